// Synthetic checkpoints: synth tiny -> Checkpoint::open -> bind_weights round trip; bit-exact
// determinism; FP8/MXFP4 bytes decode to the fp32 master values within the format error; the
// MXFP4 nibble order; index.json consistency; the flash preset's tensor list when shrunk.
#include "model/synth.h"
#include "core/error.h"
#include "core/fp_formats.h"
#include "loader/checkpoint.h"
#include "model/quantize.h"
#include "model/weights.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

namespace onecard {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& tag) {
    const fs::path d = fs::temp_directory_path() / fmt::format("onecard_synth_test_{}_{}", ::getpid(), tag);
    fs::remove_all(d);
    return d;
}

std::string sha256_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
    std::string hex;
    for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
    return hex;
}

std::map<std::string, std::string> hashes(const fs::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = sha256_file(e.path());
    return out;
}

SynthOptions tiny(uint64_t seed) {
    SynthOptions o;
    o.preset = SynthPreset::Tiny;
    o.seed = seed;
    return o;
}

class SynthTiny : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new fs::path(temp_dir("tiny"));
        cfg_ = new ModelConfig(synth_config(tiny(7)));
        synth_write(*cfg_, 7, *dir_, synth_default_shard_bytes(SynthPreset::Tiny), false);
    }
    static void TearDownTestSuite() {
        fs::remove_all(*dir_);
        delete dir_;
        delete cfg_;
    }
    static fs::path* dir_;
    static ModelConfig* cfg_;
};
fs::path* SynthTiny::dir_ = nullptr;
ModelConfig* SynthTiny::cfg_ = nullptr;

TEST_F(SynthTiny, PresetCoversEveryLayerKind) {
    const ModelConfig& c = *cfg_;
    EXPECT_EQ(c.compress_ratios, (std::vector<int64_t>{0, 0, 4, 128, 4, 128, 0}));
    EXPECT_EQ(c.num_hash_layers, 2);
    EXPECT_EQ(c.hidden_size % 128, 0);
    EXPECT_LT(c.num_experts_per_tok, c.n_routed_experts);
    EXPECT_LT(c.index_topk * 4 * 4, 600);  // a 600-token sequence has many more CSA entries than top-k
}

TEST_F(SynthTiny, RoundTripBindsEveryTensor) {
    const ModelConfig loaded = load_config(*dir_ / "config.json");
    EXPECT_EQ(loaded.compress_ratios, cfg_->compress_ratios);
    EXPECT_EQ(loaded.hidden_size, cfg_->hidden_size);
    const Checkpoint ckpt = Checkpoint::open(*dir_);
    const ModelWeights w = bind_weights(loaded, ckpt);
    ASSERT_EQ(w.layers.size(), 6u);
    ASSERT_EQ(w.mtp.size(), 1u);
    EXPECT_FALSE(w.dspark.has_value());
    EXPECT_EQ(w.embed.shape, (std::vector<int64_t>{1024, 256}));
    EXPECT_NE(w.embed.data, nullptr);
    for (int il = 0; il < 6; ++il) {
        const BlockWeights& b = w.layers[il];
        EXPECT_EQ(b.attn.compressor.has_value(), il >= 2) << il;
        EXPECT_EQ(b.attn.indexer.has_value(), il == 2 || il == 4) << il;
        EXPECT_EQ(b.ffn.tid2eid.has_value(), il < 2) << il;
        EXPECT_EQ(b.ffn.gate_bias.has_value(), il >= 2) << il;
        EXPECT_EQ(b.ffn.experts.size(), 8u);
        EXPECT_TRUE(b.ffn.experts[7].w2.is_mxfp4());
        EXPECT_EQ(b.ffn.experts[7].w2.in_features(), cfg_->moe_intermediate_size);
        EXPECT_FALSE(b.ffn.shared.w2.is_mxfp4());
    }
    EXPECT_EQ(w.layers[3].attn.compressor->ape.shape, (std::vector<int64_t>{128, 128}));
    EXPECT_EQ(w.layers[2].attn.compressor->ape.shape, (std::vector<int64_t>{4, 256}));
    // Nothing else in the files.
    EXPECT_EQ(ckpt.tensors().size(), checkpoint_layout(loaded).size());
}

