// Synthetic device weights (model_cuda/gpu_synth.h). There is no CPU oracle for random values, so
// the GPU tests check the properties the benchmark relies on: every element written (the arena is
// poisoned with 0xFF first, which no fill produces: NaN in bf16/fp32/E4M3/UE8M0, -1 in tid2eid),
// effective weights with the intended scale (FP8 codes × block scales, MXFP4 codes × UE8M0 scales),
// scale layout and padding, unit norms, distinct in-range tid2eid rows, and determinism in the seed.
// The byte accounting runs on the CPU (borrowed host arena, never touched) and is checked against
// model/weights.cpp's checkpoint layout with the GPU layouts' conversions applied.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/ops/elementwise.cuh"
#include "backend/cuda/ops/fp8_gemm.cuh"
#include "core/fp_formats.h"
#include "model/synth.h"
#include "model/weights.h"
#include "model_cuda/gpu_synth.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include <sys/mman.h>

namespace onecard {
namespace {

ModelConfig flash_cfg(int64_t layers, int64_t experts, std::optional<int64_t> vocab = 1024) {
    SynthOptions o;
    o.preset = SynthPreset::Flash;
    o.layers = layers;
    o.experts = experts;
    o.vocab = vocab;
    return synth_config(o);
}

// ---- the tensors of a GpuModelWeights, walked independently of gpu_synth.cpp ----------------------

enum class Kind { Bf16, F32, Fp8, Fp8Scale, MxCodes, MxScale, I32 };

struct Flat {
    std::string name;
    const void* p = nullptr;
    int64_t rows = 0, cols = 0;  // logical; Fp8Scale: the weight's [n_out, n_in]; Mx*: [E·n_out, n_in]
    Kind kind = Kind::Bf16;
    size_t bytes() const {
        switch (kind) {
            case Kind::Bf16:
                return static_cast<size_t>(rows * cols) * 2;
            case Kind::F32:
            case Kind::I32:
                return static_cast<size_t>(rows * cols) * 4;
            case Kind::Fp8:
                return static_cast<size_t>(rows * cols);
            case Kind::Fp8Scale:
                return static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(rows, cols)) * 4;
            case Kind::MxCodes:
                return static_cast<size_t>(rows * cols / 2);
            case Kind::MxScale:
                return static_cast<size_t>(rows * cols / 32);
        }
        return 0;
    }
};

class Flattener {
public:
    std::vector<Flat> out;
    int64_t n_experts = 0;

