// Parity of the model ends on the GPU (backend/cuda/ops/embed_head.cuh, token_pick.cuh, elementwise.cuh):
// - embed_streams: a copy, so bit-exact against the CPU forward's gather (fp32 streams, and the bf16
//   single row the MTP block embeds).
// - hc_head vs cpu::hc_head on the same fp32 streams: fp32 math in another reduction order only, so
//   rel L2 ≤ 1e-5.
// - argmax_rows: exact, ties to the lower id, NaN never wins.
// - sample_rows: the same token as engine/sampler's Sampler::sample (no penalties) for the same seed
//   and counter. The GPU computes the probabilities with the CPU's double formula but sums masses in
//   another order (fixed point), so a row can differ only when the draw u, the top-p target or the
//   min-p threshold lies within ~1e-13 (relative) of a boundary between two tokens. The test
//   measures each row's margin to every boundary and compares the rows whose margin exceeds 1e-9;
//   with random logits a skipped row is very rare, and the test requires nearly all rows compared.
//   With token masks (grammar-constrained rows): the host sampler's token for the row after
//   apply_token_mask (masks of one allowed token, a few, most, EOS only, all but the top ten, and
//   unmasked rows beside them), never a masked-out token, the same ids on a second run.
// - add / convert / scale: element-wise, exact against the same fp32 operation on the host.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/hyper_connection.h"
#include "backend/cuda/ops/elementwise.cuh"
#include "backend/cuda/ops/embed_head.cuh"
#include "backend/cuda/ops/token_pick.cuh"
#include "engine/sampler.h"
#include "engine/token_constraint.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

namespace onecard {
namespace {

__nv_bfloat16* bf(uint16_t* p) {
    return reinterpret_cast<__nv_bfloat16*>(p);
}

// ---- embed_streams ----

void check_embed(int64_t n, int64_t dim, int64_t vocab, uint32_t seed) {
    SCOPED_TRACE("embed n " + std::to_string(n) + " dim " + std::to_string(dim));
    std::mt19937 rng(seed);
    const int64_t hc = 4;
    const auto embed = test::random_bf16_values(rng, static_cast<size_t>(vocab * dim));
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
    for (auto& t : tokens) t = tok(rng);
    tokens[0] = static_cast<int32_t>(vocab - 1);  // the last row of the table
    if (n > 1) tokens[1] = 0;
    // The CPU forward: every stream of token i is a copy of embed[tokens[i]] (deepseek_v4.cpp).
    std::vector<float> ref(static_cast<size_t>(n * hc * dim));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hc; ++j)
            std::copy(embed.begin() + tokens[i] * dim, embed.begin() + (tokens[i] + 1) * dim,
                      ref.begin() + (i * hc + j) * dim);

