// KV compressor on the GPU (compressor_pool + compressor_store over several steps) vs the CPU
// reference: per sequence, the same rows (kv, score + ape) pushed one by one through
// cpu::CompressorState, each emitted entry then cpu::rmsnorm(weight) and cpu::apply_rope at the
// window start (model/layer_attention.cpp finish_entry).
//
// Batches hold several sequences (contiguous tokens, batch order changing between steps, different
// lengths and start positions: one sequence's ring is seeded from a long history on the host, in the
// layout compressor.cuh documents). Checked after every step:
//  * entries of window-closing tokens: relative L2 ≤ 4e-3 and worst element ≤ 1e-2 of max|ref| per
//    entry. The GPU output is bf16 (≤ 2^-9 relative rounding per element, i.e. rel. L2 ≤ ~2e-3);
//    the online softmax, the fp32 RMSNorm sum and sincosf differ from the CPU's two-pass softmax,
//    double sum and double cos/sin by ~1e-6 relative, far below that.
//  * rows of non-closing tokens stay poisoned (0xFFFF);
//  * the whole state buffer byte for byte: ring rows [kv | score + ape] (fp32, exact: a copy and
//    one fp32 add), bytes of never-written rows and the gaps between rings untouched (0xFF).
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/compressor.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/rope.h"
#include "backend/cuda/ops/compressor.cuh"

#include <algorithm>
#include <cstring>