    void add(const std::string& n, const void* p, int64_t rows, int64_t cols, Kind k) {
        out.push_back(Flat{n, p, rows, cols, k});
    }
    void fp8(const std::string& n, const GpuFp8Linear& l) {
        add(n + ".weight", l.w, l.n_out, l.n_in, Kind::Fp8);
        add(n + ".scale", l.ws, l.n_out, l.n_in, Kind::Fp8Scale);
    }
    void bf16(const std::string& n, const GpuBf16Linear& l) { add(n, l.w, l.n_out, l.n_in, Kind::Bf16); }
    void hc(const std::string& n, const GpuHC& h, int64_t n_mix, int64_t width, int64_t n_scale) {
        add(n + "_fn", h.fn, n_mix, width, Kind::F32);
        add(n + "_base", h.base, 1, n_mix, Kind::F32);
        add(n + "_scale", h.scale, 1, n_scale, Kind::F32);
    }
    void compressor(const std::string& n, const GpuCompressor& c) {
        bf16(n + ".wkv", c.wkv);
        bf16(n + ".wgate", c.wgate);
        add(n + ".ape", c.ape, c.ratio, c.wkv.n_out, Kind::F32);
        add(n + ".norm", c.norm, 1, c.head_dim, Kind::Bf16);
    }
    void model(const ModelConfig& cfg, const GpuModelWeights& w) {
        const int64_t D = cfg.hidden_size, hc_n = cfg.hc_mult, H = cfg.num_attention_heads;
        n_experts = cfg.n_routed_experts;
        add("embed", w.embed, cfg.vocab_size, D, Kind::Bf16);
        for (const GpuBlock& b : w.layers) {
            const std::string p = "layers." + std::to_string(b.layer_id);
            add(p + ".attn_norm", b.attn_norm, 1, D, Kind::Bf16);
            add(p + ".ffn_norm", b.ffn_norm, 1, D, Kind::Bf16);
            hc(p + ".hc_attn", b.hc_attn, (2 + hc_n) * hc_n, hc_n * D, 3);
            hc(p + ".hc_ffn", b.hc_ffn, (2 + hc_n) * hc_n, hc_n * D, 3);
            const GpuAttention& a = b.attn;
            fp8(p + ".attn.wq_a", a.wq_a);
            add(p + ".attn.q_norm", a.q_norm, 1, cfg.q_lora_rank, Kind::Bf16);
            fp8(p + ".attn.wq_b", a.wq_b);
            fp8(p + ".attn.wkv", a.wkv);
            add(p + ".attn.kv_norm", a.kv_norm, 1, cfg.head_dim, Kind::Bf16);
            fp8(p + ".attn.wo_a", a.wo_a);
            fp8(p + ".attn.wo_b", a.wo_b);
            add(p + ".attn.sink", a.sink, 1, H, Kind::F32);
            if (a.compressor) compressor(p + ".attn.compressor", *a.compressor);
            if (a.indexer) {
                fp8(p + ".attn.indexer.wq_b", a.indexer->wq_b);
                bf16(p + ".attn.indexer.weights_proj", a.indexer->weights_proj);
                compressor(p + ".attn.indexer.compressor", a.indexer->compressor);
            }
            const GpuMoE& m = b.ffn;
            bf16(p + ".ffn.gate", m.gate);
            if (m.bias) add(p + ".ffn.gate.bias", m.bias, 1, cfg.n_routed_experts, Kind::F32);
            if (m.tid2eid) add(p + ".ffn.gate.tid2eid", m.tid2eid, cfg.vocab_size, cfg.num_experts_per_tok, Kind::I32);
            const cuda::MxExpertWeights& x = m.experts;
            add(p + ".ffn.experts.w1", x.w1, x.n_experts * x.inter, x.dim, Kind::MxCodes);
            add(p + ".ffn.experts.s1", x.s1, x.n_experts * x.inter, x.dim, Kind::MxScale);
            add(p + ".ffn.experts.w2", x.w2, x.n_experts * x.dim, x.inter, Kind::MxCodes);
            add(p + ".ffn.experts.s2", x.s2, x.n_experts * x.dim, x.inter, Kind::MxScale);
            add(p + ".ffn.experts.w3", x.w3, x.n_experts * x.inter, x.dim, Kind::MxCodes);
            add(p + ".ffn.experts.s3", x.s3, x.n_experts * x.inter, x.dim, Kind::MxScale);
            fp8(p + ".ffn.shared.w1", m.shared_w1);
            fp8(p + ".ffn.shared.w2", m.shared_w2);
            fp8(p + ".ffn.shared.w3", m.shared_w3);
        }
        add("norm", w.norm, 1, D, Kind::Bf16);
        hc("hc_head", w.hc_head, hc_n, hc_n * D, 1);
        bf16("head", w.head);
    }
};

std::vector<Flat> flatten(const ModelConfig& cfg, const GpuModelWeights& w) {
    Flattener f;
    f.model(cfg, w);
    return f.out;
}

// Tensor bytes of the checkpoint layout (main model only), converted to the GPU layouts: FP8 scales
// become the GEMM's padded fp32 matrix, tid2eid becomes int32; everything else keeps its bytes (MXFP4 experts are
// concatenated as stored).
int64_t expected_tensor_bytes(const ModelConfig& cfg) {
    int64_t total = 0;
    const TensorSpec* last_weight = nullptr;
    const std::vector<TensorSpec> specs = checkpoint_layout(cfg);
    for (const TensorSpec& t : specs) {
        if (t.name.rfind("mtp.", 0) == 0) continue;
        const auto nb = static_cast<int64_t>(t.nbytes());
        switch (t.dtype) {
            case DType::F8_E4M3:
                total += nb;
                last_weight = &t;
                break;
            case DType::I8:
            case DType::U8:
                total += nb;
                last_weight = &t;
                break;
            case DType::F8_E8M0:
                EXPECT_NE(last_weight, nullptr) << t.name;
                if (last_weight == nullptr) break;
                if (last_weight->dtype == DType::F8_E4M3)
                    total += cuda::fp8_gemm_weight_scale_floats(last_weight->shape[0], last_weight->shape[1]) * 4;
                else
                    total += nb;  // MXFP4 scales as stored
                break;
            case DType::I64:
                total += nb / 2;
                break;
            default:
                total += nb;
        }
    }
    return total;
}

// A borrowed arena over reserved, inaccessible address space (PROT_NONE): the bookkeeping only
// computes offsets, and any touch of the memory would crash the test.
struct HostArena {
    void* mem = nullptr;
    size_t cap = 0;
    std::unique_ptr<cuda::DeviceArena> arena;
    explicit HostArena(size_t bytes) : cap((bytes + 4095) / 4096 * 4096 + 4096) {
        mem = mmap(nullptr, cap, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (mem == MAP_FAILED) throw std::bad_alloc();
        arena = std::make_unique<cuda::DeviceArena>(mem, cap, "host synth layout");  // page-aligned base
    }
    ~HostArena() {
        arena.reset();
        munmap(mem, cap);
    }
    HostArena(const HostArena&) = delete;
    HostArena& operator=(const HostArena&) = delete;
};

// ---- CPU: byte accounting ---------------------------------------------------------------------------

TEST(GpuSynthBytes, LinearInLayersAndExperts) {
    // Layers 4.. alternate CSA/HCA without hash routing, so every pair of layers adds the same bytes.
    const int64_t l4 = synth_weights_device_bytes(flash_cfg(4, 8));
    const int64_t l6 = synth_weights_device_bytes(flash_cfg(6, 8));
    const int64_t l8 = synth_weights_device_bytes(flash_cfg(8, 8));
    EXPECT_GT(l6, l4);
    EXPECT_EQ(l8 - l6, l6 - l4);

    // Each expert adds three MXFP4 matrices (codes + scales) and one router row per layer. Every one of
    // these arrays is a multiple of 256 bytes, and the bias ([E] fp32 ≤ 256 bytes) pads to one 256-byte
    // slot for E ≤ 64, so the increment is exact.
    const ModelConfig c8 = flash_cfg(4, 8);
    const int64_t D = c8.hidden_size, I = c8.moe_intermediate_size;
    const int64_t per_expert_layer = 3 * (I * D / 2 + I * D / 32) + 2 * D;
    const int64_t e8 = synth_weights_device_bytes(c8);
    const int64_t e16 = synth_weights_device_bytes(flash_cfg(4, 16));
    const int64_t e24 = synth_weights_device_bytes(flash_cfg(4, 24));
    EXPECT_EQ(e16 - e8, 4 * 8 * per_expert_layer);
    EXPECT_EQ(e24 - e16, 4 * 8 * per_expert_layer);
}

// The layout carved from an arena: what synth_weights_device_bytes promises, every pointer of the
// struct an allocation of exactly its size, the tensor bytes equal to the checkpoint's in GPU layouts.
void check_layout(const ModelConfig& cfg) {
    const int64_t want = synth_weights_device_bytes(cfg);
    HostArena h(static_cast<size_t>(want));
    const GpuModelWeights w = alloc_synth_weights(cfg, *h.arena);
    h.arena->check_integrity();
    EXPECT_EQ(static_cast<int64_t>(h.arena->used()), want);

    const auto& allocs = h.arena->allocations();
    std::map<const void*, const cuda::DeviceArena::Allocation*> by_ptr;
    std::set<std::string> tags;
    int64_t alloc_bytes = 0;
    for (const auto& a : allocs) {
        by_ptr[h.arena->base() + a.offset] = &a;
        EXPECT_TRUE(tags.insert(a.tag).second) << "duplicate tag " << a.tag;
        alloc_bytes += static_cast<int64_t>(a.bytes);
    }
    EXPECT_EQ(alloc_bytes, expected_tensor_bytes(cfg));
    EXPECT_LT(want - alloc_bytes, static_cast<int64_t>(256 * allocs.size())) << "padding beyond alignment";

    const std::vector<Flat> flat = flatten(cfg, w);
    EXPECT_EQ(flat.size(), allocs.size()) << "tensors in the struct vs allocations";
    std::set<const void*> seen;
    for (const Flat& f : flat) {
        ASSERT_NE(f.p, nullptr) << f.name;
        auto it = by_ptr.find(f.p);
        ASSERT_NE(it, by_ptr.end()) << f.name << " does not point at an allocation";
        EXPECT_EQ(it->second->bytes, f.bytes()) << f.name << " (" << it->second->tag << ")";
        EXPECT_TRUE(seen.insert(f.p).second) << f.name << " shares its allocation";
    }

    ASSERT_EQ(static_cast<int64_t>(w.layers.size()), cfg.num_hidden_layers);
    for (int64_t il = 0; il < cfg.num_hidden_layers; ++il) {
        const GpuBlock& b = w.layers[static_cast<size_t>(il)];
        const int64_t ratio = cfg.compress_ratio(il);
        EXPECT_EQ(b.layer_id, il);
        EXPECT_EQ(b.attn.compressor.has_value(), ratio != 0) << il;
        EXPECT_EQ(b.attn.indexer.has_value(), ratio == 4) << il;
        if (b.attn.compressor) {
            EXPECT_EQ(b.attn.compressor->ratio, ratio);
            EXPECT_EQ(b.attn.compressor->head_dim, cfg.head_dim);
            EXPECT_EQ(b.attn.compressor->wkv.n_out, (ratio == 4 ? 2 : 1) * cfg.head_dim);
        }
        if (b.attn.indexer) {
            EXPECT_EQ(b.attn.indexer->compressor.head_dim, cfg.index_head_dim);
        }
        EXPECT_EQ(b.ffn.tid2eid != nullptr, cfg.is_hash_layer(il)) << il;
        EXPECT_EQ(b.ffn.bias != nullptr, !cfg.is_hash_layer(il)) << il;
        EXPECT_EQ(b.attn.wq_b.n_out, cfg.num_attention_heads * cfg.head_dim);
        EXPECT_EQ(b.attn.wq_b.n_in, cfg.q_lora_rank);
        EXPECT_EQ(b.attn.wo_a.n_out, cfg.o_groups * cfg.o_lora_rank);
        EXPECT_EQ(b.attn.wo_a.n_in, cfg.num_attention_heads * cfg.head_dim / cfg.o_groups);
        EXPECT_EQ(b.ffn.experts.n_experts, cfg.n_routed_experts);
        EXPECT_EQ(b.ffn.shared_w2.n_in, cfg.moe_intermediate_size);
    }
    EXPECT_TRUE(tags.count("layers.0.attn.wq_b.weight"));
    EXPECT_TRUE(tags.count("layers.0.attn.wq_b.scale"));
    EXPECT_TRUE(tags.count("embed.weight"));
}

TEST(GpuSynthBytes, ArenaUsageMatchesAndLayoutFollowsTheCheckpoint) {
    check_layout(flash_cfg(4, 8));
    check_layout(flash_cfg(2, 4));                 // hash routing only, no compressors
    check_layout(flash_cfg(7, 16, std::nullopt));  // full vocabulary, an odd layer count
}

TEST(GpuSynthBytes, FullFlashSize) {
    // The real shape: 43 layers, 256 experts. Printed for the memory plan; the checkpoint comparison
    // above is the exact check, this one guards the order of magnitude.
    SynthOptions o;
    o.preset = SynthPreset::Flash;
    const ModelConfig cfg = synth_config(o);
    const int64_t bytes = synth_weights_device_bytes(cfg);
    std::printf("full Flash main-model weights on the device: %.2f GB\n", static_cast<double>(bytes) / 1e9);
    EXPECT_GT(bytes, int64_t{100} * 1000 * 1000 * 1000);
    EXPECT_LT(bytes, int64_t{200} * 1000 * 1000 * 1000);
}

// ---- GPU: values ------------------------------------------------------------------------------------

template <typename T>
std::vector<T> fetch(const void* p, size_t n) {
    return cuda::copy_to_host(static_cast<const T*>(p), n);
}

struct Moments {
    double mean = 0.0, std = 0.0;
};
Moments moments(const std::vector<float>& v) {
    double s = 0.0, s2 = 0.0;
    for (float x : v) {
        s += x;
        s2 += static_cast<double>(x) * x;
    }
    const double n = static_cast<double>(v.size());
    Moments m;
    m.mean = s / n;
    m.std = std::sqrt(std::max(0.0, s2 / n - m.mean * m.mean));
    return m;
}

// Every element was written: no fill produces the 0xFF poison in its type.
void check_written(const Flat& f, const std::vector<uint8_t>& bytes, int64_t n_experts) {
    const size_t n = bytes.size();
    switch (f.kind) {
        case Kind::Bf16:
            for (size_t i = 0; i < n; i += 2) {
                const float v = bf16_to_f32(static_cast<uint16_t>(bytes[i] | (bytes[i + 1] << 8)));
                ASSERT_TRUE(std::isfinite(v)) << f.name << " element " << i / 2;
            }
            break;
        case Kind::F32:
        case Kind::Fp8Scale:
            for (size_t i = 0; i < n; i += 4) {
                float v;
                std::memcpy(&v, bytes.data() + i, 4);
                ASSERT_TRUE(std::isfinite(v)) << f.name << " element " << i / 4;
            }
            break;
        case Kind::Fp8:
            for (size_t i = 0; i < n; ++i) ASSERT_NE(bytes[i] & 0x7F, 0x7F) << f.name << " NaN code at " << i;
            break;
        case Kind::MxScale:
            for (size_t i = 0; i < n; ++i) ASSERT_NE(bytes[i], 0xFF) << f.name << " NaN scale at " << i;
            break;
        case Kind::MxCodes: {
            // Random bytes: a run of 16 poison bytes has probability 2^-128 per position.
            size_t run = 0;
            for (size_t i = 0; i < n; ++i) {
                run = bytes[i] == 0xFF ? run + 1 : 0;
                ASSERT_LT(run, 16u) << f.name << " unwritten near byte " << i;
            }
            break;
        }
        case Kind::I32:
            for (size_t i = 0; i < n; i += 4) {
                int32_t v;
                std::memcpy(&v, bytes.data() + i, 4);
                ASSERT_GE(v, 0) << f.name << " element " << i / 4;
                ASSERT_LT(v, n_experts) << f.name << " element " << i / 4;
            }
            break;
    }
}

// FP8 linear: scales are powers of two in {2^e0, 2^(e0+1)} (one tensor-wide e0), padding is 0, codes
// have variety, and the effective weight code·scale has std 1/√n_in overall and in every block.
// Tolerances: a 128×128 block has 16384 samples (std estimate ±0.6%), E4M3 rounding adds ~0.1%:
// 6% per block and 3% overall leave room without letting a wrong scale (×2 or ×0.5) through.
void check_fp8(const std::string& name, const GpuFp8Linear& l) {
    SCOPED_TRACE(name);
    const int64_t n = l.n_out, k = l.n_in, n_rb = (n + 127) / 128, n_cb = k / 128;
    const int64_t ld = cuda::fp8_gemm_weight_scale_ld(k);
    const auto codes = fetch<uint8_t>(l.w, static_cast<size_t>(n * k));
    const auto ws = fetch<float>(l.ws, static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(n, k)));
    float lo = INFINITY, hi = 0.0f;
    for (int64_t rb = 0; rb < n_rb; ++rb) {
        for (int64_t cb = 0; cb < ld; ++cb) {
            const float s = ws[static_cast<size_t>(rb * ld + cb)];
            if (cb >= n_cb) {
                ASSERT_EQ(s, 0.0f) << "padding (" << rb << ", " << cb << ")";
                continue;
            }
            int e = 0;
            ASSERT_EQ(std::frexp(s, &e), 0.5f) << "scale " << s << " is not a power of two";
            lo = std::min(lo, s);
            hi = std::max(hi, s);
        }
    }
    EXPECT_LE(hi, 2.0f * lo) << "block scales span more than one binade";
    const double sigma = 1.0 / std::sqrt(static_cast<double>(k));
    std::vector<int64_t> hist(256, 0);
    std::vector<float> all(static_cast<size_t>(n * k));
    for (int64_t rb = 0; rb < n_rb; ++rb) {
        for (int64_t cb = 0; cb < n_cb; ++cb) {
            const float s = ws[static_cast<size_t>(rb * ld + cb)];
            std::vector<float> blk;
            for (int64_t r = rb * 128; r < std::min(n, rb * 128 + 128); ++r) {
                for (int64_t c = cb * 128; c < cb * 128 + 128; ++c) {
                    const uint8_t q = codes[static_cast<size_t>(r * k + c)];
                    ASSERT_NE(q & 0x7F, 0x7F) << "NaN code at (" << r << ", " << c << ")";
                    ++hist[q];
                    const float v = e4m3fn_to_f32(q) * s;
                    blk.push_back(v);
                    all[static_cast<size_t>(r * k + c)] = v;
                }
            }
            const Moments m = moments(blk);
            ASSERT_NEAR(m.std / sigma, 1.0, 0.06) << "block (" << rb << ", " << cb << ")";
        }
    }
    const Moments m = moments(all);
    EXPECT_NEAR(m.std / sigma, 1.0, 0.03);
    EXPECT_LT(std::fabs(m.mean), 0.01 * sigma);
    const int64_t distinct = std::count_if(hist.begin(), hist.end(), [](int64_t c) { return c > 0; });
    EXPECT_GT(distinct, 150) << "E4M3 codes used";
    EXPECT_LT(static_cast<double>(hist[0] + hist[0x80]) / static_cast<double>(n * k), 0.005) << "zero codes";
}

// bf16 tensor ~ N(mean, std): 3% on the std (the smallest checked has 4096 samples: ±1.1%).
void check_bf16_normal(const std::string& name, const void* p, int64_t n, double mean, double std) {
    SCOPED_TRACE(name);
    const auto bits = fetch<uint16_t>(p, static_cast<size_t>(n));
    const Moments m = moments(test::from_bf16_bits(bits));
    EXPECT_NEAR(m.std / std, 1.0, 0.03);
    EXPECT_NEAR(m.mean, mean, 0.02 * std);
}

// fp32 tensor ~ N(mean, std): the std within tol_std (relative), the mean within tol_mean·std.
void check_f32_normal(const std::string& name, const float* p, int64_t n, double mean, double std, double tol_std,
                      double tol_mean) {
    SCOPED_TRACE(name);
    const Moments m = moments(fetch<float>(p, static_cast<size_t>(n)));
    EXPECT_NEAR(m.std / std, 1.0, tol_std);
    EXPECT_NEAR(m.mean, mean, tol_mean * std);
}

// MXFP4 matrix [rows, k] (all experts): E2M1 codes uniform over the 16 values, UE8M0 scales in two
// neighbouring binades, effective weights with std 1/√k. rows·k ≥ 16M samples here: 2% is ~50σ of
// the sampling error yet far below the factor √2 a wrong scale choice would give.
void check_mxfp4(const std::string& name, const uint8_t* w, const uint8_t* s, int64_t rows, int64_t k) {
    SCOPED_TRACE(name);
    const auto codes = fetch<uint8_t>(w, static_cast<size_t>(rows * k / 2));
    const auto scales = fetch<uint8_t>(s, static_cast<size_t>(rows * k / 32));
    const auto [smin, smax] = std::minmax_element(scales.begin(), scales.end());
    EXPECT_LE(*smax - *smin, 1) << "scale bytes " << int(*smin) << ".." << int(*smax);
    EXPECT_GE(*smin, 127 - 20);
    EXPECT_LE(*smax, 127);
    std::vector<int64_t> hist(16, 0);
    double s2 = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < k; ++c) {
            const uint8_t byte = codes[static_cast<size_t>((r * k + c) / 2)];
            const uint8_t code = (c % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
            ++hist[code];
            const double v = e2m1_to_f32(code) * ue8m0_to_f32(scales[static_cast<size_t>(r * (k / 32) + c / 32)]);
            s2 += v * v;
        }
    }
    const double n = static_cast<double>(rows * k);
    for (int c = 0; c < 16; ++c) EXPECT_NEAR(hist[c] / n * 16.0, 1.0, 0.02) << "code " << c;
    EXPECT_NEAR(std::sqrt(s2 / n) * std::sqrt(static_cast<double>(k)), 1.0, 0.02);
}