TEST_F(SynthTiny, IndexIsConsistent) {
    nlohmann::json index = nlohmann::json::parse(std::ifstream(*dir_ / "model.safetensors.index.json"));
    const auto& wm = index.at("weight_map");
    const Checkpoint ckpt = Checkpoint::open(*dir_);
    uint64_t total = 0;
    std::set<std::string> shard_files;
    for (const TensorView& t : ckpt.tensors()) {
        total += t.nbytes;
        ASSERT_TRUE(wm.contains(t.name)) << t.name;
        shard_files.insert(wm[t.name].get<std::string>());
    }
    EXPECT_EQ(wm.size(), ckpt.tensors().size());
    EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);
    EXPECT_GT(shard_files.size(), 1u) << "tiny should exercise sharding";
    EXPECT_EQ(ckpt.shard_paths().size(), shard_files.size());
    for (const auto& f : shard_files) {
        EXPECT_TRUE(fs::is_regular_file(*dir_ / f)) << f;
        EXPECT_NE(f.find(fmt::format("-of-{:05d}.safetensors", shard_files.size())), std::string::npos) << f;
    }
    // Every .scale sits in the same shard as its .weight.
    for (const auto& [name, file] : wm.items()) {
        if (name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0) {
            const std::string weight = name.substr(0, name.size() - 6) + ".weight";
            EXPECT_EQ(wm.at(weight), file) << name;
        }
    }
    nlohmann::json gen = nlohmann::json::parse(std::ifstream(*dir_ / "generation_config.json"));
    EXPECT_EQ(gen.at("eos_token_id"), 1);
}

TEST_F(SynthTiny, Fp8WeightsDecodeWithinFormatError) {
    const Checkpoint ckpt = Checkpoint::open(*dir_);
    int n_checked = 0;
    for (const TensorSpec& spec : checkpoint_layout(*cfg_)) {
        if (spec.dtype != DType::F8_E4M3) continue;
        const TensorView& w = ckpt.get(spec.name);
        const TensorView& s = ckpt.get(spec.name.substr(0, spec.name.size() - 7) + ".scale");
        const int64_t rows = w.shape[0], cols = w.shape[1];
        const int64_t n_cb = s.shape[1];
        std::vector<float> src(static_cast<size_t>(rows * cols));
        synth_master_rows(*cfg_, 7, spec, 0, rows, src.data());
        const auto* codes = w.as<uint8_t>();
        const auto* scales = s.as<uint8_t>();
        // Each block's scale is the tightest power of two: amax/scale in (224, 448].
        std::vector<float> amax(static_cast<size_t>(s.numel()), 0.0f);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
                const size_t bi = static_cast<size_t>((r / 128) * n_cb + c / 128);
                const float scale = std::ldexp(1.0f, static_cast<int>(scales[bi]) - 127);
                const float dec = e4m3fn_to_f32(codes[r * cols + c]) * scale;
                const float x = src[static_cast<size_t>(r * cols + c)];
                // E4M3: 3 mantissa bits -> half-ulp <= 2^-4 relative; subnormal step 2^-9 * scale.
                ASSERT_LE(std::fabs(dec - x), std::fabs(x) * 0.0625f + std::ldexp(scale, -10))
                    << spec.name << " [" << r << "," << c << "]";
                amax[bi] = std::max(amax[bi], std::fabs(x));
            }
        }
        for (size_t bi = 0; bi < amax.size(); ++bi) {
            const float ratio = amax[bi] / std::ldexp(1.0f, static_cast<int>(scales[bi]) - 127);
            EXPECT_GT(ratio, 224.0f) << spec.name << " block " << bi;
            EXPECT_LE(ratio, 448.0f) << spec.name << " block " << bi;
        }
        ++n_checked;
    }
    // 7 blocks x (5 attention + 3 shared expert) + 2 indexer wq_b + MTP e_proj/h_proj.
    EXPECT_EQ(n_checked, 7 * 8 + 2 + 2);
}

