// Memory planner v1: weight bytes of the full DeepSeek-V4-Flash shape against hand arithmetic from
// dsv4-model.md §7.2 (≈ 148.6 GiB with MTP, which does NOT fit one H200's ~131 GiB), the KV pool
// against kvcache's byte format, the refusal message, and plans that fit once shrunk.
#include "engine/memory_plan.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/config.h"
#include "model/expert_profile.h"
#include "model/weights.h"

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
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
constexpr uint64_t kCsa = 2 * 1024 * 4096 * 2 + 4 * 1024 * 4 + 512 * 2   // compressor
                          + fp8_linear(8192, 1024) + 64 * 4096 * 2       // indexer wq_b, weights_proj
                          + 2 * 256 * 4096 * 2 + 4 * 256 * 4 + 128 * 2;  // indexer compressor
constexpr uint64_t kHca = 2 * 512 * 4096 * 2 + 128 * 512 * 4 + 512 * 2;
constexpr uint64_t kEmbed = 129280ull * 4096 * 2;
constexpr uint64_t kTop = 2 * kEmbed + 4096 * 2 + 4 * 16384 * 4 + 4 * 4 + 4;
constexpr uint64_t kMtp = kAttention + kHc + kNorms + kShared + 256 * kExpert + kGateWeight + kGateBias + 3 * 4096 * 2 +
                          2 * fp8_linear(4096, 4096) + 4 * 16384 * 4 + 4 * 4 + 4;

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
    opt.max_num_seqs = 4;
    opt.kv_block_size = 256;
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    // Per token: 21 · (584 + 132) / 4 + 20 · 584 / 128 = 3850.25 B -> 985,664 B per 256-token block.
    EXPECT_EQ(p.kv_spec.block_bytes, 985664);
    // Per sequence: 44 windows · 128 · 584 B + 21 · (8·8192 + 8·2048) + 20 · 128 · 4096 B.
    EXPECT_EQ(p.kv_spec.slot_bytes, 44 * 128 * 584 + 21 * (8 * 8192 + 8 * 2048) + 20 * 128 * 4096);
    EXPECT_EQ(p.kv_blocks, 65536 / 256 + 4);  // one spare block per sequence for its partial tail
    EXPECT_EQ(p.kv_token_capacity, 65536);
    EXPECT_EQ(p.kv_pool_bytes, 4ull * static_cast<uint64_t>(p.kv_spec.slot_bytes) + 260ull * 985664ull);

    // Speculation's spare ring rows (3): every ring of the slot 3 rows longer, blocks unchanged.
    opt.kv_ring_spare = 3;
    const MemoryPlan s = make_memory_plan(cfg, planned(cfg), opt);
    EXPECT_EQ(s.kv_spec.block_bytes, 985664);
    EXPECT_EQ(s.kv_spec.slot_bytes, 44 * 131 * 584 + 21 * (11 * 8192 + 11 * 2048) + 20 * 131 * 4096);
    EXPECT_EQ(s.kv_pool_bytes, 4ull * static_cast<uint64_t>(s.kv_spec.slot_bytes) + 260ull * 985664ull);
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

// ---- one planner: budget, workspace, routed experts in host RAM ---------------------------------

constexpr uint64_t kGiB = 1ull << 30;

// The full Flash checkpoint less its routed experts of the main layers (what stays on the GPU
// whatever the placement), by hand.
uint64_t flash_non_expert_bytes() {
    return flash_main_bytes_by_hand() + kMtp - 43ull * 256 * kExpert;
}

MemoryPlanOptions offload_options() {
    MemoryPlanOptions opt;  // H200 default budget
    opt.kv_tokens = 65536;
    opt.allow_host_experts = true;
    opt.host_ram_bytes = 200 * kGiB;
    return opt;
}