struct DeviceSynth {
    std::unique_ptr<cuda::DeviceArena> arena;
    GpuModelWeights w;
    double ms = 0.0;
};

// Poisons a fresh arena with 0xFF, then synthesises into it (after `offset` dummy bytes, so a second
// copy sits at other addresses).
DeviceSynth synth(const ModelConfig& cfg, uint64_t seed, size_t offset = 0) {
    DeviceSynth d;
    const size_t bytes = static_cast<size_t>(synth_weights_device_bytes(cfg)) + offset + 512;
    d.arena = std::make_unique<cuda::DeviceArena>(bytes, "gpu synth test");
    cuda::fill_bytes(d.arena->base(), 0xFF, bytes);
    if (offset) d.arena->alloc(offset, "dummy");
    const size_t used0 = d.arena->used();
    cuda::Stream s;
    const auto t0 = std::chrono::steady_clock::now();
    d.w = synth_weights_on_device(cfg, *d.arena, seed, s.get());
    s.sync();
    d.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (offset == 0) {
        EXPECT_EQ(static_cast<int64_t>(d.arena->used() - used0), synth_weights_device_bytes(cfg));
    }
    return d;
}

TEST(GpuSynth, ValuesHaveTheIntendedDistributions) {
    ONECARD_REQUIRE_GPU();
    // 4 layers: SWA, SWA, CSA, HCA; hash routing on layers 0-2, a learned bias on layer 3. 8 experts
    // so that tid2eid picks 6 of 8 (with 4 experts every row would be a permutation).
    const ModelConfig cfg = flash_cfg(4, 8);
    const DeviceSynth d = synth(cfg, 7);
    std::printf("synthesised %.2f GB in %.1f ms\n", d.arena->used() / 1e9, d.ms);
    const GpuModelWeights& w = d.w;
    const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, E = cfg.n_routed_experts, K = cfg.num_experts_per_tok;

    for (const Flat& f : flatten(cfg, w)) {
        check_written(f, fetch<uint8_t>(f.p, f.bytes()), E);
        if (HasFatalFailure()) return;
    }

    // FP8 linears of every input width the model has (D, q_lora_rank, G·r, inter).
    check_fp8("layers.0.attn.wq_a", w.layers[0].attn.wq_a);
    check_fp8("layers.0.attn.wq_b", w.layers[0].attn.wq_b);
    check_fp8("layers.1.attn.wkv", w.layers[1].attn.wkv);
    check_fp8("layers.1.attn.wo_a", w.layers[1].attn.wo_a);
    check_fp8("layers.2.attn.wo_b", w.layers[2].attn.wo_b);
    check_fp8("layers.2.attn.indexer.wq_b", w.layers[2].attn.indexer->wq_b);
    check_fp8("layers.3.ffn.shared_w2", w.layers[3].ffn.shared_w2);
    check_fp8("layers.3.ffn.shared_w3", w.layers[3].ffn.shared_w3);

    // bf16 linears N(0, 1/fan_in); embedding N(0, 1).
    check_bf16_normal("embed", w.embed, cfg.vocab_size * D, 0.0, 1.0);
    check_bf16_normal("head", w.head.w, cfg.vocab_size * D, 0.0, 1.0 / std::sqrt(double(D)));
    const GpuCompressor& comp = *w.layers[3].attn.compressor;
    check_bf16_normal("compressor.wkv", comp.wkv.w, comp.wkv.n_out * D, 0.0, 1.0 / std::sqrt(double(D)));
    check_bf16_normal("indexer.weights_proj", w.layers[2].attn.indexer->weights_proj.w, cfg.index_n_heads * D, 0.0,
                      1.0 / std::sqrt(double(D)));
    check_bf16_normal("gate", w.layers[3].ffn.gate.w, E * D, 0.0, 1.0 / std::sqrt(double(D)));

    // Norm gains exactly 1.
    auto all_ones = [](const char* what, const __nv_bfloat16* p, int64_t n) {
        for (uint16_t b : fetch<uint16_t>(p, static_cast<size_t>(n))) ASSERT_EQ(b, 0x3F80) << what;
    };
    all_ones("norm", w.norm, D);
    all_ones("attn_norm", w.layers[0].attn_norm, D);
    all_ones("ffn_norm", w.layers[3].ffn_norm, D);
    all_ones("q_norm", w.layers[2].attn.q_norm, cfg.q_lora_rank);
    all_ones("kv_norm", w.layers[2].attn.kv_norm, cfg.head_dim);
    all_ones("compressor norm", comp.norm, comp.head_dim);
    all_ones("indexer compressor norm", w.layers[2].attn.indexer->compressor.norm, cfg.index_head_dim);

    // MXFP4 experts: w1 (fan-in D) and w2 (fan-in inter).
    const cuda::MxExpertWeights& x = w.layers[0].ffn.experts;
    check_mxfp4("experts.w1", x.w1, x.s1, E * x.inter, x.dim);
    check_mxfp4("experts.w2", x.w2, x.s2, E * x.dim, x.inter);

    // HC: fn small; base = synth.cpp's pattern ± 0.02·|z| (|z| ≤ 5.8); scale 1 ± 0.05·|z|.
    const int64_t n_mix = (2 + hc) * hc;
    check_f32_normal("hc_attn_fn", w.layers[1].hc_attn.fn, n_mix * hc * D, 0.0, 0.2 / std::sqrt(double(hc * D)), 0.03,
                     0.03);
    const double pre = std::log(1.0 / static_cast<double>(hc - 1));
    const auto base = fetch<float>(w.layers[1].hc_ffn.base, static_cast<size_t>(n_mix));
    for (int64_t j = 0; j < n_mix; ++j) {
        const int64_t kk = j - 2 * hc;
        const double want = j < hc ? pre : j < 2 * hc ? 0.0 : (kk / hc == kk % hc ? 3.0 : 0.0);
        EXPECT_NEAR(base[static_cast<size_t>(j)], want, 0.12) << "hc base " << j;
    }
    for (float v : fetch<float>(w.hc_head.base, static_cast<size_t>(hc))) EXPECT_NEAR(v, pre, 0.12);
    for (float v : fetch<float>(w.layers[0].hc_attn.scale, 3)) EXPECT_NEAR(v, 1.0, 0.3);
    EXPECT_NEAR(fetch<float>(w.hc_head.scale, 1)[0], 1.0, 0.3);

    // ape 0.1·N(0,1) (HCA: 65536 samples), sinks N(0, 1) (64 samples: std ±9%, mean ±0.125 at 1 sd,
    // so 40% / 0.5 are 4 sd), router bias small.
    const GpuCompressor& hca = *w.layers[3].attn.compressor;
    check_f32_normal("ape", hca.ape, hca.ratio * hca.wkv.n_out, 0.0, 0.1, 0.03, 0.03);
    check_f32_normal("sink", w.layers[0].attn.sink, cfg.num_attention_heads, 0.0, 1.0, 0.4, 0.5);
    const auto bias = fetch<float>(w.layers[3].ffn.bias, static_cast<size_t>(E));
    for (float b : bias) EXPECT_LT(std::fabs(b), 0.3f);
    EXPECT_NE(bias[0], bias[1]);

    // tid2eid: K distinct experts per row, in range, every expert used about equally
    // (vocab·K/E = 768 per expert, binomial sd ≈ 14: 15% is > 8 sd).
    for (int64_t il = 0; il < cfg.num_hash_layers; ++il) {
        const auto t =
            fetch<int32_t>(w.layers[static_cast<size_t>(il)].ffn.tid2eid, static_cast<size_t>(cfg.vocab_size * K));
        std::vector<int64_t> count(static_cast<size_t>(E), 0);
        for (int64_t r = 0; r < cfg.vocab_size; ++r) {
            std::set<int32_t> row;
            for (int64_t j = 0; j < K; ++j) {
                const int32_t e = t[static_cast<size_t>(r * K + j)];
                ASSERT_GE(e, 0);
                ASSERT_LT(e, E);
                row.insert(e);
                ++count[static_cast<size_t>(e)];
            }
            ASSERT_EQ(static_cast<int64_t>(row.size()), K) << "layer " << il << " row " << r;
        }
        const double expect = static_cast<double>(cfg.vocab_size * K) / static_cast<double>(E);
        for (int64_t e = 0; e < E; ++e)
            EXPECT_NEAR(count[static_cast<size_t>(e)] / expect, 1.0, 0.15) << "expert " << e;
    }
}