TEST_F(SynthTiny, Mxfp4ExpertsDecodeWithinFormatError) {
    const Checkpoint ckpt = Checkpoint::open(*dir_);
    for (const char* name :
         {"layers.0.ffn.experts.0.w1.weight", "layers.5.ffn.experts.7.w2.weight", "mtp.0.ffn.experts.3.w3.weight"}) {
        const TensorView& w = ckpt.get(name);
        const TensorView& s = ckpt.get(std::string(name).substr(0, std::strlen(name) - 7) + ".scale");
        ASSERT_EQ(w.dtype, DType::I8);
        const int64_t rows = w.shape[0], cols = w.shape[1] * 2;
        ASSERT_EQ(s.shape, (std::vector<int64_t>{rows, cols / 32}));
        TensorSpec spec{name, DType::I8, w.shape};
        std::vector<float> src(static_cast<size_t>(rows * cols));
        synth_master_rows(*cfg_, 7, spec, 0, rows, src.data());
        static const float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
                const uint8_t byte = w.as<uint8_t>()[r * (cols / 2) + c / 2];
                const uint8_t code = (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);  // element 2j = low nibble
                const float scale = std::ldexp(1.0f, static_cast<int>(s.as<uint8_t>()[r * (cols / 32) + c / 32]) - 127);
                const float dec = (code & 8 ? -1.0f : 1.0f) * kE2M1[code & 7] * scale;
                const float x = src[static_cast<size_t>(r * cols + c)];
                // E2M1: the widest gap (4 -> 6) is half the lower value; subnormal step 0.5 * scale.
                ASSERT_LE(std::fabs(dec - x), std::fabs(x) * 0.25f + 0.25f * scale)
                    << name << " [" << r << "," << c << "]";
                EXPECT_EQ(dec, dequant_mxfp4(w.as<uint8_t>(), s.as<uint8_t>(), cols, r, c));
            }
        }
    }
}

TEST(Quantize, Mxfp4NibbleOrderOnKnownPattern) {
    // 32 values with amax 6 -> scale 2^0 (byte 127). Values chosen to be exact E2M1 codes, so the
    // expected bytes follow from the format definition alone: code(v) low nibble for even k.
    const float pattern[16] = {0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,  0.0f,
                               -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f, 1.0f};
    const uint8_t codes[16] = {0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x0, 0x9, 0xA, 0xB, 0xC, 0xD, 0xE, 0xF, 0x2};
    float row[32];
    for (int i = 0; i < 32; ++i) row[i] = pattern[i % 16];
    uint8_t packed[16], scales[1];
    quantize_mxfp4_row(row, 32, packed, scales);
    EXPECT_EQ(scales[0], 127);
    for (int j = 0; j < 16; ++j) {
        const uint8_t expect = static_cast<uint8_t>(codes[(2 * j) % 16] | (codes[(2 * j + 1) % 16] << 4));
        EXPECT_EQ(packed[j], expect) << "byte " << j;
    }
    EXPECT_EQ(packed[0], 0x21);  // 0.5 in the low nibble, 1.0 in the high nibble
    // Scaled by 2^-3: same codes, scale byte 124.
    for (float& v : row) v *= 0.125f;
    quantize_mxfp4_row(row, 32, packed, scales);
    EXPECT_EQ(scales[0], 124);
    EXPECT_EQ(packed[0], 0x21);
}