TEST(MemoryPlan, FitsWithoutOffloadKeepsEveryExpertOnTheGpu) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt;
    opt.n_resident_experts = 128;
    opt.include_mtp = false;
    const MemoryPlan gpu_only = make_memory_plan(cfg, planned(cfg), opt);
    opt.allow_host_experts = true;
    opt.host_ram_bytes = 1;  // would refuse any offload: none must be planned
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    ASSERT_TRUE(p.fits) << p.refusal;
    EXPECT_FALSE(p.host_experts());
    EXPECT_EQ(p.host_expert_bytes, 0u);
    EXPECT_FALSE(p.embed_on_host) << "the embedding table moves only when experts must";
    EXPECT_EQ(component(p, "embed"), kEmbed);
    EXPECT_TRUE(p.placement.all_gpu());
    EXPECT_EQ(p.placement.n_layers(), 43);
    EXPECT_EQ(p.placement.n_experts, 128);
    EXPECT_EQ(p.weight_bytes, gpu_only.weight_bytes);
    EXPECT_EQ(p.kv_pool_bytes, gpu_only.kv_pool_bytes);
    EXPECT_EQ(component(p, "routed_experts"), 43ull * 128 * kExpert);
    const json j = json::parse(memory_plan_json(p));
    EXPECT_EQ(j.at("expert_placement").at("host_pairs").get<int64_t>(), 0);
    EXPECT_EQ(j.at("expert_placement").at("gpu_per_layer_min").get<int64_t>(), 128);
    EXPECT_EQ(j.at("weights_host_bytes").get<uint64_t>(), 0u);
}

TEST(MemoryPlan, FullFlashOffloadsExactlyThePairsThatDoNotFit) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    const MemoryPlanOptions opt = offload_options();
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    std::printf("%s%s\n%s\n", memory_plan_report(p).c_str(), memory_plan_line(p).c_str(), memory_plan_json(p).c_str());
    ASSERT_TRUE(p.fits) << p.refusal;
    ASSERT_TRUE(p.host_experts());
    EXPECT_EQ(p.expert_pair_bytes, kExpert);
    // By hand: the pairs that fit beside the non-expert weights, the 65536-token KV pool, the
    // workspace, the graphs and the headroom.
    const uint64_t others = p.kv_pool_bytes + p.activation_bytes + p.graph_bytes + p.headroom_bytes;
    // The embedding table went to host RAM first (allow_host_embed, on by default).
    ASSERT_TRUE(p.embed_on_host);
    EXPECT_EQ(p.host_embed_bytes, kEmbed);
    EXPECT_EQ(component(p, "embed"), 0u);
    const auto want_gpu =
        static_cast<int64_t>((p.device_bytes - (flash_non_expert_bytes() - kEmbed) - others) / kExpert);
    EXPECT_EQ(p.placement.total_gpu(), want_gpu);
    EXPECT_EQ(p.placement.total_gpu() + p.placement.total_host(), 43 * 256);
    EXPECT_EQ(p.host_expert_bytes, static_cast<uint64_t>(p.placement.total_host()) * kExpert);
    EXPECT_EQ(p.weight_bytes + p.host_expert_bytes + p.host_embed_bytes, flash_main_bytes_by_hand() + kMtp);
    EXPECT_EQ(p.host_weight_bytes(), p.host_expert_bytes + kEmbed);
    EXPECT_EQ(component(p, "routed_experts"), static_cast<uint64_t>(want_gpu) * kExpert);
    EXPECT_EQ(component(p, "mtp"), kMtp);  // the MTP block's experts stay with the MTP weights
    EXPECT_LE(p.planned_bytes, p.device_bytes);
    EXPECT_GT(p.planned_bytes + kExpert, p.device_bytes);  // one more pair would not fit
    EXPECT_EQ(p.kv_token_capacity, 65536);
    // No profile: uniform, per-layer counts differ by at most one.
    const auto [lo, hi] = std::minmax({p.placement.n_gpu(0), p.placement.n_gpu(42)});
    EXPECT_LE(hi - lo, 1);
    EXPECT_FALSE(p.has_profile);
    uint64_t host_in_components = 0, gpu_formats = 0;
    for (const auto& c : p.weight_components) host_in_components += c.host_bytes;
    for (const auto& f : p.weight_formats) gpu_formats += f.bytes;
    EXPECT_EQ(host_in_components, p.host_expert_bytes + p.host_embed_bytes);
    EXPECT_EQ(gpu_formats, p.weight_bytes);
    EXPECT_NE(memory_plan_report(p).find("in host RAM"), std::string::npos);
    const json j = json::parse(memory_plan_json(p));
    EXPECT_EQ(j.at("expert_placement").at("host_pairs").get<int64_t>(), p.placement.total_host());
    EXPECT_EQ(j.at("expert_placement").at("gpu_per_layer").size(), 43u);
    EXPECT_EQ(j.at("weights_host_by_component").at("routed_experts").get<uint64_t>(), p.host_expert_bytes);
    EXPECT_EQ(j.at("weights_host_by_component").at("embed").get<uint64_t>(), kEmbed);
    EXPECT_EQ(j.at("weights_host_bytes").get<uint64_t>(), p.host_expert_bytes + kEmbed);
    EXPECT_TRUE(j.at("embed_on_host").get<bool>());
    EXPECT_TRUE(j.at("fits").get<bool>());
    EXPECT_NE(memory_plan_report(p).find("embedding table    in pinned host RAM"), std::string::npos);

    // allow_host_embed off: the table stays, and the GPU holds exactly kEmbed / kExpert fewer pairs.
    MemoryPlanOptions keep = opt;
    keep.allow_host_embed = false;
    const MemoryPlan k = make_memory_plan(cfg, planned(cfg), keep);
    ASSERT_TRUE(k.fits) << k.refusal;
    EXPECT_FALSE(k.embed_on_host);
    EXPECT_EQ(k.host_embed_bytes, 0u);
    EXPECT_EQ(component(k, "embed"), kEmbed);
    EXPECT_EQ(k.placement.total_gpu(),
              static_cast<int64_t>((k.device_bytes - flash_non_expert_bytes() - others) / kExpert));
    EXPECT_GE(p.placement.total_gpu() - k.placement.total_gpu(), static_cast<int64_t>(kEmbed / kExpert));

    // With a profile: the same count, the profile's hottest pairs, and the host share of picks.
    const ExpertUseProfile prof = synthetic_skewed_profile(43, 256, 3);
    MemoryPlanOptions with = opt;
    with.expert_profile = &prof;
    const MemoryPlan q = make_memory_plan(cfg, planned(cfg), with);
    ASSERT_TRUE(q.fits) << q.refusal;
    EXPECT_EQ(q.placement.total_gpu(), want_gpu);
    EXPECT_EQ(q.placement.on_gpu, place_experts(43, 256, want_gpu, &prof).on_gpu);
    ASSERT_TRUE(q.has_profile);
    EXPECT_NEAR(q.host_pick_share, 1.0 - prof.coverage(q.placement), 1e-12);
    EXPECT_LT(q.host_pick_share, 0.05);  // ~15% of pairs off the GPU carry only a few % of picks
    EXPECT_NE(memory_plan_report(q).find("host share of picks"), std::string::npos);
    EXPECT_TRUE(json::parse(memory_plan_json(q)).at("expert_placement").contains("host_pick_share"));
    const ExpertUseProfile wrong(42, 256);
    with.expert_profile = &wrong;
    try {
        make_memory_plan(cfg, planned(cfg), with);
        FAIL() << "a profile of another shape must be refused";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("42 layers x 256 experts"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("43 layers x 256 experts"), std::string::npos) << e.what();
    }
}

