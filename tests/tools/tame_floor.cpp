// The tame model's one-ulp floor on the CPU oracle at the real per-layer Flash dims (issue 23): the
// checkpoint gpu_tame_test.cpp writes (support/flash_dims.h: 4 layers, 16 experts top-6, index_topk 32,
// seed 424242), a 192-token prompt, every hc bias one fp32 ulp up. Prints the median,
// worst and argmax of the per-position relative L2 of the logits. Not a test (minutes per run on two
// cores): the numbers behind the tame rule's post weight (src/model/synth.cpp) and docs/results.md.
//   tame_floor [POST_SCALE [ORACLE]]
//     POST_SCALE: the rule's post weight times this (default 1: 0.005)
//     ORACLE: gpu (the GPU's storage points, what the parity tests compare against; default) or fp32
#include "model/deepseek_v4.h"
#include "model/weights.h"
#include "support/flash_dims.h"
#include "support/test_support.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>

using namespace onecard;

int main(int argc, char** argv) {
    const double post_scale = argc > 1 ? std::atof(argv[1]) : 1.0;
    const std::string oracle = argc > 2 ? argv[2] : "gpu";
    if (post_scale <= 0.0 || (oracle != "gpu" && oracle != "fp32")) {
        std::fprintf(stderr, "usage: tame_floor [POST_SCALE > 0 [gpu|fp32]]\n");
        return 2;
    }
    test::TempDir dir("tame_floor");
    const ModelConfig cfg = test::write_flash_dims_checkpoint(dir.path(), 424242, 16, 32, /*tame=*/true);
    const Checkpoint ckpt = Checkpoint::open(dir.path());
    ModelWeights w = bind_weights(cfg, ckpt);
    // Post entries [hc, 2·hc) of every block's hc biases: 2·sigmoid(b) scaled by post_scale (left
    // untouched at 1, so the figure is gpu_tame_test's TameFloorAtFlashDims to the bit).
    std::vector<std::vector<float>> scaled;
    scaled.reserve(2 * w.layers.size());
    const int64_t hc = cfg.hc_mult;
    for (BlockWeights& b : post_scale == 1.0 ? std::span<BlockWeights>() : std::span<BlockWeights>(w.layers))
        for (TensorView* t : {&b.hc_attn.base, &b.hc_ffn.base}) {
            std::vector<float>& v = scaled.emplace_back(static_cast<size_t>(t->numel()));
            std::memcpy(v.data(), t->data, v.size() * 4);
            for (int64_t j = hc; j < 2 * hc; ++j) {
                const double p = post_scale * 2.0 / (1.0 + std::exp(-static_cast<double>(v[j])));
                v[static_cast<size_t>(j)] = static_cast<float>(std::log(p / (2.0 - p)));
            }
            t->data = reinterpret_cast<const std::byte*>(v.data());
        }
    std::mt19937 rng(7);  // gpu_tame_test.cpp's prompt
    std::uniform_int_distribution<int32_t> tok(2, static_cast<int32_t>(cfg.vocab_size) - 1);
    std::vector<int32_t> tokens(192);
    for (int32_t& t : tokens) t = tok(rng);
    auto logits = [&](const ModelWeights& ww) {
        DeepSeekV4 m(cfg, ww, Numerics::Reference);
        m.set_bf16_storage(oracle == "gpu");
        SequenceState st = m.new_sequence();
        return m.forward(st, tokens);
    };
    std::vector<std::vector<float>> nudged_storage;
    const test::LogitsAgreement a =
        test::compare_logits(logits(test::nudge_hc_bases(w, nudged_storage)), logits(w), 0, 192, cfg.vocab_size);
    std::printf("tame_floor post_scale %.4g oracle %s: median %.3g worst %.3g argmax %lld/%lld\n", post_scale,
                oracle.c_str(), a.median, a.worst, static_cast<long long>(a.argmax_same), static_cast<long long>(a.n));
    return 0;
}