    cuda::DeviceArena arena(size_t{64} << 20, "embed test");
    auto* de = test::upload(arena, test::to_bf16_bits(embed), "embed");
    auto* dt = test::upload(arena, tokens, "tokens");
    auto* dX = arena.alloc_n<float>(ref.size(), "X");
    cuda::fill_bytes(dX, 0xFF, ref.size() * 4);
    cuda::Stream s;
    cuda::embed_streams(dt, bf(de), dX, n, dim, hc, s.get());
    s.sync();
    EXPECT_EQ(cuda::copy_to_host(dX, ref.size()), ref);
    // The bf16 variant, one row per token (the MTP block's next-token embedding).
    auto* dx1 = arena.alloc_n<uint16_t>(static_cast<size_t>(n * dim), "x");
    cuda::fill_bytes(dx1, 0xFF, static_cast<size_t>(n * dim) * 2);
    cuda::embed_streams(dt, bf(de), bf(dx1), n, dim, 1, s.get());
    s.sync();
    std::vector<float> ref1(static_cast<size_t>(n * dim));
    for (int64_t i = 0; i < n; ++i)
        std::copy(embed.begin() + tokens[i] * dim, embed.begin() + (tokens[i] + 1) * dim, ref1.begin() + i * dim);
    EXPECT_EQ(cuda::copy_to_host(dx1, ref1.size()), test::to_bf16_bits(ref1));
}

TEST(CudaModelIo, EmbedStreamsCopiesRowsExactly) {
    ONECARD_REQUIRE_GPU();
    check_embed(1, 4096, 1000, 1);
    check_embed(5, 4096, 1000, 2);
    check_embed(33, 320, 129, 3);
}

// ---- hc_head ----

void check_hc_head(int64_t n, int64_t dim, uint32_t seed) {
    SCOPED_TRACE("hc_head n " + std::to_string(n) + " dim " + std::to_string(dim));
    std::mt19937 rng(seed);
    const int64_t hc = 4, flat = hc * dim;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> X(static_cast<size_t>(n * flat));  // fp32 streams, all mantissa bits used
    for (auto& v : X) v = nd(rng);
    std::vector<float> fn(static_cast<size_t>(hc * flat)), base(static_cast<size_t>(hc));
    for (auto& v : fn) v = nd(rng) * 2.0f / std::sqrt(static_cast<float>(flat));
    for (auto& v : base) v = nd(rng);
    const std::vector<float> scale = {0.7f};
    cpu::HCParams p;
    p.hc = hc;
    p.dim = dim;
    p.hc_eps = 1e-6f;
    p.norm_eps = 1e-6f;
    std::vector<float> ref(static_cast<size_t>(n * dim));
    cpu::hc_head(X.data(), fn.data(), base.data(), scale.data(), n, p, ref.data());

    cuda::DeviceArena arena(size_t{64} << 20, "hc head test");
    auto* dX = test::upload(arena, X, "X");
    auto* dfn = test::upload(arena, fn, "fn");
    auto* dbase = test::upload(arena, base, "base");
    auto* dscale = test::upload(arena, scale, "scale");
    auto* dy = arena.alloc_n<float>(ref.size(), "y");
    cuda::fill_bytes(dy, 0xFF, ref.size() * 4);
    cuda::Stream s;
    cuda::hc_head(dX, dfn, dbase, dscale, dy, n, dim, p.hc_eps, p.norm_eps, s.get());
    s.sync();
    const auto got = cuda::copy_to_host(dy, ref.size());
    EXPECT_LE(test::rel_l2(got, ref), 1e-5);
    // Every element within the fp32 reductions' reordering (the mixes differ in the last bits, which
    // moves pre by ~1e-6 relative) plus a small absolute slack.
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_LE(std::fabs(got[i] - ref[i]), std::ldexp(std::fabs(ref[i]), -16) + 1e-5f) << "element " << i;
}

TEST(CudaModelIo, HcHeadMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_hc_head(3, 4096, 11);
    check_hc_head(1, 4096, 12);
    check_hc_head(7, 256, 13);
}

// ---- argmax_rows ----

int32_t host_argmax(const float* row, int64_t vocab) {
    int32_t best = -1;
    for (int64_t i = 0; i < vocab; ++i) {
        if (std::isnan(row[i])) continue;
        if (best < 0 || row[i] > row[best]) best = static_cast<int32_t>(i);
    }
    return best < 0 ? 0 : best;
}

TEST(CudaModelIo, ArgmaxExactWithTiesAndNaN) {
    ONECARD_REQUIRE_GPU();
    for (int64_t vocab : {int64_t{129280}, int64_t{1000}, int64_t{1}}) {
        SCOPED_TRACE("vocab " + std::to_string(vocab));
        std::mt19937 rng(static_cast<uint32_t>(vocab));
        const int64_t n = 6;
        std::normal_distribution<float> nd(0.0f, 2.0f);
        std::vector<float> logits(static_cast<size_t>(n * vocab));
        for (auto& v : logits) v = nd(rng);
        auto row = [&](int64_t r) { return logits.data() + r * vocab; };
        if (vocab > 10) {
            // Row 1: the maximum twice; the lower id must win.
            row(1)[vocab / 2] = 50.0f;
            row(1)[7] = 50.0f;
            // Row 2: NaN before and after the maximum, and a NaN where the maximum would otherwise be.
            row(2)[0] = NAN;
            row(2)[vocab - 1] = NAN;
            row(2)[3] = 40.0f;
            row(2)[vocab / 3] = NAN;
            // Row 3: the maximum at the last id. Row 4: all equal (id 0). Row 5: all -inf but one NaN.
            row(3)[vocab - 1] = 60.0f;
            std::fill(row(4), row(4) + vocab, 1.25f);
            std::fill(row(5), row(5) + vocab, -INFINITY);
            row(5)[2] = NAN;
        }
        std::vector<int32_t> ref(static_cast<size_t>(n));
        for (int64_t r = 0; r < n; ++r) ref[r] = host_argmax(row(r), vocab);
        if (vocab > 10) {
            EXPECT_EQ(ref[1], 7);
            EXPECT_EQ(ref[2], 3);
            EXPECT_EQ(ref[4], 0);
            EXPECT_EQ(ref[5], 0);
        }
        cuda::DeviceArena arena(size_t{8} << 20, "argmax test");
        auto* dl = test::upload(arena, logits, "logits");
        auto* di = arena.alloc_n<int32_t>(static_cast<size_t>(n), "ids");
        cuda::fill_bytes(di, 0xFF, static_cast<size_t>(n) * 4);
        cuda::Stream s;
        cuda::argmax_rows(dl, di, n, vocab, s.get());
        s.sync();
        EXPECT_EQ(cuda::copy_to_host(di, static_cast<size_t>(n)), ref);
    }
}

// ---- sample_rows ----

struct SampleCase {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    float sigma;       // logit spread: small = flat distribution (huge nucleus), large = peaked
    bool bf16_logits;  // round logits to bf16: many exact ties, exercising the lower-id rule
};

// The CPU's probabilities (engine/sampler.cpp's formula), for measuring margins only.
std::vector<double> host_probs(const float* logits, int64_t vocab, float temperature) {
    const float mx = *std::max_element(logits, logits + vocab);
    std::vector<double> q(static_cast<size_t>(vocab));
    double sum = 0.0;
    for (int64_t t = 0; t < vocab; ++t) {
        q[t] = std::exp((static_cast<double>(logits[t]) - mx) / temperature);
        sum += q[t];
    }
    for (double& v : q) v /= sum;
    return q;
}

// Smallest relative distance of this row's decision points to a boundary: the draw u to every
// cumulative boundary of the CPU's candidates, the top-p target to the survivors' running masses,
// and the min-p threshold to every probability. Large margin => fp summation order cannot matter.
double decision_margin(const float* logits, int64_t vocab, const SamplingParams& sp, const Candidates& c, double u) {
    double margin = std::numeric_limits<double>::infinity();
    if (c.tokens.size() > 1) {
        double cum = 0.0;
        for (double p : c.probs) {
            cum += p;
            margin = std::min(margin, std::fabs(u - cum));
        }
    }
    if (sp.temperature == 0.0f) return margin;
    const auto q = host_probs(logits, vocab, sp.temperature);
    const double q_max = *std::max_element(q.begin(), q.end());
    const double min_keep = sp.min_p > 0.0f ? static_cast<double>(sp.min_p) * q_max : 0.0;
    if (sp.min_p > 0.0f)
        for (double v : q) margin = std::min(margin, std::fabs(v - min_keep) / q_max);
    if (sp.top_p < 1.0f) {
        std::vector<int32_t> idx;
        for (int64_t t = 0; t < vocab; ++t)
            if (q[t] > 0.0 && q[t] >= min_keep) idx.push_back(static_cast<int32_t>(t));
        std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return q[a] > q[b] || (q[a] == q[b] && a < b); });
        if (sp.top_k > 0 && static_cast<size_t>(sp.top_k) < idx.size()) idx.resize(static_cast<size_t>(sp.top_k));
        double mass = 0.0;
        for (int32_t t : idx) mass += q[t];
        const double target = static_cast<double>(sp.top_p) * mass;
        double cum = 0.0;
        for (int32_t t : idx) {
            cum += q[t];
            margin = std::min(margin, std::fabs(cum - target) / mass);
            if (cum > target * 1.001 + 1e-300) break;
        }
    }
    return margin;
}

