// GpuModel's two sub-layers of a decoder block (dsv4-model.md §3-§4; the CPU oracles are
// DeepSeekV4's attention and MoE): compressed sparse attention over the paged KV pool, and the
// routed mixture of experts with its shared expert, on the GPU or, for hybrid placement, partly on
// the host. forward() in gpu_model.cpp strings them together with the hyper-connections.

#include "model_cuda/gpu_model.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/compressor.cuh"
#include "backend/cuda/ops/elementwise.cuh"
#include "backend/cuda/ops/embed_head.cuh"
#include "backend/cuda/ops/fp8_quant.cuh"
#include "backend/cuda/ops/host_moe.cuh"
#include "backend/cuda/ops/hyper_connection.cuh"
#include "backend/cuda/ops/indexer.cuh"
#include "backend/cuda/ops/kv_write.cuh"
#include "backend/cuda/ops/moe.cuh"
#include "backend/cuda/ops/mxfp4_gemv.cuh"
#include "backend/cuda/ops/rmsnorm.cuh"
#include "backend/cuda/ops/rope.cuh"
#include "backend/cuda/ops/sparse_attention.cuh"
#include "backend/cuda/ops/token_pick.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"
#include "model/deepseek_v4.h"
#include "model_cuda/gpu_model_buffers.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace onecard {

