#include "model/synth.h"

#include "core/error.h"
#include "core/fp_formats.h"
#include "model/quantize.h"
#include "model/synth_random.h"
#include "model/weights.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <span>
#include <thread>

namespace onecard {

namespace {

using synth_random::Rng;

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Every row of every tensor has its own stream, so values do not depend on chunking, on the
// order tensors are written, or on which other tensors exist (--layers/--experts keep the
// values of the tensors that remain).
Rng row_rng(uint64_t seed, const std::string& name, int64_t row) {
    const uint64_t h = synth_random::splitmix64(seed ^ synth_random::fnv1a64(name));
    return Rng(synth_random::splitmix64(h + static_cast<uint64_t>(row) * 0xD1B54A32D192ED03ull));
}

int64_t logical_cols(const TensorSpec& spec) {
    int64_t cols = 1;
    for (size_t i = 1; i < spec.shape.size(); ++i) cols *= spec.shape[i];
    if (spec.shape.size() == 1) cols = spec.shape[0];
    if (spec.dtype == DType::I8 || spec.dtype == DType::U8) cols *= 2;  // packed MXFP4
    return cols;
}

int64_t logical_rows(const TensorSpec& spec) {
    return spec.shape.size() <= 1 ? 1 : spec.shape[0];
}

// hc base vector: pre-mix logits give sigmoid = 1/hc (an average of the streams), post-mix
// logits give 2*sigmoid = 1, the comb logits are diagonal-heavy so Sinkhorn yields a matrix close
// to the identity. [(2+hc)*hc] for blocks, [hc] for heads.
double hc_base_value(int64_t hc, int64_t j, bool head) {
    const double pre = hc > 1 ? synth_random::det_log(1.0 / static_cast<double>(hc - 1)) : 0.0;
    if (head || j < hc) return pre;
    if (j < 2 * hc) return 0.0;
    const int64_t k = j - 2 * hc;
    return (k / hc == k % hc) ? 3.0 : 0.0;
}

}  // namespace

namespace {

enum class Role { Sink, HcBase, HcHeadBase, HcScale, HcFn, Norm, Ape, GateBias, Embed, Linear };

// How a tensor's values are drawn, from its name (decided once per tensor, not per element).
Role role_of(const std::string& name) {
    const bool is_hc = name.find("hc_") != std::string::npos;
    if (ends_with(name, "attn_sink")) return Role::Sink;
    if (is_hc && ends_with(name, "_base"))
        return name.find("hc_head") != std::string::npos ? Role::HcHeadBase : Role::HcBase;
    if (is_hc && ends_with(name, "_scale")) return Role::HcScale;
    if (is_hc && ends_with(name, "_fn")) return Role::HcFn;
    if (ends_with(name, "norm.weight")) return Role::Norm;
    if (ends_with(name, ".ape")) return Role::Ape;
    if (ends_with(name, "gate.bias")) return Role::GateBias;
    if (name == "embed.weight") return Role::Embed;
    return Role::Linear;
}

// The tame rule (SynthOptions::tame). Why the default network is chaotic: every quantised linear
// rounds its input to FP8 (3 mantissa bits), so an input difference of relative size e flips about
// 11·e of the roundings, each by a whole FP8 step — the linear's output moves by ~0.3·sqrt(e), not e.
// Through the 3–4 chained linears of a sub-block any difference grows to a few percent of the
// sub-block's output; at unit gain that is a few percent of the residual stream, which the next
// layer amplifies again, and attention, the compressors and the indexer carry it to every later
// position. The tame rule breaks the loop where it closes, at the residual stream, and nowhere else:
//  * post-mix weight (hc_*_base, the post entries): 2·sigmoid(bias) = kTamePost instead of 1, so a
//    sub-block adds kTamePost of its (unit-size) output to the stream. A difference that grew to a few
//    percent inside a sub-block reaches the stream, and so the next layer's inputs and the logits,
//    kTamePost times smaller. The next sub-block grows it again (~sqrt: FP8 flips), so the streams
//    settle where d = kTamePost · c · sqrt(d): the floor falls with the square of kTamePost;
//  * experts' w1 and w3 (routed and shared): gain kTameSwigluIn, so the gate and up projections reach
//    the SwiGLU clamp (swiglu_limit 10) on 10–20% of elements — the clamp path does real work, and
//    a missing clamp changes the experts' output by far more than the parity bar;
//  * experts' w2: gain 1 / kTameSwigluIn², so an expert's output keeps about the default rule's size
//    and the post-mix weight alone sets the sub-block's share of the stream;
//  * attention's wo_b: gain kTameAttnOut. Attention averages the values of ~window / e keys (unit-size
//    score spread), so its output is ~1/sqrt(50) of a unit-gain sub-block's at the real window of 128;
//    the gain brings it to about the MoE sub-block's size, so a wrong key list or KV entry moves the
//    stream as much as a wrong expert does, instead of hiding under the MoE's output;
//  * router selection bias (gate.bias): gain kTameBiasGain (sd 0.2, against scores that spread by
//    ~0.3), so the bias really decides picks, as it does in the real model, and routing without it
//    picks other experts for most tokens.
// Everything else is drawn as by the default rule (same random numbers, same FP8/MXFP4 quantisation),
// so routers, indexers, compressors and attention compute what they compute on the default model.
// The floor also needs the streams and the head unrounded: a bf16 rounding of the streams grows any
// difference e to sqrt(e · 2^-8) per sub-block, whatever kTamePost is (model/storage_points.h; the GPU
// keeps them in fp32 for that reason; with bf16 ones and 0.05 the floor was 5.6e-3). Measured at the
// real per-layer Flash dims by tests/tools/tame_floor.cpp (the oracle with the GPU's storage points):
// kTamePost 0.05: 3.9e-3, 0.01: 5.8e-4, 0.005 (this rule): 2.5e-4, 0.0025: 1.1e-4. Each sub-block
// still moves the streams by ~0.5% of their size, tens of thousands of fp32 ulps: real work.
constexpr double kTamePost = 0.005;
constexpr double kTameSwigluIn = 8.0;
constexpr double kTameBiasGain = 4.0;
constexpr double kTameAttnOut = 4.0;

// The tame rule's gain on a linear tensor's default values (1 where the rule leaves it alone).
double tame_gain(const std::string& name) {
    if (ends_with(name, ".w1.weight") || ends_with(name, ".w3.weight")) return kTameSwigluIn;
    if (ends_with(name, ".w2.weight")) return 1.0 / (kTameSwigluIn * kTameSwigluIn);
    if (ends_with(name, ".attn.wo_b.weight")) return kTameAttnOut;
    return 1.0;
}

// hc block base under the tame rule: the post entries give 2·sigmoid(b) = kTamePost.
double tame_hc_base_value(int64_t hc, int64_t j) {
    if (j >= hc && j < 2 * hc) return synth_random::det_log(kTamePost / (2.0 - kTamePost));
    return hc_base_value(hc, j, false);
}

}  // namespace

void synth_master_rows(const ModelConfig& cfg, uint64_t seed, const TensorSpec& spec, int64_t row0, int64_t n_rows,
                       float* out, bool tame) {
    const std::string& name = spec.name;
    const int64_t cols = logical_cols(spec);
    ONECARD_CHECK(spec.dtype != DType::I64 && spec.dtype != DType::I32 && spec.dtype != DType::F8_E8M0,
                  "synth: tensor {} has no fp32 master values", name);
    ONECARD_CHECK(row0 >= 0 && row0 + n_rows <= logical_rows(spec), "synth: rows [{}, {}) outside tensor {}", row0,
                  row0 + n_rows, name);
    const Role role = role_of(name);
    const double inv_sqrt_fan_in = 1.0 / std::sqrt(static_cast<double>(cols));
    const double linear_gain = tame ? tame_gain(name) * inv_sqrt_fan_in : inv_sqrt_fan_in;
    for (int64_t r = 0; r < n_rows; ++r) {
        Rng rng = row_rng(seed, name, row0 + r);
        float* o = out + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
            const double z = rng.normal();
            double v;
            switch (role) {
                case Role::Sink:
                    v = z;
                    break;  // per-head sink logits ~ N(0, 1)
                case Role::HcBase:
                    v = (tame ? tame_hc_base_value(cfg.hc_mult, c) : hc_base_value(cfg.hc_mult, c, false)) + 0.02 * z;
                    break;
                case Role::HcHeadBase:
                    v = hc_base_value(cfg.hc_mult, c, true) + 0.02 * z;
                    break;
                case Role::HcScale:
                    v = 1.0 + 0.05 * z;
                    break;
                case Role::HcFn:
                    v = 0.2 * z * inv_sqrt_fan_in;
                    break;  // mixes stay small: m ~ N(0, 0.04)
                case Role::Norm:
                    v = 1.0 + 0.02 * z;
                    break;
                case Role::Ape:
                    v = 0.1 * z;
                    break;
                case Role::GateBias:
                    v = (tame ? kTameBiasGain : 1.0) * 0.05 * z;
                    break;
                case Role::Embed:
                    v = z;
                    break;
                default:
                    v = z * linear_gain;
                    break;  // linear layers: unit gain, N(0, 1/fan_in)
            }
            o[c] = static_cast<float>(v);
        }
    }
}

