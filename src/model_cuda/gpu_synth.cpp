// Synthetic weights in device memory (gpu_synth.h): one walk over the config builds the tensor list
// (tag, layout, fill rule), allocating from the arena or only counting bytes; the fill launches run
// over that list. The byte count, the allocation-only layout and the fill share the walk, so they
// cannot disagree. The kernels are in gpu_synth.cu (C++17, see gpu_synth_fill.cuh).
#include "model_cuda/gpu_synth.h"

#include "backend/cuda/ops/fp8_gemm.cuh"
#include "core/error.h"
#include "model/synth_random.h"
#include "model_cuda/gpu_synth_fill.cuh"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

namespace onecard {

namespace {

constexpr size_t kAlign = 256;  // DeviceArena's default alignment, used by every allocation here

enum class Fill { Fp8Codes, Fp8Scales, MxCodes, MxScales, Bf16Normal, F32Normal, HcBase, HcHeadBase, Tid2eid };

struct FillJob {
    Fill kind = Fill::Bf16Normal;
    std::string tag;  // the allocation's tag; its hash keys the random stream
    void* ptr = nullptr;
    int64_t rows = 0, cols = 0;     // logical shape (MXFP4: all experts' rows, unpacked columns)
    float mean = 0.0f, std = 0.0f;  // normal fills
};

float inv_sqrt(int64_t fan_in) {
    return static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
}

// Walks the config in checkpoint order, allocating from `arena`, or (arena == nullptr) counting the
// bytes a fresh arena would hand out.
class Builder {
public:
    // host_embed: the embedding table's device-mapped host memory (HostEmbedding), filled there with
    // the same values instead of taking arena bytes; nullptr: in the arena.
    // embed_on_host without host_embed: only count (the table takes no arena bytes).
    Builder(const ModelConfig& cfg, cuda::DeviceArena* arena, const ExpertPlacement* placement,
            __nv_bfloat16* host_embed = nullptr, bool embed_on_host = false)
        : cfg_(cfg),
          arena_(arena),
          placement_(placement),
          host_embed_(host_embed),
          embed_on_host_(embed_on_host || host_embed != nullptr) {}

    GpuModelWeights build() {
        const int64_t D = cfg_.hidden_size, V = cfg_.vocab_size;
        ONECARD_CHECK(D > 0 && V > 0 && cfg_.num_hidden_layers >= 0 && cfg_.hc_mult > 0,
                      "gpu synth: empty model shape (hidden {}, vocab {}, layers {}, hc {})", D, V,
                      cfg_.num_hidden_layers, cfg_.hc_mult);
        GpuModelWeights w;
        if (embed_on_host_) {  // N(0, 1) as below, written through the device alias of host RAM
            if (host_embed_) jobs_.push_back(FillJob{Fill::Bf16Normal, "embed.weight", host_embed_, V, D, 0.0f, 1.0f});
            w.embed = host_embed_;
        } else {
            w.embed = bf16_tensor("embed.weight", V, D, 0.0f, 1.0f);  // N(0, 1), as synth.cpp
        }
        for (int64_t il = 0; il < cfg_.num_hidden_layers; ++il) w.layers.push_back(block(il));
        w.norm = norm("norm.weight", D);
        w.hc_head = hc("hc_head", true);
        w.head = bf16_linear("head.weight", V, D);
        return w;
    }

    // The MTP block mtp.0 (tags "mtp.0.*"): a decoder block at layer index num_hidden_layers with every
    // routed expert, plus its glue (GpuMtp).
    GpuMtp build_mtp() {
        const int64_t D = cfg_.hidden_size;
        GpuMtp m;
        m.block = block(cfg_.num_hidden_layers, "mtp.0");
        m.enorm = norm("mtp.0.enorm.weight", D);
        m.hnorm = norm("mtp.0.hnorm.weight", D);
        m.norm = norm("mtp.0.norm.weight", D);
        m.e_proj = fp8_linear("mtp.0.e_proj", D, D);
        m.h_proj = fp8_linear("mtp.0.h_proj", D, D);
        m.hc_head = hc("mtp.0.hc_head", true);
        return m;
    }