// The 0731 release (DSpark drafter in mtp.0..2, ~155 GiB) plans the same way: without speculation the
// drafter stays off the GPU (the CUDA backend does not load it) and the main model's placement is the
// Flash one's; with the drafter planned in, exactly its bytes' worth of pairs more go to host RAM.
TEST(MemoryPlan, Flash0731PlansLikeFlashWithTheDrafterOffTheGpu) {
    const ModelConfig flash = parse_config(test::flash_official_config_json());
    const ModelConfig c0731 = parse_config(test::flash_0731_config_json());
    ASSERT_EQ(c0731.n_mtp_blocks(), 3);
    MemoryPlanOptions opt = offload_options();
    opt.include_mtp = false;
    const MemoryPlan f = make_memory_plan(flash, planned(flash), opt);
    const MemoryPlan p = make_memory_plan(c0731, planned(c0731), opt);
    ASSERT_TRUE(f.fits) << f.refusal;
    ASSERT_TRUE(p.fits) << p.refusal;
    uint64_t drafter = 0, all = 0;
    for (const auto& t : planned(c0731)) {
        all += t.nbytes;
        if (t.name.rfind("mtp.", 0) == 0) drafter += t.nbytes;
    }
    std::printf("0731: %.2f GiB in all, drafter %.2f GiB\n", all / double(kGiB), drafter / double(kGiB));
    EXPECT_GT(all, 150 * kGiB) << "the 0731 checkpoint is larger than Flash's";
    EXPECT_EQ(p.weight_bytes_not_resident, drafter);
    EXPECT_TRUE(p.embed_on_host);
    // The main model places as Flash's does, less what the drafter's extra window KV takes (its
    // three SWA stages are in every KV slot and block).
    ASSERT_GE(p.kv_pool_bytes, f.kv_pool_bytes);
    const double kv_pairs = static_cast<double>(p.kv_pool_bytes - f.kv_pool_bytes) / static_cast<double>(kExpert);
    EXPECT_NEAR(static_cast<double>(f.placement.total_gpu() - p.placement.total_gpu()), kv_pairs, 1.0);
    // Speculation on: the drafter is resident, so about drafter / pair bytes fewer pairs fit.
    opt.include_mtp = true;
    const MemoryPlan s = make_memory_plan(c0731, planned(c0731), opt);
    ASSERT_TRUE(s.fits) << s.refusal;
    EXPECT_EQ(component(s, "mtp"), drafter);
    const int64_t fewer = p.placement.total_gpu() - s.placement.total_gpu();
    EXPECT_GE(fewer, static_cast<int64_t>(drafter / kExpert));
    EXPECT_LE(fewer, static_cast<int64_t>(drafter / kExpert) + 1);
}

