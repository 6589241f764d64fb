// Lightning indexer top-k on the GPU vs the CPU oracle: keys are encoded in the 132-byte-style FP8
// format and scattered over a paged pool with shuffled block ids; the CPU decodes them with
// decode_indexer_key and runs cpu::indexer_scores + cpu::indexer_topk per token.
//
// Comparison: the GPU sums the same exact products (bf16 q × decoded FP8 key) in another fp32 order,
// so the two score vectors differ by rounding only. With tol an upper bound of that difference, an
// entry whose CPU score exceeds the CPU's (k+1)-th by more than 2·tol must be picked and one below the
// k-th by more than 2·tol must not be; when the k-th and (k+1)-th differ by more than 4·tol the picked
// SET must equal the CPU's exactly. Byte-identical keys score bit-identically on both sides, so the
// tie cases (duplicate keys straddling the k-th place) must match the CPU's lower-index rule exactly.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/indexer.h"
#include "backend/cuda/ops/indexer.cuh"
#include "core/error.h"
#include "kvcache/kv_format.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

namespace onecard {
namespace {

struct IndexerCase {
    int64_t n_heads = 64, head_dim = 128, topk = 512;
    int64_t ratio = 4, block_size = 256;
    std::vector<std::vector<uint8_t>> seq_keys;  // per sequence [n_entries, head_dim + 4] encoded keys
    std::vector<int32_t> positions;              // [n]
    std::vector<int32_t> seq_of_token;           // [n]
    std::vector<float> q;                        // [n, n_heads, head_dim] bf16-valued
    std::vector<float> w;                        // [n, n_heads]

    int64_t n() const { return static_cast<int64_t>(positions.size()); }
    int64_t entry_bytes() const { return head_dim + 4; }
    int64_t n_visible(int64_t t) const { return cpu::n_visible_entries(positions[t], ratio); }
    float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }
};

std::vector<uint8_t> random_keys(std::mt19937& rng, int64_t n_entries, int64_t head_dim) {
    const IndexerKeyFormat fmt = make_indexer_key_format(head_dim);
    std::vector<uint8_t> keys(static_cast<size_t>(n_entries * fmt.entry_bytes()));
    std::uniform_real_distribution<float> amp(0.5f, 2.0f);  // varied per-key scales
    for (int64_t e = 0; e < n_entries; ++e) {
        const auto v = test::random_bf16_values(rng, static_cast<size_t>(head_dim), amp(rng));
        encode_indexer_key(fmt, v.data(), keys.data() + e * fmt.entry_bytes());
    }
    return keys;
}

// Adds a token of sequence `seq` that sees exactly n_vis entries (position anywhere in the ratio group).
void add_token(IndexerCase& c, std::mt19937& rng, int32_t seq, int64_t n_vis) {
    std::uniform_int_distribution<int64_t> off(n_vis == 0 ? 1 : 0, c.ratio - 1);  // n_visible 0: position >= 0
    c.positions.push_back(static_cast<int32_t>(n_vis * c.ratio - 1 + off(rng)));
    c.seq_of_token.push_back(seq);
    const auto q = test::random_bf16_values(rng, static_cast<size_t>(c.n_heads * c.head_dim));
    c.q.insert(c.q.end(), q.begin(), q.end());
    std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(static_cast<float>(c.n_heads)));
    for (int64_t h = 0; h < c.n_heads; ++h) {
        float x;
        do x = nd(rng);
        while (x == 0.0f);
        c.w.push_back(x);
    }
}

std::vector<float> decoded_keys(const IndexerCase& c, int64_t seq) {
    const IndexerKeyFormat fmt = make_indexer_key_format(c.head_dim);
    const auto& k = c.seq_keys[static_cast<size_t>(seq)];
    const int64_t n_entries = static_cast<int64_t>(k.size()) / c.entry_bytes();
    std::vector<float> x(static_cast<size_t>(n_entries * c.head_dim));
    for (int64_t e = 0; e < n_entries; ++e)
        decode_indexer_key(fmt, k.data() + e * c.entry_bytes(), x.data() + e * c.head_dim);
    return x;
}