    // The 0731 DSpark drafter (tags "mtp.{s}.*" as the checkpoint names them): S stages at layer
    // indices num_hidden_layers + s with every routed expert, the context projection, the last
    // stage's head norms and the Markov head (GpuDSpark).
    GpuDSpark build_dspark() {
        ONECARD_CHECK(cfg_.dspark.has_value(), "gpu synth: the config has no DSpark drafter");
        const int64_t D = cfg_.hidden_size, V = cfg_.vocab_size, r = cfg_.dspark->markov_rank;
        const auto S = static_cast<int64_t>(cfg_.dspark->target_layer_ids.size());
        const std::string last = fmt::format("mtp.{}", S - 1);
        GpuDSpark d;
        for (int64_t s = 0; s < S; ++s) d.stages.push_back(block(cfg_.num_hidden_layers + s, fmt::format("mtp.{}", s)));
        d.main_proj = fp8_linear("mtp.0.main_proj", D, S * D);
        d.main_norm = norm("mtp.0.main_norm.weight", D);
        d.norm = norm(last + ".norm.weight", D);
        d.hc_head = hc(last + ".hc_head", true);
        // w1 ~ N(0, 1) and w2 ~ N(0, 1/r): a bias of unit scale, like a logit.
        d.markov_w1 = bf16_tensor(last + ".markov_head.markov_w1.weight", V, r, 0.0f, 1.0f);
        d.markov_w2 = bf16_tensor(last + ".markov_head.markov_w2.weight", V, r, 0.0f, inv_sqrt(r));
        d.confidence = bf16_tensor(last + ".confidence_head.proj.weight", 1, D + r, 0.0f, inv_sqrt(D + r));
        d.rank = r;
        return d;
    }

    size_t used() const { return used_; }
    const std::vector<FillJob>& jobs() const { return jobs_; }

private:
    void* take(size_t bytes, Fill kind, const std::string& tag, int64_t rows, int64_t cols, float mean = 0.0f,
               float std = 0.0f) {
        void* p = nullptr;
        if (arena_) {
            p = arena_->alloc(bytes, tag, kAlign);
            used_ = arena_->used();
        } else {
            used_ = (used_ + kAlign - 1) / kAlign * kAlign + bytes;  // arena bases are 256-aligned (cudaMalloc)
        }
        jobs_.push_back(FillJob{kind, tag, p, rows, cols, mean, std});
        return p;
    }

    const __nv_bfloat16* bf16_tensor(const std::string& tag, int64_t rows, int64_t cols, float mean, float std) {
        return static_cast<const __nv_bfloat16*>(
            take(static_cast<size_t>(rows * cols) * 2, Fill::Bf16Normal, tag, rows, cols, mean, std));
    }
    // RMSNorm gains exactly 1 (synth.cpp adds 0.02·N(0,1); a unit gain keeps the activation scale exact).
    const __nv_bfloat16* norm(const std::string& tag, int64_t n) { return bf16_tensor(tag, 1, n, 1.0f, 0.0f); }
    const float* f32_tensor(const std::string& tag, int64_t rows, int64_t cols, float mean, float std) {
        return static_cast<const float*>(
            take(static_cast<size_t>(rows * cols) * 4, Fill::F32Normal, tag, rows, cols, mean, std));
    }

    // [n_out, n_in] bf16, N(0, 1/n_in): unit gain.
    GpuBf16Linear bf16_linear(const std::string& tag, int64_t n_out, int64_t n_in) {
        GpuBf16Linear l;
        l.w = bf16_tensor(tag, n_out, n_in, 0.0f, inv_sqrt(n_in));
        l.n_out = n_out;
        l.n_in = n_in;
        return l;
    }

    // prefix.weight [n_out, n_in] E4M3 + prefix.scale fp32 [ceil(n_out/128), ld] (the GEMM's padded layout).
    GpuFp8Linear fp8_linear(const std::string& prefix, int64_t n_out, int64_t n_in) {
        ONECARD_CHECK(n_out > 0 && n_in > 0 && n_in % 128 == 0,
                      "gpu synth: FP8 linear {} [{}, {}] needs an input width that is a multiple of 128", prefix, n_out,
                      n_in);
        GpuFp8Linear l;
        l.w = static_cast<const uint8_t*>(
            take(static_cast<size_t>(n_out * n_in), Fill::Fp8Codes, prefix + ".weight", n_out, n_in));
        l.ws = static_cast<const float*>(take(static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(n_out, n_in)) * 4,
                                              Fill::Fp8Scales, prefix + ".scale", n_out, n_in));
        l.n_out = n_out;
        l.n_in = n_in;
        return l;
    }

