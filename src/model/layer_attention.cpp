// Attention sub-block of every layer kind (dsv4-model.md §4): q path, shared KV head, sliding window,
// compressor (CSA/HCA), lightning indexer (CSA), sink attention, inverse RoPE, grouped output.
//
// Stored KV goes through the SequenceKv the caller passes. In Numerics::Reference every stored vector
// is first rounded to what the paged cache format (kvcache/kv_format.h) holds, so the fp32 and paged
// stores give back identical values:
//  * window rows and compressed entries: nope dims FP8 E4M3 in blocks of 64 (REF's QAT simulation),
//    rope dims bf16 (REF keeps its whole KV cache in bf16; the 584-byte entry stores them as bf16);
//  * indexer keys: REF's Hadamard + FP4 (E2M1, blocks of 32) simulation, then FP8 E4M3 with one
//    power-of-two scale per key (the 132-byte entry). FP4 values have 2 significant bits, so the FP8
//    step is the identity unless a key's smallest 32-block scale is below 2^-15 of its largest (or
//    the key's amax is below ~1e-4); only such keys lose precision in their small blocks.
// Numerics::Exact stores plain fp32 (what transformers computes).
// ctx.storage marks where the GPU stores an activation in bf16 (model/storage_points.h).
#include "backend/cpu/attention.h"
#include "backend/cpu/indexer.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/quant_sim.h"
#include "backend/cpu/rope.h"
#include "core/fp_formats.h"
#include "model/block_forward.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace onecard::detail {
namespace {

// Projects xn [n, D] through a compressor's wkv/wgate: kv [n, c·d], score [n, c·d] with the learned
// position bias ape[pos % ratio] already added to the score.
void compressor_rows(const BlockContext& ctx, const DenseCompressor& c, const float* xn, int64_t n, int64_t pos0,
                     std::vector<float>& kv, std::vector<float>& score) {
    const int64_t width = c.wkv.n_out;
    kv.resize(static_cast<size_t>(n * width));
    score.resize(static_cast<size_t>(n * width));
    // REF computes the compressor projections in fp32 on fp32-upcast BF16 weights: never quantised.
    apply_linear(c.wkv, xn, n, kv.data(), ctx.numerics, ctx.bf16_linear_inputs);
    apply_linear(c.wgate, xn, n, score.data(), ctx.numerics, ctx.bf16_linear_inputs);
    for (int64_t i = 0; i < n; ++i) {
        const float* ape = c.ape.data() + ((pos0 + i) % c.ratio) * width;
        for (int64_t j = 0; j < width; ++j) score[i * width + j] += ape[j];
    }
}

// Normalises and rotates a freshly pooled entry [d] of window `w` (RoPE at the window start w·ratio).
void finish_entry(const BlockContext& ctx, const DenseCompressor& c, int64_t window, float* entry) {
    const int64_t d = c.head_dim;
    const int64_t n_rope = ctx.cfg.qk_rope_head_dim;
    cpu::rmsnorm(entry, c.norm.data(), entry, 1, d, static_cast<float>(ctx.cfg.rms_norm_eps));
    cpu::apply_rope(entry + d - n_rope, ctx.rope_compress.data(), n_rope, window * c.ratio);
}

// Reference numerics: a KV row [hd] as the 584-byte cache entry holds it (FP8 nope dims, bf16 rope).
void round_to_kv_format(float* row, int64_t hd, int64_t n_rope) {
    cpu::fp8_quant_dequant(row, hd - n_rope, 64);
    for (int64_t d = hd - n_rope; d < hd; ++d) row[d] = round_bf16(row[d]);
}

}  // namespace