// Arena size for one sampling check: logits, params, ids, scratch, with alignment slack.
size_t sample_bytes_with_slack(int64_t n, int64_t vocab) {
    return static_cast<size_t>(n * vocab) * sizeof(float) + static_cast<size_t>(n) * (sizeof(cuda::SampleParams) + 4) +
           cuda::sample_rows_scratch_bytes(n, vocab) + (size_t{1} << 16);
}

void check_sampling(int64_t vocab, const std::vector<SampleCase>& cases, int rows_per_case, uint32_t seed) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    std::mt19937_64 rng(seed);
    const int64_t n = static_cast<int64_t>(cases.size()) * rows_per_case;
    std::vector<float> logits(static_cast<size_t>(n * vocab));
    std::vector<cuda::SampleParams> params(static_cast<size_t>(n));
    std::vector<SamplingParams> cpu_params(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
        const SampleCase& sc = cases[static_cast<size_t>(r / rows_per_case)];
        std::normal_distribution<float> nd(0.0f, sc.sigma);
        for (int64_t t = 0; t < vocab; ++t) {
            float v = nd(rng);
            logits[r * vocab + t] = sc.bf16_logits ? round_bf16(v) : v;
        }
        cuda::SampleParams& gp = params[static_cast<size_t>(r)];
        gp.temperature = sc.temperature;
        gp.top_k = sc.top_k;
        gp.top_p = sc.top_p;
        gp.min_p = sc.min_p;
        gp.seed = rng();
        gp.counter = rng() % 300;
        SamplingParams& cp = cpu_params[static_cast<size_t>(r)];
        cp.temperature = sc.temperature;
        cp.top_k = sc.top_k;
        cp.top_p = sc.top_p;
        cp.min_p = sc.min_p;
    }

    cuda::DeviceArena arena(sample_bytes_with_slack(n, vocab), "sample test");
    auto* dl = test::upload(arena, logits, "logits");
    auto* dp = arena.alloc_n<cuda::SampleParams>(params.size(), "params");
    cuda::copy_to_device(static_cast<void*>(dp), params.data(), params.size() * sizeof(cuda::SampleParams));
    auto* di = arena.alloc_n<int32_t>(static_cast<size_t>(n), "ids");
    cuda::fill_bytes(di, 0xFF, static_cast<size_t>(n) * 4);
    void* scratch = arena.alloc(cuda::sample_rows_scratch_bytes(n, vocab), "scratch");
    cuda::Stream s;
    cuda::sample_rows(dl, dp, nullptr, di, n, vocab, scratch, s.get());
    s.sync();
    const auto got = cuda::copy_to_host(di, static_cast<size_t>(n));

    Sampler sampler;
    int compared = 0, skipped = 0;
    for (int64_t r = 0; r < n; ++r) {
        const auto& sp = cpu_params[static_cast<size_t>(r)];
        const auto& gp = params[static_cast<size_t>(r)];
        const std::span<const float> row(logits.data() + r * vocab, static_cast<size_t>(vocab));
        // The counter is output.size(); with no penalties the output's contents do not matter.
        const std::vector<int32_t> output(static_cast<size_t>(gp.counter), 0);
        const int32_t want = sampler.sample(row, sp, {}, output, gp.seed).token;
        const Candidates c = sampler.target_distribution(row, sp, {}, output);
        const double u = sampler_uniform(gp.seed, gp.counter);
        const double margin = decision_margin(row.data(), vocab, sp, c, u);
        const std::string what = "row " + std::to_string(r) + " T " + std::to_string(sp.temperature) + " top_k " +
                                 std::to_string(sp.top_k) + " top_p " + std::to_string(sp.top_p) + " min_p " +
                                 std::to_string(sp.min_p) + " candidates " + std::to_string(c.tokens.size());
        if (margin < 1e-9) {
            ++skipped;
            // Either side of the boundary is a correct answer here; it must still be a token.
            EXPECT_TRUE(got[static_cast<size_t>(r)] >= 0 && got[static_cast<size_t>(r)] < vocab) << what;
            continue;
        }
        ++compared;
        EXPECT_EQ(got[static_cast<size_t>(r)], want) << what << " margin " << margin;
    }
    EXPECT_LE(skipped, std::max<int>(1, static_cast<int>(n) / 20))
        << "too many rows too close to a boundary to compare";
    EXPECT_GT(compared, 0);
}