std::vector<float> cpu_scores(const IndexerCase& c, int64_t t, const std::vector<float>& keys) {
    const int64_t n_vis = c.n_visible(t);
    std::vector<float> s(static_cast<size_t>(n_vis));
    cpu::indexer_scores(c.q.data() + t * c.n_heads * c.head_dim, c.w.data() + t * c.n_heads, keys.data(), n_vis,
                        c.n_heads, c.head_dim, c.scale(), s.data());
    return s;
}

// Upper bound of the CPU/GPU score difference for token t: Σ_h |w_h|·scale·‖q_h‖·max_s‖k_s‖ bounds
// every |Σ_d q·k| term set (Cauchy–Schwarz); reordered fp32 sums differ by ~eps·√head_dim of it
// (~1e-8 relative), so 1e-6 of the bound is a ~100x margin that still leaves the ambiguous band far
// narrower than the typical gap between neighbouring scores.
double score_tol(const IndexerCase& c, int64_t t, const std::vector<float>& keys) {
    double k_max = 0.0;
    for (int64_t e = 0; e < c.n_visible(t); ++e) {
        double k2 = 0.0;
        for (int64_t i = 0; i < c.head_dim; ++i)
            k2 += static_cast<double>(keys[e * c.head_dim + i]) * keys[e * c.head_dim + i];
        k_max = std::max(k_max, std::sqrt(k2));
    }
    double bound = 0.0;
    for (int64_t h = 0; h < c.n_heads; ++h) {
        double q2 = 0.0;
        const float* qh = c.q.data() + (t * c.n_heads + h) * c.head_dim;
        for (int64_t i = 0; i < c.head_dim; ++i) q2 += static_cast<double>(qh[i]) * qh[i];
        bound += std::fabs(c.w[t * c.n_heads + h]) * c.scale() * std::sqrt(q2) * k_max;
    }
    return 1e-6 * bound + 1e-30;
}

struct PoolOnHost {
    std::vector<uint8_t> bytes;   // [n_blocks, block_bytes]
    std::vector<int32_t> tables;  // [n_seqs, max_blocks], −1 where unused
    int64_t max_blocks = 0, block_bytes = 0, stream_offset = 0;
};

// Lays the keys out like KvCacheSpec does: every block holds this stream at `stream_offset` after
// other streams' bytes (random filler), block ids shuffled across sequences, plus unused spare blocks.
PoolOnHost build_pool(const IndexerCase& c, std::mt19937& rng) {
    PoolOnHost p;
    const int64_t per_block = c.block_size / c.ratio, eb = c.entry_bytes();
    p.stream_offset = 1000;  // a multiple of 4, like the 584-byte streams before it in a real block
    p.block_bytes = p.stream_offset + per_block * eb + 24;
    std::vector<int64_t> n_blocks;
    for (const auto& k : c.seq_keys) {
        const int64_t n_entries = static_cast<int64_t>(k.size()) / eb;
        n_blocks.push_back(std::max<int64_t>(1, (n_entries + per_block - 1) / per_block));
        p.max_blocks = std::max(p.max_blocks, n_blocks.back() + 2);
    }
    const int64_t total = std::accumulate(n_blocks.begin(), n_blocks.end(), int64_t{0}) + 5;
    std::vector<int32_t> ids(static_cast<size_t>(total));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    p.bytes.resize(static_cast<size_t>(total * p.block_bytes));
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : p.bytes) b = static_cast<uint8_t>(byte(rng));
    p.tables.assign(static_cast<size_t>(c.seq_keys.size()) * p.max_blocks, -1);
    size_t next = 0;
    for (size_t s = 0; s < c.seq_keys.size(); ++s) {
        for (int64_t b = 0; b < n_blocks[s]; ++b) p.tables[s * p.max_blocks + b] = ids[next++];
        const int64_t n_entries = static_cast<int64_t>(c.seq_keys[s].size()) / eb;
        for (int64_t e = 0; e < n_entries; ++e) {
            const int64_t tok = e * c.ratio;
            const int64_t off = int64_t{p.tables[s * p.max_blocks + tok / c.block_size]} * p.block_bytes +
                                p.stream_offset + (tok % c.block_size) / c.ratio * eb;
            std::copy_n(c.seq_keys[s].begin() + e * eb, eb, p.bytes.begin() + off);
        }
    }
    return p;
}

int64_t max_visible_of(const IndexerCase& c) {
    int64_t m = 0;
    for (int64_t t = 0; t < c.n(); ++t) m = std::max(m, c.n_visible(t));
    return m;
}