void attention_q(const BlockContext& ctx, const DenseAttention& w, const float* xn, int64_t n, int64_t pos0,
                 std::vector<float>& qr, std::vector<float>& q) {
    const ModelConfig& cfg = ctx.cfg;
    const int64_t H = cfg.num_attention_heads, hd = cfg.head_dim, n_rope = cfg.qk_rope_head_dim;
    const float eps = static_cast<float>(cfg.rms_norm_eps);
    const StoragePoints& store_at = ctx.storage;
    // wq_a -> q_norm -> wq_b -> per-head unweighted RMSNorm -> RoPE on trailing dims
    const int64_t ql = cfg.q_lora_rank;
    qr.assign(static_cast<size_t>(n * ql), 0.0f);  // [n, q_lora_rank]
    apply_linear(w.wq_a, xn, n, qr.data(), ctx.numerics, ctx.bf16_linear_inputs);
    store_at.at(StoragePoint::QLoraLinear, qr.data(), n * ql);
    cpu::rmsnorm(qr.data(), w.q_norm.data(), qr.data(), n, ql, eps);
    store_at.at(StoragePoint::QLoraNorm, qr.data(), n * ql);

    q.assign(static_cast<size_t>(n * H * hd), 0.0f);  // [n, H, hd]
    apply_linear(w.wq_b, qr.data(), n, q.data(), ctx.numerics, ctx.bf16_linear_inputs);
    store_at.at(StoragePoint::QLinear, q.data(), n * H * hd);
    cpu::rmsnorm(q.data(), nullptr, q.data(), n * H, hd, eps);
    store_at.at(StoragePoint::QHeadNorm, q.data(), n * H * hd);
    for (int64_t i = 0; i < n; ++i)
        cpu::apply_rope_rows(q.data() + i * H * hd, H, hd, ctx.rope_freqs.data(), n_rope, pos0 + i);
    store_at.at(StoragePoint::QRope, q.data(), n * H * hd);
}

void attention_kv(const BlockContext& ctx, const DenseAttention& w, const float* xn, int64_t n, int64_t pos0,
                  std::vector<float>& kv) {
    const ModelConfig& cfg = ctx.cfg;
    const int64_t hd = cfg.head_dim, n_rope = cfg.qk_rope_head_dim, n_nope = hd - n_rope;
    const float eps = static_cast<float>(cfg.rms_norm_eps);
    const StoragePoints& store_at = ctx.storage;
    // wkv -> kv_norm -> RoPE; reference: rounded to the cache format
    kv.assign(static_cast<size_t>(n * hd), 0.0f);  // [n, hd]
    apply_linear(w.wkv, xn, n, kv.data(), ctx.numerics, ctx.bf16_linear_inputs);
    store_at.at(StoragePoint::KvLinear, kv.data(), n * hd);
    cpu::rmsnorm(kv.data(), w.kv_norm.data(), kv.data(), n, hd, eps);
    store_at.at(StoragePoint::KvNorm, kv.data(), n * hd);
    for (int64_t i = 0; i < n; ++i) {
        cpu::apply_rope(kv.data() + i * hd + n_nope, ctx.rope_freqs.data(), n_rope, pos0 + i);
        store_at.at(StoragePoint::KvRope, kv.data() + i * hd, hd);
        if (ctx.numerics == Numerics::Reference) round_to_kv_format(kv.data() + i * hd, hd, n_rope);
    }
}

void attention_output(const BlockContext& ctx, const DenseAttention& w, const float* o, int64_t n, float* out) {
    const ModelConfig& cfg = ctx.cfg;
    const int64_t H = cfg.num_attention_heads, hd = cfg.head_dim;
    const StoragePoints& store_at = ctx.storage;
    // ---- grouped low-rank output: group g = heads [g·H/G, (g+1)·H/G) -> wo_a[g] -> concat -> wo_b
    const int64_t G = cfg.o_groups, r = cfg.o_lora_rank, group_in = H * hd / G;
    std::vector<float> z(static_cast<size_t>(n * G * r));  // [n, G·r]
    for (int64_t g = 0; g < G; ++g) {
        cpu::matmul_nt(o + g * group_in, w.wo_a.w.data() + g * r * group_in, z.data() + g * r, n, group_in, r, H * hd,
                       G * r);
    }
    store_at.at(StoragePoint::GroupedOutput, z.data(), n * G * r);
    apply_linear(w.wo_b, z.data(), n, out, ctx.numerics, ctx.bf16_linear_inputs);
    store_at.at(StoragePoint::AttentionResult, out, n * cfg.hidden_size);
}

