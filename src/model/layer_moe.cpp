// MoE sub-block (dsv4-model.md §5): fp32 sqrtsoftplus router (bias only selects; hash layers route by
// token id), routed experts and the shared expert, both with the SwiGLU clamp.
// ctx.storage marks where the GPU stores an activation in bf16 (model/storage_points.h).
#include "backend/cpu/linear.h"
#include "backend/cpu/moe.h"
#include "core/error.h"
#include "model/block_forward.h"
#include "model/expert_profile.h"

#include <vector>

namespace onecard::detail {
namespace {

// h[n, inter] = swiglu_clamped(w1·x, w3·x) · row_w[r] for x [n, D] (row_w == nullptr: no scaling).
void expert_hidden(const BlockContext& ctx, const DenseExpert& e, const float* x, int64_t n, const float* row_w,
                   std::vector<float>& h) {
    const int64_t inter = e.w1.n_out;
    std::vector<float> gate(static_cast<size_t>(n * inter)), up(static_cast<size_t>(n * inter));
    apply_linear(e.w1, x, n, gate.data(), ctx.numerics, ctx.bf16_linear_inputs);
    apply_linear(e.w3, x, n, up.data(), ctx.numerics, ctx.bf16_linear_inputs);
    ctx.storage.at(StoragePoint::ExpertGateUp, gate.data(), n * inter);
    ctx.storage.at(StoragePoint::ExpertGateUp, up.data(), n * inter);
    h.resize(static_cast<size_t>(n * inter));
    cpu::swiglu_clamped(gate.data(), up.data(), n * inter, static_cast<float>(ctx.cfg.swiglu_limit), h.data());
    if (row_w)
        for (int64_t r = 0; r < n; ++r)
            for (int64_t j = 0; j < inter; ++j) h[r * inter + j] *= row_w[r];
    ctx.storage.at(StoragePoint::ExpertHidden, h.data(), n * inter);
}

}  // namespace

void moe_forward(const BlockContext& ctx, const DenseMoE& w, bool hash_layer, int64_t layer_id, const int32_t* tokens,
                 const float* xn, int64_t n, float* out) {
    const ModelConfig& cfg = ctx.cfg;
    const int64_t D = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.num_experts_per_tok;
    const float route_scale = static_cast<float>(cfg.routed_scaling_factor);

    // Router in fp32 (never activation-quantised).
    std::vector<float> logits(static_cast<size_t>(n * E)), scores(static_cast<size_t>(n * E));  // [n, E]
    cpu::matmul_nt(xn, w.gate.w.data(), logits.data(), n, D, E);
    cpu::sqrtsoftplus(logits.data(), n * E, scores.data());
    std::vector<int32_t> picked(static_cast<size_t>(n * K));
    std::vector<float> weight(static_cast<size_t>(n * K));
    for (int64_t t = 0; t < n; ++t) {
        if (hash_layer) {
            ONECARD_CHECK(tokens[t] >= 0 && tokens[t] < cfg.vocab_size, "token id {} out of range [0, {})", tokens[t],
                          cfg.vocab_size);
            cpu::route_hash(scores.data() + t * E, w.tid2eid.data() + int64_t(tokens[t]) * K, K, route_scale,
                            picked.data() + t * K, weight.data() + t * K);
        } else {
            cpu::route_topk(scores.data() + t * E, w.bias.empty() ? nullptr : w.bias.data(), E, K, route_scale,
                            picked.data() + t * K, weight.data() + t * K);
        }
    }
    if (ctx.expert_use != nullptr) ctx.expert_use->add_picks(layer_id, picked.data(), n * K);

    // Routed experts, expert by expert over the tokens that picked them (ascending expert id, like HF).
    std::vector<float> routed(static_cast<size_t>(n * D), 0.0f);
    std::vector<float> xs, h, y;
    std::vector<int64_t> rows;
    std::vector<float> row_w;
    for (int64_t e = 0; e < E; ++e) {
        rows.clear();
        row_w.clear();
        for (int64_t t = 0; t < n; ++t)
            for (int64_t k = 0; k < K; ++k)
                if (picked[t * K + k] == e) {
                    rows.push_back(t);
                    row_w.push_back(weight[t * K + k]);
                }
        if (rows.empty()) continue;
        const int64_t m = static_cast<int64_t>(rows.size());
        xs.resize(static_cast<size_t>(m * D));
        for (int64_t r = 0; r < m; ++r) std::copy(xn + rows[r] * D, xn + (rows[r] + 1) * D, xs.begin() + r * D);
        const DenseExpert& ex = w.experts.at(static_cast<size_t>(e));
        y.resize(static_cast<size_t>(m * D));
        if (ctx.numerics == Numerics::Reference) {
            // REF scales the hidden activation before w2, so the FP8 quantisation sees the scaled values.
            expert_hidden(ctx, ex, xs.data(), m, row_w.data(), h);
            apply_linear(ex.w2, h.data(), m, y.data(), ctx.numerics, ctx.bf16_linear_inputs);
            ctx.storage.at(StoragePoint::ExpertOutput, y.data(), m * D);
            for (int64_t r = 0; r < m; ++r)
                for (int64_t d = 0; d < D; ++d) routed[rows[r] * D + d] += y[r * D + d];
        } else {
            // HF scales the expert output.
            expert_hidden(ctx, ex, xs.data(), m, nullptr, h);
            apply_linear(ex.w2, h.data(), m, y.data(), ctx.numerics, ctx.bf16_linear_inputs);
            ctx.storage.at(StoragePoint::ExpertOutput, y.data(), m * D);
            for (int64_t r = 0; r < m; ++r)
                for (int64_t d = 0; d < D; ++d) routed[rows[r] * D + d] += y[r * D + d] * row_w[r];
        }
    }

    // Shared expert (clamped like the routed ones; current REF revision, HF, vLLM).
    expert_hidden(ctx, w.shared, xn, n, nullptr, h);
    apply_linear(w.shared.w2, h.data(), n, out, ctx.numerics, ctx.bf16_linear_inputs);
    ctx.storage.at(StoragePoint::SharedExpertOutput, out, n * D);
    for (int64_t i = 0; i < n * D; ++i) out[i] = routed[i] + out[i];
    ctx.storage.at(StoragePoint::MoeResult, out, n * D);
}

}  // namespace onecard::detail
