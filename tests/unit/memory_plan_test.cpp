// Memory planner v1: weight bytes of the full DeepSeek-V4-Flash shape against hand arithmetic from
// dsv4-model.md §7.2 (≈ 148.6 GiB with MTP, which does NOT fit one H200's ~131 GiB), the KV pool
// against kvcache's byte format, the refusal message, and plans that fit once shrunk.
#include "core/dtype.h"
#include "core/error.h"
#include "engine/memory_plan.h"
#include "model/config.h"
#include "model/weights.h"

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>

namespace onecard {
namespace {

using json = nlohmann::json;

std::vector<PlannedTensor> planned(const ModelConfig& cfg) {
    std::vector<PlannedTensor> out;
    for (const auto& t : checkpoint_layout(cfg)) out.push_back({t.name, t.dtype, t.nbytes()});
    return out;
}

// ---- hand arithmetic from the §7.2 table (independent of checkpoint_layout) --------------------
constexpr uint64_t fp8_linear(uint64_t out, uint64_t in) {  // E4M3 weight + one UE8M0 byte per 128x128 block
    return out * in + ((out + 127) / 128) * ((in + 127) / 128);
}
constexpr uint64_t kAttention = fp8_linear(1024, 4096) + fp8_linear(32768, 1024) + fp8_linear(512, 4096) +
                                fp8_linear(8192, 4096) + fp8_linear(4096, 8192) + 1024 * 2 + 512 * 2 + 64 * 4;
constexpr uint64_t kHc = 2 * (24 * 16384 * 4 + 24 * 4 + 3 * 4);
constexpr uint64_t kNorms = 2 * 4096 * 2;
constexpr uint64_t kShared = 2 * fp8_linear(2048, 4096) + fp8_linear(4096, 2048);
// One MXFP4 expert: w1, w3 [2048, 2048] I8 + [2048, 128] scales; w2 [4096, 1024] I8 + [4096, 64].
constexpr uint64_t kExpert = 2 * (2048 * 2048 + 2048 * 128) + (4096 * 1024 + 4096 * 64);
constexpr uint64_t kGateWeight = 256 * 4096 * 2;
constexpr uint64_t kTid2eid = 129280ull * 6 * 8;
constexpr uint64_t kGateBias = 256 * 4;
constexpr uint64_t kCsa = 2 * 1024 * 4096 * 2 + 4 * 1024 * 4 + 512 * 2     // compressor
                          + fp8_linear(8192, 1024) + 64 * 4096 * 2           // indexer wq_b, weights_proj
                          + 2 * 256 * 4096 * 2 + 4 * 256 * 4 + 128 * 2;      // indexer compressor
constexpr uint64_t kHca = 2 * 512 * 4096 * 2 + 128 * 512 * 4 + 512 * 2;
constexpr uint64_t kEmbed = 129280ull * 4096 * 2;
constexpr uint64_t kTop = 2 * kEmbed + 4096 * 2 + 4 * 16384 * 4 + 4 * 4 + 4;
constexpr uint64_t kMtp = kAttention + kHc + kNorms + kShared + 256 * kExpert + kGateWeight + kGateBias +
                          3 * 4096 * 2 + 2 * fp8_linear(4096, 4096) + 4 * 16384 * 4 + 4 * 4 + 4;

uint64_t flash_main_bytes_by_hand() {
    uint64_t total = kTop;
    for (int il = 0; il < 43; ++il) {
        const int r = il < 2 ? 0 : (il == 42 ? 4 : (il % 2 == 0 ? 4 : 128));
        total += kAttention + kHc + kNorms + kShared + 256 * kExpert + kGateWeight + (il < 3 ? kTid2eid : kGateBias);
        total += r == 4 ? kCsa : r == 128 ? kHca : 0;
    }
    return total;
}

uint64_t component(const MemoryPlan& p, const std::string& name) {
    for (const auto& c : p.weight_components)
        if (c.name == name) return c.bytes;
    return 0;
}

TEST(MemoryPlan, FlashWeightsMatchHandArithmetic) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt;
    opt.kv_tokens = 65536;
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    const uint64_t main_bytes = flash_main_bytes_by_hand();
    EXPECT_EQ(p.weight_bytes, main_bytes + kMtp);
    EXPECT_EQ(p.weight_bytes_not_resident, 0u);
    // dsv4-model.md §1.2: ≈ 159.6 GB = 148.6 GiB with the MTP block.
    EXPECT_NEAR(p.weight_bytes / 1073741824.0, 148.6, 0.1);
    EXPECT_EQ(component(p, "embed"), kEmbed);
    EXPECT_EQ(component(p, "lm_head"), kEmbed);
    EXPECT_EQ(component(p, "routed_experts"), 43 * 256 * kExpert);
    EXPECT_EQ(component(p, "shared_experts"), 43 * kShared);
    EXPECT_EQ(component(p, "attention"), 43 * kAttention);
    EXPECT_EQ(component(p, "hyper_connections"), 43 * kHc + 4 * 16384 * 4 + 4 * 4 + 4);
    EXPECT_EQ(component(p, "compressor_indexer"), 21 * kCsa + 20 * kHca);
    EXPECT_EQ(component(p, "router"), 43 * kGateWeight + 3 * kTid2eid + 40 * kGateBias);
    EXPECT_EQ(component(p, "mtp"), kMtp);
    uint64_t sum_formats = 0;
    for (const auto& f : p.weight_formats) sum_formats += f.bytes;
    EXPECT_EQ(sum_formats, p.weight_bytes);
    EXPECT_EQ(p.routed_expert_bytes_per_expert, 44 * kExpert);  // 43 layers + the MTP block
}

TEST(MemoryPlan, FlashKvPoolFollowsTheKvFormat) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt;
    opt.kv_tokens = 65536;
    opt.max_sequences = 4;
    opt.kv_block_size = 256;
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    // Per token: 21 · (584 + 132) / 4 + 20 · 584 / 128 = 3850.25 B -> 985,664 B per 256-token block.
    EXPECT_EQ(p.kv_spec.block_bytes, 985664);
    // Per sequence: 44 windows · 128 · 584 B + 21 · (8·8192 + 8·2048) + 20 · 128 · 4096 B.
    EXPECT_EQ(p.kv_spec.slot_bytes, 44 * 128 * 584 + 21 * (8 * 8192 + 8 * 2048) + 20 * 128 * 4096);
    EXPECT_EQ(p.kv_blocks, 65536 / 256 + 4);  // one spare block per sequence for its partial tail
    EXPECT_EQ(p.kv_token_capacity, 65536);
    EXPECT_EQ(p.kv_pool_bytes, 4ull * static_cast<uint64_t>(p.kv_spec.slot_bytes) + 260ull * 985664ull);
}

