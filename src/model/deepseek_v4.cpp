#include "model/deepseek_v4.h"

#include "backend/cpu/hyper_connection.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/quant_sim.h"
#include "backend/cpu/rope.h"
#include "core/error.h"
#include "core/fp_formats.h"
#include "model/block_forward.h"

namespace onecard {

const char* numerics_name(Numerics n) {
    return n == Numerics::Reference ? "reference" : "exact";
}

std::vector<float> rope_inv_freqs_for(const ModelConfig& cfg, bool compressed) {
    cpu::RopeParams p;
    p.theta = cfg.rope_theta;
    p.n_rope = cfg.qk_rope_head_dim;
    if (compressed) {
        p.theta = cfg.compress_rope_theta;
        // YaRN (frequency interpolation only, no mscale) on CSA/HCA layers when the config asks for it.
        p.yarn = cfg.rope_scaling.type == "yarn" && cfg.rope_scaling.factor > 1.0;
        p.factor = cfg.rope_scaling.factor;
        p.original_max_position = cfg.rope_scaling.original_max_position_embeddings;
        p.beta_fast = cfg.rope_scaling.beta_fast;
        p.beta_slow = cfg.rope_scaling.beta_slow;
    }
    return cpu::rope_inv_freqs(p);
}

namespace detail {

void apply_linear(const DenseLinear& l, const float* x, int64_t n, float* y, Numerics numerics, bool bf16_inputs) {
    const bool fp8 = numerics == Numerics::Reference && l.quantized;
    if (fp8 || (bf16_inputs && l.quantized)) {
        std::vector<float> xq(x, x + n * l.n_in);
        if (bf16_inputs)
            for (float& v : xq) v = round_bf16(v);
        if (fp8)
            for (int64_t i = 0; i < n; ++i) cpu::fp8_quant_dequant(xq.data() + i * l.n_in, l.n_in, 128);
        cpu::matmul_nt(xq.data(), l.w.data(), y, n, l.n_in, l.n_out);
        return;
    }
    cpu::matmul_nt(x, l.w.data(), y, n, l.n_in, l.n_out);
}

cpu::HCParams hc_params(const ModelConfig& cfg) {
    cpu::HCParams p;
    p.hc = cfg.hc_mult;
    p.dim = cfg.hidden_size;
    p.sinkhorn_iters = cfg.hc_sinkhorn_iters;
    p.hc_eps = static_cast<float>(cfg.hc_eps);
    p.norm_eps = static_cast<float>(cfg.rms_norm_eps);
    return p;
}

// f marks its own output's storage point.
void hc_sub_block(const BlockContext& ctx, const DenseHC& hc, const std::vector<float>& norm, float* X, int64_t n,
                  const std::function<void(const float* xn, float* out)>& f) {
    const ModelConfig& cfg = ctx.cfg;
    const StoragePoints& storage = ctx.storage;
    const cpu::HCParams p = hc_params(cfg);
    const int64_t D = p.dim, n_mix = (2 + p.hc) * p.hc;
    std::vector<float> mixes(static_cast<size_t>(n * n_mix));  // [n, n_mix]
    cpu::hc_mixes(X, hc.fn.data(), n, n_mix, p, mixes.data());
    std::vector<float> post(static_cast<size_t>(n * p.hc)), comb(static_cast<size_t>(n * p.hc * p.hc));
    std::vector<float> pre(static_cast<size_t>(p.hc));
    std::vector<float> x(static_cast<size_t>(n * D));  // [n, D] collapsed sub-block input
    for (int64_t t = 0; t < n; ++t) {
        cpu::hc_split_sinkhorn(mixes.data() + t * n_mix, hc.scale.data(), hc.base.data(), p, pre.data(),
                               post.data() + t * p.hc, comb.data() + t * p.hc * p.hc);
        cpu::hc_collapse(X + t * p.hc * D, pre.data(), p, x.data() + t * D);
    }
    storage.at(StoragePoint::HcCollapse, x.data(), n * D);
    cpu::rmsnorm(x.data(), norm.data(), x.data(), n, D, static_cast<float>(cfg.rms_norm_eps));
    storage.at(StoragePoint::SubBlockInput, x.data(), n * D);
    std::vector<float> a(static_cast<size_t>(n * D));  // [n, D] sub-block output
    f(x.data(), a.data());
    for (int64_t t = 0; t < n; ++t)
        cpu::hc_post(a.data() + t * D, post.data() + t * p.hc, comb.data() + t * p.hc * p.hc, p, X + t * p.hc * D);
}

void attention_sub_block(const BlockContext& ctx, const DenseBlock& b, LayerState& state, SequenceKv& store, float* X,
                         int64_t n) {
    hc_sub_block(ctx, b.hc_attn, b.attn_norm, X, n,
                 [&](const float* xn, float* out) { attention_forward(ctx, b.attn, state, store, xn, n, out); });
}

void moe_sub_block(const BlockContext& ctx, const DenseBlock& b, const int32_t* tokens, float* X, int64_t n) {
    const bool hash = ctx.cfg.is_hash_layer(b.layer_id) && b.layer_id < ctx.cfg.num_hidden_layers;
    hc_sub_block(ctx, b.hc_ffn, b.ffn_norm, X, n,
                 [&](const float* xn, float* out) { moe_forward(ctx, b.ffn, hash, b.layer_id, tokens, xn, n, out); });
}

void block_forward(const BlockContext& ctx, const DenseBlock& b, LayerState& state, SequenceKv& store,
                   const int32_t* tokens, float* X, int64_t n) {
    attention_sub_block(ctx, b, state, store, X, n);
    moe_sub_block(ctx, b, tokens, X, n);
}

}  // namespace detail

DeepSeekV4::DeepSeekV4(const ModelConfig& cfg, const ModelWeights& w, Numerics numerics)
    : cfg_(cfg), numerics_(numerics), dense_(densify(cfg, w)) {
    ONECARD_CHECK(cfg.num_key_value_heads == 1, "config: num_key_value_heads must be 1, got {}",
                  cfg.num_key_value_heads);
    ONECARD_CHECK(cfg.hc_mult > 0 && cfg.qk_rope_head_dim % 2 == 0 && cfg.qk_rope_head_dim <= cfg.index_head_dim,
                  "config: hc_mult {} / qk_rope_head_dim {} unusable", cfg.hc_mult, cfg.qk_rope_head_dim);
    ONECARD_CHECK(cfg.num_attention_heads % cfg.o_groups == 0, "config: {} heads do not split into {} o_groups",
                  cfg.num_attention_heads, cfg.o_groups);
    ONECARD_CHECK(static_cast<int64_t>(dense_.layers.size()) == cfg.num_hidden_layers,
                  "weights: {} layers bound, config has {}", dense_.layers.size(), cfg.num_hidden_layers);
    rope_main_ = rope_inv_freqs_for(cfg, false);
    rope_compress_ = rope_inv_freqs_for(cfg, true);
}

void DeepSeekV4::set_expert_use_sink(ExpertUseProfile* sink) {
    ONECARD_CHECK(
        sink == nullptr || (sink->n_layers() == cfg_.num_hidden_layers && sink->n_experts() == cfg_.n_routed_experts),
        "expert use sink: {} layers x {} experts, the model has {} x {}", sink ? sink->n_layers() : 0,
        sink ? sink->n_experts() : 0, cfg_.num_hidden_layers, cfg_.n_routed_experts);
    expert_use_ = sink;
}

SequenceState DeepSeekV4::new_sequence() const {
    return SequenceState(cfg_, /*own_kv=*/true);
}

SequenceState DeepSeekV4::new_sequence_external_kv() const {
    return SequenceState(cfg_, /*own_kv=*/false);
}

void DeepSeekV4::check_store(const SequenceState& state, const SequenceKv& kv) {
    ONECARD_CHECK(!state.owns_kv() || &kv.backing() == &state.own_kv(),
                  "forward: this sequence keeps its KV in its own store; another store cannot be used for it");
}

std::vector<float> DeepSeekV4::forward(SequenceState& state, std::span<const int32_t> tokens) const {
    return forward_with_streams(state, state.own_kv(), tokens).logits;
}

std::vector<float> DeepSeekV4::forward(SequenceState& state, SequenceKv& kv, std::span<const int32_t> tokens) const {
    return forward_with_streams(state, kv, tokens).logits;
}

ForwardOutput DeepSeekV4::forward_with_streams(SequenceState& state, std::span<const int32_t> tokens) const {
    return forward_with_streams(state, state.own_kv(), tokens);
}

ForwardOutput DeepSeekV4::forward_with_streams(SequenceState& state, SequenceKv& kv,
                                               std::span<const int32_t> tokens) const {
    check_store(state, kv);
    const int64_t n = static_cast<int64_t>(tokens.size());
    ONECARD_CHECK(n >= 1, "forward: at least one token is required");
    ONECARD_CHECK(static_cast<int64_t>(state.layers().size()) == cfg_.num_hidden_layers,
                  "forward: sequence state has {} layers, model {}", state.layers().size(), cfg_.num_hidden_layers);
    const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
    for (int32_t t : tokens)
        ONECARD_CHECK(t >= 0 && t < cfg_.vocab_size, "forward: token id {} out of range [0, {})", t, cfg_.vocab_size);

    // Embedding copied into all hc streams ("HC expand" has no parameters).
    std::vector<float> X(static_cast<size_t>(n * hc * D));  // [n, hc, D]
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hc; ++j)
            std::copy(dense_.embed.begin() + int64_t(tokens[i]) * D,
                      dense_.embed.begin() + (int64_t(tokens[i]) + 1) * D, X.begin() + (i * hc + j) * D);

