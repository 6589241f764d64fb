#include "model_cuda/gpu_weights.h"

#include "backend/cpu/linear.h"
#include "backend/cuda/ops/elementwise.cuh"
#include "backend/cuda/ops/fp8_gemm.cuh"
#include "backend/cuda/ops/mxfp4_layout.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"
#include "core/fp_formats.h"

#include <cstring>
#include <string>
#include <vector>

namespace onecard {
namespace {

int64_t fp8_linear_bytes(int64_t n, int64_t k) {
    return n * k + cuda::fp8_gemm_weight_scale_floats(n, k) * 4;
}

// Copies host bytes into a fresh arena allocation tagged with the tensor name.
template <typename T>
const T* upload_bytes(cuda::DeviceArena& arena, const void* src, size_t bytes, const std::string& tag) {
    void* dst = arena.alloc(bytes, tag);
    if (bytes) cuda::copy_to_device(dst, src, bytes);
    return static_cast<const T*>(dst);
}

void expect(const TensorView& t, DType dtype, std::vector<int64_t> shape) {
    ONECARD_CHECK(t.dtype == dtype && t.shape == shape,
                  "tensor {}: the GPU layout needs {} {}, the checkpoint has {} {}", t.name, dtype_name(dtype),
                  shape_str(shape), dtype_name(t.dtype), shape_str(t.shape));
}

// Any float tensor (F32 / BF16) as fp32 on the device.
const float* upload_f32(cuda::DeviceArena& arena, const TensorView& t) {
    const std::vector<float> v = cpu::to_f32(t);
    return upload_bytes<float>(arena, v.data(), v.size() * 4, t.name);
}

// Any float tensor as bf16 on the device (BF16 is copied as is; others are rounded).
const __nv_bfloat16* upload_bf16(cuda::DeviceArena& arena, const TensorView& t) {
    if (t.dtype == DType::BF16) return upload_bytes<__nv_bfloat16>(arena, t.data, t.nbytes, t.name);
    const std::vector<float> v = cpu::to_f32(t);
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
    return upload_bytes<__nv_bfloat16>(arena, b.data(), b.size() * 2, t.name);
}

GpuBf16Linear bf16_linear(cuda::DeviceArena& arena, const TensorView& t) {
    ONECARD_CHECK(t.shape.size() == 2, "tensor {}: expected a 2-D weight, got {}", t.name, shape_str(t.shape));
    return {upload_bf16(arena, t), t.shape[0], t.shape[1]};
}

void check_fp8(const QuantLinear& q) {
    ONECARD_CHECK(q.weight.dtype == DType::F8_E4M3, "tensor {}: the GPU runs it as an FP8 linear, but it is {}",
                  q.weight.name, dtype_name(q.weight.dtype));
    const int64_t n = q.out_features(), k = q.in_features();
    ONECARD_CHECK(n % 128 == 0 && k % 128 == 0, "tensor {}: FP8 linear {}x{} is not made of whole 128x128 blocks",
                  q.weight.name, n, k);
    expect(q.scale, DType::F8_E8M0, {n / 128, k / 128});
}

// The block scales of q into `ws` (the GEMM's fp32 layout); the UE8M0 bytes pass through scratch
// above the arena's top, released at once.
void upload_fp8_scales(cuda::DeviceArena& arena, const QuantLinear& q, float* ws) {
    const cuda::DeviceArena::Mark m = arena.mark();
    auto* raw = upload_bytes<uint8_t>(arena, q.scale.data, q.scale.nbytes, q.scale.name + " (ue8m0 staging)");
    cuda::fp8_gemm_prepare_weight_scales(raw, ws, q.out_features(), q.in_features(), nullptr);
    cuda::device_sync();
    arena.release(m);
}

GpuFp8Linear fp8_linear(cuda::DeviceArena& arena, const QuantLinear& q) {
    check_fp8(q);
    GpuFp8Linear l;
    l.n_out = q.out_features();
    l.n_in = q.in_features();
    l.w = upload_bytes<uint8_t>(arena, q.weight.data, q.weight.nbytes, q.weight.name);
    auto* ws =
        arena.alloc_n<float>(static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(l.n_out, l.n_in)), q.scale.name);
    upload_fp8_scales(arena, q, ws);
    l.ws = ws;
    return l;
}

// Two linears with the same input, laid out so fuse_rows() can join them: a.w, b.w, a.ws, b.ws.
void fp8_linear_pair(cuda::DeviceArena& arena, const QuantLinear& qa, const QuantLinear& qb, GpuFp8Linear& a,
                     GpuFp8Linear& b) {
    check_fp8(qa);
    check_fp8(qb);
    a.n_out = qa.out_features();
    a.n_in = qa.in_features();
    b.n_out = qb.out_features();
    b.n_in = qb.in_features();
    a.w = upload_bytes<uint8_t>(arena, qa.weight.data, qa.weight.nbytes, qa.weight.name);
    b.w = upload_bytes<uint8_t>(arena, qb.weight.data, qb.weight.nbytes, qb.weight.name);
    auto* wsa =
        arena.alloc_n<float>(static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(a.n_out, a.n_in)), qa.scale.name);
    auto* wsb =
        arena.alloc_n<float>(static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(b.n_out, b.n_in)), qb.scale.name);
    upload_fp8_scales(arena, qa, wsa);
    upload_fp8_scales(arena, qb, wsb);
    a.ws = wsa;
    b.ws = wsb;
}