TEST(MemoryPlan, ServingKvFloorHoldsOneFullRequestAndAFullBatch) {
    EXPECT_EQ(serving_kv_floor_tokens(8192, 64), 64 * kServingKvTokensPerSequence);
    EXPECT_EQ(serving_kv_floor_tokens(8192, 1), 8192);  // one full-length request
    EXPECT_EQ(serving_kv_floor_tokens(1 << 20, 16), 1 << 20);
    EXPECT_EQ(serving_kv_floor_tokens(1024, 64), 64 * 1024);  // no sequence holds more than the model length
    EXPECT_THROW(serving_kv_floor_tokens(0, 4), Error);
    // Planned as the floor: the offload plan keeps that many tokens of KV and places pairs around it.
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt = offload_options();
    opt.kv_tokens = 0;
    opt.max_num_seqs = 64;
    opt.min_kv_tokens = serving_kv_floor_tokens(8192, 64);
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    ASSERT_TRUE(p.fits) << p.refusal;
    EXPECT_GE(p.kv_token_capacity, 64 * kServingKvTokensPerSequence);
}

TEST(MemoryPlan, DefaultStreamExpertsFollowsTheHostShareOfPicks) {
    MemoryPlan p;
    p.placement = ExpertPlacement::all_on_gpu(43, 256);
    EXPECT_EQ(default_stream_experts(p), 0) << "nothing in host RAM, nothing to stage";
    // Uniform placement, 20 host experts per layer, no profile: the host's share of picks is its
    // share of pairs (7.8%), so 35% of 20 are staged.
    p.placement = place_experts(43, 256, 236 * 43, nullptr);
    ASSERT_EQ(p.placement.total_host(), 20 * 43);
    EXPECT_EQ(default_stream_experts(p), 7);
    // A profile that leaves the host 0.5% of the picks: the host is not the bottleneck.
    p.has_profile = true;
    p.host_pick_share = 0.005;
    EXPECT_EQ(default_stream_experts(p), 0);
    p.host_pick_share = kStreamMinHostShare;
    EXPECT_EQ(default_stream_experts(p), 7);
    // The mean is over the layers that have host experts: two layers with 20 each.
    ExpertPlacement two = ExpertPlacement::all_on_gpu(43, 256);
    for (int64_t l : {3, 40})
        for (int64_t e = 0; e < 20; ++e) two.on_gpu[static_cast<size_t>(l)][static_cast<size_t>(e)] = 0;
    p.placement = two;
    p.host_pick_share = 0.5;
    EXPECT_EQ(default_stream_experts(p), 7);
    // Without a profile the same placement leaves the host 40 of 11008 pairs: below the share, off.
    p.has_profile = false;
    EXPECT_EQ(default_stream_experts(p), 0);
    // One host expert per layer with a hot profile still stages at least one.
    p.placement = place_experts(43, 256, 255 * 43, nullptr);
    p.has_profile = true;
    p.host_pick_share = 0.1;
    EXPECT_EQ(default_stream_experts(p), 1);
}

