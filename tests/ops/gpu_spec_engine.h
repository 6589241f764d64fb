// The GPU engine speculation tests' harness (gpu_engine_spec_test.cpp: MTP, gpu_dspark_test.cpp:
// DSpark): Engine + CudaModelRunner with or without a drafter on one checkpoint, three concurrent
// requests (150, 40 and 90 prompt tokens: prefill chunks, decode rows and verify rows share steps of
// 96 tokens), and the plain engine's top log-probabilities for near-tie checks
// (test::expect_greedy_equal_up_to_ties).
#pragma once

#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "engine_cuda/cuda_model_runner.h"
#include "model/config.h"
#include "model/weights.h"
#include "onecard/engine.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

namespace onecard::test {

struct SpecEngineOutcome {
    std::vector<std::vector<int32_t>> prompts, outputs;
    EngineStats stats;
};

class SpecEngineHarness {
public:
    static constexpr int64_t kNew = 40;  // tokens each request generates
    // `method` "mtp" or "dspark"; prompt tokens are drawn from [2, max_token] with seed `prompt_seed`.
    SpecEngineHarness(const ModelConfig& cfg, const ModelWeights& w, std::string method, int32_t max_token,
                      uint32_t prompt_seed)
        : cfg_(cfg), w_(w), method_(std::move(method)), max_token_(max_token), prompt_seed_(prompt_seed) {}

    // drafts > 0: speculation with that many drafts a step (fixed: the tests are about correctness).
    EngineConfig engine_config(int64_t drafts, double threshold = 0.0) const {
        EngineConfig ec;
        ec.eos_token_id = -1;
        ec.max_num_seqs = 4;
        ec.max_num_batched_tokens = 96;
        ec.long_prefill_token_threshold = 64;
        ec.kv_cache_bytes = int64_t{1} << 30;
        ec.max_model_len = 512;
        if (drafts > 0) {
            ec.speculative.method = method_;
            ec.speculative.num_speculative_tokens = drafts;
            ec.speculative.fixed_draft_length = true;
            ec.speculative.confidence_threshold = threshold;
        }
        return ec;
    }
    // The runner built with the method's drafter for `drafts` drafts (0: without a drafter).
    CudaRunnerOptions runner_options(int64_t drafts) const {
        CudaRunnerOptions ro;
        ro.max_model_len = 512;
        ro.max_num_seqs = 4;
        ro.max_num_batched_tokens = 96;
        ro.arena_bytes = size_t{20} << 30;
        ro.mtp_drafter = drafts > 0 && method_ == "mtp";
        ro.dspark_drafter = drafts > 0 && method_ == "dspark";
        ro.num_speculative_tokens = drafts;
        return ro;
    }
    SpecEngineOutcome run(int64_t drafts, float temperature, int32_t top_k = 0, double threshold = 0.0) const {
        std::mt19937 rng(prompt_seed_);
        std::uniform_int_distribution<int32_t> tok(2, max_token_);
        SpecEngineOutcome r;
        auto runner = std::make_unique<CudaModelRunner>(cfg_, w_, runner_options(drafts));
        CudaModelRunner* cr = runner.get();
        Engine engine(engine_config(drafts, threshold), std::move(runner));
        std::vector<std::shared_ptr<RequestStream>> streams;
        for (int64_t len : {150, 40, 90}) {
            GenerateRequest req;
            for (int64_t i = 0; i < len; ++i) req.prompt_token_ids.push_back(tok(rng));
            r.prompts.push_back(req.prompt_token_ids);
            req.sampling.temperature = temperature;
            req.sampling.top_k = top_k;
            req.sampling.seed = 5;
            req.sampling.max_tokens = kNew;
            req.sampling.ignore_eos = true;
            streams.push_back(engine.submit(req));
        }
        for (auto& s : streams) r.outputs.push_back(drain(*s));
        r.stats = engine.stats();
        cr->check_integrity();
        return r;
    }
    // The plain GPU engine's top-5 log-probabilities of the token after `context`.
    std::vector<TokenLogprob> plain_top(const std::vector<int32_t>& context) const {
        Engine engine(engine_config(0), std::make_unique<CudaModelRunner>(cfg_, w_, runner_options(0)));
        GenerateRequest req;
        req.prompt_token_ids = context;
        req.sampling.temperature = 0.0f;
        req.sampling.max_tokens = 1;
        req.sampling.logprobs = 5;
        req.sampling.ignore_eos = true;
        auto stream = engine.submit(req);
        std::vector<TokenLogprob> top;
        while (auto ev = stream->next()) {
            if (!ev->logprobs.empty()) top = ev->logprobs.front().top;
            if (ev->finished()) break;
        }
        return top;
    }
    // Greedy (or top_k 1) speculative output against the plain output, up to near-ties of the target.
    void expect_plain_output(const SpecEngineOutcome& plain, const SpecEngineOutcome& spec) const {
        for (const auto& o : plain.outputs) ASSERT_EQ(o.size(), static_cast<size_t>(kNew));
        expect_greedy_equal_up_to_ties(plain.prompts, plain.outputs, spec.outputs,
                                       [this](const std::vector<int32_t>& c) { return plain_top(c); });
    }

private:
    const ModelConfig& cfg_;
    const ModelWeights& w_;
    std::string method_;
    int32_t max_token_;
    uint32_t prompt_seed_;
};

}  // namespace onecard::test

#endif
