// MXFP4 expert GEMV parity: GPU (token, expert) pairs vs the CPU product of the FP8-quantised
// activation and cpu::dequant_mxfp4 of the picked expert. Tolerance: relative L2 ≤ 4e-3, worst
// element ≤ 1e-2 of max|ref| (fp32 accumulation order + bf16 output) for the grouped tensor-core path
// (mxfp4_group_pairs + mxfp4_grouped_gemv over the tiled layout). The grouping itself is checked
// exactly against a CPU stable counting sort (items, their order and the sorted pair list), and the
// tiled layout against its host definition.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/linear.h"
#include "backend/cpu/quant_sim.h"
#include "backend/cuda/ops/fp8_quant.cuh"
#include "backend/cuda/ops/mxfp4_gemv.cuh"
#include "backend/cuda/ops/mxfp4_layout.cuh"
#include "core/error.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>

namespace onecard {
namespace {

// The tiled layout (mxfp4_layout.cuh): the host permutation is a bijection (untile inverts it, every
// byte lands somewhere distinct) and the device kernel writes the same bytes.
TEST(CudaMxfp4Layout, DeviceTilingMatchesHostAndInverts) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(50);
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{16, 256}, {48, 768}, {2048, 4096}}) {
        std::vector<uint8_t> w(static_cast<size_t>(n * k / 2)), ws(static_cast<size_t>(n * k / 32));
        for (auto& b : w) b = static_cast<uint8_t>(rng());
        for (auto& b : ws) b = static_cast<uint8_t>(rng());
        std::vector<uint8_t> tw(w.size()), tws(ws.size()), bw(w.size()), bws(ws.size());
        cuda::mxfp4_tile_host(w.data(), ws.data(), n, k, tw.data(), tws.data());
        cuda::mxfp4_untile_host(tw.data(), tws.data(), n, k, bw.data(), bws.data());
        EXPECT_EQ(bw, w) << n << "x" << k;
        EXPECT_EQ(bws, ws) << n << "x" << k;
        cuda::DeviceArena arena(size_t{64} << 20, "tile test");
        auto* dw = test::upload(arena, w, "w");
        auto* dws = test::upload(arena, ws, "ws");
        auto* dtw = arena.alloc_n<uint8_t>(w.size(), "tw");
        auto* dtws = arena.alloc_n<uint8_t>(ws.size(), "tws");
        cuda::Stream s;
        cuda::mxfp4_tile_device(dw, dws, n, k, dtw, dtws, s.get());
        s.sync();
        EXPECT_EQ(cuda::copy_to_host(dtw, w.size()), tw) << n << "x" << k;
        EXPECT_EQ(cuda::copy_to_host(dtws, ws.size()), tws) << n << "x" << k;
    }
    EXPECT_THROW(cuda::mxfp4_tile_host(nullptr, nullptr, 1036, 2048, nullptr, nullptr), Error);
    EXPECT_THROW(cuda::mxfp4_tile_host(nullptr, nullptr, 1024, 1000, nullptr, nullptr), Error);
}

// ---- grouped path ----

// The CPU grouping the device must reproduce exactly: items in expert order, an expert's pairs in
// ascending pair order, split into items of at most cap pairs.
struct CpuGroups {
    std::vector<std::array<int32_t, 3>> items;  // expert, first slot, count
    std::vector<int32_t> sorted;
};

CpuGroups cpu_groups(const std::vector<int32_t>& experts, int64_t n_experts, int64_t cap) {
    CpuGroups g;
    for (int64_t e = 0; e < n_experts; ++e) {
        const auto first = static_cast<int32_t>(g.sorted.size());
        for (size_t p = 0; p < experts.size(); ++p)
            if (experts[p] == e) g.sorted.push_back(static_cast<int32_t>(p));
        const auto c = static_cast<int32_t>(g.sorted.size()) - first;
        for (int32_t j = 0; j < c; j += static_cast<int32_t>(cap))
            g.items.push_back(
                {static_cast<int32_t>(e), first + j, std::min<int32_t>(static_cast<int32_t>(cap), c - j)});
    }
    return g;
}