std::optional<SynthPreset> synth_preset_from_name(const std::string& name) {
    if (name == "tiny") return SynthPreset::Tiny;
    if (name == "small") return SynthPreset::Small;
    if (name == "flash") return SynthPreset::Flash;
    return std::nullopt;
}

const char* synth_preset_name(SynthPreset p) {
    switch (p) {
        case SynthPreset::Tiny:
            return "tiny";
        case SynthPreset::Small:
            return "small";
        case SynthPreset::Flash:
            return "flash";
    }
    return "?";
}

uint64_t synth_default_shard_bytes(SynthPreset p) {
    switch (p) {
        case SynthPreset::Tiny:
            return 2ull << 20;  // several shards even for a few MB: exercises the index
        case SynthPreset::Small:
            return 32ull << 20;
        case SynthPreset::Flash:
            return 5000000000ull;
    }
    return 5000000000ull;
}

ModelConfig synth_config(const SynthOptions& opt) {
    ModelConfig c;
    int64_t layers = 0, n_hash = 0;
    // Real Flash values everywhere unless the preset shrinks them.
    c.vocab_size = 129280;
    c.hidden_size = 4096;
    c.num_attention_heads = 64;
    c.head_dim = 512;
    c.qk_rope_head_dim = 64;
    c.q_lora_rank = 1024;
    c.o_groups = 8;
    c.o_lora_rank = 1024;
    c.sliding_window = 128;
    c.max_position_embeddings = 1048576;
    c.index_n_heads = 64;
    c.index_head_dim = 128;
    c.index_topk = 512;
    c.n_routed_experts = 256;
    c.num_experts_per_tok = 6;
    c.moe_intermediate_size = 2048;
    c.num_nextn_predict_layers = 1;
    switch (opt.preset) {
        case SynthPreset::Flash:
            layers = 43;
            n_hash = 3;
            break;
        case SynthPreset::Tiny:
            // 6 layers = SWA, SWA, CSA, HCA, CSA, HCA (+ SWA MTP); 2 hash-routed layers; a window
            // of 32 and top-8 so a 600-token sequence spans many windows and CSA entries.
            layers = 6;
            n_hash = 2;
            c.vocab_size = 1024;
            c.hidden_size = 256;
            c.num_attention_heads = 4;
            c.head_dim = 128;
            c.q_lora_rank = 128;
            c.o_groups = 2;
            c.o_lora_rank = 128;
            c.sliding_window = 32;
            c.index_n_heads = 4;
            c.index_topk = 8;
            c.n_routed_experts = 8;
            c.num_experts_per_tok = 3;
            c.moe_intermediate_size = 128;
            break;
        case SynthPreset::Small:
            // The demo: the real vocabulary (so the real tokenizer works), everything else minimal.
            layers = 4;
            n_hash = 1;
            c.hidden_size = 128;
            c.num_attention_heads = 2;
            c.head_dim = 128;
            c.q_lora_rank = 128;
            c.o_groups = 1;
            c.o_lora_rank = 128;
            c.sliding_window = 64;
            c.index_n_heads = 2;
            c.index_topk = 16;
            c.n_routed_experts = 8;
            c.num_experts_per_tok = 2;
            c.moe_intermediate_size = 128;
            break;
    }
    auto set = [](int64_t& field, const std::optional<int64_t>& v, const char* flag) {
        if (!v) return;
        ONECARD_CHECK(*v > 0, "synth: --{} must be positive, got {}", flag, *v);
        field = *v;
    };
    set(layers, opt.layers, "layers");
    set(c.n_routed_experts, opt.experts, "experts");
    set(c.num_experts_per_tok, opt.experts_per_tok, "experts-per-tok");
    set(c.hidden_size, opt.hidden, "hidden");
    set(c.vocab_size, opt.vocab, "vocab");
    set(c.num_attention_heads, opt.heads, "heads");
    set(c.head_dim, opt.head_dim, "head-dim");
    set(c.qk_rope_head_dim, opt.rope_dim, "rope-dim");
    set(c.q_lora_rank, opt.q_lora_rank, "q-lora-rank");
    set(c.o_groups, opt.o_groups, "o-groups");
    set(c.o_lora_rank, opt.o_lora_rank, "o-lora-rank");
    set(c.moe_intermediate_size, opt.moe_inter, "moe-inter");
    set(c.sliding_window, opt.window, "window");
    set(c.index_n_heads, opt.index_heads, "index-heads");
    set(c.index_head_dim, opt.index_head_dim, "index-head-dim");
    set(c.index_topk, opt.index_topk, "index-topk");
    if (opt.hash_layers) {
        ONECARD_CHECK(*opt.hash_layers >= 0, "synth: --hash-layers must be >= 0");
        n_hash = *opt.hash_layers;
    }
    if (opt.mtp) {
        ONECARD_CHECK(*opt.mtp >= 0, "synth: --mtp must be >= 0");
        c.num_nextn_predict_layers = *opt.mtp;
    }
    // A shrunk model keeps what still fits: top-k within the experts, hash layers within the layers.
    if (!opt.experts_per_tok) c.num_experts_per_tok = std::min(c.num_experts_per_tok, c.n_routed_experts);
    if (!opt.hash_layers) n_hash = std::min(n_hash, layers);
    c.num_hidden_layers = layers;
    c.num_hash_layers = n_hash;
    // The Flash schedule: two sliding layers, then CSA/HCA alternating; MTP blocks are sliding.
    c.compress_ratios.clear();
    for (int64_t il = 0; il < layers; ++il) c.compress_ratios.push_back(il < 2 ? 0 : (il % 2 == 0 ? 4 : 128));
    if (opt.dspark) {
        DSparkConfig d;
        d.block_size = 5;
        d.markov_rank = opt.preset == SynthPreset::Flash ? 256 : 16;
        d.noise_token_id = c.vocab_size > 128799 ? 128799 : c.vocab_size - 1;
        for (int64_t il = std::max<int64_t>(0, layers - 3); il < layers; ++il) d.target_layer_ids.push_back(il);
        c.dspark = d;
    }
    for (int64_t i = 0; i < c.n_mtp_blocks(); ++i) c.compress_ratios.push_back(0);
    // Round trip through the official JSON: the written config.json is exactly what we validate.
    return parse_config(to_official_json(c));
}