GpuHC hc(cuda::DeviceArena& arena, const HCWeights& h) {
    return {upload_f32(arena, h.fn), upload_f32(arena, h.base), upload_f32(arena, h.scale)};
}

GpuCompressor compressor(cuda::DeviceArena& arena, const CompressorWeights& c, int64_t ratio, int64_t head_dim) {
    GpuCompressor g;
    g.ratio = ratio;
    g.head_dim = head_dim;
    g.wkv = bf16_linear(arena, c.wkv);
    g.wgate = bf16_linear(arena, c.wgate);
    g.wkv_wgate = fuse_compressor_rows(g.wkv, g.wgate);
    const int64_t width = (ratio == 4 ? 2 : 1) * head_dim;
    ONECARD_CHECK(g.wkv.n_out == width && g.wgate.n_out == width && c.ape.numel() == ratio * width,
                  "tensor {}: compressor of ratio {} needs {} channels, has {}", c.wkv.name, ratio, width, g.wkv.n_out);
    g.ape = upload_f32(arena, c.ape);
    g.norm = upload_bf16(arena, c.norm);
    return g;
}

// All routed experts of a layer into one array per matrix, each expert's matrix in the tiled layout
// (mxfp4_layout.cuh) that mxfp4_grouped_gemv and MoeExperts read, indexed by expert id.
cuda::MxExpertWeights routed_experts(cuda::DeviceArena& arena, const ModelConfig& cfg, const MoEWeights& m, int64_t il,
                                     const std::vector<int32_t>& ids) {
    cuda::MxExpertWeights x;
    x.n_experts = static_cast<int64_t>(ids.size());
    x.dim = cfg.hidden_size;
    x.inter = cfg.moe_intermediate_size;
    const std::string prefix = "layers." + std::to_string(il) + ".ffn.experts";
    auto pack = [&](auto pick, int64_t n, int64_t k, const uint8_t** w, const uint8_t** s, const char* name) {
        const size_t wb = static_cast<size_t>(n * k / 2), sb = static_cast<size_t>(n * k / 32);
        auto* dw = static_cast<uint8_t*>(arena.alloc(wb * static_cast<size_t>(x.n_experts), prefix + "." + name));
        auto* ds =
            static_cast<uint8_t*>(arena.alloc(sb * static_cast<size_t>(x.n_experts), prefix + "." + name + ".scale"));
        // Each matrix goes through a staging buffer at the arena's top and is written tiled into its
        // place by a kernel (a host-side permutation of ~120 GB would cost minutes at load); the
        // staging buffer is reused once the kernel is done.
        const auto mark = arena.mark();
        cuda::Stream stream;
        auto* tw = static_cast<uint8_t*>(arena.alloc(wb, prefix + ".staging"));
        auto* ts = static_cast<uint8_t*>(arena.alloc(sb, prefix + ".staging.scale"));
        for (int64_t e = 0; e < x.n_experts; ++e) {  // e: the slot; ids[e]: the expert
            const QuantLinear& q = pick(m.experts.at(static_cast<size_t>(ids[static_cast<size_t>(e)])));
            ONECARD_CHECK(q.is_mxfp4(), "tensor {}: the GPU runs routed experts as MXFP4, but it is {}", q.weight.name,
                          dtype_name(q.weight.dtype));
            expect(q.weight, q.weight.dtype, {n, k / 2});
            expect(q.scale, DType::F8_E8M0, {n, k / 32});
            cuda::copy_to_device(tw, q.weight.data, wb);
            cuda::copy_to_device(ts, q.scale.data, sb);
            cuda::mxfp4_tile_device(tw, ts, n, k, dw + wb * static_cast<size_t>(e), ds + sb * static_cast<size_t>(e),
                                    stream.get());
            stream.sync();
        }
        arena.release(mark);
        *w = dw;
        *s = ds;
    };
    const int64_t D = x.dim, I = x.inter;
    pack([](const ExpertWeights& e) -> const QuantLinear& { return e.w1; }, I, D, &x.w1, &x.s1, "w1");
    pack([](const ExpertWeights& e) -> const QuantLinear& { return e.w3; }, I, D, &x.w3, &x.s3, "w3");
    pack([](const ExpertWeights& e) -> const QuantLinear& { return e.w2; }, D, I, &x.w2, &x.s2, "w2");
    return x;
}