TEST(Quantize, RowQuantisersMatchTheCoreEncoders) {
    // Block values: every E2M1/E4M3 midpoint (ties), values next to them, and a spread of
    // magnitudes; the quantisers' fast paths must give the core encoders' bytes exactly.
    std::vector<float> vals;
    for (float m : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 6.0f}) {
        for (float v : {m, std::nextafter(m, 0.0f), std::nextafter(m, 10.0f)}) {
            vals.push_back(v);
            vals.push_back(-v);
        }
    }
    for (int i = 0; vals.size() % 32 != 0 || vals.size() < 256; ++i)
        vals.push_back(std::ldexp(float(i % 13) - 6.3f, i % 9 - 4));
    vals.push_back(0.0f);
    while (vals.size() % 32 != 0) vals.push_back(1e-3f * static_cast<float>(vals.size()));
    const int64_t n = static_cast<int64_t>(vals.size());
    std::vector<uint8_t> packed(static_cast<size_t>(n / 2)), scales(static_cast<size_t>(n / 32));
    quantize_mxfp4_row(vals.data(), n, packed.data(), scales.data());
    for (int64_t g = 0; g < n / 32; ++g) {
        float amax = 0;
        for (int c = 0; c < 32; ++c) amax = std::max(amax, std::fabs(vals[g * 32 + c]));
        ASSERT_EQ(scales[g], ue8m0_scale_for(amax, 6.0f));
        for (int c = 0; c < 32; ++c) {
            const float x = std::ldexp(vals[g * 32 + c], 127 - scales[g]);
            const uint8_t byte = packed[(g * 32 + c) / 2];
            EXPECT_EQ(c % 2 == 0 ? (byte & 0xF) : (byte >> 4), f32_to_e2m1(x)) << "value " << vals[g * 32 + c];
        }
    }
    // FP8: one 2 x n block row.
    std::vector<float> two(vals);
    for (float v : vals) two.push_back(v * 100.0f);
    std::vector<uint8_t> codes(two.size()), fp8_scales(static_cast<size_t>((n + 127) / 128));
    quantize_fp8_block_rows(two.data(), 2, n, 128, codes.data(), fp8_scales.data());
    for (int64_t r = 0; r < 2; ++r)
        for (int64_t c = 0; c < n; ++c)
            ASSERT_EQ(codes[r * n + c], f32_to_e4m3fn(std::ldexp(two[r * n + c], 127 - fp8_scales[c / 128])));
}

TEST(Quantize, Ue8m0ScaleIsTightestPowerOfTwo) {
    EXPECT_EQ(ue8m0_scale_for(448.0f, 448.0f), 127);  // exactly fits at 2^0
    EXPECT_EQ(ue8m0_scale_for(448.5f, 448.0f), 128);  // just over -> 2^1
    EXPECT_EQ(ue8m0_scale_for(224.0f, 448.0f), 126);  // 2^-1 fits exactly
    EXPECT_EQ(ue8m0_scale_for(6.0f, 6.0f), 127);
    EXPECT_EQ(ue8m0_scale_for(0.0f, 448.0f), ue8m0_scale_for(1e-4f, 448.0f));  // floor at 1e-4
}

TEST(SynthDeterminism, SameSeedSameBytesDifferentSeedDifferentBytes) {
    const fs::path a = temp_dir("a"), b = temp_dir("b"), c = temp_dir("c");
    const ModelConfig cfg = synth_config(tiny(11));
    const uint64_t shard = 3ull << 20;
    synth_write(cfg, 11, a, shard, false, 1);
    synth_write(cfg, 11, b, shard, false, 4);  // thread count must not change a byte
    synth_write(cfg, 12, c, shard, false, 4);
    const auto ha = hashes(a), hb = hashes(b), hc = hashes(c);
    EXPECT_EQ(ha, hb);
    ASSERT_EQ(ha.size(), hc.size());
    EXPECT_EQ(ha.at("config.json"), hc.at("config.json"));
    for (const auto& [file, h] : ha)
        if (file.find(".safetensors") != std::string::npos && file.find("index") == std::string::npos) {
            EXPECT_NE(h, hc.at(file)) << file;
        }
    // Rewriting into an existing directory reproduces the same files.
    synth_write(cfg, 11, a, shard, false, 3);
    EXPECT_EQ(hashes(a), hb);
    for (const auto& d : {a, b, c}) fs::remove_all(d);
}