TEST(MemoryPlan, ReducedExpertCountPlacesTheExpertsKeptByTheProfile) {
    // --experts (bench) reduces the model itself; the placement is then over those experts.
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt = offload_options();
    opt.n_resident_experts = 240;
    opt.device_bytes = 100 * kGiB;
    const ExpertUseProfile prof = synthetic_skewed_profile(43, 256, 3);
    opt.expert_profile = &prof;
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    ASSERT_TRUE(p.fits) << p.refusal;
    EXPECT_EQ(p.placement.n_experts, 240);
    EXPECT_EQ(p.weight_bytes_not_resident, 43ull * 16 * kExpert + 16 * kExpert);  // main layers + MTP block
    EXPECT_EQ(p.host_expert_bytes, static_cast<uint64_t>(p.placement.total_host()) * kExpert);
    const ExpertUseProfile first = prof.first_experts(240);  // the profile's columns of the experts kept
    EXPECT_EQ(p.placement.on_gpu, place_experts(43, 240, p.placement.total_gpu(), &first).on_gpu);
    EXPECT_NEAR(p.host_pick_share, 1.0 - first.coverage(p.placement), 1e-12);
}

TEST(MemoryPlan, RefusedWhenGpuPlusHostCannotHoldIt) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt = offload_options();
    opt.host_ram_bytes = 3 * kGiB;
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    std::printf("%s\n", p.refusal.c_str());
    ASSERT_FALSE(p.fits);
    EXPECT_GT(p.host_expert_bytes, opt.host_ram_bytes);
    const std::string& r = p.refusal;
    EXPECT_NE(r.find("GPU + host RAM"), std::string::npos) << r;
    EXPECT_NE(r.find(fmt::format("{:.2f} GiB is available", 3.0)), std::string::npos) << r;
    EXPECT_NE(r.find(fmt::format("{:.2f} GiB of pinned host", p.host_expert_bytes / 1073741824.0)), std::string::npos)
        << r;
    EXPECT_NE(r.find(fmt::format("budget {:.2f} GiB", p.device_bytes / 1073741824.0)), std::string::npos) << r;
    EXPECT_NE(r.find(fmt::format("{} of {} routed", p.placement.total_gpu(), 43 * 256)), std::string::npos) << r;
    EXPECT_NE(r.find("short by"), std::string::npos) << r;
    EXPECT_NE(r.find("--host-ram-gib"), std::string::npos) << r;
    EXPECT_THROW(require_plan_fits(p), Error);
    EXPECT_FALSE(json::parse(memory_plan_json(p)).at("fits").get<bool>());

    // A GPU that cannot hold even the non-expert part: refused before any placement matters.
    opt.host_ram_bytes = 1000 * kGiB;
    opt.device_bytes = 10 * kGiB;
    const MemoryPlan tiny = make_memory_plan(cfg, planned(cfg), opt);
    ASSERT_FALSE(tiny.fits);
    EXPECT_NE(tiny.refusal.find("even with every routed expert in host RAM"), std::string::npos) << tiny.refusal;
    EXPECT_NE(tiny.refusal.find(fmt::format("budget is {:.2f} GiB", 10.0)), std::string::npos) << tiny.refusal;
    EXPECT_NE(tiny.refusal.find(fmt::format("non-expert weights {:.2f} (the embedding table in host RAM)",
                                            (flash_non_expert_bytes() - kEmbed) / 1073741824.0)),
              std::string::npos)
        << tiny.refusal;

    // Offload forbidden: the GPU-only refusal with its options.
    MemoryPlanOptions gpu_only = offload_options();
    gpu_only.allow_host_experts = false;
    const MemoryPlan old = make_memory_plan(cfg, planned(cfg), gpu_only);
    ASSERT_FALSE(old.fits);
    EXPECT_NE(old.refusal.find("--experts"), std::string::npos) << old.refusal;
    EXPECT_NE(old.refusal.find("host RAM"), std::string::npos) << old.refusal;
    EXPECT_FALSE(old.host_experts());
}