std::vector<SynthShard> synth_shard_plan(const ModelConfig& cfg, uint64_t shard_bytes) {
    ONECARD_CHECK(shard_bytes > 0, "synth: shard size must be positive");
    std::vector<TensorSpec> specs = checkpoint_layout(cfg);
    std::vector<SynthShard> shards;
    for (size_t i = 0; i < specs.size();) {
        // A unit is one tensor, or a .weight with the .scale that follows it (kept together).
        size_t end = i + 1;
        if (end < specs.size() && ends_with(specs[end].name, ".scale")) ++end;
        uint64_t n = 0;
        for (size_t k = i; k < end; ++k) n += specs[k].nbytes();
        if (shards.empty() || (!shards.back().tensors.empty() && shards.back().nbytes + n > shard_bytes))
            shards.emplace_back();
        for (size_t k = i; k < end; ++k) shards.back().tensors.push_back(std::move(specs[k]));
        shards.back().nbytes += n;
        i = end;
    }
    for (size_t i = 0; i < shards.size(); ++i)
        shards[i].file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    return shards;
}

namespace {

std::span<const std::byte> as_bytes(const std::vector<uint8_t>& v) {
    return {reinterpret_cast<const std::byte*>(v.data()), v.size()};
}

constexpr int64_t kChunkElems = int64_t{1} << 22;            // fp32 values generated per chunk (16 MiB)
constexpr uint64_t kProgressMinBytes = uint64_t{256} << 20;  // smaller writes finish in seconds: no progress lines

class ShardWriter {
public:
    ShardWriter(const ModelConfig& cfg, uint64_t seed, bool tame, uint64_t total, bool progress, unsigned threads)
        : cfg_(cfg), seed_(seed), tame_(tame), total_(total), progress_(progress), threads_(std::max(1u, threads)) {}