void check_grouping(const std::vector<int32_t>& experts, int64_t n_experts, int64_t max_pairs_per_expert) {
    const auto n_pairs = static_cast<int64_t>(experts.size());
    cuda::DeviceArena arena(size_t{4} << 20, "group test");
    auto* de = test::upload(arena, experts, "experts");
    const int64_t ints = cuda::mxfp4_group_scratch_ints(n_pairs);
    auto* scratch = arena.alloc_n<int32_t>(static_cast<size_t>(ints), "scratch");
    cuda::fill_bytes(scratch, 0xFF, static_cast<size_t>(ints) * 4);
    cuda::Stream s;
    const auto g = cuda::mxfp4_group_pairs(de, n_pairs, n_experts, max_pairs_per_expert, scratch, ints, s.get());
    s.sync();
    const auto h = cuda::copy_to_host(scratch, static_cast<size_t>(ints));
    const CpuGroups ref = cpu_groups(experts, n_experts, g.max_item_pairs);
    ASSERT_EQ(h[0], static_cast<int32_t>(ref.items.size()));
    ASSERT_LE(static_cast<int64_t>(ref.items.size()), g.max_items);
    for (size_t i = 0; i < ref.items.size(); ++i) {
        EXPECT_EQ(h[4 + 4 * i + 0], ref.items[i][0]) << "item " << i;
        EXPECT_EQ(h[4 + 4 * i + 1], ref.items[i][1]) << "item " << i;
        EXPECT_EQ(h[4 + 4 * i + 2], ref.items[i][2]) << "item " << i;
    }
    const size_t sorted0 = static_cast<size_t>(4 + 4 * g.max_items);
    for (size_t i = 0; i < ref.sorted.size(); ++i) EXPECT_EQ(h[sorted0 + i], ref.sorted[i]) << "slot " << i;
}

TEST(CudaMxfp4Grouping, StableCountingSortMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(61);
    // decode top-6 lists (batch 1 / 64), skewed, repeats, invalid ids, up to 4096 pairs and 1024 experts.
    check_grouping({5, 200, 17, 3, 255, 9}, 256, 1);
    check_grouping({7, 7, 3, 7, 0, 3}, 256, 1);  // repeats with a too-small bound: items of 1 pair
    for (const int64_t n_pairs : {48, 384, 1000, 4096}) {
        for (const int64_t n_experts : {256, 1024}) {
            std::uniform_int_distribution<int> pick(0, static_cast<int>(n_experts) - 1), coin(0, 3);
            std::vector<int32_t> ids(static_cast<size_t>(n_pairs));
            for (auto& e : ids) e = coin(rng) == 0 ? 11 : pick(rng);  // a quarter of the pairs on expert 11
            if (n_pairs == 1000) ids[5] = -1, ids[77] = static_cast<int32_t>(n_experts);  // left out
            check_grouping(ids, n_experts, n_pairs / 6);
            check_grouping(ids, n_experts, 3);
        }
    }
}

// A top-k routing of n_tokens tokens over n_experts: every token picks expert `hot` first (the
// skew) and K-1 more distinct experts from a pool of `pool` experts (so the CPU oracle dequantises
// few experts); ids in [0, n_experts).
std::vector<int32_t> skewed_routing(std::mt19937& rng, int64_t n_tokens, int64_t top_k, int64_t n_experts, int64_t pool,
                                    int32_t hot) {
    std::vector<int32_t> pool_ids;
    std::uniform_int_distribution<int> any(0, static_cast<int>(n_experts) - 1);
    std::set<int32_t> seen{hot};
    while (static_cast<int64_t>(pool_ids.size()) < pool) {
        const int32_t e = any(rng);
        if (seen.insert(e).second) pool_ids.push_back(e);
    }
    std::vector<int32_t> out;
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<int32_t> perm = pool_ids;
        std::shuffle(perm.begin(), perm.end(), rng);
        out.push_back(hot);
        for (int64_t j = 1; j < top_k; ++j) out.push_back(perm[static_cast<size_t>(j - 1)]);
    }
    return out;
}

// One matrix [n_experts, n, k]: only the experts a pair uses get random bytes (the rest stay zero on
// the device and are never read), so the Flash shape (256 experts, ~1 GB per matrix) stays cheap.
struct ExpertMatrix {
    uint8_t* w = nullptr;
    uint8_t* ws = nullptr;
    std::map<int32_t, std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> host;  // expert -> (w, ws)
};

