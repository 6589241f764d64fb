// Micro-benchmark of the CUDA linear kernels at DeepSeek-V4-Flash decode/prefill shapes:
// FP8 GEMV (decode, m = 1..8), MXFP4 expert GEMV (6 routed experts per token), cuBLASLt FP8 GEMM
// (prefill), against a device-to-device copy measured in the same run (the bandwidth ceiling).
// Method (METHOD.md): random inputs (never zeros), warm-up, every repeat timed with CUDA events,
// median reported; weight sets rotated so the bytes in use exceed the 60 MB L2 several times.
// Usage: gemv_cuda_bench [--out results.jsonl] [--repeats N]
// Built by src/backend/cuda/CMakeLists.txt (not bench/CMakeLists.txt, which links no CUDA).
#include "backend/cuda/arena.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/ops/fp8_gemm.cuh"
#include "backend/cuda/ops/fp8_gemv.cuh"
#include "backend/cuda/ops/fp8_quant.cuh"
#include "backend/cuda/ops/mxfp4_gemv.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace onecard {
namespace {

constexpr uint64_t kRotateBytes = 512ull << 20;  // > 8× the 60 MB L2

struct Result {
    std::string kernel, shape;
    double median_us = 0, bytes = 0, flops = 0;
};

// Random bytes with the given mask, no E4M3 NaN codes (0x7F/0xFF) and no zeros.
void fill_random(void* dst, size_t n, uint32_t seed, bool e4m3) {
    std::vector<uint8_t> h(n);
    std::mt19937 rng(seed);
    for (auto& b : h) {
        do {
            b = static_cast<uint8_t>(rng());
        } while (b == 0 || (e4m3 && (b & 0x7F) == 0x7F));
    }
    cuda::copy_to_device(dst, h.data(), n);
}

void fill_scales(void* dst, size_t n, uint32_t seed) {
    std::vector<uint8_t> h(n);
    std::mt19937 rng(seed);
    for (auto& b : h) b = static_cast<uint8_t>(118 + rng() % 12);
    cuda::copy_to_device(dst, h.data(), n);
}

double median_us(const std::function<void(int)>& fn, cudaStream_t s, int warmup, int repeats) {
    for (int i = 0; i < warmup; ++i) fn(i);
    cuda::Event a, b;
    std::vector<float> ms;
    for (int r = 0; r < repeats; ++r) {
        a.record(s);
        fn(r);
        b.record(s);
        b.sync();
        ms.push_back(b.elapsed_ms_since(a));
    }
    std::sort(ms.begin(), ms.end());
    return 1000.0 * ms[ms.size() / 2];
}

int run(int argc, char** argv) {
    std::string out_path;
    int repeats = 50;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--out") && i + 1 < argc)
            out_path = argv[++i];
        else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
            repeats = std::atoi(argv[++i]);
        else
            fail("usage: gemv_cuda_bench [--out FILE.jsonl] [--repeats N]");
    }
    const std::string reason = cuda::no_device_reason();
    ONECARD_CHECK(reason.empty(), "gemv_cuda_bench needs a GPU: {}", reason);
    const auto dev = cuda::list_devices().at(0);
    int driver = 0;
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    std::printf("device: %s, %d SMs, %.1f GiB, driver API %d\n", dev.name.c_str(), dev.n_sm,
                dev.total_bytes / 1073741824.0, driver);

    cuda::DeviceArena arena(size_t{6} << 30, "bench");
    cuda::Stream stream;
    const cudaStream_t s = stream.get();
    std::vector<Result> results;
    const int warmup = 5;