void attention_forward(const BlockContext& ctx, const DenseAttention& w, LayerState& state, SequenceKv& store,
                       const float* xn, int64_t n, float* out) {
    const ModelConfig& cfg = ctx.cfg;
    const bool reference = ctx.numerics == Numerics::Reference;
    const int64_t H = cfg.num_attention_heads, hd = cfg.head_dim, n_rope = cfg.qk_rope_head_dim;
    const int64_t pos0 = state.n_tokens;
    const StoragePoints& store_at = ctx.storage;  // marks: model/storage_points.h

    std::vector<float> qr, q, kv;  // [n, q_lora_rank], [n, H, hd], [n, hd]
    attention_q(ctx, w, xn, n, pos0, qr, q);
    attention_kv(ctx, w, xn, n, pos0, kv);

    // ---- compressor / indexer projections for the whole chunk (pooled token by token below)
    std::vector<float> ckv, cscore, ikv, iscore, iq, iw;
    const DenseCompressor* comp = w.compressor ? &*w.compressor : nullptr;
    const DenseIndexer* idx = w.indexer ? &*w.indexer : nullptr;
    const int64_t nI = cfg.index_n_heads, dI = cfg.index_head_dim;
    if (comp) compressor_rows(ctx, *comp, xn, n, pos0, ckv, cscore);
    if (idx) {
        compressor_rows(ctx, idx->compressor, xn, n, pos0, ikv, iscore);
        iq.resize(static_cast<size_t>(n * nI * dI));  // [n, nI, dI]
        apply_linear(idx->wq_b, qr.data(), n, iq.data(), ctx.numerics, ctx.bf16_linear_inputs);
        store_at.at(StoragePoint::IndexQLinear, iq.data(), n * nI * dI);
        for (int64_t i = 0; i < n; ++i) {
            float* qi = iq.data() + i * nI * dI;
            cpu::apply_rope_rows(qi, nI, dI, ctx.rope_compress.data(), n_rope, pos0 + i);
            store_at.at(StoragePoint::IndexQRope, qi, nI * dI);
            if (reference) {
                // Hadamard is orthonormal and applied to q and keys alike: it only shapes FP4 error.
                for (int64_t h = 0; h < nI; ++h) {
                    cpu::hadamard_transform(qi + h * dI, dI);
                    cpu::fp4_quant_dequant(qi + h * dI, dI, 32);
                }
            }
        }
        iw.resize(static_cast<size_t>(n * nI));  // [n, nI]
        apply_linear(idx->weights_proj, xn, n, iw.data(), ctx.numerics, ctx.bf16_linear_inputs);
        const float w_scale = 1.0f / std::sqrt(static_cast<float>(nI));
        for (float& v : iw) v *= w_scale;
    }

    // ---- what this chunk reads of the store, loaded once: the window ring [W, hd] (same rows as the
    // store's) and, CSA, every indexer key [n_keys, dI] (each query scores all visible keys).
    const int64_t layer = state.layer_id, W = state.window_size;
    std::vector<float> window(static_cast<size_t>(W * hd));
    for (int64_t p = std::max<int64_t>(0, pos0 - W + 1); p < pos0; ++p)
        store.read_window(layer, p, window.data() + (p % W) * hd);
    std::vector<float> index_keys;
    if (idx) {
        index_keys.resize(static_cast<size_t>(state.n_compressed() * dI));
        for (int64_t e = 0; e < state.n_compressed(); ++e) store.read_index_key(layer, e, index_keys.data() + e * dI);
    }

    // ---- token by token: extend window / compressed stream, select keys, attend
    const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const float index_scale = 1.0f / std::sqrt(static_cast<float>(dI));
    std::vector<float> o(static_cast<size_t>(n * H * hd));  // [n, H, hd]
    std::vector<float> keys, entry(static_cast<size_t>(hd)), ientry(static_cast<size_t>(dI)), scores;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t pos = pos0 + i;
        // Read back what the store holds, so attention sees the stored values whatever the store.
        store.write_window(layer, pos, kv.data() + i * hd);
        store.read_window(layer, pos, window.data() + (pos % W) * hd);
        if (comp && state.compressor->push(ckv.data() + i * ckv.size() / n, cscore.data() + i * cscore.size() / n,
                                           entry.data())) {
            finish_entry(ctx, *comp, pos / comp->ratio, entry.data());
            store_at.at(StoragePoint::CompressedEntry, entry.data(), hd);
            if (reference) round_to_kv_format(entry.data(), hd, n_rope);
            store.write_entry(layer, pos / comp->ratio, entry.data());
        }
        if (idx && state.index_compressor->push(ikv.data() + i * ikv.size() / n, iscore.data() + i * iscore.size() / n,
                                                ientry.data())) {
            const int64_t e = pos / idx->compressor.ratio;
            finish_entry(ctx, idx->compressor, e, ientry.data());
            store_at.at(StoragePoint::IndexKeyEntry, ientry.data(), dI);
            if (reference) {
                cpu::hadamard_transform(ientry.data(), dI);
                cpu::fp4_quant_dequant(ientry.data(), dI, 32);
                cpu::fp8_quant_dequant(ientry.data(), dI, dI);  // the 132-byte key: identity for usual keys
            }
            store.write_index_key(layer, e, ientry.data());
            index_keys.resize(static_cast<size_t>((e + 1) * dI));
            store.read_index_key(layer, e, index_keys.data() + e * dI);
        }
        ++state.n_tokens;

        // Key set: the window (incl. this token), then compressed entries (no de-duplication).
        keys.clear();
        const int64_t first = pos - W + 1 > 0 ? pos - W + 1 : 0;
        for (int64_t p = first; p <= pos; ++p) {
            const float* row = window.data() + (p % W) * hd;
            keys.insert(keys.end(), row, row + hd);
        }
        auto append_entry = [&](int64_t e) {
            keys.resize(keys.size() + static_cast<size_t>(hd));
            store.read_entry(layer, e, keys.data() + keys.size() - hd);
        };
        if (comp) {
            const int64_t n_visible = cpu::n_visible_entries(pos, comp->ratio);
            if (idx) {
                scores.resize(static_cast<size_t>(n_visible));
                cpu::indexer_scores(iq.data() + i * nI * dI, iw.data() + i * nI, index_keys.data(), n_visible, nI, dI,
                                    index_scale, scores.data());
                for (int32_t s : cpu::indexer_topk(scores.data(), n_visible, cfg.index_topk)) append_entry(s);
            } else {
                for (int64_t e = 0; e < n_visible; ++e) append_entry(e);
            }
        }
        float* oi = o.data() + i * H * hd;
        cpu::attention_with_sink(q.data() + i * H * hd, keys.data(), static_cast<int64_t>(keys.size()) / hd,
                                 w.sink.data(), H, hd, softmax_scale, oi);
        store_at.at(StoragePoint::AttentionOutput, oi, H * hd);
        // K = V carries RoPE: de-rotate the output at the query position.
        cpu::apply_rope_rows(oi, H, hd, ctx.rope_freqs.data(), n_rope, pos, /*inverse=*/true);
        store_at.at(StoragePoint::AttentionOutputRope, oi, H * hd);
    }

    attention_output(ctx, w, o.data(), n, out);
}

}  // namespace onecard::detail