// The host table is range-checked (an out-of-range id would index past the expert arrays on the GPU).
const int32_t* tid2eid(cuda::DeviceArena& arena, const ModelConfig& cfg, const TensorView& t) {
    const std::vector<int32_t> v = hash_routing_table(t, cfg.n_routed_experts);
    return upload_bytes<int32_t>(arena, v.data(), v.size() * 4, t.name);
}

GpuBlock block(cuda::DeviceArena& arena, const ModelConfig& cfg, const BlockWeights& b, int64_t il,
               const ExpertPlacement* placement) {
    GpuBlock g;
    g.layer_id = il;
    g.attn_norm = upload_bf16(arena, b.attn_norm);
    g.ffn_norm = upload_bf16(arena, b.ffn_norm);
    g.hc_attn = hc(arena, b.hc_attn);
    g.hc_ffn = hc(arena, b.hc_ffn);
    const AttentionWeights& a = b.attn;
    fp8_linear_pair(arena, a.wq_a, a.wkv, g.attn.wq_a, g.attn.wkv);
    g.attn.wq_a_wkv = fuse_rows(g.attn.wq_a, g.attn.wkv);
    g.attn.q_norm = upload_bf16(arena, a.q_norm);
    g.attn.wq_b = fp8_linear(arena, a.wq_b);
    g.attn.kv_norm = upload_bf16(arena, a.kv_norm);
    g.attn.wo_a = fp8_linear(arena, a.wo_a);
    g.attn.wo_b = fp8_linear(arena, a.wo_b);
    g.attn.sink = upload_f32(arena, a.attn_sink);
    const int64_t ratio = cfg.compress_ratio(il);
    if (a.compressor) g.attn.compressor = compressor(arena, *a.compressor, ratio, cfg.head_dim);
    if (a.indexer) {
        GpuIndexer ix;
        ix.wq_b = fp8_linear(arena, a.indexer->wq_b);
        ix.weights_proj = bf16_linear(arena, a.indexer->weights_proj);
        ix.compressor = compressor(arena, a.indexer->compressor, ratio, cfg.index_head_dim);
        g.attn.indexer = ix;
    }
    const MoEWeights& m = b.ffn;
    g.ffn.gate = bf16_linear(arena, m.gate_weight);
    if (m.gate_bias) g.ffn.bias = upload_f32(arena, *m.gate_bias);
    if (m.tid2eid) g.ffn.tid2eid = tid2eid(arena, cfg, *m.tid2eid);
    std::vector<int32_t> ids;
    if (placement) {
        ids = placement->gpu_experts(il);
    } else {
        for (size_t e = 0; e < m.experts.size(); ++e) ids.push_back(static_cast<int32_t>(e));
    }
    g.ffn.experts = routed_experts(arena, cfg, m, il, ids);
    fp8_linear_pair(arena, m.shared.w1, m.shared.w3, g.ffn.shared_w1, g.ffn.shared_w3);
    g.ffn.shared_w13 = fuse_rows(g.ffn.shared_w1, g.ffn.shared_w3);
    g.ffn.shared_w2 = fp8_linear(arena, m.shared.w2);
    return g;
}

}  // namespace

GpuMtp upload_mtp_weights(const ModelConfig& cfg, const ModelWeights& w, cuda::DeviceArena& arena) {
    check_gpu_model_shape(cfg);
    ONECARD_CHECK(!w.mtp.empty(), "weights: the checkpoint has no mtp.0 block");
    const MTPWeights& m = w.mtp.front();
    GpuMtp g;
    g.block = block(arena, cfg, m.block, cfg.num_hidden_layers, nullptr);
    g.enorm = upload_bf16(arena, m.enorm);
    g.hnorm = upload_bf16(arena, m.hnorm);
    g.norm = upload_bf16(arena, m.norm);
    g.e_proj = fp8_linear(arena, m.e_proj);
    g.h_proj = fp8_linear(arena, m.h_proj);
    g.hc_head = hc(arena, m.hc_head);
    return g;
}