    ForwardOutput out;
    // DSpark taps (docs/dspark.md §1): the plain mean of the hc streams a target layer outputs.
    const std::vector<int64_t> no_taps;
    const std::vector<int64_t>& taps = cfg_.dspark ? cfg_.dspark->target_layer_ids : no_taps;
    const auto n_taps = static_cast<int64_t>(taps.size());
    out.taps.assign(static_cast<size_t>(n * n_taps * D), 0.0f);  // [n, n_taps, D]
    for (int64_t il = 0; il < cfg_.num_hidden_layers; ++il) {
        const bool compressed = cfg_.compress_ratio(il) != 0;
        detail::BlockContext ctx{cfg_, numerics_, compressed ? rope_compress_ : rope_main_, rope_compress_,
                                 bf16_linear_inputs_};
        ctx.storage = storage_;
        ctx.expert_use = expert_use_;  // main layers only: forward_mtp leaves it unset
        detail::block_forward(ctx, dense_.layers[il], state.layers()[il], kv, tokens.data(), X.data(), n);
        for (int64_t t = 0; t < n_taps; ++t) {
            if (taps[static_cast<size_t>(t)] != il) continue;
            for (int64_t i = 0; i < n; ++i) {
                float* tap = out.taps.data() + (i * n_taps + t) * D;
                for (int64_t j = 0; j < hc; ++j)
                    for (int64_t d = 0; d < D; ++d) tap[d] += X[(i * hc + j) * D + d];
                for (int64_t d = 0; d < D; ++d) tap[d] /= static_cast<float>(hc);
            }
        }
    }
    state.advance(n);