TEST(MemoryPlan, FullFlashIsRefusedWithOptions) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt;  // H200 default: 140.97 GB free, 2 GiB headroom
    opt.kv_tokens = 65536;
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    ASSERT_FALSE(p.fits);
    std::printf("%s%s\n", memory_plan_report(p).c_str(), p.refusal.c_str());
    EXPECT_GT(p.planned_bytes, p.device_bytes);
    EXPECT_NE(p.refusal.find("short by"), std::string::npos) << p.refusal;
    EXPECT_NE(p.refusal.find("--experts"), std::string::npos) << p.refusal;
    EXPECT_NE(p.refusal.find("MTP"), std::string::npos) << p.refusal;
    EXPECT_THROW(require_plan_fits(p), Error);
    EXPECT_NE(memory_plan_report(p).find("DOES NOT FIT"), std::string::npos);
    const json j = json::parse(memory_plan_json(p));
    EXPECT_EQ(memory_plan_json(p).find('\n'), std::string::npos);
    EXPECT_FALSE(j.at("fits").get<bool>());
    EXPECT_EQ(j.at("weights_bytes").get<uint64_t>(), p.weight_bytes);
    EXPECT_TRUE(j.contains("refusal"));

    // The suggested expert count is exactly the largest that fits.
    ASSERT_GT(p.max_resident_experts_that_fit, 6);
    ASSERT_LT(p.max_resident_experts_that_fit, 256);
    MemoryPlanOptions shrunk = opt;
    shrunk.n_resident_experts = p.max_resident_experts_that_fit;
    const MemoryPlan ok = make_memory_plan(cfg, planned(cfg), shrunk);
    EXPECT_TRUE(ok.fits) << ok.refusal;
    EXPECT_NO_THROW(require_plan_fits(ok));
    EXPECT_EQ(ok.weight_bytes + ok.weight_bytes_not_resident, p.weight_bytes);
    EXPECT_EQ(ok.weight_bytes_not_resident,
              static_cast<uint64_t>(256 - shrunk.n_resident_experts) * p.routed_expert_bytes_per_expert);
    shrunk.n_resident_experts += 1;
    EXPECT_FALSE(make_memory_plan(cfg, planned(cfg), shrunk).fits);
}

TEST(MemoryPlan, AutoKvPoolFillsWhatIsLeft) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt;
    opt.n_resident_experts = 128;  // the half-expert shape the first benchmark uses
    opt.include_mtp = false;
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    ASSERT_TRUE(p.fits) << p.refusal;
    // Everything but less than one block is planned.
    EXPECT_LE(p.planned_bytes, p.device_bytes);
    EXPECT_LT(p.device_bytes - p.planned_bytes, static_cast<uint64_t>(p.kv_spec.block_bytes));
    EXPECT_GT(p.kv_token_capacity, 10'000'000);  // > 35 GiB of KV at ~3.85 KB/token
    EXPECT_NE(memory_plan_report(p).find("fits"), std::string::npos);
    // MTP left out whole; experts 128..255 of the 43 main layers left out.
    EXPECT_EQ(p.routed_expert_bytes_per_expert, 43 * kExpert);
    EXPECT_EQ(p.weight_bytes_not_resident, kMtp + 128 * 43 * kExpert);
}

TEST(MemoryPlan, ActivationsGrowWithTheStepAndInvalidOptionsThrow) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    const uint64_t a1 = activation_bytes_for_step(cfg, 1, 1048576, 1);
    const uint64_t a8k = activation_bytes_for_step(cfg, 8192, 1048576, 64);
    EXPECT_LT(a1, a8k);
    EXPECT_GT(a8k / 1073741824.0, 2.0);
    EXPECT_LT(a8k / 1073741824.0, 8.0);
    MemoryPlanOptions bad;
    bad.kv_block_size = 100;  // not a multiple of 128
    EXPECT_THROW(make_memory_plan(cfg, planned(cfg), bad), Error);
    MemoryPlanOptions few;
    few.n_resident_experts = 3;  // fewer than the 6 a token uses
    EXPECT_THROW(make_memory_plan(cfg, planned(cfg), few), Error);
}

}  // namespace
}  // namespace onecard