    // Two linears with the same input, allocated a.w, b.w, a.ws, b.ws so fuse_rows() can join them
    // (the fill jobs depend only on the tags, so the order does not change any value).
    void fp8_linear_pair(const std::string& pa, int64_t na, const std::string& pb, int64_t nb, int64_t n_in,
                         GpuFp8Linear& a, GpuFp8Linear& b) {
        ONECARD_CHECK(na > 0 && nb > 0 && n_in > 0 && n_in % 128 == 0,
                      "gpu synth: FP8 linears {}/{} need an input width that is a multiple of 128", pa, pb);
        a.w =
            static_cast<const uint8_t*>(take(static_cast<size_t>(na * n_in), Fill::Fp8Codes, pa + ".weight", na, n_in));
        b.w =
            static_cast<const uint8_t*>(take(static_cast<size_t>(nb * n_in), Fill::Fp8Codes, pb + ".weight", nb, n_in));
        a.ws = static_cast<const float*>(take(static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(na, n_in)) * 4,
                                              Fill::Fp8Scales, pa + ".scale", na, n_in));
        b.ws = static_cast<const float*>(take(static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(nb, n_in)) * 4,
                                              Fill::Fp8Scales, pb + ".scale", nb, n_in));
        a.n_out = na;
        b.n_out = nb;
        a.n_in = b.n_in = n_in;
    }

    // The E GPU-resident experts' copies of one matrix: codes [E·n_out, n_in/2], scales [E·n_out, n_in/32].
    void mx_matrix(const std::string& prefix, int64_t E, int64_t n_out, int64_t n_in, const uint8_t*& w,
                   const uint8_t*& s) {
        ONECARD_CHECK(n_out > 0 && n_in > 0 && n_in % 32 == 0,
                      "gpu synth: MXFP4 {} [{}, {}] needs an input width that is a multiple of 32", prefix, n_out,
                      n_in);
        w = static_cast<const uint8_t*>(
            take(static_cast<size_t>(E * n_out * n_in / 2), Fill::MxCodes, prefix + ".weight", E * n_out, n_in));
        s = static_cast<const uint8_t*>(
            take(static_cast<size_t>(E * n_out * n_in / 32), Fill::MxScales, prefix + ".scale", E * n_out, n_in));
    }

    // fn [n_mix, hc·D], base [n_mix], scale [3]; the head: n_mix = hc, scale [1].
    GpuHC hc(const std::string& prefix, bool head) {
        const int64_t h = cfg_.hc_mult, D = cfg_.hidden_size;
        const int64_t n_mix = head ? h : (2 + h) * h;
        GpuHC g;
        g.fn = f32_tensor(prefix + "_fn", n_mix, h * D, 0.0f, 0.2f * inv_sqrt(h * D));  // mixes ~ N(0, 0.04)
        g.base = static_cast<const float*>(
            take(static_cast<size_t>(n_mix) * 4, head ? Fill::HcHeadBase : Fill::HcBase, prefix + "_base", 1, n_mix));
        g.scale = f32_tensor(prefix + "_scale", 1, head ? 1 : 3, 1.0f, 0.05f);
        return g;
    }

    GpuCompressor compressor(const std::string& p, int64_t ratio, int64_t d) {
        const int64_t c = ratio == 4 ? 2 : 1;  // overlapping (CSA) compressors carry two halves
        GpuCompressor g;
        g.ratio = ratio;
        g.head_dim = d;
        g.wkv = bf16_linear(p + ".wkv.weight", c * d, cfg_.hidden_size);
        g.wgate = bf16_linear(p + ".wgate.weight", c * d, cfg_.hidden_size);
        if (arena_) g.wkv_wgate = fuse_compressor_rows(g.wkv, g.wgate);
        g.ape = f32_tensor(p + ".ape", ratio, c * d, 0.0f, 0.1f);
        g.norm = norm(p + ".norm.weight", d);
        return g;
    }

    GpuAttention attention(const std::string& p, int64_t ratio) {
        const int64_t D = cfg_.hidden_size, H = cfg_.num_attention_heads, hd = cfg_.head_dim;
        const int64_t G = cfg_.o_groups, r = cfg_.o_lora_rank, q = cfg_.q_lora_rank;
        ONECARD_CHECK(G > 0 && (H * hd) % G == 0, "gpu synth: {} heads × {} dims do not split into {} groups", H, hd,
                      G);
        GpuAttention a;
        fp8_linear_pair(p + ".wq_a", q, p + ".wkv", hd, D, a.wq_a, a.wkv);
        if (arena_) a.wq_a_wkv = fuse_rows(a.wq_a, a.wkv);
        a.q_norm = norm(p + ".q_norm.weight", q);
        a.wq_b = fp8_linear(p + ".wq_b", H * hd, q);
        a.kv_norm = norm(p + ".kv_norm.weight", hd);
        a.wo_a = fp8_linear(p + ".wo_a", G * r, H * hd / G);
        a.wo_b = fp8_linear(p + ".wo_b", D, G * r);
        a.sink = f32_tensor(p + ".attn_sink", 1, H, 0.0f, 1.0f);
        if (ratio != 0) a.compressor = compressor(p + ".compressor", ratio, hd);
        if (ratio == 4) {
            GpuIndexer ix;
            ix.wq_b = fp8_linear(p + ".indexer.wq_b", cfg_.index_n_heads * cfg_.index_head_dim, q);
            ix.weights_proj = bf16_linear(p + ".indexer.weights_proj.weight", cfg_.index_n_heads, D);
            ix.compressor = compressor(p + ".indexer.compressor", ratio, cfg_.index_head_dim);
            a.indexer = ix;
        }
        return a;
    }

    GpuMoE moe(const std::string& p, bool hash) {
        const int64_t D = cfg_.hidden_size, E = cfg_.n_routed_experts, I = cfg_.moe_intermediate_size;
        const int64_t K = cfg_.num_experts_per_tok;
        ONECARD_CHECK(E > 0 && I > 0, "gpu synth: {} needs routed experts (experts {}, inter {})", p, E, I);
        GpuMoE m;
        m.gate = bf16_linear(p + ".gate.weight", E, D);
        if (hash) {
            ONECARD_CHECK(K > 0 && K <= E && K <= cuda::kSynthMaxTopK,
                          "gpu synth: {}.gate.tid2eid needs 1..min({}, {}) experts per token, the config has {}", p, E,
                          cuda::kSynthMaxTopK, K);
            m.tid2eid = static_cast<const int32_t*>(take(static_cast<size_t>(cfg_.vocab_size * K) * 4, Fill::Tid2eid,
                                                         p + ".gate.tid2eid", cfg_.vocab_size, K));
        } else {
            m.bias = f32_tensor(p + ".gate.bias", 1, E, 0.0f, 0.05f);
        }
        cuda::MxExpertWeights& x = m.experts;
        // With a placement only the layer's GPU-resident experts are made here (in slot order); the
        // others are made in host RAM (HostExpertStore::fill_synthetic).
        x.n_experts = placement_ && layer_ < cfg_.num_hidden_layers ? placement_->n_gpu(layer_) : E;
        x.dim = D;
        x.inter = I;
        mx_matrix(p + ".experts.w1", x.n_experts, I, D, x.w1, x.s1);
        mx_matrix(p + ".experts.w2", x.n_experts, D, I, x.w2, x.s2);
        mx_matrix(p + ".experts.w3", x.n_experts, I, D, x.w3, x.s3);
        // The checkpoint's shared expert is one expert of moe_intermediate_size rows (n_shared_experts = 1).
        fp8_linear_pair(p + ".shared_experts.w1", I, p + ".shared_experts.w3", I, D, m.shared_w1, m.shared_w3);
        if (arena_) m.shared_w13 = fuse_rows(m.shared_w1, m.shared_w3);
        m.shared_w2 = fp8_linear(p + ".shared_experts.w2", D, I);
        return m;
    }

    GpuBlock block(int64_t il, const std::string& prefix = "") {
        layer_ = il;
        const std::string p = prefix.empty() ? fmt::format("layers.{}", il) : prefix;
        const int64_t D = cfg_.hidden_size;
        GpuBlock b;
        b.layer_id = il;
        b.attn_norm = norm(p + ".attn_norm.weight", D);
        b.hc_attn = hc(p + ".hc_attn", false);
        b.attn = attention(p + ".attn", cfg_.compress_ratio(il));
        b.ffn_norm = norm(p + ".ffn_norm.weight", D);
        b.hc_ffn = hc(p + ".hc_ffn", false);
        b.ffn = moe(p + ".ffn", cfg_.is_hash_layer(il));
        return b;
    }

    const ModelConfig& cfg_;
    cuda::DeviceArena* arena_;
    const ExpertPlacement* placement_;  // nullptr: every routed expert on the GPU
    __nv_bfloat16* host_embed_;         // the embedding table's device-mapped host memory, or nullptr
    bool embed_on_host_;                // the table takes no arena bytes
    int64_t layer_ = 0;                 // the layer being built
    size_t used_ = 0;
    std::vector<FillJob> jobs_;
};