TEST(SynthRandom, MasterValuesHaveSensibleScale) {
    const ModelConfig cfg = synth_config(tiny(3));
    auto stats = [&](const TensorSpec& spec, double& mean, double& rms) {
        const int64_t rows = spec.shape.size() > 1 ? spec.shape[0] : 1;
        int64_t cols = 1;
        for (size_t i = spec.shape.size() > 1 ? 1 : 0; i < spec.shape.size(); ++i) cols *= spec.shape[i];
        if (spec.dtype == DType::I8) cols *= 2;
        std::vector<float> v(static_cast<size_t>(rows * cols));
        synth_master_rows(cfg, 3, spec, 0, rows, v.data());
        double s = 0, s2 = 0;
        for (float x : v) {
            s += x;
            s2 += double(x) * x;
        }
        mean = s / v.size();
        rms = std::sqrt(s2 / v.size());
    };
    double mean = 0, rms = 0;
    stats({"layers.2.attn.wq_b.weight", DType::F8_E4M3, {512, 128}}, mean, rms);
    EXPECT_NEAR(rms, 1.0 / std::sqrt(128.0), 0.01);  // unit-gain linear
    EXPECT_NEAR(mean, 0.0, 0.005);
    stats({"layers.2.attn_norm.weight", DType::BF16, {256}}, mean, rms);
    EXPECT_NEAR(mean, 1.0, 0.01);
    stats({"layers.1.attn.attn_sink", DType::F32, {4096}}, mean, rms);
    EXPECT_NEAR(rms, 1.0, 0.05);  // N(0, 1)
    stats({"embed.weight", DType::BF16, {1024, 256}}, mean, rms);
    EXPECT_NEAR(rms, 1.0, 0.01);
    EXPECT_NEAR(mean, 0.0, 0.01);
}

int64_t count_with(const std::vector<TensorSpec>& specs, const std::string& part) {
    int64_t n = 0;
    for (const auto& s : specs) n += s.name.find(part) != std::string::npos;
    return n;
}

const TensorSpec* find_spec(const std::vector<TensorSpec>& specs, const std::string& name) {
    for (const auto& s : specs)
        if (s.name == name) return &s;
    return nullptr;
}

TEST(SynthFlash, FullLayoutMatchesDerivedInventory) {
    SynthOptions o;
    o.preset = SynthPreset::Flash;
    const ModelConfig cfg = synth_config(o);
    const auto specs = checkpoint_layout(cfg);
    // dsv4-model.md §1.2: 67,612 main + 1,575 MTP tensors, about 159.6 GB.
    EXPECT_EQ(specs.size(), 69187u);
    EXPECT_EQ(count_with(specs, "mtp.0."), 1575);
    uint64_t bytes = 0;
    for (const auto& s : specs) bytes += s.nbytes();
    EXPECT_GT(bytes, 159.0e9);
    EXPECT_LT(bytes, 160.2e9);
    const TensorSpec* e = find_spec(specs, "layers.42.ffn.experts.255.w2.weight");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->dtype, DType::I8);
    EXPECT_EQ(e->shape, (std::vector<int64_t>{4096, 1024}));
    const TensorSpec* sc = find_spec(specs, "layers.42.ffn.experts.255.w2.scale");
    ASSERT_NE(sc, nullptr);
    EXPECT_EQ(sc->shape, (std::vector<int64_t>{4096, 64}));
    EXPECT_EQ(find_spec(specs, "layers.7.attn.wq_b.scale")->shape, (std::vector<int64_t>{256, 8}));
    EXPECT_EQ(find_spec(specs, "layers.2.attn.indexer.compressor.ape")->shape, (std::vector<int64_t>{4, 256}));
    EXPECT_EQ(find_spec(specs, "layers.2.ffn.gate.tid2eid")->shape, (std::vector<int64_t>{129280, 6}));
    EXPECT_EQ(find_spec(specs, "mtp.0.e_proj.scale")->shape, (std::vector<int64_t>{32, 32}));
    EXPECT_EQ(find_spec(specs, "hc_head_fn")->shape, (std::vector<int64_t>{4, 16384}));

    // 5 GB shards: none over the target (no Flash tensor is that big).
    const auto plan = synth_shard_plan(cfg, synth_default_shard_bytes(SynthPreset::Flash));
    EXPECT_GE(plan.size(), 32u);
    for (const auto& sh : plan) EXPECT_LE(sh.nbytes, 5000000000ull) << sh.file;
}