void GpuModel::attention(const StepPlan& p, const GpuBlock& blk, const bf16* xn, bf16* out, cudaStream_t s) {
    Buffers& b = *buf_;
    const ModelConfig& c = cfg_;
    const int64_t n = meta_->n, il = blk.layer_id, H = c.num_attention_heads, hd = c.head_dim;
    const int64_t W = c.sliding_window, n_rope = c.qk_rope_head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const GpuAttention& w = blk.attn;
    const int64_t ratio = c.compress_ratio(il);
    const float* rope = ratio ? b.rope_compress : b.rope_main;

    // q path: wq_a -> q_norm -> wq_b -> per-head RMSNorm -> RoPE; shared KV head: wkv -> kv_norm -> RoPE.
    // wq_a and wkv read the same xn: one quantisation and one launch for both when they are fused.
    const int64_t ql = c.q_lora_rank;
    if (w.wq_a_wkv.w) {
        if (attention_input(p, blk) == SubBlockInput::Fp8FromHcPre)
            lin_->fp8_quantized(w.wq_a_wkv, b.xq, b.xs, n, b.qkv, s);
        else
            lin_->fp8(w.wq_a_wkv, xn, n, b.qkv, s);
        // q = q_norm(qkv[:, :ql]), kv = kv_norm(qkv[:, ql:]) over the [n, ql + hd] rows of the fused output.
        cuda::rmsnorm_bf16_pair({b.qkv, w.q_norm, b.qr, ql, ql + hd, ql},
                                {b.qkv + ql, w.kv_norm, b.kv, hd, ql + hd, hd}, n, eps, s);
    } else {
        lin_->fp8(w.wq_a, xn, n, b.qr, s);
        cuda::rmsnorm_bf16(b.qr, w.q_norm, b.qr, n, ql, eps, s);
        lin_->fp8(w.wkv, xn, n, b.kv, s);
        cuda::rmsnorm_bf16(b.kv, w.kv_norm, b.kv, n, hd, eps, s);
    }
    // qr feeds wq_b and the indexer's wq_b: quantise it once on the GEMV path.
    const bool qr_once = lin_->gemv_ok(w.wq_b, n) && (!w.indexer || lin_->gemv_ok(w.indexer->wq_b, n));
    if (qr_once) {
        cuda::quantize_fp8_1x128(b.qr, b.qrq, b.qrs, n, ql, cuda::ActScaleLayout::RowMajor, s);
        lin_->fp8_quantized(w.wq_b, b.qrq, b.qrs, n, b.q, s);
    } else {
        lin_->fp8(w.wq_b, b.qr, n, b.q, s);
    }
    cuda::rmsnorm_bf16(b.q, nullptr, b.q, n * H, hd, eps, s);
    cuda::rope_bf16_pair(b.q, H, b.kv, 1, n, hd, {rope, n_rope, meta_->positions, cuda::RopeDirection::Forward}, s);
    // Planted fault: one more rotation by one position (rotations add) puts the queries at p + 1.
    if (opt_.faults.rope_off_by_one)
        cuda::rope_bf16(b.q, n, H, hd, {rope, n_rope, fault_ones_, cuda::RopeDirection::Forward}, s);
    tick("attn: q/kv path (wq_a|wkv, wq_b, norms, rope)", s);
    build_write_offsets(*meta_, pool_, il, W, b.step_dst, b.ring_dst, b.entry_dst, b.key_dst, s);
    const KvCacheSpec& spec = pool_.spec();
    cuda::KvEntryDims ed;
    ed.head_dim = hd;
    ed.rope_dim = n_rope;
    ed.quant_block = spec.entry.quant_block;
    ed.entry_bytes = spec.entry.entry_bytes();
    cuda::kv_write_entries(b.kv, 0, b.step_dst, pool_.base(), n, ed, s);
    tick("attn: kv writes", s);

    const auto& addr = pool_.layer(il);
    cuda::CompressorTokens ct;
    ct.positions = meta_->positions;
    ct.seq_first = meta_->seq_first;
    ct.ring_base = meta_->slot_off;
    // buf [T, 2·c·d] floats: rows [kv | score] from one GEMV over wkv|wgate when they are stored back to
    // back, else kv [n, c·d] then score [n, c·d] from two.
    auto compress = [&](const GpuCompressor& cw, int64_t region, int64_t ring_rows, float* buf, bf16* entries) {
        cuda::CompressorDims cd;
        cd.ratio = cw.ratio;
        cd.ring_rows = ring_rows;
        cd.head_dim = cw.head_dim;
        cd.rope_dim = n_rope;
        cd.eps = eps;
        const int64_t width = cw.wkv.n_out;
        const float* kvp = buf;
        const float* scp = nullptr;
        if (cw.wkv_wgate.w) {
            lin_->bf16(cw.wkv_wgate, xn, n, buf, cuda::GemmOut::F32, s);
            scp = buf + width;
            cd.ld_in = 2 * width;
        } else {
            lin_->bf16(cw.wkv, xn, n, buf, cuda::GemmOut::F32, s);
            lin_->bf16(cw.wgate, xn, n, buf + n * width, cuda::GemmOut::F32, s);
            scp = buf + n * width;
        }
        cuda::compressor_pool(kvp, scp, cw.ape, cw.norm, b.rope_compress, pool_.base() + region, ct, entries, n, cd, s);
        cuda::compressor_store(kvp, scp, cw.ape, pool_.base() + region, ct, n, cd, s);
    };
    const int32_t* picks = nullptr;
    if (w.compressor) {
        compress(*w.compressor, addr.compressor_offset, addr.compressor_rows, b.ckv, b.centries);
        const int64_t entry_rows = opt_.faults.skip_compressed_entry ? n - 1 : n;
        if (entry_rows > 0) cuda::kv_write_entries(b.centries, 0, b.entry_dst, pool_.base(), entry_rows, ed, s);
        tick("attn: compressor", s);
    }
    if (w.indexer) {
        const GpuIndexer& ix = *w.indexer;
        const int64_t nI = c.index_n_heads, dI = c.index_head_dim;
        compress(ix.compressor, addr.index_compressor_offset, addr.index_compressor_rows, b.ikv, b.ientries);
        cuda::hadamard_fp4_sim(b.ientries, n, dI, s);
        if (!opt_.faults.stale_indexer_keys) cuda::indexer_key_write(b.ientries, b.key_dst, pool_.base(), n, dI, s);
        tick("attn: indexer compressor", s);
        if (qr_once)
            lin_->fp8_quantized(ix.wq_b, b.qrq, b.qrs, n, b.iq, s);
        else
            lin_->fp8(ix.wq_b, b.qr, n, b.iq, s);
        cuda::rope_hadamard_fp4_sim(b.iq, n, nI, dI, b.rope_compress, n_rope, meta_->positions, s);
        lin_->bf16(ix.weights_proj, xn, n, b.iw, cuda::GemmOut::F32, s, 0, 1.0f / std::sqrt(static_cast<float>(nI)));
        tick("attn: indexer q + weights", s);
        cuda::IndexerDims id;
        id.n_heads = nI;
        id.head_dim = dI;
        id.topk = c.index_topk;
        id.softmax_scale = 1.0f / std::sqrt(static_cast<float>(dI));
        const cuda::PagedStreamAddr ka =
            pool_.entry_addr(il, KvStreamKind::IndexerKey, meta_->block_tables, meta_->max_blocks);
        cuda::indexer_topk({b.iq, b.iw, meta_->positions, meta_->row_of_token, pool_.base(), ka, b.topk, n,
                            p.pos_bound / ratio, b.index_scratch, b.index_scratch_floats},
                           id, s);
        picks = b.topk;
        tick("attn: indexer scores + top-k", s);
    }
    // Key lists, then attention over the FP8 entries, inverse RoPE, grouped output projection.
    int64_t max_keys = W;
    if (ratio) max_keys += picks ? c.index_topk : p.pos_bound / ratio;
    max_keys = std::max<int64_t>(max_keys, W);
    ONECARD_CHECK(max_keys <= b.max_keys, "gpu model: position {} needs {} keys (max_model_len too small?)",
                  meta_->max_pos, max_keys);
    if (p.dspark_block) {
        max_keys = W + c.dspark->block_size;
        ONECARD_CHECK(max_keys <= b.max_keys, "gpu model: a DSpark block needs {} keys, the buffers hold {}", max_keys,
                      b.max_keys);
        build_block_attention_offsets(*meta_, pool_, il, W, max_keys, b.kv_off, s);
    } else {
        build_attention_offsets(*meta_, pool_, il, W - (opt_.faults.window_off_by_one ? 1 : 0), picks, c.index_topk,
                                max_keys, b.kv_off, s);
    }
    cuda::SparseAttnDims ad;
    ad.n_heads = H;
    ad.head_dim = hd;
    ad.rope_dim = n_rope;
    ad.quant_block = spec.entry.quant_block;
    ad.entry_bytes = spec.entry.entry_bytes();
    ad.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    tick("attn: key lists", s);
    cuda::sparse_attention(b.q, pool_.base(), b.kv_off, max_keys, w.sink, b.o, n, ad, s, b.attn_scratch,
                           cuda::sparse_attention_scratch_floats(H, hd));
    cuda::rope_bf16(b.o, n, H, hd, {rope, n_rope, meta_->positions, cuda::RopeDirection::Inverse}, s);
    tick("attn: sparse attention", s);
    lin_->grouped(w.wo_a, c.o_groups, b.o, n, b.z, s);
    tick("attn: wo_a (grouped)", s);
    lin_->fp8(w.wo_b, b.z, n, out, s);
    tick("attn: wo_b", s);
    // Only now may the window rings take this step's rows (earlier tokens of the step read the old ones).
    // A DSpark block stores nothing: its stage's ring holds the main model's context (dspark_push).
    const int64_t ring_rows = p.dspark_block ? 0 : opt_.faults.drop_ring_row ? n - 1 : n;
    if (ring_rows > 0) cuda::kv_write_entries(b.kv, 0, b.ring_dst, pool_.base(), ring_rows, ed, s);
}

