// Sparse attention with sink, decode: the GPU kernel reads FP8 KV entries (kvcache/kv_format.h) by
// byte offset; the CPU reference decodes the same entries with decode_kv_entry and runs
// cpu::attention_with_sink over the gathered keys. Tolerance: relative L2 ≤ 4e-3 and worst element
// ≤ 1e-2 of max|ref| (fp32 online softmax in another order + bf16 output).
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/attention.h"
#include "backend/cuda/ops/sparse_attention.cuh"
#include "kvcache/kv_format.h"

namespace onecard {
namespace {

TEST(CudaSparseAttention, WindowPlusSelectedEntriesMatchCpu) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(71);
    const int64_t H = 64, Dh = 512, n_tok = 4, n_entries = 900, max_keys = 128 + 96;
    const KvEntryFormat fmt = make_kv_entry_format(Dh, 64, 64);
    const int64_t eb = fmt.entry_bytes();

    // Pool of encoded entries (the rope dims bf16-valued, as the cache stores them).
    std::vector<uint8_t> pool(static_cast<size_t>(n_entries * eb));
    std::vector<float> decoded(static_cast<size_t>(n_entries * Dh));
    for (int64_t e = 0; e < n_entries; ++e) {
        const auto v = test::random_bf16_values(rng, static_cast<size_t>(Dh));
        encode_kv_entry(fmt, v.data(), pool.data() + e * eb);
        decode_kv_entry(fmt, pool.data() + e * eb, decoded.data() + e * Dh);
    }
    // Key lists: a window (consecutive entries), then "selected" entries in random order, some −1
    // holes and a duplicate; token 3 sees only a handful of keys (start of a sequence).
    std::uniform_int_distribution<int64_t> pick(0, n_entries - 1);
    std::vector<int64_t> idx(static_cast<size_t>(n_tok * max_keys), -1);
    for (int64_t t = 0; t < n_tok; ++t) {
        const int64_t n_valid = t == 3 ? 5 : max_keys;
        for (int64_t j = 0; j < n_valid; ++j) {
            int64_t e = j < 128 ? (t * 200 + j) % n_entries : pick(rng);
            if (j % 37 == 5) e = -1;
            if (j == 150) e = idx[t * max_keys + 140];
            idx[t * max_keys + j] = e;
        }
    }
    const auto q = test::random_bf16_values(rng, static_cast<size_t>(n_tok * H * Dh));
    std::vector<float> sink(static_cast<size_t>(H));
    std::normal_distribution<float> nd(0.0f, 1.5f);
    for (auto& s : sink) s = nd(rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));

    std::vector<float> ref(static_cast<size_t>(n_tok * H * Dh));
    for (int64_t t = 0; t < n_tok; ++t) {
        std::vector<float> kv;
        for (int64_t j = 0; j < max_keys; ++j) {
            const int64_t e = idx[t * max_keys + j];
            if (e >= 0) kv.insert(kv.end(), decoded.begin() + e * Dh, decoded.begin() + (e + 1) * Dh);
        }
        cpu::attention_with_sink(q.data() + t * H * Dh, kv.data(), static_cast<int64_t>(kv.size()) / Dh, sink.data(), H,
                                 Dh, scale, ref.data() + t * H * Dh);
    }

    cuda::DeviceArena arena(size_t{64} << 20, "attention test");
    auto* dq = test::upload(arena, test::to_bf16_bits(q), "q");
    auto* dpool = test::upload(arena, pool, "pool");
    // The kernel takes byte offsets into the pool (slots and blocks interleave entry kinds).
    std::vector<int64_t> offs(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) offs[i] = idx[i] < 0 ? -1 : idx[i] * eb;
    auto* didx = test::upload(arena, offs, "kv offsets");
    auto* dsink = test::upload(arena, sink, "sink");
    auto* dout = arena.alloc_n<uint16_t>(ref.size(), "out");
    cuda::fill_bytes(dout, 0xFF, ref.size() * 2);
    cuda::SparseAttnDims d;
    d.n_heads = H;
    d.entry_bytes = eb;
    d.scale = scale;
    cuda::Stream s;
    cuda::sparse_attention_decode(reinterpret_cast<const __nv_bfloat16*>(dq), dpool, didx, max_keys, dsink,
                                  reinterpret_cast<__nv_bfloat16*>(dout), n_tok, d, s.get());
    s.sync();
    const auto out = test::from_bf16_bits(cuda::copy_to_host(dout, ref.size()));
    EXPECT_LE(test::rel_l2(out, ref), 4e-3);
    EXPECT_LE(test::max_err_rel_to_max(out, ref), 1e-2);
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaSparseAttention, Unavailable) { GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)"; }
#endif