TEST(SynthFlash, LayersAndExpertsShrinkTheTensorList) {
    SynthOptions o;
    o.preset = SynthPreset::Flash;
    o.layers = 4;
    o.experts = 16;
    const ModelConfig cfg = synth_config(o);
    EXPECT_EQ(cfg.compress_ratios, (std::vector<int64_t>{0, 0, 4, 128, 0}));
    EXPECT_EQ(cfg.num_hash_layers, 3);
    EXPECT_EQ(cfg.hidden_size, 4096);
    EXPECT_EQ(cfg.num_experts_per_tok, 6);
    const auto specs = checkpoint_layout(cfg);
    // Per block: 13 attention + 2 norms + 6 HC + gate + bias/tid2eid + 6 shared + 6 per expert;
    // +4 compressor (ratio != 0), +7 indexer (ratio 4); MTP +10; top level 6.
    const int64_t per_block = 13 + 2 + 6 + 1 + 1 + 6 + 6 * 16;
    EXPECT_EQ(static_cast<int64_t>(specs.size()), 6 + 4 * per_block + (4 + 7) + 4 + (per_block + 10));
    EXPECT_EQ(count_with(specs, ".ffn.experts."), 5 * 16 * 6);
    EXPECT_EQ(find_spec(specs, "layers.0.ffn.experts.16.w1.weight"), nullptr);
    EXPECT_NE(find_spec(specs, "layers.3.ffn.experts.15.w1.weight"), nullptr);
    EXPECT_EQ(find_spec(specs, "layers.4.attn_norm.weight"), nullptr);
    EXPECT_NE(find_spec(specs, "layers.2.ffn.gate.tid2eid"), nullptr);  // layers 0..2 hash-routed
    EXPECT_NE(find_spec(specs, "layers.3.ffn.gate.bias"), nullptr);
    EXPECT_EQ(find_spec(specs, "layers.3.ffn.gate.bias")->shape, (std::vector<int64_t>{16}));
    EXPECT_EQ(find_spec(specs, "layers.3.ffn.gate.weight")->shape, (std::vector<int64_t>{16, 4096}));
    EXPECT_NE(find_spec(specs, "layers.3.attn.compressor.ape"), nullptr);
    EXPECT_EQ(find_spec(specs, "layers.3.attn.indexer.wq_b.weight"), nullptr);
    EXPECT_EQ(find_spec(specs, "layers.2.attn.compressor.wkv.weight")->shape, (std::vector<int64_t>{1024, 4096}));
    EXPECT_EQ(find_spec(specs, "layers.3.attn.compressor.wkv.weight")->shape, (std::vector<int64_t>{512, 4096}));

    // Fewer experts than the top-k: top-k follows unless given explicitly.
    o.experts = 4;
    EXPECT_EQ(synth_config(o).num_experts_per_tok, 4);
    o.experts_per_tok = 6;
    EXPECT_THROW(synth_config(o), Error);
}

TEST(SynthOptions, OverridesReachTheConfig) {
    SynthOptions o = tiny(1);
    o.hidden = 4096;
    o.heads = 64;
    o.head_dim = 512;
    o.q_lora_rank = 1024;
    o.o_groups = 8;
    o.o_lora_rank = 1024;
    o.layers = 4;
    o.window = 16;
    o.index_topk = 4;
    const ModelConfig c = synth_config(o);
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.num_attention_heads, 64);
    EXPECT_EQ(c.head_dim, 512);
    EXPECT_EQ(c.o_groups, 8);
    EXPECT_EQ(c.sliding_window, 16);
    EXPECT_EQ(c.index_topk, 4);
    EXPECT_EQ(c.vocab_size, 1024);  // still tiny elsewhere
    o.hidden = 1000;                // not a multiple of 128
    try {
        synth_config(o);
        ADD_FAILURE() << "accepted hidden 1000";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("hidden_size"), std::string::npos) << e.what();
    }
    EXPECT_EQ(synth_preset_from_name("small"), SynthPreset::Small);
    EXPECT_FALSE(synth_preset_from_name("huge").has_value());
}

}  // namespace
}  // namespace onecard