// Runs the GPU op; scratch_floats < 0 means "room for every token at once".
std::vector<int32_t> run_gpu(const IndexerCase& c, std::mt19937& rng, int64_t scratch_floats = -1) {
    const PoolOnHost p = build_pool(c, rng);
    const int64_t max_vis = max_visible_of(c);
    if (scratch_floats < 0) scratch_floats = std::max<int64_t>(1, max_vis * c.n());
    cuda::DeviceArena arena(size_t{256} << 20, "indexer test");
    auto* dq = test::upload(arena, test::to_bf16_bits(c.q), "q");
    auto* dw = test::upload(arena, c.w, "w");
    auto* dpos = test::upload(arena, c.positions, "positions");
    auto* dseq = test::upload(arena, c.seq_of_token, "seq_of_token");
    auto* dpool = test::upload(arena, p.bytes, "pool");
    auto* dtables = test::upload(arena, p.tables, "block tables");
    auto* dscratch = arena.alloc_n<float>(static_cast<size_t>(scratch_floats), "scratch");
    cuda::fill_bytes(dscratch, 0xFF, static_cast<size_t>(scratch_floats) * 4);  // NaN: unwritten scores show
    const size_t n_out = static_cast<size_t>(c.n() * c.topk);
    auto* dout = arena.alloc_n<int32_t>(n_out, "out");
    // 0x7F bytes, not 0xFF: 0xFFFFFFFF would be −1, the padding value, and hide unwritten padding.
    cuda::fill_bytes(dout, 0x7F, n_out * 4);

    cuda::PagedStreamAddr addr;
    addr.block_tables = dtables;
    addr.max_blocks = p.max_blocks;
    addr.block_bytes = p.block_bytes;
    addr.block_size = c.block_size;
    addr.ratio = c.ratio;
    addr.stream_offset = p.stream_offset;
    addr.entry_bytes = c.entry_bytes();
    cuda::IndexerDims d;
    d.n_heads = c.n_heads;
    d.head_dim = c.head_dim;
    d.topk = c.topk;
    d.softmax_scale = c.scale();
    cuda::Stream s;
    cuda::IndexerTopkArgs args;
    args.q = reinterpret_cast<const __nv_bfloat16*>(dq);
    args.w = dw;
    args.positions = dpos;
    args.row_of_token = dseq;
    args.pool = dpool;
    args.addr = addr;
    args.out = dout;
    args.n = c.n();
    args.max_visible = max_vis;
    args.scratch = dscratch;
    args.scratch_floats = scratch_floats;
    cuda::indexer_topk(args, d, s.get());
    s.sync();
    return cuda::copy_to_host(dout, n_out);
}