TEST(GpuSynth, SameSeedSameBytesOtherSeedOtherBytes) {
    ONECARD_REQUIRE_GPU();
    const ModelConfig cfg = flash_cfg(4, 8);
    const DeviceSynth a = synth(cfg, 11);
    const DeviceSynth b = synth(cfg, 11, 4096);  // other addresses: values must not depend on them
    const DeviceSynth c = synth(cfg, 12);
    const std::vector<Flat> fa = flatten(cfg, a.w), fb = flatten(cfg, b.w), fc = flatten(cfg, c.w);
    ASSERT_EQ(fa.size(), fb.size());
    ASSERT_EQ(fa.size(), fc.size());
    for (size_t i = 0; i < fa.size(); ++i) {
        const auto va = fetch<uint8_t>(fa[i].p, fa[i].bytes());
        EXPECT_TRUE(va == fetch<uint8_t>(fb[i].p, fb[i].bytes())) << fa[i].name << " differs for the same seed";
        const bool constant = fa[i].name.size() >= 4 && fa[i].name.compare(fa[i].name.size() - 4, 4, "norm") == 0;
        EXPECT_EQ(va == fetch<uint8_t>(fc[i].p, fc[i].bytes()), constant)
            << fa[i].name << (constant ? " should not depend on the seed" : " is the same for another seed");
    }
}