void GpuModel::moe(const StepPlan& p, const GpuBlock& blk, const bf16* xn, bf16* out, cudaStream_t s) {
    Buffers& b = *buf_;
    const ModelConfig& c = cfg_;
    const int64_t n = meta_->n, D = c.hidden_size, I = c.moe_intermediate_size, K = c.num_experts_per_tok;
    const float limit = opt_.faults.no_swiglu_clamp ? 0.0f : static_cast<float>(c.swiglu_limit);  // 0: no clamp
    const GpuMoE& m = blk.ffn;
    const bool hash = c.is_hash_layer(blk.layer_id);
    lin_->bf16(m.gate, xn, n, b.router, cuda::GemmOut::F32, s);
    const cuda::MoeRouteDims route{c.n_routed_experts, K, static_cast<float>(c.routed_scaling_factor)};
    cuda::moe_route(b.router, hash || opt_.faults.route_without_bias ? nullptr : m.bias, hash ? m.tid2eid : nullptr,
                    meta_->tokens, n, route, b.experts, b.weights, s);
    if (opt_.faults.swap_expert_weights && K >= 2) {  // planted fault: picks 0 and 1 trade weights
        const size_t pitch = static_cast<size_t>(K) * sizeof(float), row = sizeof(float);
        const auto n_rows = static_cast<size_t>(n);
        CUDA_CHECK(cudaMemcpy2DAsync(fault_swap_, row, b.weights, pitch, row, n_rows, cudaMemcpyDeviceToDevice, s));
        CUDA_CHECK(cudaMemcpy2DAsync(b.weights, pitch, b.weights + 1, pitch, row, n_rows, cudaMemcpyDeviceToDevice, s));
        CUDA_CHECK(cudaMemcpy2DAsync(b.weights + 1, pitch, fault_swap_, row, row, n_rows, cudaMemcpyDeviceToDevice, s));
    }
    if (b.pick_counts && blk.layer_id < c.num_hidden_layers)  // counts cover the main layers
        cuda::count_expert_picks(b.experts, n * K, b.pick_counts + blk.layer_id * c.n_routed_experts, s);
    tick("moe: router", s);
    // Shared expert: w1 and w3 as one linear when fused; on the GEMV path xn is quantised once for
    // the shared and the routed experts.
    const cuda::MxExpertWeights& e = m.experts;
    // On the GEMV path hc_pre wrote xn's FP8 copy (b.xq, b.xs) for the shared and the routed experts.
    const bool routed_gemv = p.moe_gemv;
    const bool x_once = routed_gemv && m.shared_w13.w && lin_->gemv_ok(m.shared_w13, n);
    // Hybrid layer, GEMV path: hand the host its pairs first, so the host experts run while the GPU
    // computes the shared expert and its own routed experts.
    const bool host_pairs = routed_gemv && m.hybrid();
    // On a streaming step this layer's staged host experts run on the GPU too (HostExpertStreamer).
    const bool staged = host_pairs && p.stream_experts && m.n_stream > 0;
    if (host_pairs) {
        cuda::host_moe_publish({.xq = b.xq,
                                .xs = b.xs,
                                .experts = b.experts,
                                .weights = b.weights,
                                .slot_of = m.expert_slot,
                                .stream_slot_of = staged ? m.expert_stream_slot : nullptr,
                                .local_ids = b.local_ids,
                                .stream_ids = staged ? b.stream_ids : nullptr,
                                .n = n,
                                .top_k = K,
                                .dim = D,
                                .layer = static_cast<int32_t>(blk.layer_id)},
                               host_->view(), s);
        tick("moe: host experts publish", s);
    }
    if (x_once) {
        lin_->fp8_quantized(m.shared_w13, b.xq, b.xs, n, b.s13, s);
        // SwiGLU and w2's input quantisation in one kernel (hq is free until the routed experts).
        cuda::swiglu_clamp_quant(b.s13, b.s13 + I, 2 * I, nullptr, b.hq, b.hs, n, I, limit, s);
    } else if (m.shared_w13.w) {
        lin_->fp8(m.shared_w13, xn, n, b.s13, s);
        cuda::swiglu_clamp(b.s13, b.s13 + I, 2 * I, nullptr, b.sh, n, I, limit, s);
    } else {
        lin_->fp8(m.shared_w1, xn, n, b.sg, s);
        lin_->fp8(m.shared_w3, xn, n, b.su, s);
        cuda::swiglu_clamp(b.sg, b.su, I, nullptr, b.sh, n, I, limit, s);
    }
    if (x_once && lin_->gemv_ok(m.shared_w2, n)) {
        lin_->fp8_quantized(m.shared_w2, b.hq, b.hs, n, b.shared, s);
    } else {
        if (x_once) cuda::swiglu_clamp(b.s13, b.s13 + I, 2 * I, nullptr, b.sh, n, I, limit, s);
        lin_->fp8(m.shared_w2, b.sh, n, b.shared, s);
    }
    tick("moe: shared expert", s);
    // Routed experts; REF scales the hidden activation by the routing weight before w2.
    if (routed_gemv) {
        const int64_t P = n * K;
        // On a hybrid layer the GPU groups its own slots (host and staged pairs are negative: left out).
        const int32_t* ids = host_pairs ? b.local_ids : b.experts;
        const int64_t scratch = cuda::mxfp4_group_scratch_ints(b.gemv_rows * K);
        const bool gpu = e.n_experts > 0;
        cuda::MoePairGroups groups, sgroups;
        if (gpu) groups = cuda::mxfp4_group_pairs(ids, P, e.n_experts, n, b.pair_groups, scratch, s);
        if (staged) sgroups = cuda::mxfp4_group_pairs(b.stream_ids, P, m.n_stream, n, b.stream_groups, scratch, s);
        // gate/up: y1 = w1·x, y3 = w3·x for every (token, expert) pair, x the token's FP8 row from hc_pre;
        // down: y2 = w2·h over the pairs' FP8 SwiGLU rows h.
        auto gate_up = [&](const cuda::MxExpertWeights& x) {
            return cuda::Mxfp4GroupedGemvArgs{b.xq, b.xs, b.pair_token, {x.w1, x.s1, b.y1}, {x.w3, x.s3, b.y3}, I, D};
        };
        auto down = [&](const cuda::MxExpertWeights& x) {
            return cuda::Mxfp4GroupedGemvArgs{b.hq, b.hs, nullptr, {x.w2, x.s2, b.y2}, {}, D, I};
        };
        if (gpu) cuda::mxfp4_grouped_gemv(gate_up(e), groups, s);
        // The staged experts' gate/up rows go into y1/y3 next to the GPU experts' (other pairs), so one
        // SwiGLU pass covers both; the wait for their copy comes after the GPU experts are queued.
        const cuda::MxExpertWeights* t = staged ? &streamer_->acquire(blk.layer_id, s) : nullptr;
        if (t) cuda::mxfp4_grouped_gemv(gate_up(*t), sgroups, s);
        if (gpu || t) cuda::swiglu_clamp_quant(b.y1, b.y3, I, b.weights, b.hq, b.hs, P, I, limit, s);
        if (gpu) cuda::mxfp4_grouped_gemv(down(e), groups, s);
        if (t) {
            cuda::mxfp4_grouped_gemv(down(*t), sgroups, s);
            streamer_->release(blk.layer_id, s);
        }
        tick("moe: routed experts (gemv)", s);
        if (host_pairs) {
            cuda::host_moe_wait_gather(b.local_ids, P, D, host_->view(), b.y2, opt_.host_experts.timeout_ns, s);
            tick("moe: host experts wait", s);
        }
        cuda::moe_combine(b.y2, nullptr, b.shared, out, n, K, D, s);
        tick("moe: routed experts (gemv)", s);
    } else {
        CUDA_CHECK(cudaMemcpyAsync(b.xr, xn, static_cast<size_t>(n * D) * 2, cudaMemcpyDeviceToDevice, s));
        cuda::fp8_round_1x128(b.xr, n, D, s);
        cuda::MxHybridExperts hyb;
        if (m.hybrid()) {
            hyb.n_global = c.n_routed_experts;
            hyb.slot_of = m.expert_slot_host.data();
            hyb.host = m.host_experts.data();
            hyb.staging = host_staging_;
        }
        experts_->run(b.xr, b.experts, b.weights, n, K, e, cuda::ExpertWeighting::BeforeW2, limit, b.shared, out, s,
                      m.hybrid() ? &hyb : nullptr);
        tick("moe: routed experts (grouped)", s);
    }
}

}  // namespace onecard
