// The default max_model_len: on the GPU the longest length whose own memory plan (the real planner,
// full DeepSeek-V4-Flash shape, as `serve` makes it: max_context and the KV floor follow the length)
// fits and holds it, without moving experts to the host; the model's maximum when that fits; on the
// CPU min(model maximum, 8192).
#include "engine/max_model_len.h"
#include "core/error.h"
#include "model/config.h"
#include "model/weights.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <functional>

namespace onecard {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

std::vector<PlannedTensor> planned(const ModelConfig& cfg) {
    std::vector<PlannedTensor> out;
    for (const auto& t : checkpoint_layout(cfg)) out.push_back({t.name, t.dtype, t.nbytes()});
    return out;
}

// serve's plan for a length (tools/onecard/serve_plan.cpp): the length sizes the step workspace's
// score tile and is the KV floor the offload path keeps; the KV pool takes what is left.
struct Planner {
    ModelConfig cfg = parse_config(test::flash_official_config_json());
    std::vector<PlannedTensor> tensors = planned(cfg);
    MemoryPlanOptions base;
    int n_calls = 0;
    Planner(uint64_t device_bytes) {
        base.device_bytes = device_bytes;
        base.include_mtp = false;
        base.allow_host_experts = true;
        base.host_ram_bytes = 400 * kGiB;
        base.max_num_seqs = 16;
        base.max_num_batched_tokens = 2048;
    }
    MemoryPlan operator()(int64_t len) {
        ++n_calls;
        MemoryPlanOptions o = base;
        o.max_context = len;
        o.min_kv_tokens = len;
        return make_memory_plan(cfg, tensors, o);
    }
};

TEST(MaxModelLen, CpuDefaultIsTheModelsMaximumUpTo8192) {
    EXPECT_EQ(default_max_model_len_cpu(1048576).max_model_len, 8192);
    EXPECT_NE(default_max_model_len_cpu(1048576).why.find("--max-model-len raises it"), std::string::npos);
    EXPECT_EQ(default_max_model_len_cpu(4096).max_model_len, 4096);
    EXPECT_NE(default_max_model_len_cpu(4096).why.find("model's maximum"), std::string::npos);
}

TEST(MaxModelLen, GpuTakesTheModelsMaximumWhenThePoolHoldsIt) {
    Planner plan(1024 * kGiB);  // room for everything
    const MaxModelLenChoice c = default_max_model_len_gpu(plan.cfg.max_position_embeddings, std::ref(plan));
    EXPECT_EQ(c.max_model_len, 1048576);
    ASSERT_TRUE(c.plan.fits) << c.plan.refusal;
    EXPECT_GE(c.plan.kv_token_capacity, 1048576);
    EXPECT_FALSE(c.plan.host_experts());
    EXPECT_NE(c.why.find("model's maximum"), std::string::npos) << c.why;
}

TEST(MaxModelLen, GpuIsLimitedByThePoolWithoutOffloadingMoreExperts) {
    // An H200: the floor's plan already keeps some experts in host RAM; the default may not add more.
    Planner plan(MemoryPlanOptions{}.device_bytes);
    const MemoryPlan floor_plan = plan(kMaxModelLenFloor);
    ASSERT_TRUE(floor_plan.fits) << floor_plan.refusal;
    const MaxModelLenChoice c = default_max_model_len_gpu(plan.cfg.max_position_embeddings, std::ref(plan));
    ASSERT_TRUE(c.plan.fits) << c.plan.refusal;
    EXPECT_GE(c.max_model_len, kMaxModelLenFloor);
    EXPECT_LT(c.max_model_len, 1048576);
    // The plan that comes back is the plan for that length, and it holds it.
    EXPECT_EQ(c.plan.kv_token_capacity, plan(c.max_model_len).kv_token_capacity);
    EXPECT_GE(c.plan.kv_token_capacity, c.max_model_len);
    EXPECT_EQ(c.plan.placement.total_host(), floor_plan.placement.total_host());
    // And it is the longest such: one token more either overflows the pool or moves an expert out.
    const MemoryPlan more = plan(c.max_model_len + 1);
    EXPECT_TRUE(!more.fits || more.kv_token_capacity < c.max_model_len + 1 ||
                more.placement.total_host() > floor_plan.placement.total_host());
    EXPECT_NE(c.why.find("what the KV pool holds"), std::string::npos) << c.why;
    EXPECT_LT(plan.n_calls, 30);  // bisection, not a scan
}

TEST(MaxModelLen, GpuWithEveryExpertResidentTakesWhatIsLeft) {
    // A budget with every weight resident and room for about 300k KV tokens (the pool's bytes per
    // token taken from a plan with room for everything), not for the model's million.
    Planner big(1024 * kGiB);
    const MemoryPlan roomy = big(kMaxModelLenFloor);
    const double kv_bytes_per_token =
        static_cast<double>(roomy.kv_pool_bytes) / static_cast<double>(roomy.kv_token_capacity);
    Planner plan(roomy.planned_bytes - roomy.kv_pool_bytes + static_cast<uint64_t>(300000 * kv_bytes_per_token));
    const MemoryPlan floor_plan = plan(kMaxModelLenFloor);
    ASSERT_TRUE(floor_plan.fits) << floor_plan.refusal;
    ASSERT_FALSE(floor_plan.host_experts());
    const MaxModelLenChoice c = default_max_model_len_gpu(plan.cfg.max_position_embeddings, std::ref(plan));
    ASSERT_TRUE(c.plan.fits) << c.plan.refusal;
    EXPECT_FALSE(c.plan.host_experts());
    EXPECT_GT(c.max_model_len, 4 * kMaxModelLenFloor);
    EXPECT_LT(c.max_model_len, 1048576);
    EXPECT_GE(c.plan.kv_token_capacity, c.max_model_len);
    EXPECT_FALSE(c.plan.embed_on_host);
    // One token more overflows the pool, or makes the planner move weights to the host (the
    // embedding table goes first: it frees ~1 GiB, so a longer pool would then fit).
    const MemoryPlan more = plan(c.max_model_len + 1);
    EXPECT_TRUE(!more.fits || more.kv_token_capacity < c.max_model_len + 1 || more.host_experts() ||
                more.embed_on_host);
}

TEST(MaxModelLen, GpuStaysBelowALengthThePlannerRefuses) {
    Planner plan(1024 * kGiB);
    const auto limited = [&](int64_t len) {
        if (len > 100000) throw Error("backend: at most 100000 tokens");
        return plan(len);
    };
    const MaxModelLenChoice c = default_max_model_len_gpu(plan.cfg.max_position_embeddings, limited);
    EXPECT_EQ(c.max_model_len, 100000);
    EXPECT_TRUE(c.plan.fits);
}

TEST(MaxModelLen, GpuThatCannotHoldTheFloorReturnsItsRefusal) {
    Planner plan(4 * kGiB);  // not even the non-expert weights fit
    const MaxModelLenChoice c = default_max_model_len_gpu(plan.cfg.max_position_embeddings, std::ref(plan));
    EXPECT_EQ(c.max_model_len, kMaxModelLenFloor);
    EXPECT_FALSE(c.plan.fits);
    EXPECT_FALSE(c.plan.refusal.empty());
}

}  // namespace
}  // namespace onecard
