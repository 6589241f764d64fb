// The DeepSeek-V4-Flash-0731 DSpark drafter's parallel pass (docs/dspark.md §2-3): the context rows
// each stage's window ring holds, made from the main model's taps, and one pass of the block
// [next, noise x (B-1)] through the S stages with bidirectional attention inside the block. Shares
// embed and head with the model. The sequential heads are model/dspark_heads.h.
#include "backend/cpu/attention.h"
#include "backend/cpu/hyper_connection.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/rope.h"
#include "core/error.h"
#include "model/block_forward.h"
#include "model/deepseek_v4.h"

#include <algorithm>
#include <cmath>

namespace onecard {
namespace {

// Block attention of one stage (docs/dspark.md §3): xn [B, D] at positions pos0..pos0+B-1; the keys
// are the ring's rows at positions max(0, pos0 - W)..pos0-1 (ring [W, hd], slot p mod W) followed by
// the block's own B rows, the same key set for every slot (no causal mask). out [B, D].
void block_attention(const detail::BlockContext& ctx, const DenseAttention& w, const float* ring, int64_t pos0,
                     const float* xn, int64_t B, float* out) {
    const ModelConfig& cfg = ctx.cfg;
    const int64_t H = cfg.num_attention_heads, hd = cfg.head_dim, n_rope = cfg.qk_rope_head_dim;
    const int64_t W = cfg.sliding_window;
    std::vector<float> qr, q, kv;  // [B, q_lora_rank], [B, H, hd], [B, hd]
    detail::attention_q(ctx, w, xn, B, pos0, qr, q);
    detail::attention_kv(ctx, w, xn, B, pos0, kv);

    const int64_t first = std::max<int64_t>(0, pos0 - W);
    std::vector<float> keys;  // [pos0 - first + B, hd]
    keys.reserve(static_cast<size_t>((pos0 - first + B) * hd));
    for (int64_t p = first; p < pos0; ++p) keys.insert(keys.end(), ring + (p % W) * hd, ring + (p % W + 1) * hd);
    keys.insert(keys.end(), kv.begin(), kv.end());
    const int64_t n_keys = static_cast<int64_t>(keys.size()) / hd;

    const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> o(static_cast<size_t>(B * H * hd));  // [B, H, hd]
    for (int64_t j = 0; j < B; ++j) {
        float* oj = o.data() + j * H * hd;
        cpu::attention_with_sink(q.data() + j * H * hd, keys.data(), n_keys, w.sink.data(), H, hd, softmax_scale, oj);
        cpu::apply_rope_rows(oj, H, hd, ctx.rope_freqs.data(), n_rope, pos0 + j, /*inverse=*/true);
    }
    detail::attention_output(ctx, w, o.data(), B, out);
}

}  // namespace

const DenseDSpark& DeepSeekV4::dspark_weights() const {
    ONECARD_CHECK(dense_.dspark.has_value(), "dspark: the checkpoint has no DSpark drafter (not a 0731 model)");
    return *dense_.dspark;
}

void DeepSeekV4::dspark_push_context(SequenceState& state, std::span<const float> taps) const {
    const DenseDSpark& ds = dspark_weights();
    const int64_t D = cfg_.hidden_size, hd = cfg_.head_dim, W = cfg_.sliding_window;
    const auto S = static_cast<int64_t>(ds.stages.size());
    const int64_t n_in = ds.main_proj.n_in;  // n_taps * D
    ONECARD_CHECK(taps.size() % static_cast<size_t>(n_in) == 0, "dspark: {} tap floats are not rows of {}", taps.size(),
                  n_in);
    const auto m = static_cast<int64_t>(taps.size()) / n_in;
    const int64_t p0 = state.n_mtp_tokens();
    ONECARD_CHECK(p0 + m == state.n_tokens(), "dspark: taps of positions {}..{} for a sequence at {} tokens", p0,
                  p0 + m - 1, state.n_tokens());
    if (m == 0) return;
    // Only the last W positions can still be read: earlier ring slots are overwritten by later rows.
    const int64_t skip = std::max<int64_t>(0, m - W), rows = m - skip;
    // main_x = main_norm(main_proj(taps))   [rows, D]
    std::vector<float> main_x(static_cast<size_t>(rows * D));
    detail::apply_linear(ds.main_proj, taps.data() + skip * n_in, rows, main_x.data(), numerics_);
    cpu::rmsnorm(main_x.data(), ds.main_norm.data(), main_x.data(), rows, D, static_cast<float>(cfg_.rms_norm_eps));
    std::vector<float>& ring = state.dspark_ring();  // [S, W, hd]
    std::vector<float> kv;                           // [rows, hd]
    for (int64_t s = 0; s < S; ++s) {
        detail::BlockContext ctx{cfg_, numerics_, rope_main_, rope_compress_, bf16_linear_inputs_};
        ctx.storage = storage_;
        detail::attention_kv(ctx, ds.stages[static_cast<size_t>(s)].attn, main_x.data(), rows, p0 + skip, kv);
        for (int64_t i = 0; i < rows; ++i) {
            const int64_t p = p0 + skip + i;
            std::copy(kv.begin() + i * hd, kv.begin() + (i + 1) * hd, ring.begin() + (s * W + p % W) * hd);
        }
    }
    state.advance_mtp(m);
}

DSparkBlockOutput DeepSeekV4::dspark_block(const SequenceState& state, int32_t next) const {
    const DenseDSpark& ds = dspark_weights();
    const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult, hd = cfg_.head_dim, W = cfg_.sliding_window;
    const int64_t B = cfg_.dspark->block_size, n = state.n_tokens();
    ONECARD_CHECK(n >= 1 && state.n_mtp_tokens() == n,
                  "dspark: the drafter has read {} positions of a sequence at {} tokens (push the context first)",
                  state.n_mtp_tokens(), n);
    ONECARD_CHECK(next >= 0 && next < cfg_.vocab_size, "dspark: token id {} out of range [0, {})", next,
                  cfg_.vocab_size);
    // ids = [next, noise...] at positions n..n+B-1; X = embed(ids) in every stream   [B, hc, D]
    std::vector<int32_t> ids(static_cast<size_t>(B), static_cast<int32_t>(cfg_.dspark->noise_token_id));
    ids[0] = next;
    std::vector<float> X(static_cast<size_t>(B * hc * D));
    for (int64_t j = 0; j < B; ++j)
        for (int64_t h = 0; h < hc; ++h)
            std::copy(dense_.embed.begin() + int64_t(ids[j]) * D, dense_.embed.begin() + (int64_t(ids[j]) + 1) * D,
                      X.begin() + (j * hc + h) * D);

    const std::vector<float>& ring = state.dspark_ring();
    for (size_t s = 0; s < ds.stages.size(); ++s) {
        const DenseBlock& b = ds.stages[s];
        ONECARD_CHECK(cfg_.compress_ratio(b.layer_id) == 0, "dspark: stage {} has compress ratio {} (must be 0)", s,
                      cfg_.compress_ratio(b.layer_id));
        detail::BlockContext ctx{cfg_, numerics_, rope_main_, rope_compress_, bf16_linear_inputs_};
        ctx.storage = storage_;
        const float* stage_ring = ring.data() + static_cast<int64_t>(s) * W * hd;
        detail::hc_sub_block(ctx, b.hc_attn, b.attn_norm, X.data(), B, [&](const float* xn, float* out) {
            block_attention(ctx, b.attn, stage_ring, n, xn, B, out);
        });
        detail::moe_sub_block(ctx, b, ids.data(), X.data(), B);  // stages are never hash-routed
    }

    // h = hc_head(X) [B, D] (the confidence head's input); base logits = head · norm(h)   [B, vocab]
    DSparkBlockOutput out;
    out.hidden.resize(static_cast<size_t>(B * D));
    cpu::hc_head(X.data(), ds.hc_head.fn.data(), ds.hc_head.base.data(), ds.hc_head.scale.data(), B,
                 detail::hc_params(cfg_), out.hidden.data());
    std::vector<float> y(out.hidden);
    cpu::rmsnorm(y.data(), ds.norm.data(), y.data(), B, D, static_cast<float>(cfg_.rms_norm_eps));
    out.base_logits.resize(static_cast<size_t>(B * cfg_.vocab_size));
    cpu::matmul_nt(y.data(), dense_.head.data(), out.base_logits.data(), B, D, cfg_.vocab_size);
    return out;
}

}  // namespace onecard