// Checks every token's row; counts in *n_exact the rows held to exact set equality (n_visible > topk
// with a clear gap at the k-th place). Void: ASSERT_* needs it.
void check_rows(const IndexerCase& c, const std::vector<int32_t>& out, int64_t* n_exact = nullptr) {
    if (n_exact != nullptr) *n_exact = 0;
    std::vector<std::vector<float>> keys(c.seq_keys.size());
    for (size_t s = 0; s < c.seq_keys.size(); ++s) keys[s] = decoded_keys(c, static_cast<int64_t>(s));
    for (int64_t t = 0; t < c.n(); ++t) {
        SCOPED_TRACE(testing::Message() << "token " << t << ", n_visible " << c.n_visible(t));
        const int64_t n_vis = c.n_visible(t), k = c.topk;
        const auto& kt = keys[static_cast<size_t>(c.seq_of_token[t])];
        const auto scores = cpu_scores(c, t, kt);
        const auto ref = cpu::indexer_topk(scores.data(), n_vis, k);
        const std::vector<int32_t> row(out.begin() + t * k, out.begin() + (t + 1) * k);
        const int64_t n_pick = std::min(k, n_vis);
        // Shape of the row: n_pick strictly ascending indices in range, then exactly −1.
        for (int64_t j = 0; j < k; ++j) {
            if (j < n_pick) {
                ASSERT_GE(row[j], 0) << "slot " << j;
                ASSERT_LT(row[j], n_vis) << "slot " << j;
                if (j > 0) {
                    ASSERT_LT(row[j - 1], row[j]) << "slot " << j;
                }
            } else {
                ASSERT_EQ(row[j], -1) << "padding slot " << j;
            }
        }
        if (n_vis <= k) {  // all visible entries, in order
            for (int64_t j = 0; j < n_pick; ++j) ASSERT_EQ(row[j], j);
            continue;
        }
        std::vector<float> sorted = scores;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        const double kth = sorted[k - 1], next = sorted[k], tol = score_tol(c, t, kt);
        std::vector<char> picked(static_cast<size_t>(n_vis), 0);
        for (int64_t j = 0; j < k; ++j) picked[row[j]] = 1;
        int64_t n_must_missing = 0, n_forbidden = 0;
        for (int64_t s = 0; s < n_vis; ++s) {
            if (scores[s] > next + 2 * tol && !picked[s]) ++n_must_missing;
            if (scores[s] < kth - 2 * tol && picked[s]) ++n_forbidden;
        }
        EXPECT_EQ(n_must_missing, 0) << "clearly-top entries left out (k-th " << kth << ", tol " << tol << ")";
        EXPECT_EQ(n_forbidden, 0) << "clearly-low entries picked (k-th " << kth << ", tol " << tol << ")";
        // Order-independent: the picked entries' CPU scores add up to the CPU's best total, up to
        // swaps inside the ambiguous band (each swap costs at most 4·tol).
        double sum_gpu = 0.0, sum_ref = 0.0;
        for (int64_t j = 0; j < k; ++j) sum_gpu += scores[row[j]];
        for (int32_t s : ref) sum_ref += scores[s];
        EXPECT_NEAR(sum_gpu, sum_ref, 4 * tol * k + 1e-6 * std::fabs(sum_ref));
        // Exact set equality where the CPU's choice cannot flip under rounding: a single k-th score
        // clear of the (k+1)-th, or a group of equal k-th scores from byte-identical keys (which the
        // GPU scores identically too) clear of every other score.
        std::vector<int64_t> group;
        for (int64_t s = 0; s < n_vis; ++s)
            if (scores[s] == kth) group.push_back(s);
        const int64_t eb = c.entry_bytes();
        const auto& bytes = c.seq_keys[static_cast<size_t>(c.seq_of_token[t])];
        bool identical = true;
        for (int64_t s : group)
            identical = identical &&
                        std::equal(bytes.begin() + s * eb, bytes.begin() + (s + 1) * eb, bytes.begin() + group[0] * eb);
        const auto first_above = std::find_if(sorted.rbegin(), sorted.rend(), [&](float v) { return v > kth; });
        const auto first_below = std::find_if(sorted.begin(), sorted.end(), [&](float v) { return v < kth; });
        const double gap_up = first_above == sorted.rend() ? INFINITY : *first_above - kth;
        const double gap_dn = first_below == sorted.end() ? INFINITY : kth - *first_below;
        const bool clear = group.size() == 1 ? kth - next > 4 * tol : identical && gap_up > 4 * tol && gap_dn > 4 * tol;
        if (clear) {
            if (n_exact != nullptr) ++*n_exact;
            EXPECT_EQ(row, ref) << "picked set differs from the CPU's despite a clear gap at the k-th place";
        }
    }
}