    void write_shard(const std::filesystem::path& path, const SynthShard& shard, size_t index, size_t n_shards) {
        shard_ = index;
        n_shards_ = n_shards;
        SafetensorsWriter w(path, shard.tensors, {{"format", "pt"}});
        for (size_t i = 0; i < shard.tensors.size(); ++i) {
            const TensorSpec& spec = shard.tensors[i];
            const bool scale_follows = i + 1 < shard.tensors.size() && is_scale_of(shard.tensors[i + 1], spec);
            write_tensor(w, spec, scale_follows ? &shard.tensors[i + 1] : nullptr);
        }
        w.close();
    }

private:
    static bool is_scale_of(const TensorSpec& scale, const TensorSpec& weight) {
        return ends_with(weight.name, ".weight") && ends_with(scale.name, ".scale") &&
               scale.name.substr(0, scale.name.size() - 6) == weight.name.substr(0, weight.name.size() - 7);
    }

    void emit(SafetensorsWriter& w, const std::string& name, const std::vector<uint8_t>& bytes) {
        w.write(name, as_bytes(bytes));
        done_ += bytes.size();
        report();
    }

    void write_tensor(SafetensorsWriter& w, const TensorSpec& spec, const TensorSpec* scale) {
        switch (spec.dtype) {
            case DType::F8_E4M3: {
                ONECARD_CHECK(scale != nullptr, "synth: FP8 tensor {} has no .scale after it", spec.name);
                write_fp8(w, spec, *scale);
                return;
            }
            case DType::I8:
            case DType::U8: {
                ONECARD_CHECK(scale != nullptr, "synth: MXFP4 tensor {} has no .scale after it", spec.name);
                write_mxfp4(w, spec, *scale);
                return;
            }
            case DType::F8_E8M0: {
                ONECARD_CHECK(pending_scale_name_ == spec.name, "synth: scale {} without its weight", spec.name);
                emit(w, spec.name, pending_scale_);
                pending_scale_name_.clear();
                return;
            }
            case DType::I64:
            case DType::I32:
                write_tid2eid(w, spec);
                return;
            case DType::BF16:
            case DType::F32:
                write_plain(w, spec);
                return;
            default:
                fail("synth: no generator for tensor {} of dtype {}", spec.name, dtype_name(spec.dtype));
        }
    }