    out.logits = logits_from_streams(X.data(), n, dense_.hc_head, dense_.norm);
    out.streams = std::move(X);
    return out;
}

void DeepSeekV4::forward_sub_block(SequenceState& state, int64_t il, SubBlock which, std::span<const int32_t> tokens,
                                   float* X) const {
    const auto n = static_cast<int64_t>(tokens.size());
    ONECARD_CHECK(n >= 1 && il >= 0 && il < cfg_.num_hidden_layers, "forward_sub_block: layer {} of {}, {} tokens", il,
                  cfg_.num_hidden_layers, n);
    const DenseBlock& b = dense_.layers[static_cast<size_t>(il)];
    detail::BlockContext ctx{cfg_, numerics_, cfg_.compress_ratio(il) != 0 ? rope_compress_ : rope_main_,
                             rope_compress_, bf16_linear_inputs_};
    ctx.storage = storage_;
    if (which == SubBlock::Attention) {
        detail::attention_sub_block(ctx, b, state.layers()[static_cast<size_t>(il)], state.own_kv(), X, n);
    } else {
        detail::moe_sub_block(ctx, b, tokens.data(), X, n);
    }
}

std::vector<float> DeepSeekV4::logits_from_streams(const float* streams, int64_t n_tok, const DenseHC& hc_head,
                                                   const std::vector<float>& norm) const {
    const int64_t D = cfg_.hidden_size;
    const cpu::HCParams p = detail::hc_params(cfg_);
    std::vector<float> y(static_cast<size_t>(n_tok * D));  // [n, D]
    cpu::hc_head(streams, hc_head.fn.data(), hc_head.base.data(), hc_head.scale.data(), n_tok, p, y.data());
    cpu::rmsnorm(y.data(), norm.data(), y.data(), n_tok, D, static_cast<float>(cfg_.rms_norm_eps));
    std::vector<float> logits(static_cast<size_t>(n_tok * cfg_.vocab_size));  // [n, vocab]
    cpu::matmul_nt(y.data(), dense_.head.data(), logits.data(), n_tok, D, cfg_.vocab_size);
    return logits;
}

}  // namespace onecard