// ---- the fills ------------------------------------------------------------------------------------

uint64_t tensor_key(uint64_t seed, const std::string& tag) {
    return synth_random::splitmix64(seed ^ synth_random::fnv1a64(tag));
}

// FP8 block exponents come from the weight's tag, so its codes and its scales agree.
uint64_t fp8_block_key(uint64_t seed, const std::string& weight_tag) {
    return synth_random::splitmix64(tensor_key(seed, weight_tag) ^ 0x5CA1EB10C4ull);
}

// e0 = ceil(log2(σ/112)), σ = 1/√fan_in: the code std σ/2^e0 lies in (56, 112] (|z| up to 4σ-8σ before
// E4M3 saturates at 448), and in (28, 56] for blocks bumped to 2^(e0+1).
int fp8_base_exponent(int64_t fan_in) {
    const double sigma = 1.0 / std::sqrt(static_cast<double>(fan_in));
    return static_cast<int>(std::ceil(std::log2(sigma / 112.0)));
}

std::string weight_tag_of_scale(const std::string& scale_tag) {
    return scale_tag.substr(0, scale_tag.size() - 6) + ".weight";  // "x.scale" -> "x.weight"
}

void launch_fill(const FillJob& j, uint64_t seed, const ModelConfig& cfg, cudaStream_t stream) {
    const uint64_t key = tensor_key(seed, j.tag);
    const int64_t n = j.rows * j.cols;
    switch (j.kind) {
        case Fill::Fp8Codes:
            cuda::synth_fill_fp8_codes(static_cast<uint8_t*>(j.ptr), j.rows, j.cols, key, fp8_block_key(seed, j.tag),
                                       inv_sqrt(j.cols), fp8_base_exponent(j.cols), stream);
            return;
        case Fill::Fp8Scales:
            cuda::synth_fill_fp8_scales(
                static_cast<float*>(j.ptr), (j.rows + 127) / 128, j.cols / 128, cuda::fp8_gemm_weight_scale_ld(j.cols),
                fp8_block_key(seed, weight_tag_of_scale(j.tag)), fp8_base_exponent(j.cols), stream);
            return;
        case Fill::MxCodes:
            cuda::synth_fill_random_bytes(static_cast<uint8_t*>(j.ptr), n / 2, key, stream);
            return;
        case Fill::MxScales: {
            int base = 0;
            double p = 0;
            synth_mx_scale_rule(j.cols, base, p);
            cuda::synth_fill_mx_scales(static_cast<uint8_t*>(j.ptr), n / 32, key, base, static_cast<float>(p), stream);
            return;
        }
        case Fill::Bf16Normal:
            cuda::synth_fill_bf16_normal(j.ptr, n, key, j.mean, j.std, stream);
            return;
        case Fill::F32Normal:
            cuda::synth_fill_f32_normal(static_cast<float*>(j.ptr), n, key, j.mean, j.std, stream);
            return;
        case Fill::HcBase:
        case Fill::HcHeadBase: {
            // synth.cpp's pre-mix logit log(1/(hc−1)): sigmoid of it is 1/hc, an average of the streams.
            const float pre =
                cfg.hc_mult > 1 ? static_cast<float>(std::log(1.0 / static_cast<double>(cfg.hc_mult - 1))) : 0.0f;
            cuda::synth_fill_hc_base(static_cast<float*>(j.ptr), n, cfg.hc_mult, j.kind == Fill::HcHeadBase, pre, key,
                                     stream);
            return;
        }
        case Fill::Tid2eid:
            cuda::synth_fill_tid2eid(static_cast<int32_t*>(j.ptr), j.rows, static_cast<int>(j.cols),
                                     static_cast<int>(cfg.n_routed_experts), key, stream);
            return;
    }
}

}  // namespace

