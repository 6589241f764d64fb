// Speculative decoding through the engine on the GPU (issue 17): Engine + CudaModelRunner with the
// MTP drafter (`--speculative-config '{"method":"mtp",...}'` on `serve --device cuda`), on the tame
// Flash-dimension checkpoint with its mtp.0 block (gpu_test_util.h). Three greedy requests run
// concurrently (prefill chunks, plain decode rows and verify rows share steps); their outputs must be
// the plain engine's token for token up to a near-tie of the target model (a row computed in a verify
// step is not bit-equal to a one-token step's: test::expect_greedy_equal_up_to_ties says why), with
// drafts made and verified (the engine's spec_decode counters). H200, 2026-12-04 08:50 UTC, before that
// allowance: request 1 left the plain output at token 20 in both the greedy and the top_k 1 runs.
// Sampled rows draft too, and are decided on the host by the CPU backend's speculative sampling
// (whose distribution the chi-square tests prove): with top_k 1 every distribution is one token, so
// the sampled path's output must also be the plain output, up to such a tie. The runner refuses
// methods it cannot run.
#include "gpu_spec_engine.h"

#ifdef ONECARD_HAVE_CUDA

#include "core/error.h"
#include "engine_cuda/cuda_model_runner.h"
#include "loader/checkpoint.h"
#include "model/weights.h"
#include "onecard/engine.h"
#include "support/test_support.h"

namespace onecard {
namespace {

constexpr int64_t kDrafts = 3, kNew = test::SpecEngineHarness::kNew;

struct Model {
    test::TempDir dir{"gpu_engine_spec"};
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
    ModelWeights w;
};

Model& model() {
    static Model* m = [] {
        auto* x = new Model;
        x->cfg = test::write_flash_dims_checkpoint(x->dir.path(), 7171, 8, 16, /*tame=*/true, /*mtp=*/1);
        x->ckpt = std::make_unique<Checkpoint>(Checkpoint::open(x->dir.path()));
        x->w = bind_weights(x->cfg, *x->ckpt);
        return x;
    }();
    return *m;
}

const test::SpecEngineHarness& harness() {
    static const test::SpecEngineHarness h(model().cfg, model().w, "mtp",
                                           static_cast<int32_t>(model().cfg.vocab_size) - 1, 23);
    return h;
}

TEST(GpuEngineSpec, GreedyOutputIsThePlainOutputWithMtpDrafts) {
    ONECARD_REQUIRE_GPU();
    const test::SpecEngineHarness& h = harness();
    const test::SpecEngineOutcome plain = h.run(0, 0.0f), spec = h.run(kDrafts, 0.0f);
    h.expect_plain_output(plain, spec);
    std::printf("[gpu engine spec] drafts %lld, draft tokens %lld, accepted %lld\n",
                static_cast<long long>(spec.stats.spec_num_drafts),
                static_cast<long long>(spec.stats.spec_num_draft_tokens),
                static_cast<long long>(spec.stats.spec_num_accepted_tokens));
    EXPECT_EQ(plain.stats.spec_num_drafts, 0);
    EXPECT_GT(spec.stats.spec_num_drafts, 0);
    EXPECT_LE(spec.stats.spec_num_accepted_tokens, spec.stats.spec_num_draft_tokens);
}

TEST(GpuEngineSpec, SampledRowsDraftAndAreDecidedOnTheHost) {
    ONECARD_REQUIRE_GPU();
    // top_k 1: sampled rows whose every distribution is one token (the host path, exact).
    const test::SpecEngineHarness& h = harness();
    const test::SpecEngineOutcome plain = h.run(0, 0.8f, 1), spec = h.run(kDrafts, 0.8f, 1);
    h.expect_plain_output(plain, spec);
    EXPECT_GT(spec.stats.spec_num_drafts, 0);
    // Full sampling: drafts made and some rejected; every request completes.
    const test::SpecEngineOutcome wide = h.run(kDrafts, 0.8f);
    for (const auto& o : wide.outputs) EXPECT_EQ(o.size(), static_cast<size_t>(kNew));
    std::printf("[gpu engine spec] sampled: drafts %lld, draft tokens %lld, accepted %lld\n",
                static_cast<long long>(wide.stats.spec_num_drafts),
                static_cast<long long>(wide.stats.spec_num_draft_tokens),
                static_cast<long long>(wide.stats.spec_num_accepted_tokens));
    EXPECT_GT(wide.stats.spec_num_drafts, 0);
    EXPECT_LE(wide.stats.spec_num_accepted_tokens, wide.stats.spec_num_draft_tokens);
}

TEST(GpuEngineSpec, MethodsTheRunnerCannotRunAreRefused) {
    ONECARD_REQUIRE_GPU();
    Model& m = model();
    const test::SpecEngineHarness& h = harness();
    auto runner = std::make_unique<CudaModelRunner>(m.cfg, m.w, h.runner_options(0));
    EXPECT_FALSE(runner->supports_speculation("mtp"));  // built without the drafter
    EXPECT_THROW(Engine(h.engine_config(kDrafts), std::move(runner)), Error);
    auto with = std::make_unique<CudaModelRunner>(m.cfg, m.w, h.runner_options(kDrafts));
    EXPECT_TRUE(with->supports_speculation("mtp"));
    EXPECT_FALSE(with->supports_speculation("dspark"));
}

}  // namespace
}  // namespace onecard

#else
TEST(GpuEngineSpec, NeedsCuda) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