ExpertMatrix make_matrix(cuda::DeviceArena& arena, std::mt19937& rng, const std::set<int32_t>& used, int64_t n_experts,
                         int64_t n, int64_t k, int scale_lo, int scale_hi) {
    ExpertMatrix m;
    const size_t wb = static_cast<size_t>(n * k / 2), sb = static_cast<size_t>(n * k / 32);
    m.w = arena.alloc_n<uint8_t>(wb * static_cast<size_t>(n_experts), "w");
    m.ws = arena.alloc_n<uint8_t>(sb * static_cast<size_t>(n_experts), "ws");
    cuda::fill_bytes(m.w, 0, wb * static_cast<size_t>(n_experts));
    cuda::fill_bytes(m.ws, 0, sb * static_cast<size_t>(n_experts));
    std::uniform_int_distribution<int> sc(scale_lo, scale_hi);
    for (const int32_t e : used) {
        std::vector<uint8_t> w(wb), ws(sb);
        for (size_t i = 0; i < wb; i += 4) {
            const uint32_t r = rng();
            std::memcpy(w.data() + i, &r, 4);
        }
        for (auto& b : ws) b = static_cast<uint8_t>(sc(rng));
        std::vector<uint8_t> tw(wb), tws(sb);  // the device holds the tiled layout
        cuda::mxfp4_tile_host(w.data(), ws.data(), n, k, tw.data(), tws.data());
        cuda::copy_to_device(m.w + static_cast<size_t>(e) * wb, tw.data(), wb);
        cuda::copy_to_device(m.ws + static_cast<size_t>(e) * sb, tws.data(), sb);
        m.host.emplace(e, std::make_pair(std::move(w), std::move(ws)));
    }
    return m;
}

// CPU oracle: ref[p, :] = xd[act_row(p), :] · dequant(W_{expert(p)})ᵀ, one dequantisation per expert.
std::vector<float> cpu_pairs(const ExpertMatrix& m, const std::vector<float>& xd, const std::vector<int32_t>& experts,
                             const std::vector<int32_t>& rows, int64_t n, int64_t k) {
    const auto n_pairs = static_cast<int64_t>(experts.size());
    std::vector<float> ref(static_cast<size_t>(n_pairs * n));
    for (const auto& [e, wsv] : m.host) {
        const auto wd = cpu::dequant_mxfp4(wsv.first.data(), wsv.second.data(), n, k);
        std::vector<int64_t> ps;
        for (int64_t p = 0; p < n_pairs; ++p)
            if (experts[static_cast<size_t>(p)] == e) ps.push_back(p);
        std::vector<float> xe(ps.size() * static_cast<size_t>(k)), ye(ps.size() * static_cast<size_t>(n));
        for (size_t i = 0; i < ps.size(); ++i)
            std::copy_n(xd.data() + rows[static_cast<size_t>(ps[i])] * k, k, xe.data() + i * static_cast<size_t>(k));
        cpu::matmul_nt(xe.data(), wd.data(), ye.data(), static_cast<int64_t>(ps.size()), k, n);
        for (size_t i = 0; i < ps.size(); ++i)
            std::copy_n(ye.data() + i * static_cast<size_t>(n), n, ref.data() + ps[i] * n);
    }
    return ref;
}