    // Rows are independent (each has its own random stream and output slot), so splitting them
    // over threads cannot change a byte.
    template <typename F>
    void parallel_rows(int64_t n, F&& f) {
        const int64_t t = std::min<int64_t>(threads_, n);
        if (t <= 1) {
            f(int64_t{0}, n);
            return;
        }
        std::vector<std::thread> pool;
        std::vector<std::exception_ptr> errors(static_cast<size_t>(t));
        for (int64_t i = 0; i < t; ++i) {
            pool.emplace_back([&, i] {
                try {
                    f(n * i / t, n * (i + 1) / t);
                } catch (...) {
                    errors[static_cast<size_t>(i)] = std::current_exception();
                }
            });
        }
        for (auto& th : pool) th.join();
        for (auto& e : errors)
            if (e) std::rethrow_exception(e);
    }

    void write_plain(SafetensorsWriter& w, const TensorSpec& spec) {
        const int64_t rows = logical_rows(spec), cols = logical_cols(spec);
        const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, kChunkElems / std::max<int64_t>(cols, 1)));
        const size_t elt = spec.dtype == DType::BF16 ? 2 : 4;
        std::vector<float> vals;
        std::vector<uint8_t> bytes;
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t n = std::min(chunk, rows - r0);
            vals.resize(static_cast<size_t>(n * cols));
            bytes.resize(vals.size() * elt);
            parallel_rows(n, [&](int64_t b, int64_t e) {
                synth_master_rows(cfg_, seed_, spec, r0 + b, e - b, vals.data() + b * cols, tame_);
                for (size_t i = static_cast<size_t>(b * cols); i < static_cast<size_t>(e * cols); ++i) {
                    if (elt == 2) {
                        const uint16_t v = f32_to_bf16(vals[i]);
                        bytes[2 * i] = static_cast<uint8_t>(v & 0xFF);
                        bytes[2 * i + 1] = static_cast<uint8_t>(v >> 8);
                    } else {
                        const uint32_t u = std::bit_cast<uint32_t>(vals[i]);
                        for (int k = 0; k < 4; ++k) bytes[4 * i + k] = static_cast<uint8_t>(u >> (8 * k));
                    }
                }
            });
            emit(w, spec.name, bytes);
        }
    }

    void write_fp8(SafetensorsWriter& w, const TensorSpec& spec, const TensorSpec& scale) {
        const int64_t rows = spec.shape.at(0), cols = spec.shape.at(1), blk = cfg_.weight_block_size;
        const int64_t n_cb = scale.shape.at(1);
        pending_scale_.assign(static_cast<size_t>(scale.shape.at(0) * n_cb), 0);
        // Whole 128-row blocks per chunk: a block's scale needs all of its rows.
        const int64_t blocks_per_chunk = std::max<int64_t>(1, kChunkElems / (blk * cols));
        std::vector<float> vals;
        std::vector<uint8_t> codes;
        for (int64_t r0 = 0; r0 < rows; r0 += blocks_per_chunk * blk) {
            const int64_t n = std::min(blocks_per_chunk * blk, rows - r0);
            const int64_t n_blocks = (n + blk - 1) / blk;
            vals.resize(static_cast<size_t>(n * cols));
            codes.resize(vals.size());
            parallel_rows(n_blocks, [&](int64_t b, int64_t e) {
                for (int64_t ib = b; ib < e; ++ib) {
                    const int64_t rb = ib * blk, nr = std::min(blk, n - rb);
                    synth_master_rows(cfg_, seed_, spec, r0 + rb, nr, vals.data() + rb * cols, tame_);
                    quantize_fp8_block_rows(vals.data() + rb * cols, nr, cols, blk, codes.data() + rb * cols,
                                            pending_scale_.data() + ((r0 + rb) / blk) * n_cb);
                }
            });
            emit(w, spec.name, codes);
        }
        pending_scale_name_ = scale.name;
    }

    void write_mxfp4(SafetensorsWriter& w, const TensorSpec& spec, const TensorSpec& scale) {
        const int64_t rows = spec.shape.at(0), cols = 2 * spec.shape.at(1);
        ONECARD_CHECK(cols % 32 == 0, "synth: MXFP4 tensor {} needs a multiple of 32 columns", spec.name);
        pending_scale_.assign(static_cast<size_t>(rows * (cols / 32)), 0);
        const int64_t chunk = std::max<int64_t>(1, kChunkElems / cols);
        std::vector<float> vals;
        std::vector<uint8_t> packed;
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t n = std::min(chunk, rows - r0);
            vals.resize(static_cast<size_t>(n * cols));
            packed.resize(static_cast<size_t>(n * cols / 2));
            parallel_rows(n, [&](int64_t b, int64_t e) {
                synth_master_rows(cfg_, seed_, spec, r0 + b, e - b, vals.data() + b * cols, tame_);
                for (int64_t r = b; r < e; ++r)
                    quantize_mxfp4_row(vals.data() + r * cols, cols, packed.data() + r * cols / 2,
                                       pending_scale_.data() + (r0 + r) * (cols / 32));
            });
            emit(w, spec.name, packed);
        }
        pending_scale_name_ = scale.name;
    }

    // Hash routing table: each vocabulary row gets top_k distinct experts (partial Fisher-Yates).
    void write_tid2eid(SafetensorsWriter& w, const TensorSpec& spec) {
        const int64_t rows = spec.shape.at(0), k = spec.shape.at(1);
        const int64_t n_experts = cfg_.n_routed_experts;
        ONECARD_CHECK(k <= n_experts, "synth: {} needs {} distinct experts of {}", spec.name, k, n_experts);
        const size_t elt = dtype_size(spec.dtype);
        std::vector<uint32_t> perm(static_cast<size_t>(n_experts));
        std::vector<uint8_t> bytes;
        const int64_t chunk = 4096;
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t n = std::min(chunk, rows - r0);
            bytes.assign(static_cast<size_t>(n * k) * elt, 0);
            for (int64_t r = 0; r < n; ++r) {
                Rng rng = row_rng(seed_, spec.name, r0 + r);
                for (int64_t e = 0; e < n_experts; ++e) perm[static_cast<size_t>(e)] = static_cast<uint32_t>(e);
                for (int64_t j = 0; j < k; ++j) {
                    const int64_t pick = j + rng.below(static_cast<uint32_t>(n_experts - j));
                    std::swap(perm[static_cast<size_t>(j)], perm[static_cast<size_t>(pick)]);
                    const uint64_t v = perm[static_cast<size_t>(j)];
                    uint8_t* dst = bytes.data() + static_cast<size_t>(r * k + j) * elt;
                    for (size_t b = 0; b < elt; ++b) dst[b] = static_cast<uint8_t>(v >> (8 * b));
                }
            }
            emit(w, spec.name, bytes);
        }
    }

    void report() {
        if (!progress_ || total_ < kProgressMinBytes) return;
        const uint64_t pct = done_ * 100 / total_;
        if (pct < next_pct_ && done_ != total_) return;
        next_pct_ = pct + 5;
        std::fprintf(stderr, "synth: %.2f / %.2f GB (%3llu%%), shard %zu/%zu\n", static_cast<double>(done_) / 1e9,
                     static_cast<double>(total_) / 1e9, static_cast<unsigned long long>(pct), shard_ + 1, n_shards_);
    }

    const ModelConfig& cfg_;
    uint64_t seed_;
    bool tame_;
    uint64_t total_;
    bool progress_;
    int64_t threads_;
    uint64_t done_ = 0;
    size_t shard_ = 0, n_shards_ = 0;
    uint64_t next_pct_ = 0;
    std::vector<uint8_t> pending_scale_;  // scales of the weight just written, for the .scale that follows
    std::string pending_scale_name_;
};