// Overwrites n_copies low-scoring entries of token t's sequence (random positions over the whole
// range) with byte-identical copies of one entry ranked just above the k-th place, so a group of equal
// scores straddles it. The copied entry is the candidate rank with the widest gap to its neighbours,
// so the group stays clear of every other score.
// Returns the minimum gap between the group and the nearest other score, relative to score_tol.
double make_tie_group(IndexerCase& c, int64_t t, int64_t n_copies, std::mt19937& rng) {
    const int64_t seq = c.seq_of_token[t], eb = c.entry_bytes(), n_vis = c.n_visible(t), k = c.topk;
    auto keys = decoded_keys(c, seq);
    auto scores = cpu_scores(c, t, keys);
    std::vector<int32_t> order(static_cast<size_t>(n_vis));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
    // The group takes ranks r .. r + n_copies: it straddles the k-th place for r in [k − n_copies, k − 1].
    int64_t best_rank = k - 1;
    double best_gap = -1.0;
    for (int64_t r = std::max<int64_t>(1, k - n_copies); r <= k - 1 && r + 1 < n_vis; ++r) {
        const double gap = std::min(scores[order[r - 1]] - scores[order[r]], scores[order[r]] - scores[order[r + 1]]);
        if (gap > best_gap) best_gap = gap, best_rank = r;
    }
    const int32_t src = order[best_rank];
    // Victims: entries from the bottom half of the ranking (well below the boundary), random positions.
    std::vector<int32_t> low(order.begin() + n_vis / 2, order.end());
    std::shuffle(low.begin(), low.end(), rng);
    auto& bytes = c.seq_keys[static_cast<size_t>(seq)];
    for (int64_t i = 0; i < n_copies; ++i)
        std::copy_n(bytes.begin() + src * eb, eb, bytes.begin() + int64_t{low[i]} * eb);
    // The group's score vs the nearest other score, after the copies.
    keys = decoded_keys(c, seq);
    scores = cpu_scores(c, t, keys);
    double gap = INFINITY;
    for (int64_t s = 0; s < n_vis; ++s)
        if (scores[s] != scores[src]) gap = std::min(gap, std::fabs(static_cast<double>(scores[s]) - scores[src]));
    return gap / score_tol(c, t, keys);
}

TEST(CudaIndexer, SmallDimsVisibilityEdgesMatchCpu) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(1201);
    IndexerCase c;
    c.n_heads = 4, c.head_dim = 64, c.topk = 8, c.ratio = 4, c.block_size = 64;
    // n_visible 0 (first window of a sequence, incl. position 0), 1, k−1, k, k+1, a few hundred, and
    // 20000 (several 8192-entry chunks of the output pass).
    const std::vector<int64_t> vis = {0, 1, 7, 8, 9, 300, 20000, 0, 57};
    for (size_t i = 0; i < vis.size(); ++i)
        c.seq_keys.push_back(random_keys(rng, vis[i] + static_cast<int64_t>(i) * 3, 64));
    for (size_t i = 0; i < vis.size(); ++i) add_token(c, rng, static_cast<int32_t>(i), vis[i]);
    c.positions[7] = 0;  // position 0: sees nothing
    const auto out = run_gpu(c, rng);
    check_rows(c, out);
}

TEST(CudaIndexer, FlashDimsDecodeBatchMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(1202);
    IndexerCase c;  // Flash: 64 heads x 128, top 512, ratio 4
    // Sequences of different lengths with shuffled, non-contiguous blocks; two tokens share sequence 2
    // at different positions (a ragged prefill tail next to decode tokens).
    const std::vector<int64_t> seq_len = {0, 100, 511, 512, 513, 5000, 2048};
    for (int64_t n_e : seq_len) c.seq_keys.push_back(random_keys(rng, n_e + 7, 128));
    for (size_t i = 0; i < seq_len.size(); ++i) add_token(c, rng, static_cast<int32_t>(i), seq_len[i]);
    add_token(c, rng, 2, 300);
    add_token(c, rng, 5, 4999);
    const auto out = run_gpu(c, rng);
    int64_t n_exact = 0;
    check_rows(c, out, &n_exact);
    std::printf("rows held to exact set equality: %lld\n", static_cast<long long>(n_exact));
}

TEST(CudaIndexer, DuplicateKeysTieToLowerIndexLikeCpu) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(1203);
    // Flash dims, 2000 entries; and small dims with 20000 entries so the tied copies span several
    // chunks of the output pass.
    for (const bool flash : {true, false}) {
        SCOPED_TRACE(flash ? "flash dims" : "small dims");
        IndexerCase c;
        if (!flash) c.n_heads = 4, c.head_dim = 64, c.topk = 8, c.block_size = 64;
        const int64_t n_vis = flash ? 2000 : 20000, n_copies = flash ? 40 : 6;
        c.seq_keys.push_back(random_keys(rng, n_vis, c.head_dim));
        add_token(c, rng, 0, n_vis);
        const double gap_in_tols = make_tie_group(c, 0, n_copies, rng);
        ASSERT_GT(gap_in_tols, 8.0) << "test setup: the tied group is not clear of other scores";
        // A second sequence whose keys are all identical: every score ties, the picks are 0..k−1.
        c.seq_keys.push_back(std::vector<uint8_t>());
        const auto one = random_keys(rng, 1, c.head_dim);
        for (int64_t e = 0; e < 3 * c.topk + 5; ++e) c.seq_keys[1].insert(c.seq_keys[1].end(), one.begin(), one.end());
        add_token(c, rng, 1, 3 * c.topk + 5);
        const auto out = run_gpu(c, rng);
        int64_t n_exact = 0;
        check_rows(c, out, &n_exact);
        EXPECT_EQ(n_exact, 2) << "both rows must be held to exact equality";
        for (int64_t j = 0; j < c.topk; ++j) EXPECT_EQ(out[c.topk + j], j);
    }
}