GpuDSpark upload_dspark_weights(const ModelConfig& cfg, const ModelWeights& w, cuda::DeviceArena& arena) {
    check_gpu_model_shape(cfg);
    ONECARD_CHECK(w.dspark.has_value() && cfg.dspark.has_value(),
                  "weights: the checkpoint has no DSpark drafter (not a 0731 model)");
    const DSparkWeights& d = *w.dspark;
    GpuDSpark g;
    for (size_t s = 0; s < d.stages.size(); ++s) {
        const int64_t il = cfg.num_hidden_layers + static_cast<int64_t>(s);
        ONECARD_CHECK(cfg.compress_ratio(il) == 0, "weights: DSpark stage {} has compress ratio {} (must be 0)", s,
                      cfg.compress_ratio(il));
        g.stages.push_back(block(arena, cfg, d.stages[s], il, nullptr));
    }
    g.main_proj = fp8_linear(arena, d.main_proj);
    g.main_norm = upload_bf16(arena, d.main_norm);
    g.norm = upload_bf16(arena, d.norm);
    g.hc_head = hc(arena, d.hc_head);
    g.markov_w1 = upload_bf16(arena, d.markov_w1);
    g.markov_w2 = upload_bf16(arena, d.markov_w2);
    g.confidence = upload_bf16(arena, d.confidence_proj);
    g.rank = cfg.dspark->markov_rank;
    ONECARD_CHECK(g.rank > 0 && g.rank % 8 == 0, "weights: DSpark Markov rank {} (the GPU needs a multiple of 8)",
                  g.rank);
    return g;
}

GpuFp8Linear fuse_rows(const GpuFp8Linear& a, const GpuFp8Linear& b) {
    GpuFp8Linear f;
    if (!a.w || !b.w || a.n_in != b.n_in) return f;
    // Scale rows are whole 128-row blocks, so the joined scale matrix is a's rows then b's.
    if (a.n_out % 128 != 0) return f;
    if (b.w != a.w + a.n_out * a.n_in || b.ws != a.ws + cuda::fp8_gemm_weight_scale_floats(a.n_out, a.n_in)) return f;
    f.w = a.w;
    f.ws = a.ws;
    f.n_out = a.n_out + b.n_out;
    f.n_in = a.n_in;
    return f;
}

GpuBf16Linear fuse_compressor_rows(const GpuBf16Linear& wkv, const GpuBf16Linear& wgate) {
    GpuBf16Linear f;
    if (!wkv.w || !wgate.w || wkv.n_in != wgate.n_in || wkv.n_out != wgate.n_out) return f;
    if (wgate.w != wkv.w + wkv.n_out * wkv.n_in) return f;
    f.w = wkv.w;
    f.n_out = 2 * wkv.n_out;
    f.n_in = wkv.n_in;
    return f;
}

GpuWeightBytes gpu_weight_bytes(const ModelConfig& c) {
    GpuWeightBytes b;
    const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim, I = c.moe_intermediate_size;
    const int64_t E = c.n_routed_experts, G = c.o_groups, r = c.o_lora_rank, hc = c.hc_mult;
    const int64_t n_mix = (2 + hc) * hc;
    b.embed_head = 2 * c.vocab_size * D * 2 + D * 2 + (hc * hc * D + hc + 1) * 4;
    for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
        int64_t a = fp8_linear_bytes(c.q_lora_rank, D) + fp8_linear_bytes(H * hd, c.q_lora_rank) +
                    fp8_linear_bytes(hd, D) + fp8_linear_bytes(G * r, H * hd / G) + fp8_linear_bytes(D, G * r) +
                    (c.q_lora_rank + hd) * 2 + H * 4;
        const int64_t ratio = c.compress_ratio(il);
        auto comp = [&](int64_t d) {
            const int64_t w = (ratio == 4 ? 2 : 1) * d;
            return 2 * w * D * 2 + ratio * w * 4 + d * 2;
        };
        if (ratio) a += comp(hd);
        if (ratio == 4)
            a += fp8_linear_bytes(c.index_n_heads * c.index_head_dim, c.q_lora_rank) + c.index_n_heads * D * 2 +
                 comp(c.index_head_dim);
        b.attention += a;
        b.routed_experts += E * 3 * I * D * 17 / 32;  // E2M1 nibbles + one UE8M0 byte per 32
        b.shared_experts += 2 * fp8_linear_bytes(I, D) + fp8_linear_bytes(D, I);
        b.other += E * D * 2 + (c.is_hash_layer(il) ? c.vocab_size * c.num_experts_per_tok * 4 : E * 4) +
                   2 * (n_mix * hc * D + n_mix + 3) * 4 + 2 * D * 2;
    }
    b.total = b.embed_head + b.attention + b.routed_experts + b.shared_experts + b.other;
    return b;
}