void synth_mx_scale_rule(int64_t fan_in, int& base_byte, double& p_high) {
    // Uniform E2M1 codes have E[v²] = (0 + 0.25 + 1 + 2.25 + 4 + 9 + 16 + 36) / 8 = 8.5625. The block
    // scale s needs E[s²] = 1/(8.5625·fan_in) =: t; with s = 2^e_lo, or 2^(e_lo+1) with probability p,
    // E[s²] = 4^e_lo·(1 + 3p) = t for e_lo = floor(log2(t)/2), p = (t/4^e_lo − 1)/3 ∈ [0, 1).
    const double t = 1.0 / (8.5625 * static_cast<double>(fan_in));
    const int e_lo = static_cast<int>(std::floor(0.5 * std::log2(t)));
    p_high = (t / std::ldexp(1.0, 2 * e_lo) - 1.0) / 3.0;
    base_byte = 127 + e_lo;
}

int64_t synth_weights_device_bytes(const ModelConfig& cfg, const ExpertPlacement* placement, bool embed_on_host) {
    Builder b(cfg, nullptr, placement, nullptr, embed_on_host);
    b.build();
    return static_cast<int64_t>(b.used());
}

int64_t synth_mtp_device_bytes(const ModelConfig& cfg) {
    Builder b(cfg, nullptr, nullptr);
    b.build_mtp();
    return static_cast<int64_t>(b.used());
}