// Few tokens take the split score kernel (keys spread over many blocks, heads over a key's threads),
// many tokens the per-key kernel; both sum the same terms in the same order, so the same decode tokens
// get the same picks whichever kernel scores them (here: 6 tokens alone, then with 140 short-context
// tokens that only make the chunk large).
TEST(CudaIndexer, SplitAndPerKeyScoreKernelsPickAlike) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(1205);
    IndexerCase c;  // Flash dims
    for (int64_t n_e : {600, 2100, 5000}) c.seq_keys.push_back(random_keys(rng, n_e, 128));
    const std::vector<int64_t> vis = {600, 2048, 5000, 513, 1000, 4000};
    for (size_t i = 0; i < vis.size(); ++i) add_token(c, rng, static_cast<int32_t>(i % 3), vis[i]);
    const auto split = run_gpu(c, rng);
    int64_t n_exact = 0;
    check_rows(c, split, &n_exact);
    IndexerCase big = c;
    for (int i = 0; i < 140; ++i) add_token(big, rng, 0, 3);
    const auto per_key = run_gpu(big, rng);
    check_rows(big, per_key);
    const std::vector<int32_t> head(per_key.begin(), per_key.begin() + static_cast<int64_t>(split.size()));
    EXPECT_EQ(head, split);
}

// The select kernel copies a token's score row to shared memory when the launch has few tokens (or
// short rows) and its longest row fits the cache (40,960 scores); otherwise it reads the rows where
// the scores are. Both give the CPU's picks, and the same picks: a decode token with 12,000 visible
// entries alone (cached), then among 300 short-context tokens that make the chunk too large to cache
// its row; and a token with 45,000 entries, too many for the cache.
TEST(CudaIndexer, CachedAndUncachedScoreRowsPickAlike) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(1206);
    IndexerCase c;  // Flash dims
    c.seq_keys.push_back(random_keys(rng, 12000, 128));
    add_token(c, rng, 0, 12000);
    const auto alone = run_gpu(c, rng);
    check_rows(c, alone);
    IndexerCase crowd = c;
    for (int i = 0; i < 300; ++i) add_token(crowd, rng, 0, 1 + i % 500);
    const auto among = run_gpu(crowd, rng);
    check_rows(crowd, among);
    const std::vector<int32_t> head(among.begin(), among.begin() + static_cast<int64_t>(alone.size()));
    EXPECT_EQ(head, alone);
    IndexerCase longer;
    longer.seq_keys.push_back(random_keys(rng, 45000, 128));
    add_token(longer, rng, 0, 45000);
    check_rows(longer, run_gpu(longer, rng));
}

// Launches of at least 512 tokens score on tensor cores (indexer_scores_tc_kernel: bf16 products of
// the same values, another fp32 order). A prefill-like chunk of 600 tokens: ragged contexts around
// every edge of the kernel's tiles (32 keys a warp, 512 a block) and the top-k, two sequences, a tie
// group of byte-identical keys straddling the k-th place (held to the CPU's lower-index rule exactly),
// and the short-context tokens that skip scoring. The CPU oracle judges every row; the same scored
// tokens alone (the split kernel) give the same picks wherever the CPU's choice is clear.
TEST(CudaIndexer, TensorCoreScoresOfLongChunksMatchCpu) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(1207);
    IndexerCase c;  // Flash dims
    c.seq_keys.push_back(random_keys(rng, 3000, 128));
    c.seq_keys.push_back(random_keys(rng, 1600, 128));
    const std::vector<int64_t> vis = {513, 514, 543, 544, 545, 1023, 1024, 1025, 1536, 2999, 3000, 1600, 777, 1111};
    for (size_t i = 0; i < vis.size(); ++i) add_token(c, rng, vis[i] > 1600 || i % 2 == 0 ? 0 : 1, vis[i]);
    const double gap_in_tols = make_tie_group(c, 9, 30, rng);  // token 9: sequence 0, 2999 entries
    ASSERT_GT(gap_in_tols, 8.0) << "test setup: the tied group is not clear of other scores";
    IndexerCase chunk = c;
    for (int i = 0; i < 600 - static_cast<int>(vis.size()); ++i) add_token(chunk, rng, i % 2, 1 + i % 512);
    const auto tc = run_gpu(chunk, rng);
    int64_t n_exact = 0;
    check_rows(chunk, tc, &n_exact);
    EXPECT_GE(n_exact, 1) << "the tie group's row must be held to exact equality";
    const auto alone = run_gpu(c, rng);
    check_rows(c, alone);
    std::printf("tensor-core chunk: rows held to exact set equality %lld of %zu scored\n",
                static_cast<long long>(n_exact), vis.size());
}