std::vector<SampleCase> sampling_cases() {
    // temperature, top_k, top_p, min_p, sigma, bf16 logits
    return {
        {0.0f, 0, 1.0f, 0.0f, 2.0f, false},       // greedy
        {1.0f, 0, 1.0f, 0.0f, 2.0f, false},       // temperature only: the draw walks token-id order
        {0.7f, 50, 1.0f, 0.0f, 2.0f, false},      // top-k
        {1.0f, 0, 0.9f, 0.0f, 1.0f, false},       // top-p over a flat distribution (huge nucleus)
        {1.2f, 0, 1.0f, 0.05f, 2.0f, false},      // min-p
        {0.8f, 40, 0.8f, 0.02f, 3.0f, false},     // min-p, top-k and top-p together
        {1.0f, 1, 1.0f, 0.0f, 2.0f, false},       // top-k = 1 is the argmax
        {1.0f, 200000, 1.0f, 0.0f, 2.0f, false},  // top-k past the vocabulary: no cut, id order
        {1.0f, 0, 0.999f, 0.0f, 0.5f, false},     // nearly the whole vocabulary in the nucleus
        {1.0f, 20, 0.7f, 0.0f, 2.0f, true},       // bf16 logits: exact ties, lower id first
        {0.9f, 0, 0.95f, 0.0f, 2.0f, true},      {1.5f, 0, 1.0f, 0.1f, 1.0f, true},
    };
}