// Grouped GEMV vs the CPU. rows_per_pair > 0: act row = pair / rows_per_pair (w1/w3: pair / K),
// else act_rows = nullptr (w2: row = pair id). dual: a second matrix in the same call.
void check_grouped(int64_t n_experts, int64_t n, int64_t k, const std::vector<int32_t>& experts, int64_t rows_per_pair,
                   int64_t max_pairs_per_expert, bool dual, uint32_t seed, int scale_lo = 118, int scale_hi = 130) {
    std::mt19937 rng(seed);
    const auto n_pairs = static_cast<int64_t>(experts.size());
    std::vector<int32_t> rows(static_cast<size_t>(n_pairs));
    for (int64_t p = 0; p < n_pairs; ++p)
        rows[static_cast<size_t>(p)] = static_cast<int32_t>(rows_per_pair > 0 ? p / rows_per_pair : p);
    const int64_t n_act_rows = rows_per_pair > 0 ? (n_pairs + rows_per_pair - 1) / rows_per_pair : n_pairs;
    const std::set<int32_t> used(experts.begin(), experts.end());

    const size_t mat_bytes = static_cast<size_t>(n_experts * n * k / 2 + n_experts * n * k / 32);
    cuda::DeviceArena arena(
        (dual ? 2 : 1) * mat_bytes + static_cast<size_t>(n_act_rows * k * 8 + n_pairs * n * 4) + (size_t{64} << 20),
        "mxfp4 grouped test");
    const ExpertMatrix a = make_matrix(arena, rng, used, n_experts, n, k, scale_lo, scale_hi);
    const ExpertMatrix b = dual ? make_matrix(arena, rng, used, n_experts, n, k, scale_lo, scale_hi) : ExpertMatrix{};
    const auto x = test::random_bf16_values(rng, static_cast<size_t>(n_act_rows * k));
    std::vector<float> xd = x;
    for (int64_t r = 0; r < n_act_rows; ++r) cpu::fp8_quant_dequant(xd.data() + r * k, k, 128);
    const auto ref_a = cpu_pairs(a, xd, experts, rows, n, k);
    const auto ref_b = dual ? cpu_pairs(b, xd, experts, rows, n, k) : std::vector<float>{};

    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    auto* de = test::upload(arena, experts, "experts");
    auto* dr = test::upload(arena, rows, "rows");
    auto* dxq = arena.alloc_n<uint8_t>(x.size(), "xq");
    auto* dxs = arena.alloc_n<float>(static_cast<size_t>(n_act_rows * k / 128), "xs");
    auto* dya = arena.alloc_n<uint16_t>(ref_a.size(), "ya");
    auto* dyb = arena.alloc_n<uint16_t>(ref_a.size(), "yb");
    cuda::fill_bytes(dya, 0xFF, ref_a.size() * 2);
    cuda::fill_bytes(dyb, 0xFF, ref_a.size() * 2);
    const int64_t ints = cuda::mxfp4_group_scratch_ints(n_pairs);
    auto* scratch = arena.alloc_n<int32_t>(static_cast<size_t>(ints), "group scratch");
    cuda::Stream s;
    cuda::quantize_fp8_1x128(reinterpret_cast<const __nv_bfloat16*>(dx), dxq, dxs, n_act_rows, k,
                             cuda::ActScaleLayout::RowMajor, s.get());
    const auto g = cuda::mxfp4_group_pairs(de, n_pairs, n_experts, max_pairs_per_expert, scratch, ints, s.get());
    cuda::Mxfp4GroupedGemvArgs args;
    args.xq = dxq;
    args.xs = dxs;
    args.act_rows = rows_per_pair > 0 ? dr : nullptr;
    args.a = {a.w, a.ws, reinterpret_cast<__nv_bfloat16*>(dya)};
    if (dual) args.b = {b.w, b.ws, reinterpret_cast<__nv_bfloat16*>(dyb)};
    args.n = n;
    args.k = k;
    cuda::mxfp4_grouped_gemv(args, g, s.get());
    s.sync();
    const auto ya = test::from_bf16_bits(cuda::copy_to_host(dya, ref_a.size()));
    EXPECT_LE(test::rel_l2(ya, ref_a), 4e-3) << "n " << n << " k " << k << " pairs " << n_pairs;
    EXPECT_LE(test::max_err_rel_to_max(ya, ref_a), 1e-2) << "n " << n << " k " << k << " pairs " << n_pairs;
    if (dual) {
        const auto yb = test::from_bf16_bits(cuda::copy_to_host(dyb, ref_b.size()));
        EXPECT_LE(test::rel_l2(yb, ref_b), 4e-3) << "second matrix, n " << n << " k " << k;
        EXPECT_LE(test::max_err_rel_to_max(yb, ref_b), 1e-2) << "second matrix, n " << n << " k " << k;
    }
}