TEST(GpuSynth, FullWidthLayerWithAllExperts) {
    ONECARD_REQUIRE_GPU();
    // One real Flash layer with its 256 experts and the full vocabulary (~7 GB): grid-stride loops past
    // 2^16 blocks and multi-GB arrays. Checks the tail of the largest arrays (written last by the
    // grid-stride loops) and the effective scale of the last expert.
    const ModelConfig cfg = flash_cfg(1, 256, std::nullopt);
    const DeviceSynth d = synth(cfg, 3);
    std::printf("synthesised %.2f GB in %.1f ms\n", d.arena->used() / 1e9, d.ms);
    const cuda::MxExpertWeights& x = d.w.layers[0].ffn.experts;
    const int64_t last = x.n_experts - 1;
    check_mxfp4("last expert w2", x.w2 + last * x.dim * x.inter / 2, x.s2 + last * x.dim * x.inter / 32, x.dim,
                x.inter);
    check_mxfp4("last expert w3", x.w3 + last * x.inter * x.dim / 2, x.s3 + last * x.inter * x.dim / 32, x.inter,
                x.dim);
    const int64_t D = cfg.hidden_size, V = cfg.vocab_size;
    const int64_t tail = int64_t{1} << 20;
    const Flat head_tail{"head tail", d.w.head.w + (V * D - tail), 1, tail, Kind::Bf16};
    check_written(head_tail, fetch<uint8_t>(head_tail.p, head_tail.bytes()), cfg.n_routed_experts);
    const Flat tid{"tid2eid", d.w.layers[0].ffn.tid2eid, V, cfg.num_experts_per_tok, Kind::I32};
    check_written(tid, fetch<uint8_t>(tid.p, tid.bytes()), cfg.n_routed_experts);
}

}  // namespace
}  // namespace onecard

#endif  // ONECARD_HAVE_CUDA