TEST(MemoryPlan, GpuMemoryUtilizationIsAFractionOfTheTotal) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt;
    opt.n_resident_experts = 64;
    opt.include_mtp = false;
    opt.device_total_bytes = 140 * kGiB;
    opt.device_bytes = 120 * kGiB;  // free
    opt.gpu_memory_utilization = 0.5;
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    ASSERT_TRUE(p.fits) << p.refusal;
    EXPECT_EQ(p.device_bytes, 70 * kGiB);   // of the total, not of the free memory
    EXPECT_LE(p.planned_bytes, 70 * kGiB);  // the headroom inside it
    EXPECT_LT(70 * kGiB - p.planned_bytes, static_cast<uint64_t>(p.kv_spec.block_bytes));  // KV fills the rest
    EXPECT_EQ(p.headroom_bytes, 2 * kGiB);
    EXPECT_NE(memory_plan_report(p).find("gpu_memory_utilization 0.5"), std::string::npos);
    // More than is free: refused, naming the numbers and what would do.
    opt.gpu_memory_utilization = 0.95;
    const MemoryPlan over = make_memory_plan(cfg, planned(cfg), opt);
    ASSERT_FALSE(over.fits);
    EXPECT_NE(over.refusal.find("only 120.00 GiB are free"), std::string::npos) << over.refusal;
    EXPECT_NE(over.refusal.find("at most 0.857"), std::string::npos) << over.refusal;
    // Without a total the fraction applies to the free memory given.
    opt.device_total_bytes = 0;
    opt.gpu_memory_utilization = 0.5;
    EXPECT_EQ(make_memory_plan(cfg, planned(cfg), opt).device_bytes, 60 * kGiB);
    // No utilization: the free memory.
    opt.gpu_memory_utilization = 0;
    EXPECT_EQ(make_memory_plan(cfg, planned(cfg), opt).device_bytes, 120 * kGiB);
    opt.gpu_memory_utilization = 1.5;
    EXPECT_THROW(make_memory_plan(cfg, planned(cfg), opt), Error);
}

TEST(MemoryPlan, ExactWorkspaceReplacesTheEstimate) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt;
    opt.n_resident_experts = 128;
    opt.include_mtp = false;
    const MemoryPlan est = make_memory_plan(cfg, planned(cfg), opt);
    EXPECT_FALSE(est.workspace_exact);
    EXPECT_EQ(est.activation_bytes, activation_bytes_for_step(cfg, opt.max_num_batched_tokens, opt.max_context, 64));
    EXPECT_NE(memory_plan_report(est).find("estimated"), std::string::npos);
    opt.workspace_bytes = 5 * kGiB + 12345;
    const MemoryPlan ex = make_memory_plan(cfg, planned(cfg), opt);
    ASSERT_TRUE(ex.fits) << ex.refusal;
    EXPECT_TRUE(ex.workspace_exact);
    EXPECT_EQ(ex.activation_bytes, 5 * kGiB + 12345);
    EXPECT_NE(memory_plan_report(ex).find("exact"), std::string::npos);
    EXPECT_TRUE(json::parse(memory_plan_json(ex)).at("workspace_exact").get<bool>());
    // The KV pool gives the difference back (to within a block).
    const int64_t diff = static_cast<int64_t>(est.kv_pool_bytes) - static_cast<int64_t>(ex.kv_pool_bytes);
    EXPECT_NEAR(static_cast<double>(diff),
                static_cast<double>(ex.activation_bytes) - static_cast<double>(est.activation_bytes),
                static_cast<double>(ex.kv_spec.block_bytes));
}

TEST(MemoryPlan, KvPoolGivenInBytesMatchesTheEnginesSizing) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    MemoryPlanOptions opt;
    opt.n_resident_experts = 128;
    opt.include_mtp = false;
    opt.max_num_seqs = 4;
    opt.kv_block_size = 128;
    const uint64_t want = 10 * kGiB + 777;
    opt.kv_pool_bytes = want;
    const MemoryPlan p = make_memory_plan(cfg, planned(cfg), opt);
    ASSERT_TRUE(p.fits) << p.refusal;
    // kvcache's plan_kv_pool: slots, then as many whole blocks as the bytes hold.
    const uint64_t slots = 4ull * static_cast<uint64_t>(p.kv_spec.slot_bytes);
    EXPECT_EQ(p.kv_blocks, static_cast<int64_t>((want - slots) / static_cast<uint64_t>(p.kv_spec.block_bytes)));
    EXPECT_LE(p.kv_pool_bytes, want);
    EXPECT_GT(p.kv_pool_bytes + static_cast<uint64_t>(p.kv_spec.block_bytes), want);
    opt.kv_tokens = 1000;
    EXPECT_THROW(make_memory_plan(cfg, planned(cfg), opt), Error);  // not both
}

}  // namespace
}  // namespace onecard