// Flash dims: 256 experts, top-6, hidden 4096, expert inter 2048. w1/w3 (dual, [2048, 4096], act row
// = pair / 6) and w2 ([4096, 2048], act row = pair id) for decode batches 1, 8 and 64.
TEST(CudaMxfp4GroupedGemv, FlashBatch1) {
    ONECARD_REQUIRE_GPU();
    const std::vector<int32_t> ids{200, 5, 255, 0, 131, 64};
    check_grouped(256, 2048, 4096, ids, 6, 1, true, 71);
    check_grouped(256, 4096, 2048, ids, 0, 1, false, 72);
}

TEST(CudaMxfp4GroupedGemv, FlashBatch1RepeatedExpert) {
    ONECARD_REQUIRE_GPU();
    // An expert repeated within one token's list although the caller promised 1 pair per expert:
    // items of one pair each, still exact.
    const std::vector<int32_t> ids{9, 40, 9, 250, 40, 9};
    check_grouped(256, 2048, 4096, ids, 6, 1, true, 73);
    check_grouped(256, 4096, 2048, ids, 0, 1, false, 74);
}

TEST(CudaMxfp4GroupedGemv, FlashBatch8Skewed) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(75);
    const auto ids = skewed_routing(rng, 8, 6, 256, 12, 77);  // expert 77 x8: one full item of 8 pairs
    check_grouped(256, 2048, 4096, ids, 6, 8, true, 76);
    check_grouped(256, 4096, 2048, ids, 0, 8, false, 77);
}

TEST(CudaMxfp4GroupedGemv, FlashBatch64Skewed) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(78);
    // Expert 3 picked by all 64 tokens: 8 items of 8 pairs (the weights are streamed once per item).
    const auto ids = skewed_routing(rng, 64, 6, 256, 24, 3);
    check_grouped(256, 2048, 4096, ids, 6, 64, true, 79);
    check_grouped(256, 4096, 2048, ids, 0, 64, false, 80);
}

TEST(CudaMxfp4GroupedGemv, OddShapesAndLongK) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(81);
    const auto ids = skewed_routing(rng, 5, 4, 16, 6, 2);
    check_grouped(16, 1040, 2048, ids, 4, 5, false, 82);  // 65 row tiles: the last block half used
    check_grouped(16, 1040, 256, ids, 4, 5, true, 83);    // k = 256 (one chunk of 8 groups), two matrices
    check_grouped(16, 208, 8192, ids, 4, 5, true, 84);    // the longest k (66 KB of staged activations)
}

TEST(CudaMxfp4GroupedGemv, WideScalesAndEveryCode) {
    ONECARD_REQUIRE_GPU();
    // Scale bytes over [100, 160] (2^-27 .. 2^33) and all 16 E2M1 codes (random bytes): the E4M3
    // subnormal that carries the code 0.5 and the fp32 scale products must stay exact.
    std::mt19937 rng(87);
    const auto ids = skewed_routing(rng, 3, 6, 32, 10, 5);
    check_grouped(32, 512, 1024, ids, 6, 3, true, 88, 100, 160);
}

TEST(CudaMxfp4GroupedGemv, RefusesUntileableShapes) {
    ONECARD_REQUIRE_GPU();
    cuda::MoePairGroups g;  // empty: the shape check comes first
    cuda::Mxfp4GroupedGemvArgs rows_not_16;
    rows_not_16.n = 1036;
    rows_not_16.k = 2048;
    EXPECT_THROW(cuda::mxfp4_grouped_gemv(rows_not_16, g, nullptr), Error);
    cuda::Mxfp4GroupedGemvArgs k_too_wide;
    k_too_wide.n = 2048;
    k_too_wide.k = 16384;
    EXPECT_THROW(cuda::mxfp4_grouped_gemv(k_too_wide, g, nullptr), Error);
}

TEST(CudaMxfp4GroupedGemv, PrefillSizedPairList) {
    ONECARD_REQUIRE_GPU();
    // 682 tokens x top-6 = 4092 pairs (near the 4096 limit) over 64 experts at a small matrix.
    std::mt19937 rng(85);
    const auto ids = skewed_routing(rng, 682, 6, 64, 40, 63);
    check_grouped(64, 256, 1024, ids, 6, 682, true, 86);
}
}  // namespace
}  // namespace onecard

#else
TEST(CudaMxfp4Gemv, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
