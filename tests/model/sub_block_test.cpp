// DeepSeekV4::forward_sub_block, the teacher-forcing entry of the oracle (issue 23): each sub-block run
// alone on the streams at its input gives, sub-block after sub-block, the forward pass's own streams
// bit for bit, in one call per sub-block over the whole prompt and in chunks (each layer's state
// carries its positions); and a sub-block fed streams other than the forward's gives other output (the
// input is read, not ignored).
#include "core/error.h"
#include "core/fp_formats.h"
#include "core/tensor.h"
#include "loader/checkpoint.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "model/weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <vector>

using namespace onecard;

namespace {

struct Tiny {
    std::filesystem::path dir;
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
    std::unique_ptr<ModelWeights> weights;
    Tiny() {
        dir = std::filesystem::temp_directory_path() / ("onecard_sub_block_" + std::to_string(::getpid()));
        SynthOptions opt;
        opt.preset = SynthPreset::Tiny;
        opt.seed = 20261204;
        synth_write(synth_config(opt), opt.seed, dir, synth_default_shard_bytes(SynthPreset::Tiny), false);
        cfg = load_config(dir / "config.json");
        ckpt = std::make_unique<Checkpoint>(Checkpoint::open(dir));
        weights = std::make_unique<ModelWeights>(bind_weights(cfg, *ckpt));
    }
    ~Tiny() { std::filesystem::remove_all(dir); }
};

// The embedding (a bf16 table) in all hc streams, [n, hc, D], as the forward starts.
std::vector<float> embedded(const ModelConfig& cfg, const ModelWeights& w, const std::vector<int32_t>& tokens) {
    const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
    std::vector<float> X(tokens.size() * static_cast<size_t>(hc * D));
    for (size_t i = 0; i < tokens.size(); ++i)
        for (int64_t j = 0; j < hc; ++j)
            for (int64_t d = 0; d < D; ++d)
                X[(i * static_cast<size_t>(hc) + static_cast<size_t>(j)) * static_cast<size_t>(D) +
                  static_cast<size_t>(d)] = bf16_to_f32(tensor_element<uint16_t>(w.embed, tokens[i] * D + d));
    return X;
}

TEST(SubBlock, SubBlocksInTurnGiveTheForwardsStreamsBitForBit) {
    Tiny t;
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(t.cfg.vocab_size - 1));
    std::vector<int32_t> tokens(160);  // past the tiny model's HCA ratio and index_topk
    for (int32_t& x : tokens) x = dist(rng);
    for (bool bf16 : {false, true}) {
        DeepSeekV4 m(t.cfg, *t.weights, Numerics::Reference);
        m.set_bf16_storage(bf16);
        SequenceState whole = m.new_sequence();
        const ForwardOutput ref = m.forward_with_streams(whole, tokens);

        const int64_t L = t.cfg.num_hidden_layers;
        using SB = DeepSeekV4::SubBlock;
        // One call per sub-block over the whole prompt.
        std::vector<float> X = embedded(t.cfg, *t.weights, tokens);
        SequenceState one = m.new_sequence();
        for (int64_t il = 0; il < L; ++il) {
            m.forward_sub_block(one, il, SB::Attention, tokens, X.data());
            m.forward_sub_block(one, il, SB::Moe, tokens, X.data());
        }
        EXPECT_EQ(X, ref.streams) << "bf16 storage " << bf16;

        // In chunks of 64 + 61 + 35, each layer continuing from its own state.
        std::vector<float> Y = embedded(t.cfg, *t.weights, tokens);
        SequenceState chunked = m.new_sequence();
        const int64_t row = t.cfg.hc_mult * t.cfg.hidden_size;
        for (int64_t il = 0; il < L; ++il) {
            int64_t p = 0;
            for (int64_t len : {64, 61, 35}) {
                const std::span<const int32_t> part(tokens.data() + p, static_cast<size_t>(len));
                m.forward_sub_block(chunked, il, SB::Attention, part, Y.data() + p * row);
                m.forward_sub_block(chunked, il, SB::Moe, part, Y.data() + p * row);
                p += len;
            }
        }
        EXPECT_EQ(Y, ref.streams) << "chunked, bf16 storage " << bf16;
    }
}

TEST(SubBlock, ReadsItsInputAndRefusesALayerOutOfRange) {
    Tiny t;
    const std::vector<int32_t> tokens = {3, 14, 15, 92, 65};
    DeepSeekV4 m(t.cfg, *t.weights, Numerics::Reference);
    std::vector<float> a = embedded(t.cfg, *t.weights, tokens), b = a;
    for (float& v : b) v *= 1.5f;
    SequenceState sa = m.new_sequence(), sb = m.new_sequence();
    m.forward_sub_block(sa, 0, DeepSeekV4::SubBlock::Attention, tokens, a.data());
    m.forward_sub_block(sb, 0, DeepSeekV4::SubBlock::Attention, tokens, b.data());
    std::vector<float> a_scaled = a;
    for (float& v : a_scaled) v *= 1.5f;
    EXPECT_NE(a_scaled, b);  // not a linear map of its input: it was computed from it
    EXPECT_THROW(m.forward_sub_block(sa, t.cfg.num_hidden_layers, DeepSeekV4::SubBlock::Moe, tokens, a.data()), Error);
}

}  // namespace
