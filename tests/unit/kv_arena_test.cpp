// KvHostArena: entries written through block tables of many live sequences never alias, and read
// back (decoded) exactly as the QAT simulation of what was written.
#include "kvcache/kv_arena.h"
#include "core/error.h"
#include "kvcache/kv_format.h"
#include "kvcache/kv_layer_table.h"
#include "kvcache/kv_manager.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

namespace onecard {
namespace {

KvModelShape shape() {
    KvModelShape s;
    s.head_dim = 128;
    s.rope_dim = 64;
    s.index_head_dim = 32;
    s.sliding_window = 8;
    s.n_main_layers = 3;
    s.kinds = {KvLayerKind::SWA, KvLayerKind::CSA, KvLayerKind::HCA};
    s.compress_ratios = {0, 4, 16};
    return s;
}

// Deterministic per-(sequence, stream, entry) content, so aliasing shows up as a mismatch.
std::vector<float> content(int64_t seq, size_t stream, int64_t entry, int64_t dim) {
    std::mt19937 rng(static_cast<uint32_t>(seq * 1000003 + stream * 7919 + entry));
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> x(static_cast<size_t>(dim));
    for (auto& v : x) v = nd(rng);
    return x;
}

void encode(const KvCacheSpec& spec, const KvPagedStream& s, const std::vector<float>& x, uint8_t* out) {
    if (s.kind == KvStreamKind::IndexerKey)
        encode_indexer_key(spec.index_key, x.data(), out);
    else
        encode_kv_entry(spec.entry, x.data(), out);
}

TEST(KvArena, PagedEntriesOfLiveSequencesNeverAlias) {
    const auto spec = make_kv_cache_spec(shape(), 16);
    const KvPoolSize size{5, 30};
    KvCacheManager kv(spec, size);
    KvHostArena arena(spec, size);
    EXPECT_EQ(arena.bytes(), size.total_bytes(spec));
    std::mt19937 rng(3);
    std::map<int64_t, std::pair<KvHandle, int64_t>> seqs;  // seq id -> (handle, n_tokens)
    for (int64_t id = 0; id < 5; ++id) {
        const int64_t n = 10 + static_cast<int64_t>(rng() % 70);
        seqs[id] = {kv.allocate(n), n};
    }
    // Grow them interleaved so their blocks interleave in the pool.
    for (int round = 0; round < 3; ++round)
        for (auto& [id, hn] : seqs)
            if (kv.can_extend(hn.first, 9)) {
                kv.extend(hn.first, 9);
                hn.second += 9;
            }
    kv.check_integrity();
    auto n_entries = [](const KvPagedStream& s, int64_t n_tokens) { return n_tokens / s.ratio; };
    for (auto& [id, hn] : seqs)
        for (size_t si = 0; si < spec.streams.size(); ++si)
            for (int64_t e = 0; e < n_entries(spec.streams[si], hn.second); ++e) {
                const auto& s = spec.streams[si];
                const int64_t dim =
                    s.kind == KvStreamKind::IndexerKey ? spec.index_key.index_head_dim : spec.entry.head_dim;
                encode(spec, s, content(id, si, e, dim), arena.paged_entry(kv.block_table(hn.first), si, e));
            }
    std::vector<uint8_t> want(static_cast<size_t>(spec.entry.entry_bytes()));
    for (auto& [id, hn] : seqs)
        for (size_t si = 0; si < spec.streams.size(); ++si)
            for (int64_t e = 0; e < n_entries(spec.streams[si], hn.second); ++e) {
                const auto& s = spec.streams[si];
                const int64_t dim =
                    s.kind == KvStreamKind::IndexerKey ? spec.index_key.index_head_dim : spec.entry.head_dim;
                encode(spec, s, content(id, si, e, dim), want.data());
                ASSERT_EQ(0, std::memcmp(want.data(), arena.paged_entry(kv.block_table(hn.first), si, e),
                                         static_cast<size_t>(s.entry_bytes)))
                    << "seq " << id << " stream " << si << " entry " << e;
            }
    // Past the table: refused.
    const auto& [h0, n0] = seqs[0];
    const size_t csa = kv_stream_index(spec, 1, KvStreamKind::CompressedEntry);
    EXPECT_THROW(arena.paged_entry(kv.block_table(h0), csa, static_cast<int64_t>(kv.block_table(h0).size()) * 4),
                 Error);
    EXPECT_THROW(kv_stream_index(spec, 0, KvStreamKind::CompressedEntry), Error);  // SWA layer
}

// core/kv_address.h is the one offset formula (host arena, step kernels, indexer). Checked here against
// kv_spec.h's statement of the layout, restated independently: a block is the concat over streams of
// [entries_per_block][entry_bytes], entry i in table block i / entries_per_block at row i % entries_per_block.
TEST(KvArena, SharedEntryOffsetMatchesTheBlockLayout) {
    const auto spec = make_kv_cache_spec(shape(), 16);
    const std::vector<int32_t> table = {5, 0, 3, 7, 1};
    KvHostArena arena(spec, KvPoolSize{1, 8});
    for (size_t si = 0; si < spec.streams.size(); ++si) {
        const KvPagedStream& s = spec.streams[si];
        const KvStreamGeometry g = kv_stream_geometry(spec, si);
        EXPECT_EQ(g.stream_offset, s.offset);
        EXPECT_EQ(g.entry_bytes, s.entry_bytes);
        EXPECT_EQ(g.block_size / g.ratio, s.entries_per_block);
        for (int64_t i = 0; i < static_cast<int64_t>(table.size()) * s.entries_per_block; ++i) {
            const int64_t b = i / s.entries_per_block;
            ASSERT_EQ(kv_entry_block(g, i), b) << "stream " << si << " entry " << i;
            const int64_t want =
                table[static_cast<size_t>(b)] * spec.block_bytes + s.offset + (i % s.entries_per_block) * s.entry_bytes;
            ASSERT_EQ(kv_entry_offset(g, table[static_cast<size_t>(b)], i), want) << "stream " << si << " entry " << i;
            ASSERT_EQ(arena.paged_entry(table, si, i) - arena.block(0), want);  // the arena's own address
        }
    }
}

// Resident bytes of this process now (Linux /proc/self/statm), not the high-water mark; -1 if unreadable.
int64_t resident_bytes() {
    std::ifstream f("/proc/self/statm");
    int64_t total = 0, resident = 0;
    if (!(f >> total >> resident)) return -1;
    return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

// A 1 GiB pool (what `onecard generate` and a CPU `serve` ask for) reads as zeros everywhere, yet takes
// memory only where a sequence writes: before, every byte was written up front (~3 s on 2 cores).
TEST(KvArena, ALargePoolIsZeroedButResidentOnlyWhereWritten) {
    const auto spec = make_kv_cache_spec(shape(), 16);
    const KvPoolSize size{4, (int64_t{1} << 30) / spec.block_bytes};
    const int64_t before = resident_bytes();
    if (before < 0) GTEST_SKIP() << "/proc/self/statm is unreadable: no resident-memory figure to check";
    KvHostArena arena(spec, size);
    ASSERT_EQ(arena.bytes(), size.total_bytes(spec));
    ASSERT_GE(arena.bytes(), int64_t{1} << 29);
    for (int32_t b : {int32_t{0}, static_cast<int32_t>(size.n_blocks / 2), static_cast<int32_t>(size.n_blocks - 1)}) {
        const uint8_t* p = arena.block(b);
        for (int64_t i = 0; i < spec.block_bytes; ++i) ASSERT_EQ(p[i], 0) << "block " << b << " byte " << i;
    }
    std::memset(arena.block(7), 0xab, static_cast<size_t>(spec.block_bytes));
    EXPECT_EQ(arena.block(7)[spec.block_bytes - 1], 0xab);
    EXPECT_LT(resident_bytes() - before, int64_t{64} << 20) << "the pool was touched up front";
}

TEST(KvArena, WindowIsARingPerSlot) {
    const auto spec = make_kv_cache_spec(shape(), 16);
    KvHostArena arena(spec, KvPoolSize{2, 4});
    const size_t w = kv_fixed_index(spec, 2, KvFixedKind::Window);
    EXPECT_EQ(arena.window_entry(0, w, 3), arena.window_entry(0, w, 3 + 8));
    EXPECT_NE(arena.window_entry(0, w, 3), arena.window_entry(1, w, 3));
    EXPECT_EQ(arena.window_entry(1, w, 0) - arena.window_entry(0, w, 0), spec.slot_bytes);
    const size_t c = kv_fixed_index(spec, 1, KvFixedKind::Compressor);
    EXPECT_EQ(spec.fixed[c].n_rows, 8);  // 2 * ratio rows for the overlapping CSA compressor
    EXPECT_THROW(arena.window_entry(0, c, 0), Error);
}

TEST(KvArena, SpareRingRowsWidenEveryRingAndNothingElse) {
    KvModelShape spared = shape();
    spared.ring_spare = 3;
    const auto plain = make_kv_cache_spec(shape(), 16), spec = make_kv_cache_spec(spared, 16);
    ASSERT_EQ(spec.fixed.size(), plain.fixed.size());
    int64_t extra = 0;
    for (size_t r = 0; r < spec.fixed.size(); ++r) {
        EXPECT_EQ(spec.fixed[r].n_rows, plain.fixed[r].n_rows + 3) << "region " << r;
        EXPECT_EQ(spec.fixed[r].row_bytes, plain.fixed[r].row_bytes);
        extra += 3 * spec.fixed[r].row_bytes;
    }
    EXPECT_EQ(spec.slot_bytes, plain.slot_bytes + extra);
    EXPECT_EQ(spec.block_bytes, plain.block_bytes);  // paged entries are untouched
    // The window ring now has sliding_window + 3 rows: position p and p + 11 share a row, p + 8 does not.
    KvHostArena arena(spec, KvPoolSize{2, 4});
    const size_t w = kv_fixed_index(spec, 2, KvFixedKind::Window);
    EXPECT_EQ(arena.window_entry(0, w, 3), arena.window_entry(0, w, 3 + 11));
    EXPECT_NE(arena.window_entry(0, w, 3), arena.window_entry(0, w, 3 + 8));
    const KvLayerTable table(spec);
    EXPECT_EQ(table.layer(1).window_rows, 11);
    EXPECT_EQ(table.layer(1).compressor_rows, 11);  // 2 * ratio + 3
    EXPECT_EQ(table.layer(1).index_compressor_rows, 11);
    EXPECT_EQ(table.layer(2).compressor_rows, 19);  // ratio 16 + 3
    spared.ring_spare = -1;
    EXPECT_THROW(make_kv_cache_spec(spared, 16), Error);
}

}  // namespace
}  // namespace onecard