void write_text(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    ONECARD_CHECK(out.good(), "synth: cannot write {}", path.string());
    out << text;
    out.close();
    ONECARD_CHECK(!out.fail(), "synth: write failed: {}", path.string());
}

}  // namespace

SynthResult synth_write(const ModelConfig& cfg, uint64_t seed, const std::filesystem::path& out_dir,
                        uint64_t shard_bytes, bool progress, unsigned threads, bool tame) {
    if (threads == 0) threads = std::min(16u, std::max(1u, std::thread::hardware_concurrency()));
    std::filesystem::create_directories(out_dir);
    const std::vector<SynthShard> plan = synth_shard_plan(cfg, shard_bytes);
    SynthResult res;
    res.n_shards = plan.size();
    for (const SynthShard& s : plan) {
        res.n_tensors += s.tensors.size();
        res.n_bytes += s.nbytes;
    }
    // Shards of an earlier run with a different shard count would linger next to the index.
    const std::regex shard_re(R"(model-\d{5}-of-\d{5}\.safetensors)");
    std::set<std::string> planned;
    for (const SynthShard& s : plan) planned.insert(s.file);
    for (const auto& entry : std::filesystem::directory_iterator(out_dir)) {
        const std::string f = entry.path().filename().string();
        if (std::regex_match(f, shard_re) && !planned.count(f)) std::filesystem::remove(entry.path());
    }

    ShardWriter writer(cfg, seed, tame, res.n_bytes, progress, threads);
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < plan.size(); ++i) {
        writer.write_shard(out_dir / plan[i].file, plan[i], i, plan.size());
        for (const TensorSpec& t : plan[i].tensors) weight_map[t.name] = plan[i].file;
    }
    nlohmann::json index;
    index["metadata"] = {{"total_size", res.n_bytes}};
    index["weight_map"] = std::move(weight_map);
    write_text(out_dir / "model.safetensors.index.json", index.dump(2) + "\n");
    synth_write_config(cfg, out_dir);
    return res;
}

void synth_write_config(const ModelConfig& cfg, const std::filesystem::path& out_dir) {
    std::filesystem::create_directories(out_dir);
    write_text(out_dir / "config.json", to_official_json(cfg).dump(2) + "\n");
    nlohmann::json gen = {{"_from_model_config", true},
                          {"bos_token_id", cfg.bos_token_id},
                          {"eos_token_id", cfg.eos_token_id},
                          {"do_sample", true},
                          {"temperature", 1.0},
                          {"top_p", 1.0},
                          {"transformers_version", "4.57.1"}};
    write_text(out_dir / "generation_config.json", gen.dump(2) + "\n");
}

}  // namespace onecard