    // ---- ceiling: device-to-device copy (bytes read + written) ----
    {
        const size_t n = size_t{1} << 30;
        void* a = arena.alloc(n, "copy src");
        void* b = arena.alloc(n, "copy dst");
        fill_random(a, n, 1, false);
        const double us = median_us([&](int) { CUDA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s)); }, s,
                                    3, std::max(10, repeats / 5));
        results.push_back({"d2d_copy", "1 GiB", us, 2.0 * n, 0});
        arena.release({0, 0});
    }
    const double copy_bw = results[0].bytes / (results[0].median_us * 1e-6);

    // ---- FP8 GEMV at the Flash linears ----
    struct Shape {
        const char* name;
        int64_t n, k;
    };
    const Shape fp8_shapes[] = {{"wq_a", 1024, 4096},     {"wq_b", 32768, 1024}, {"wkv", 512, 4096},
                                {"wo_a", 8192, 4096},     {"wo_b", 4096, 8192},  {"shared_w1", 2048, 4096},
                                {"shared_w2", 4096, 2048}};
    for (const int64_t m : {int64_t{1}, int64_t{8}, int64_t{32}}) {
        for (const auto& sh : fp8_shapes) {
            const auto mark = arena.mark();
            const uint64_t w_bytes = static_cast<uint64_t>(sh.n * sh.k);
            const uint64_t s_bytes = static_cast<uint64_t>((sh.n + 127) / 128 * (sh.k / 128));
            const int n_sets = static_cast<int>(std::max<uint64_t>(2, kRotateBytes / w_bytes + 1));
            auto* w = arena.alloc_n<uint8_t>(w_bytes * n_sets, "w");
            auto* ws8 = arena.alloc_n<uint8_t>(s_bytes, "ws8");
            auto* ws = arena.alloc_n<float>(s_bytes, "ws");
            auto* x = arena.alloc_n<uint8_t>(static_cast<size_t>(m * sh.k), "xq");
            auto* xs = arena.alloc_n<float>(static_cast<size_t>(m * sh.k / 128), "xs");
            auto* y = arena.alloc_n<__nv_bfloat16>(static_cast<size_t>(m * sh.n), "y");
            fill_random(w, w_bytes * n_sets, 2, true);
            fill_random(x, static_cast<size_t>(m * sh.k), 3, true);
            fill_scales(ws8, s_bytes, 4);
            cuda::ue8m0_to_f32(ws8, ws, (sh.n + 127) / 128, sh.k / 128, false, s);
            std::vector<float> xsh(static_cast<size_t>(m * sh.k / 128), 0.015625f);
            cuda::copy_to_device(xs, xsh);
            const double us =
                median_us([&](int r) { cuda::fp8_gemv(x, xs, w + (r % n_sets) * w_bytes, ws, y, m, sh.n, sh.k, s); }, s,
                          warmup, repeats);
            results.push_back({fmt::format("fp8_gemv_m{}", m), fmt::format("{} [{}x{}]", sh.name, sh.n, sh.k), us,
                               static_cast<double>(w_bytes + s_bytes * 4), 2.0 * m * sh.n * sh.k});
            arena.release(mark);
        }
    }

    // ---- MXFP4 routed experts (tensor-core grouped GEMV): batch 1 and 64, top-6 of 216 resident
    // experts, rotating picks; bytes = the distinct experts' codes + scales, averaged over the lists ----
    {
        const int64_t n_exp = 216, top_k = 6;
        struct EShape {
            const char* name;
            int64_t n, k;
        };
        for (const int64_t batch : {int64_t{1}, int64_t{64}}) {
            for (const EShape sh : {EShape{"experts_w1", 2048, 4096}, EShape{"experts_w2", 4096, 2048}}) {
                const auto mark = arena.mark();
                const int64_t n_pairs = batch * top_k;
                const uint64_t w_bytes = static_cast<uint64_t>(sh.n * sh.k / 2),
                               s_bytes = static_cast<uint64_t>(sh.n * sh.k / 32);
                auto* w = arena.alloc_n<uint8_t>(w_bytes * n_exp, "experts");
                auto* ws = arena.alloc_n<uint8_t>(s_bytes * n_exp, "expert scales");
                auto* x = arena.alloc_n<uint8_t>(static_cast<size_t>(batch * sh.k), "xq");
                auto* xs = arena.alloc_n<float>(static_cast<size_t>(batch * sh.k / 128), "xs");
                auto* y = arena.alloc_n<__nv_bfloat16>(static_cast<size_t>(n_pairs * sh.n), "y");
                const int n_lists = 32;
                auto* ids = arena.alloc_n<int32_t>(static_cast<size_t>(n_lists * n_pairs), "ids");
                auto* rows = arena.alloc_n<int32_t>(static_cast<size_t>(n_pairs), "rows");
                const int64_t ints = cuda::mxfp4_group_scratch_ints(n_pairs);
                auto* scratch = arena.alloc_n<int32_t>(static_cast<size_t>(ints), "group scratch");
                fill_random(w, w_bytes * n_exp, 5, false);
                fill_scales(ws, s_bytes * n_exp, 6);
                fill_random(x, static_cast<size_t>(batch * sh.k), 7, true);
                std::vector<float> xsh(static_cast<size_t>(batch * sh.k / 128), 0.015625f);
                cuda::copy_to_device(xs, xsh);
                std::vector<int32_t> hid(static_cast<size_t>(n_lists * n_pairs)), hrow(static_cast<size_t>(n_pairs));
                for (int64_t p = 0; p < n_pairs; ++p) hrow[static_cast<size_t>(p)] = static_cast<int32_t>(p / top_k);
                std::mt19937 rng(8);
                double distinct = 0;
                for (int l = 0; l < n_lists; ++l) {
                    std::vector<bool> used(static_cast<size_t>(n_exp), false);
                    for (int64_t t = 0; t < batch; ++t) {
                        std::vector<int32_t> perm(static_cast<size_t>(n_exp));
                        for (int e = 0; e < n_exp; ++e) perm[static_cast<size_t>(e)] = e;
                        std::shuffle(perm.begin(), perm.end(), rng);
                        for (int j = 0; j < top_k; ++j) {
                            hid[static_cast<size_t>(l * n_pairs + t * top_k + j)] = perm[static_cast<size_t>(j)];
                            used[static_cast<size_t>(perm[static_cast<size_t>(j)])] = true;
                        }
                    }
                    distinct += static_cast<double>(std::count(used.begin(), used.end(), true)) / n_lists;
                }
                cuda::copy_to_device(ids, hid);
                cuda::copy_to_device(rows, hrow);
                const double us = median_us(
                    [&](int r) {
                        const auto g = cuda::mxfp4_group_pairs(ids + (r % n_lists) * n_pairs, n_pairs, n_exp, batch,
                                                               scratch, ints, s);
                        cuda::mxfp4_grouped_gemv({x, xs, rows, {w, ws, y}, {}, sh.n, sh.k}, g, s);
                    },
                    s, warmup, repeats);
                results.push_back({fmt::format("mxfp4_grouped_b{}", batch),
                                   fmt::format("{} [{}x{}]", sh.name, sh.n, sh.k), us,
                                   distinct * static_cast<double>(w_bytes + s_bytes),
                                   2.0 * static_cast<double>(n_pairs * sh.n * sh.k)});
                arena.release(mark);
            }
        }
    }

    // ---- cuBLASLt block-scaled FP8 GEMM (prefill) ----
    {
        const size_t ws_bytes = size_t{32} << 20;
        void* lt_ws = arena.alloc(ws_bytes, "cublaslt workspace");
        cuda::Fp8GemmLt gemm(lt_ws, ws_bytes);
        struct G {
            const char* name;
            int64_t m, n, k;
        };
        for (const G g : {G{"wq_b", 8192, 32768, 1024}, G{"wo_a", 8192, 8192, 4096}, G{"shared_w1", 8192, 2048, 4096},
                          G{"square", 8192, 8192, 8192}, G{"wq_a_m16", 16, 1024, 4096}}) {
            const auto mark = arena.mark();
            auto* w = arena.alloc_n<uint8_t>(static_cast<size_t>(g.n * g.k), "w");
            auto* ws = arena.alloc_n<float>(static_cast<size_t>(g.n / 128 * g.k / 128), "ws");
            auto* x = arena.alloc_n<uint8_t>(static_cast<size_t>(g.m * g.k), "xq");
            auto* xs = arena.alloc_n<float>(static_cast<size_t>(g.m * g.k / 128), "xs");
            auto* y = arena.alloc_n<__nv_bfloat16>(static_cast<size_t>(g.m * g.n), "y");
            fill_random(w, static_cast<size_t>(g.n * g.k), 9, true);
            fill_random(x, static_cast<size_t>(g.m * g.k), 10, true);
            std::vector<float> one(static_cast<size_t>(std::max(g.n / 128 * g.k / 128, g.m * g.k / 128)), 0.0078125f);
            cuda::copy_to_device(ws, one.data(), static_cast<size_t>(g.n / 128 * g.k / 128) * 4);
            cuda::copy_to_device(xs, one.data(), static_cast<size_t>(g.m * g.k / 128) * 4);
            try {
                const double us = median_us([&](int) { gemm.run(x, xs, w, ws, y, g.m, g.n, g.k, s); }, s, warmup,
                                            std::max(10, repeats / 2));
                results.push_back({"cublaslt_fp8_blockscaled", fmt::format("{} m{} [{}x{}]", g.name, g.m, g.n, g.k), us,
                                   static_cast<double>(g.n * g.k + g.m * g.k + 2 * g.m * g.n), 2.0 * g.m * g.n * g.k});
            } catch (const Error& e) {
                std::printf("cublaslt %s: %s\n", g.name, e.what());
            }
            arena.release(mark);
        }
    }
    stream.sync();

    std::FILE* out = out_path.empty() ? nullptr : std::fopen(out_path.c_str(), "w");
    std::printf("\n%-26s %-32s %10s %10s %8s %10s\n", "kernel", "shape", "median_us", "GB/s", "of_copy", "TFLOP/s");
    for (const auto& r : results) {
        const double gbs = r.bytes / (r.median_us * 1e-6) / 1e9;
        const double tflops = r.flops / (r.median_us * 1e-6) / 1e12;
        std::printf("%-26s %-32s %10.1f %10.1f %7.1f%% %10.2f\n", r.kernel.c_str(), r.shape.c_str(), r.median_us, gbs,
                    100.0 * gbs * 1e9 / copy_bw, tflops);
        if (out)
            std::fprintf(out,
                         "{\"kernel\":\"%s\",\"shape\":\"%s\",\"median_us\":%.3f,\"bytes\":%.0f,\"gb_s\":%.1f,"
                         "\"fraction_of_copy\":%.4f,\"tflops\":%.3f,\"device\":\"%s\",\"driver\":%d,\"repeats\":%d}\n",
                         r.kernel.c_str(), r.shape.c_str(), r.median_us, r.bytes, gbs, gbs * 1e9 / copy_bw, tflops,
                         dev.name.c_str(), driver, repeats);
    }
    if (out) std::fclose(out);
    return 0;
}

}  // namespace
}  // namespace onecard

int main(int argc, char** argv) {
    try {
        return onecard::run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