TEST(CudaIndexer, SmallScratchChunksTokens) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(1204);
    IndexerCase c;
    c.n_heads = 4, c.head_dim = 64, c.topk = 8, c.block_size = 64;
    for (int s = 0; s < 3; ++s) c.seq_keys.push_back(random_keys(rng, 700, 64));
    for (int i = 0; i < 11; ++i) add_token(c, rng, i % 3, (i * 97) % 700);  // 0, 97, ... incl. n_visible 0
    const int64_t max_vis = max_visible_of(c);
    // Room for 3 tokens (plus a little): 4 passes, the last one partial.
    const auto out = run_gpu(c, rng, 3 * max_vis + 5);
    check_rows(c, out);
    // The same tokens with room for all at once give the same picks.
    EXPECT_EQ(out, run_gpu(c, rng));
}

// Host-side argument checks run before anything touches the device, so these run without a GPU: the
// arguments carry no device pointers, only shapes and a host float standing in for the scratch.
cuda::IndexerTopkArgs checks_only_args(const cuda::PagedStreamAddr& addr, int64_t n, int64_t max_visible,
                                       float* scratch, int64_t scratch_floats) {
    cuda::IndexerTopkArgs args;
    args.addr = addr;
    args.n = n;
    args.max_visible = max_visible;
    args.scratch = scratch;
    args.scratch_floats = scratch_floats;
    return args;
}

TEST(CudaIndexerArgs, RejectsScratchSmallerThanOneRow) {
    cuda::PagedStreamAddr addr;
    addr.block_size = 256, addr.ratio = 4, addr.entry_bytes = 132, addr.block_bytes = 4096;
    cuda::IndexerDims d;
    d.softmax_scale = 1.0f / std::sqrt(128.0f);
    float fake = 0.0f;
    EXPECT_THROW(cuda::indexer_topk(checks_only_args(addr, 4, 1000, &fake, 999), d, nullptr), Error);
}

TEST(CudaIndexerArgs, RejectsBadDims) {
    cuda::PagedStreamAddr addr;
    addr.block_size = 256, addr.ratio = 4, addr.entry_bytes = 132, addr.block_bytes = 4096;
    cuda::IndexerDims d;
    d.softmax_scale = 1.0f / std::sqrt(128.0f);
    float fake = 0.0f;
    auto call = [&](const cuda::IndexerDims& dd, const cuda::PagedStreamAddr& aa) {
        cuda::indexer_topk(checks_only_args(aa, 1, 1, &fake, 1), dd, nullptr);
    };
    cuda::IndexerDims bad = d;
    bad.n_heads = 48;  // no kernel instantiation
    EXPECT_THROW(call(bad, addr), Error);
    bad = d;
    bad.softmax_scale = 0.0f;  // the default: forgetting to set it would zero every score
    EXPECT_THROW(call(bad, addr), Error);
    cuda::PagedStreamAddr bad_addr = addr;
    bad_addr.entry_bytes = 584;  // a KV-entry stream, not the indexer keys
    EXPECT_THROW(call(d, bad_addr), Error);
    bad_addr = addr;
    bad_addr.stream_offset = 2;  // keys would be misaligned for the 4-byte loads
    EXPECT_THROW(call(d, bad_addr), Error);
}

}  // namespace
}  // namespace onecard
#else
TEST(CudaIndexer, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