void check_gpu_model_shape(const ModelConfig& c) {
    std::vector<std::string> bad;
    auto need = [&](bool ok, std::string what) {
        if (!ok) bad.push_back(std::move(what));
    };
    need(c.head_dim == 512, fmt::format("head_dim {} (the attention kernel is written for 512)", c.head_dim));
    need(c.qk_rope_head_dim == 64, fmt::format("qk_rope_head_dim {} (64 expected)", c.qk_rope_head_dim));
    need(c.hc_mult == 4, fmt::format("hc_mult {} (the hyper-connection kernels are written for 4)", c.hc_mult));
    need(c.num_key_value_heads == 1, fmt::format("num_key_value_heads {} (must be 1)", c.num_key_value_heads));
    need(c.hidden_size % 512 == 0, fmt::format("hidden_size {} (a multiple of 512)", c.hidden_size));
    need(c.q_lora_rank % 128 == 0, fmt::format("q_lora_rank {} (a multiple of 128)", c.q_lora_rank));
    need(c.o_groups > 0 && c.o_lora_rank % 128 == 0 && c.num_attention_heads % c.o_groups == 0 &&
             (c.num_attention_heads * c.head_dim / c.o_groups) % 128 == 0,
         fmt::format("o_groups {} x o_lora_rank {} (groups dividing the heads, whole 128x128 wo_a blocks per group)",
                     c.o_groups, c.o_lora_rank));
    need(c.moe_intermediate_size % 256 == 0,
         fmt::format("moe_intermediate_size {} (a multiple of 256: the tiled MXFP4 expert layout)",
                     c.moe_intermediate_size));
    const int64_t dI = c.index_head_dim;
    need(dI >= 32 && dI <= 1024 && (dI & (dI - 1)) == 0,
         fmt::format("index_head_dim {} (a power of two in [32, 1024] for the Hadamard transform)", dI));
    need(c.expert_dtype == "fp4", fmt::format("expert_dtype {} (the GPU runs MXFP4 routed experts)", c.expert_dtype));
    need(c.n_routed_experts <= 1024, fmt::format("n_routed_experts {} (at most 1024)", c.n_routed_experts));
    need(c.sliding_window >= 1, fmt::format("sliding_window {}", c.sliding_window));
    if (bad.empty()) return;
    std::string msg = "the CUDA backend cannot run this model:";
    for (const auto& s : bad) msg += "\n  " + s;
    throw Error(msg);
}

GpuModelWeights upload_weights(const ModelConfig& cfg, const ModelWeights& w, cuda::DeviceArena& arena,
                               const ExpertPlacement* placement, const __nv_bfloat16* host_embed) {
    check_gpu_model_shape(cfg);
    if (placement) {
        placement->check_integrity();
        ONECARD_CHECK(placement->n_layers() == cfg.num_hidden_layers && placement->n_experts == cfg.n_routed_experts,
                      "weights: the expert placement is for {} layers x {} experts, the model has {} x {}",
                      placement->n_layers(), placement->n_experts, cfg.num_hidden_layers, cfg.n_routed_experts);
    }
    GpuModelWeights g;
    g.embed = host_embed ? host_embed : upload_bf16(arena, w.embed);
    g.head = bf16_linear(arena, w.head);
    g.norm = upload_bf16(arena, w.norm);
    g.hc_head = hc(arena, w.hc_head);
    ONECARD_CHECK(static_cast<int64_t>(w.layers.size()) == cfg.num_hidden_layers, "weights: {} layers, config {}",
                  w.layers.size(), cfg.num_hidden_layers);
    for (int64_t il = 0; il < cfg.num_hidden_layers; ++il)
        g.layers.push_back(block(arena, cfg, w.layers[static_cast<size_t>(il)], il, placement));
    return g;
}

}  // namespace onecard