namespace onecard {
namespace {

struct SeqPlan {
    int64_t start = 0;            // position of the first scheduled token (earlier rows are seeded history)
    std::vector<int64_t> chunks;  // tokens scheduled per step (0 = not in that step)
};

struct Shape {
    int64_t ratio, d, rope = 64;
    int64_t spare = 0;  // ring rows beyond the minimum (KvModelShape::ring_spare)
    int64_t c() const { return ratio == 4 ? 2 : 1; }
    int64_t w() const { return c() * d; }
    int64_t n_ring() const { return (ratio == 4 ? 2 * ratio : ratio) + spare; }
};

// Rows of one sequence known so far, by position: kv [w] and score + ape [w].
struct SeqRows {
    std::vector<std::vector<float>> kv, score;  // index = position
};

// interleaved: the inputs as one GEMV over wkv|wgate writes them, rows [kv | score] (ld_in = 2W).
void run_case(const Shape& sh, const std::vector<SeqPlan>& plan, uint32_t seed, bool interleaved = false) {
    std::mt19937 rng(seed);
    const int64_t W = sh.w(), d = sh.d, n_ring = sh.n_ring(), n_seq = static_cast<int64_t>(plan.size());
    cuda::CompressorDims dims;
    dims.ratio = sh.ratio;
    dims.head_dim = d;
    dims.rope_dim = sh.rope;
    if (sh.spare > 0) dims.ring_rows = n_ring;
    if (interleaved) dims.ld_in = 2 * W;
    const int64_t ring_bytes = cuda::compressor_ring_bytes(dims);
    ASSERT_EQ(ring_bytes, n_ring * 2 * W * 4);

    // Parameters: ape [ratio, W], norm weight (bf16 values), the compress RoPE frequencies with YaRN.
    std::normal_distribution<float> nd(0.0f, 1.0f), nd_score(0.0f, 2.0f), nd_ape(0.0f, 0.5f);
    std::vector<float> ape(static_cast<size_t>(sh.ratio * W));
    for (auto& v : ape) v = nd_ape(rng);
    std::vector<float> norm_w(static_cast<size_t>(d));
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (auto& v : norm_w) v = round_bf16(u(rng));
    cpu::RopeParams rp;
    rp.theta = 160000.0;
    rp.n_rope = sh.rope;
    rp.yarn = true;
    const std::vector<float> inv_freq = cpu::rope_inv_freqs(rp);
    const float eps = 1e-6f;

    // Rings at non-adjacent, differently spaced offsets, sequence k's ring not in batch order.
    std::vector<int64_t> base(static_cast<size_t>(n_seq));
    int64_t state_bytes = 0;
    for (int64_t k = n_seq - 1; k >= 0; --k) {
        state_bytes += 4096 + 256 * k;  // gap
        base[k] = state_bytes;
        state_bytes += ring_bytes;
    }
    state_bytes += 4096;
    std::vector<uint8_t> state_img(static_cast<size_t>(state_bytes), 0xFF);  // expected state bytes
    auto write_ring_row = [&](int64_t k, int64_t pos, const float* kv, const float* sc) {
        uint8_t* row = state_img.data() + base[k] + (pos % n_ring) * 2 * W * 4;
        std::memcpy(row, kv, static_cast<size_t>(W) * 4);
        std::memcpy(row + W * 4, sc, static_cast<size_t>(W) * 4);
    };

    auto random_row = [&](std::normal_distribution<float>& dist) {
        std::vector<float> r(static_cast<size_t>(W));
        for (auto& v : r) v = dist(rng);
        return r;
    };
    auto with_ape = [&](std::vector<float> sc, int64_t pos) {
        const float* a = ape.data() + (pos % sh.ratio) * W;
        for (int64_t j = 0; j < W; ++j) sc[j] += a[j];
        return sc;
    };

    // CPU states; seeded history: the last n_ring rows random (they reach the GPU through the ring),
    // earlier ones one shared random row (only the CPU state sees them).
    std::vector<cpu::CompressorState> cpu_state;
    std::vector<SeqRows> rows(static_cast<size_t>(n_seq));
    std::vector<int64_t> next_pos(static_cast<size_t>(n_seq));
    std::vector<float> scratch_entry(static_cast<size_t>(d));
    const auto old_kv = random_row(nd), old_sc = random_row(nd_score);
    for (int64_t k = 0; k < n_seq; ++k) {
        cpu_state.emplace_back(sh.ratio, d);
        const int64_t P = plan[k].start;
        rows[k].kv.resize(static_cast<size_t>(P));
        rows[k].score.resize(static_cast<size_t>(P));
        for (int64_t p = 0; p < P; ++p) {
            if (p < P - n_ring) {
                cpu_state[k].push(old_kv.data(), with_ape(old_sc, p).data(), scratch_entry.data());
                continue;
            }
            rows[k].kv[p] = random_row(nd);
            rows[k].score[p] = with_ape(random_row(nd_score), p);
            cpu_state[k].push(rows[k].kv[p].data(), rows[k].score[p].data(), scratch_entry.data());
            write_ring_row(k, p, rows[k].kv[p].data(), rows[k].score[p].data());
        }
        next_pos[k] = P;
    }

    cuda::DeviceArena arena(size_t{256} << 20, "compressor test");
    auto* dstate = test::upload(arena, state_img, "state");
    auto* dape = test::upload(arena, ape, "ape");
    auto* dnorm = test::upload(arena, test::to_bf16_bits(norm_w), "norm");
    auto* dfreq = test::upload(arena, inv_freq, "inv_freq");
    cuda::Stream s;

    const size_t n_steps = plan[0].chunks.size();
    int64_t n_emitted = 0;
    for (size_t step = 0; step < n_steps; ++step) {
        // Batch order: natural on even steps, reversed on odd ones.
        std::vector<int64_t> order;
        for (int64_t k = 0; k < n_seq; ++k) order.push_back(step % 2 ? n_seq - 1 - k : k);
        std::vector<float> kv, score;  // [n, W] this step's inputs (no ape)
        std::vector<int32_t> positions, seq_first;
        std::vector<int64_t> ring_base;
        std::vector<std::vector<float>> expect;  // [n] expected entry, empty = no emission
        for (int64_t k : order) {
            const int64_t len = plan[k].chunks[step];
            const int32_t first = static_cast<int32_t>(positions.size());
            for (int64_t t = 0; t < len; ++t) {
                const int64_t pos = next_pos[k]++;
                const auto kv_row = random_row(nd), sc_row = random_row(nd_score);
                kv.insert(kv.end(), kv_row.begin(), kv_row.end());
                score.insert(score.end(), sc_row.begin(), sc_row.end());
                positions.push_back(static_cast<int32_t>(pos));
                seq_first.push_back(first);
                ring_base.push_back(base[k]);
                rows[k].kv.push_back(kv_row);
                rows[k].score.push_back(with_ape(sc_row, pos));
                std::vector<float> entry(static_cast<size_t>(d));
                if (cpu_state[k].push(kv_row.data(), rows[k].score[pos].data(), entry.data())) {
                    cpu::rmsnorm(entry.data(), norm_w.data(), entry.data(), 1, d, eps);
                    cpu::apply_rope(entry.data() + d - sh.rope, inv_freq.data(), sh.rope, (pos / sh.ratio) * sh.ratio);
                    expect.push_back(std::move(entry));
                } else {
                    expect.emplace_back();
                }
                write_ring_row(k, pos, kv_row.data(), rows[k].score[pos].data());
            }
        }
        const int64_t n = static_cast<int64_t>(positions.size());
        if (n == 0) continue;

        float* dkv = nullptr;
        float* dscore = nullptr;
        if (interleaved) {
            std::vector<float> rows2(static_cast<size_t>(n * 2 * W));
            for (int64_t i = 0; i < n; ++i) {
                std::copy_n(kv.begin() + i * W, W, rows2.begin() + i * 2 * W);
                std::copy_n(score.begin() + i * W, W, rows2.begin() + i * 2 * W + W);
            }
            dkv = test::upload(arena, rows2, "kv | score");
            dscore = dkv + W;
        } else {
            dkv = test::upload(arena, kv, "kv");
            dscore = test::upload(arena, score, "score");
        }
        auto* dpos = test::upload(arena, positions, "positions");
        auto* dfirst = test::upload(arena, seq_first, "seq_first");
        auto* dbase = test::upload(arena, ring_base, "ring_base");
        auto* dentries = arena.alloc_n<uint16_t>(static_cast<size_t>(n * d), "entries");
        cuda::fill_bytes(dentries, 0xFF, static_cast<size_t>(n * d) * 2);
        cuda::CompressorTokens tok;
        tok.positions = dpos;
        tok.seq_first = dfirst;
        tok.ring_base = dbase;
        cuda::compressor_pool(dkv, dscore, dape, reinterpret_cast<const __nv_bfloat16*>(dnorm), dfreq, dstate, tok,
                              reinterpret_cast<__nv_bfloat16*>(dentries), n, dims, s.get());
        cuda::compressor_store(dkv, dscore, dape, dstate, tok, n, dims, s.get());
        s.sync();

        const auto got_bits = cuda::copy_to_host(dentries, static_cast<size_t>(n * d));
        for (int64_t i = 0; i < n; ++i) {
            const std::vector<uint16_t> bits(got_bits.begin() + i * d, got_bits.begin() + (i + 1) * d);
            if (expect[i].empty()) {
                for (int64_t j = 0; j < d; ++j)
                    ASSERT_EQ(bits[j], 0xFFFF) << "step " << step << " token " << i << " (pos " << positions[i]
                                               << ") closes no window but its row was written at " << j;
                continue;
            }
            ++n_emitted;
            const auto got = test::from_bf16_bits(bits);
            EXPECT_LE(test::rel_l2(got, expect[i]), 4e-3)
                << "step " << step << " token " << i << " pos " << positions[i] << " ratio " << sh.ratio << " d " << d;
            EXPECT_LE(test::max_err_rel_to_max(got, expect[i]), 1e-2)
                << "step " << step << " token " << i << " pos " << positions[i];
        }
        const auto state_now = cuda::copy_to_host(dstate, static_cast<size_t>(state_bytes));
        int64_t n_bad = 0;
        for (int64_t b = 0; b < state_bytes; ++b) {
            if (state_now[b] == state_img[b]) continue;
            if (++n_bad <= 4) ADD_FAILURE() << "step " << step << ": state byte " << b << " differs";
        }
        ASSERT_EQ(n_bad, 0) << "ring state after step " << step;
    }
    EXPECT_GT(n_emitted, 0);
}

// CPU-only (runs in CI without a GPU): the ring size, and the layout argument the kernels rely on.
// A token at `pos` that closes a window, in a step whose first token of that sequence is at
// first_pos <= pos, reads positions [window start − ratio (overlap) or window start, pos]; those
// before first_pos must still be in the ring, i.e. not overwritten by a later position of an earlier
// step: p >= first_pos − n_ring, so row p mod n_ring holds p.
TEST(CudaCompressor, RingHoldsEveryEarlierRowAWindowReads) {
    for (const int64_t ratio : {4, 128, 16}) {
        cuda::CompressorDims dims;
        dims.ratio = ratio;
        dims.head_dim = 512;
        const bool overlap = ratio == 4;
        const int64_t c = overlap ? 2 : 1, n_ring = overlap ? 2 * ratio : ratio;
        EXPECT_EQ(cuda::compressor_ring_bytes(dims), n_ring * 2 * c * 512 * 4) << "ratio " << ratio;
        for (int64_t first_pos = 0; first_pos < 4 * n_ring; ++first_pos) {
            for (int64_t pos = first_pos; pos < first_pos + 3 * n_ring; ++pos) {
                if ((pos + 1) % ratio != 0) continue;
                const int64_t window = pos / ratio;
                const int64_t p0 = overlap ? (window - 1) * ratio : window * ratio;
                for (int64_t p = std::max<int64_t>(p0, 0); p < first_pos; ++p)
                    ASSERT_GE(p, first_pos - n_ring) << "ratio " << ratio << " pos " << pos << " reads " << p;
            }
        }
    }
}

// Ratio 4 plan: seq 0 prefills 37 tokens, decodes 1 at a time across window ends, then a chunk of 9;
// seq 1 resumes at 4097 from a seeded ring; seq 2 joins at step 2. Step 3 has a single token (n = 1).
std::vector<SeqPlan> overlap_plan() {
    return {
        {0, {37, 1, 1, 0, 1, 9}},
        {4097, {5, 1, 3, 0, 1, 9}},
        {0, {0, 0, 6, 1, 1, 9}},
    };
}

TEST(CudaCompressor, Ratio4Head512MatchesCpu) {
    ONECARD_REQUIRE_GPU();
    run_case({4, 512}, overlap_plan(), 1);
}

TEST(CudaCompressor, InterleavedInputsMatchCpu) {
    ONECARD_REQUIRE_GPU();
    run_case({4, 512}, overlap_plan(), 4, true);  // rows [kv | score] from one GEMV (ld_in = 2W)
    run_case({128, 512}, {{0, {150, 1, 1, 120, 0}}, {300, {10, 1, 0, 80, 1}}}, 5, true);
}

TEST(CudaCompressor, Ratio4Head128MatchesCpu) {
    ONECARD_REQUIRE_GPU();
    run_case({4, 128}, overlap_plan(), 2);  // the indexer's compressor (index_head_dim 128)
}

TEST(CudaCompressor, RingsWithSpareRowsMatchCpu) {
    ONECARD_REQUIRE_GPU();
    // Speculative decoding's spare rows (3): position p at row p % (min + 3) in both kernels.
    run_case({4, 512, 64, 3}, overlap_plan(), 6);
    run_case({128, 512, 64, 3}, {{0, {150, 1, 1, 120, 0}}, {300, {10, 1, 0, 80, 1}}}, 7);
}

TEST(CudaCompressor, Ratio128Head512MatchesCpu) {
    ONECARD_REQUIRE_GPU();
    // seq 0 closes windows 0 and 1 (positions 127, 255) across a prefill chunk, decodes and a second
    // chunk; seq 1 resumes at 300 (windows 0, 1 in its history) and closes window 2 at 383; seq 2
    // closes window 0 in a chunk that starts mid-window after decode steps.
    run_case({128, 512},
             {
                 {0, {150, 1, 1, 120, 0}},
                 {300, {10, 1, 0, 80, 1}},
                 {0, {0, 100, 1, 60, 1}},
             },
             3);
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaCompressor, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