int64_t synth_dspark_device_bytes(const ModelConfig& cfg) {
    Builder b(cfg, nullptr, nullptr);
    b.build_dspark();
    return static_cast<int64_t>(b.used());
}

GpuModelWeights alloc_synth_weights(const ModelConfig& cfg, cuda::DeviceArena& arena, const ExpertPlacement* placement,
                                    __nv_bfloat16* host_embed) {
    Builder b(cfg, &arena, placement, host_embed);
    return b.build();
}

GpuMtp synth_mtp_on_device(const ModelConfig& cfg, cuda::DeviceArena& arena, uint64_t seed, cudaStream_t stream) {
    Builder b(cfg, &arena, nullptr);
    GpuMtp m = b.build_mtp();
    for (const FillJob& j : b.jobs()) launch_fill(j, seed, cfg, stream);
    return m;
}

GpuDSpark synth_dspark_on_device(const ModelConfig& cfg, cuda::DeviceArena& arena, uint64_t seed, cudaStream_t stream) {
    Builder b(cfg, &arena, nullptr);
    GpuDSpark d = b.build_dspark();
    for (const FillJob& j : b.jobs()) launch_fill(j, seed, cfg, stream);
    return d;
}

GpuModelWeights synth_weights_on_device(const ModelConfig& cfg, cuda::DeviceArena& arena, uint64_t seed,
                                        cudaStream_t stream, const ExpertPlacement* placement,
                                        __nv_bfloat16* host_embed) {
    if (placement) {
        placement->check_integrity();
        ONECARD_CHECK(placement->n_layers() == cfg.num_hidden_layers && placement->n_experts == cfg.n_routed_experts,
                      "gpu synth: the placement is for {} layers x {} experts, the model has {} x {}",
                      placement->n_layers(), placement->n_experts, cfg.num_hidden_layers, cfg.n_routed_experts);
    }
    Builder b(cfg, &arena, placement, host_embed);
    GpuModelWeights w = b.build();
    for (const FillJob& j : b.jobs()) launch_fill(j, seed, cfg, stream);
    return w;
}

}  // namespace onecard