TEST(CudaModelIo, SampleRowsPicksTheCpuTokenFlashVocab) {
    ONECARD_REQUIRE_GPU();
    check_sampling(129280, sampling_cases(), 4, 21);
}

TEST(CudaModelIo, SampleRowsPicksTheCpuTokenSmallVocab) {
    ONECARD_REQUIRE_GPU();
    check_sampling(1000, sampling_cases(), 10, 22);
}

TEST(CudaModelIo, SampleRowsSingleRow) {
    ONECARD_REQUIRE_GPU();
    check_sampling(1000, {{1.0f, 0, 0.9f, 0.0f, 1.0f, false}}, 1, 23);
    check_sampling(129280, {{0.6f, 0, 1.0f, 0.0f, 1.5f, false}}, 1, 24);
}

// ---- sample_rows with token masks (grammar-constrained rows) ----

enum class MaskKind { None, One, Few, Most, EosOnly, NoTopTen };

// A row's allowed-token bitmask; kEos stands for the EOS id (the last one).
std::vector<uint32_t> make_mask(MaskKind kind, const float* logits, int64_t vocab, std::mt19937_64& rng) {
    std::vector<uint32_t> m(static_cast<size_t>((vocab + 31) / 32), 0u);
    auto allow = [&](int64_t t) { m[static_cast<size_t>(t >> 5)] |= 1u << (t & 31); };
    std::uniform_int_distribution<int64_t> tok(0, vocab - 1);
    switch (kind) {
        case MaskKind::None:  // unused: the row's masked flag is off, its zeros must not apply
            break;
        case MaskKind::One:
            allow(tok(rng));
            break;
        case MaskKind::Few:
            for (int i = 0; i < 5; ++i) allow(tok(rng));
            break;
        case MaskKind::Most:
            for (int64_t t = 0; t < vocab; ++t)
                if (rng() % 10 != 0) allow(t);
            break;
        case MaskKind::EosOnly:
            allow(vocab - 1);
            break;
        case MaskKind::NoTopTen: {  // everything but the ten largest logits: the argmax is out
            std::vector<int32_t> idx(static_cast<size_t>(vocab));
            std::iota(idx.begin(), idx.end(), 0);
            std::partial_sort(idx.begin(), idx.begin() + 10, idx.end(),
                              [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
            for (int64_t t = 0; t < vocab; ++t) allow(t);
            for (int i = 0; i < 10; ++i) m[static_cast<size_t>(idx[i] >> 5)] &= ~(1u << (idx[i] & 31));
            break;
        }
    }
    return m;
}

bool mask_allows(const std::vector<uint32_t>& m, int32_t t) {
    return (m[static_cast<size_t>(t >> 5)] >> (t & 31)) & 1u;
}

// Every (sampling case, mask kind) pair, rows_per_pair rows each: the GPU's token is the host
// sampler's for the row after engine/token_constraint.h's apply_token_mask, and always allowed.
void check_masked_sampling(int64_t vocab, int rows_per_pair, uint32_t seed) {
    SCOPED_TRACE("masked, vocab " + std::to_string(vocab));
    const std::vector<SampleCase> cases = sampling_cases();
    const std::vector<MaskKind> kinds = {MaskKind::None, MaskKind::One,     MaskKind::Few,
                                         MaskKind::Most, MaskKind::EosOnly, MaskKind::NoTopTen};
    std::mt19937_64 rng(seed);
    const int64_t words = (vocab + 31) / 32;
    const int64_t n = static_cast<int64_t>(cases.size() * kinds.size()) * rows_per_pair;
    std::vector<float> logits(static_cast<size_t>(n * vocab));
    std::vector<uint32_t> masks(static_cast<size_t>(n * words));
    std::vector<cuda::SampleParams> params(static_cast<size_t>(n));
    std::vector<SamplingParams> cpu_params(static_cast<size_t>(n));
    std::vector<MaskKind> row_kind(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
        const SampleCase& sc = cases[static_cast<size_t>(r / rows_per_pair) % cases.size()];
        const MaskKind kind = kinds[static_cast<size_t>(r / rows_per_pair) / cases.size()];
        row_kind[static_cast<size_t>(r)] = kind;
        std::normal_distribution<float> nd(0.0f, sc.sigma);
        float* row = logits.data() + r * vocab;
        for (int64_t t = 0; t < vocab; ++t) row[t] = sc.bf16_logits ? round_bf16(nd(rng)) : nd(rng);
        const auto m = make_mask(kind, row, vocab, rng);
        std::copy(m.begin(), m.end(), masks.begin() + r * words);
        cuda::SampleParams& gp = params[static_cast<size_t>(r)];
        gp.temperature = sc.temperature;
        gp.top_k = sc.top_k;
        gp.top_p = sc.top_p;
        gp.min_p = sc.min_p;
        gp.seed = rng();
        gp.counter = rng() % 300;
        gp.masked = kind != MaskKind::None;
        SamplingParams& cp = cpu_params[static_cast<size_t>(r)];
        cp.temperature = sc.temperature;
        cp.top_k = sc.top_k;
        cp.top_p = sc.top_p;
        cp.min_p = sc.min_p;
    }

    cuda::DeviceArena arena(sample_bytes_with_slack(n, vocab) + masks.size() * 4, "masked sample test");
    auto* dl = test::upload(arena, logits, "logits");
    auto* dm = test::upload(arena, masks, "masks");
    auto* dp = arena.alloc_n<cuda::SampleParams>(params.size(), "params");
    cuda::copy_to_device(static_cast<void*>(dp), params.data(), params.size() * sizeof(cuda::SampleParams));
    auto* di = arena.alloc_n<int32_t>(static_cast<size_t>(n), "ids");
    void* scratch = arena.alloc(cuda::sample_rows_scratch_bytes(n, vocab), "scratch");
    cuda::Stream s;
    std::vector<int32_t> got;
    for (int run = 0; run < 2; ++run) {  // twice, the output poisoned before each: the same ids
        cuda::fill_bytes(di, 0xFF, static_cast<size_t>(n) * 4);
        cuda::sample_rows(dl, dp, dm, di, n, vocab, scratch, s.get());
        s.sync();
        const auto ids = cuda::copy_to_host(di, static_cast<size_t>(n));
        if (run == 1) {
            EXPECT_EQ(ids, got) << "a second run gave other tokens";
        }
        got = ids;
    }

    Sampler sampler;
    int compared = 0, skipped = 0;
    for (int64_t r = 0; r < n; ++r) {
        const auto& sp = cpu_params[static_cast<size_t>(r)];
        const auto& gp = params[static_cast<size_t>(r)];
        std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
        const std::vector<uint32_t> m(masks.begin() + r * words, masks.begin() + (r + 1) * words);
        if (gp.masked) apply_token_mask(row, m);
        const std::vector<int32_t> output(static_cast<size_t>(gp.counter), 0);
        const int32_t want = sampler.sample(row, sp, {}, output, gp.seed).token;
        const int32_t token = got[static_cast<size_t>(r)];
        const std::string what = "row " + std::to_string(r) + " mask kind " +
                                 std::to_string(static_cast<int>(row_kind[static_cast<size_t>(r)])) + " T " +
                                 std::to_string(sp.temperature) + " top_k " + std::to_string(sp.top_k) + " top_p " +
                                 std::to_string(sp.top_p) + " min_p " + std::to_string(sp.min_p);
        ASSERT_TRUE(token >= 0 && token < vocab) << what << " token " << token;
        if (gp.masked) {
            EXPECT_TRUE(mask_allows(m, token)) << what << ": token " << token << " is masked out";
        }
        if (row_kind[static_cast<size_t>(r)] == MaskKind::EosOnly) {
            EXPECT_EQ(token, vocab - 1) << what;
        }
        const Candidates c = sampler.target_distribution(row, sp, {}, output);
        if (decision_margin(row.data(), vocab, sp, c, sampler_uniform(gp.seed, gp.counter)) < 1e-9) {
            ++skipped;
            continue;
        }
        ++compared;
        EXPECT_EQ(token, want) << what;
    }
    EXPECT_LE(skipped, std::max<int>(1, static_cast<int>(n) / 20))
        << "too many rows too close to a boundary to compare";
    EXPECT_GT(compared, 0);
}

TEST(CudaModelIo, MaskedSampleRowsPicksTheCpuTokenFlashVocab) {
    ONECARD_REQUIRE_GPU();
    check_masked_sampling(129280, 2, 41);
}

TEST(CudaModelIo, MaskedSampleRowsPicksTheCpuTokenSmallVocab) {
    ONECARD_REQUIRE_GPU();
    check_masked_sampling(1000, 5, 42);  // 1000: the last mask word is partial
}

// ---- element-wise ----

TEST(CudaModelIo, ElementwiseOpsExact) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(31);
    const int64_t n = 1000003;  // odd, not a multiple of the block
    const auto a = test::random_bf16_values(rng, static_cast<size_t>(n));
    const auto b = test::random_bf16_values(rng, static_cast<size_t>(n));
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> f(static_cast<size_t>(n));
    for (auto& v : f) v = nd(rng);  // full fp32 values, so the bf16 conversion must round

    std::vector<uint16_t> sum_ref(static_cast<size_t>(n)), conv_ref(static_cast<size_t>(n));
    std::vector<float> scaled_ref(static_cast<size_t>(n));
    const float s_factor = 0.0883883476f;  // 1/sqrt(128)
    for (int64_t i = 0; i < n; ++i) {
        sum_ref[i] = f32_to_bf16(a[i] + b[i]);
        conv_ref[i] = f32_to_bf16(f[i]);
        scaled_ref[i] = f[i] * s_factor;
    }

    cuda::DeviceArena arena(size_t{64} << 20, "elementwise test");
    auto* da = test::upload(arena, test::to_bf16_bits(a), "a");
    auto* db = test::upload(arena, test::to_bf16_bits(b), "b");
    auto* df = test::upload(arena, f, "f");
    auto* dy16 = arena.alloc_n<uint16_t>(static_cast<size_t>(n), "y16");
    auto* dy32 = arena.alloc_n<float>(static_cast<size_t>(n), "y32");
    cuda::Stream s;

    cuda::fill_bytes(dy16, 0xFF, static_cast<size_t>(n) * 2);
    cuda::add_bf16(bf(da), bf(db), bf(dy16), n, s.get());
    s.sync();
    EXPECT_EQ(cuda::copy_to_host(dy16, static_cast<size_t>(n)), sum_ref) << "add_bf16";

    cuda::fill_bytes(dy32, 0xFF, static_cast<size_t>(n) * 4);
    cuda::bf16_to_f32(bf(da), dy32, n, s.get());
    s.sync();
    EXPECT_EQ(cuda::copy_to_host(dy32, static_cast<size_t>(n)), a) << "bf16_to_f32";

    cuda::fill_bytes(dy16, 0xFF, static_cast<size_t>(n) * 2);
    cuda::f32_to_bf16(df, bf(dy16), n, s.get());
    s.sync();
    EXPECT_EQ(cuda::copy_to_host(dy16, static_cast<size_t>(n)), conv_ref) << "f32_to_bf16";

    cuda::copy_to_device(dy32, f);
    cuda::scale_f32(dy32, s_factor, n, s.get());
    s.sync();
    EXPECT_EQ(cuda::copy_to_host(dy32, static_cast<size_t>(n)), scaled_ref) << "scale_f32";

    // add_to_streams: fp32 [rows, 4, dim] += bf16 [rows, dim] in every stream (b's first rows·dim
    // values as e, f as X).
    {
        const int64_t rows = 97, dim = 1024, hc = 4;
        std::vector<float> x_ref(static_cast<size_t>(rows * hc * dim));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < hc; ++j)
                for (int64_t d = 0; d < dim; ++d) {
                    const size_t i = static_cast<size_t>((r * hc + j) * dim + d);
                    x_ref[i] = f[i] + b[static_cast<size_t>(r * dim + d)];
                }
        cuda::copy_to_device(dy32, std::vector<float>(f.begin(), f.begin() + rows * hc * dim));
        cuda::add_to_streams(bf(db), dy32, rows, hc, dim, s.get());
        s.sync();
        EXPECT_EQ(cuda::copy_to_host(dy32, x_ref.size()), x_ref) << "add_to_streams";
    }

    // split_bf16 + add_halves (the head's fp32 input through a bf16 GEMM): hi = bf16(f), lo =
    // bf16(f - hi), both exact conversions; hi + lo keeps f to 2^-16 relative; add_halves is one fp32 add.
    {
        const int64_t m = 1000, k = 1000;  // n = m·k + 3: f's first m·k values
        auto* dhl = arena.alloc_n<uint16_t>(static_cast<size_t>(2 * m * k), "hi|lo");
        cuda::split_bf16(df, bf(dhl), m, k, s.get());
        s.sync();
        const std::vector<uint16_t> hl = cuda::copy_to_host(dhl, static_cast<size_t>(2 * m * k));
        const std::vector<float> hlf = test::from_bf16_bits(hl);
        for (int64_t i = 0; i < m * k; ++i) {
            const size_t u = static_cast<size_t>(i);
            ASSERT_EQ(hl[u], f32_to_bf16(f[u])) << "hi " << i;
            ASSERT_EQ(hl[u + m * k], f32_to_bf16(f[u] - hlf[u])) << "lo " << i;
            ASSERT_LE(std::fabs(hlf[u] + hlf[u + m * k] - f[u]), std::ldexp(std::fabs(f[u]), -16)) << "hi+lo " << i;
        }
        auto* dsum = arena.alloc_n<float>(static_cast<size_t>(m * k / 2), "halves");
        cuda::add_halves(df, dsum, m / 2, k, s.get());
        s.sync();
        const std::vector<float> sum = cuda::copy_to_host(dsum, static_cast<size_t>(m * k / 2));
        for (int64_t i = 0; i < m * k / 2; ++i)
            ASSERT_EQ(sum[static_cast<size_t>(i)], f[static_cast<size_t>(i)] + f[static_cast<size_t>(i + m * k / 2)])
                << "add_halves " << i;
    }

    // n = 0 is a no-op everywhere.
    cuda::add_to_streams(bf(db), dy32, 0, 4, 1024, s.get());
    cuda::add_bf16(bf(da), bf(db), bf(dy16), 0, s.get());
    cuda::scale_f32(dy32, 2.0f, 0, s.get());
    s.sync();
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaModelIo, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
