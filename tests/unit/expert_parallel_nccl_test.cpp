// Expert parallelism over NCCL (src/parallel/nccl_comm, docs/PARALLEL.md): the host-only parts of the
// module (NVLS default, type sizes, version) anywhere NCCL is built; on 2 GPUs in one process,
// all_to_all_v / all_gather(_v) moving a real dispatch plan, bitwise against the host's combine, and the
// id-file bootstrap of `onecard serve --gpus N` with threads as ranks. Skips with the reason on fewer
// GPUs or without NCCL. The CPU side of expert parallelism is expert_parallel_test.cpp.
#include "parallel/expert_partition.h"

#ifdef ONECARD_HAVE_NCCL
#include "parallel/nccl_comm.h"

#include <cuda_runtime_api.h>
#endif

#include "support/expert_routing.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace onecard::parallel {
namespace {

using test::random_routing;
using test::Routing;

#ifdef ONECARD_HAVE_NCCL
int visible_gpus() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // no driver here: clear the sticky error, count none
        return 0;
    }
    return n;
}

// The host-only parts of the NCCL module run here, without a GPU.
TEST(NcclHost, NvlsOffUnlessSetAndTypeSizes) {
    const char* before = std::getenv("NCCL_NVLS_ENABLE");
    const std::string saved = before ? before : "";
    ::unsetenv("NCCL_NVLS_ENABLE");
    EXPECT_EQ(disable_nvls_unless_set(), "0");
    ::setenv("NCCL_NVLS_ENABLE", "1", 1);  // an operator's explicit choice is kept
    EXPECT_EQ(disable_nvls_unless_set(), "1");
    if (before)
        ::setenv("NCCL_NVLS_ENABLE", saved.c_str(), 1);
    else
        ::unsetenv("NCCL_NVLS_ENABLE");
    EXPECT_EQ(nccl_type_bytes(ncclBfloat16), 2u);
    EXPECT_EQ(nccl_type_bytes(ncclFloat32), 4u);
    EXPECT_EQ(nccl_type_bytes(ncclInt64), 8u);
    EXPECT_EQ(nccl_type_bytes(ncclUint8), 1u);
    const std::string v = nccl_version_string();
    EXPECT_EQ(v.rfind(std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + ".", 0), 0u) << v;
}

#define CK(call) ASSERT_EQ((call), cudaSuccess) << #call

// Two ranks, one process, one device each (ncclCommInitAll). Each rank is a source with its own
// tokens and routing (the data-parallel-attention layout): token rows go out by all_to_all_v, every
// rank "computes" its pairs with a per-expert function, the rows come back by all_to_all_v and the
// combine must equal the host's single-device result bitwise; then all_gather and all_gather_v.
TEST(NcclExpertParallel, TwoGpuDispatchAndCombine) {
    const int n_gpus = visible_gpus();
    if (n_gpus < 2) GTEST_SKIP() << "needs 2 GPUs (CUDA sees " << n_gpus << ")";
    std::printf("NCCL %s, NCCL_NVLS_ENABLE=%s\n", nccl_version_string().c_str(), disable_nvls_unless_set().c_str());
    std::vector<NcclComm> comms = NcclComm::init_all({0, 1});
    ASSERT_EQ(comms.size(), 2u);
    const int N = 2;
    const int64_t E = 16, K = 4, D = 64;
    const ExpertPartition part(E, N);
    std::mt19937 rng(99);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t n_tok[N] = {37, 5};
    std::vector<std::vector<float>> x(N);
    std::vector<Routing> rt(N);
    std::vector<DispatchPlan> plan;
    for (int s = 0; s < N; ++s) {
        x[static_cast<size_t>(s)].resize(static_cast<size_t>(n_tok[s] * D));
        for (auto& v : x[static_cast<size_t>(s)]) v = nd(rng);
        rt[static_cast<size_t>(s)] = random_routing(rng, n_tok[s], E, K);
        plan.push_back(make_dispatch_plan(part, rt[static_cast<size_t>(s)].experts.data(),
                                          rt[static_cast<size_t>(s)].weights.data(), n_tok[s], K));
        plan.back().check_integrity();
    }
    // Send buffers (rows in the plan's order), receive layout: from source s at offsets by s.
    std::vector<float*> d_send(N), d_recv(N), d_out(N), d_back(N);
    std::vector<cudaStream_t> streams(N);
    std::vector<std::vector<int64_t>> s_cnt(N), s_off(N), r_cnt(N), r_off(N);
    for (int r = 0; r < N; ++r) {
        const auto ur = static_cast<size_t>(r);
        CK(cudaSetDevice(r));
        CK(cudaStreamCreate(&streams[ur]));
        std::vector<float> send(static_cast<size_t>(plan[ur].token_offsets.back() * D));
        for (size_t i = 0; i < plan[ur].send_tokens.size(); ++i)
            std::copy_n(x[ur].begin() + plan[ur].send_tokens[i] * D, D, send.begin() + static_cast<int64_t>(i) * D);
        int64_t recv_total = 0;
        for (int s = 0; s < N; ++s) {
            s_cnt[ur].push_back(plan[ur].token_counts[static_cast<size_t>(s)] * D);
            s_off[ur].push_back(plan[ur].token_offsets[static_cast<size_t>(s)] * D);
            r_cnt[ur].push_back(plan[static_cast<size_t>(s)].token_counts[ur] * D);
            r_off[ur].push_back(recv_total);
            recv_total += r_cnt[ur].back();
        }
        CK(cudaMalloc(&d_send[ur], std::max<size_t>(send.size(), 1) * sizeof(float)));
        CK(cudaMalloc(&d_recv[ur], static_cast<size_t>(std::max<int64_t>(recv_total, 1)) * sizeof(float)));
        CK(cudaMemset(d_recv[ur], 0xFF, static_cast<size_t>(std::max<int64_t>(recv_total, 1)) * sizeof(float)));
        CK(cudaMemcpy(d_send[ur], send.data(), send.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    {
        NcclGroup g;
        for (int r = 0; r < N; ++r) {
            const auto ur = static_cast<size_t>(r);
            comms[ur].all_to_all_v(d_send[ur], s_cnt[ur].data(), s_off[ur].data(), d_recv[ur], r_cnt[ur].data(),
                                   r_off[ur].data(), ncclFloat32, streams[ur]);
        }
        g.end();
    }
    // Each rank checks what arrived, computes its pairs on the host (expert e: y = (e + 1) · x + k),
    // and sends one row per pair back to each source.
    std::vector<std::vector<int64_t>> b_scnt(N), b_soff(N), b_rcnt(N), b_roff(N);
    for (int r = 0; r < N; ++r) {
        const auto ur = static_cast<size_t>(r);
        CK(cudaSetDevice(r));
        CK(cudaStreamSynchronize(streams[ur]));
        std::vector<float> recv(static_cast<size_t>(r_off[ur].back() + r_cnt[ur].back()));
        CK(cudaMemcpy(recv.data(), d_recv[ur], recv.size() * sizeof(float), cudaMemcpyDeviceToHost));
        std::vector<float> back;
        int64_t sent = 0;
        for (int s = 0; s < N; ++s) {
            const auto us = static_cast<size_t>(s);
            const DispatchPlan& ps = plan[us];
            const float* block = recv.data() + r_off[ur][us];
            for (int64_t i = 0; i < ps.token_counts[ur]; ++i)
                ASSERT_EQ(std::memcmp(block + i * D,
                                      x[us].data() + ps.send_tokens[static_cast<size_t>(ps.token_offsets[ur] + i)] * D,
                                      D * sizeof(float)),
                          0)
                    << "row " << i << " from rank " << s << " to " << r;
            for (int64_t i = ps.pair_offsets[ur]; i < ps.pair_offsets[ur + 1]; ++i) {
                const DispatchPair& p = ps.pairs[static_cast<size_t>(i)];
                const float scale = static_cast<float>(part.global_expert(r, p.local_expert) + 1);
                for (int64_t d = 0; d < D; ++d)
                    back.push_back(scale * block[int64_t{p.row} * D + d] + static_cast<float>(p.k));
            }
            b_scnt[ur].push_back(ps.pair_counts[ur] * D);
            b_soff[ur].push_back(sent);
            sent += ps.pair_counts[ur] * D;
            b_rcnt[ur].push_back(plan[ur].pair_counts[us] * D);
            b_roff[ur].push_back(plan[ur].pair_offsets[us] * D);
        }
        CK(cudaMalloc(&d_back[ur], std::max<size_t>(back.size(), 1) * sizeof(float)));
        CK(cudaMemcpy(d_back[ur], back.data(), back.size() * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMalloc(&d_out[ur], static_cast<size_t>(std::max<int64_t>(plan[ur].n_pairs() * D, 1)) * sizeof(float)));
        CK(cudaMemset(d_out[ur], 0xFF,
                      static_cast<size_t>(std::max<int64_t>(plan[ur].n_pairs() * D, 1)) * sizeof(float)));
    }
    {
        NcclGroup g;
        for (int r = 0; r < N; ++r) {
            const auto ur = static_cast<size_t>(r);
            comms[ur].all_to_all_v(d_back[ur], b_scnt[ur].data(), b_soff[ur].data(), d_out[ur], b_rcnt[ur].data(),
                                   b_roff[ur].data(), ncclFloat32, streams[ur]);
        }
        g.end();
    }
    for (int r = 0; r < N; ++r) {
        const auto ur = static_cast<size_t>(r);
        CK(cudaSetDevice(r));
        CK(cudaStreamSynchronize(streams[ur]));
        std::vector<float> pair_out(static_cast<size_t>(plan[ur].n_pairs() * D));
        CK(cudaMemcpy(pair_out.data(), d_out[ur], pair_out.size() * sizeof(float), cudaMemcpyDeviceToHost));
        std::vector<float> got(static_cast<size_t>(n_tok[r] * D)), want(got.size());
        combine_pair_outputs(plan[ur], pair_out.data(), D, true, nullptr, got.data());
        for (int64_t t = 0; t < n_tok[r]; ++t)
            for (int64_t d = 0; d < D; ++d) {
                float acc = 0.0f;
                for (int64_t k = 0; k < K; ++k) {
                    const auto p = static_cast<size_t>(t * K + k);
                    const float y = static_cast<float>(rt[ur].experts[p] + 1) * x[ur][static_cast<size_t>(t * D + d)] +
                                    static_cast<float>(k);
                    acc = acc + y * rt[ur].weights[p];
                }
                want[static_cast<size_t>(t * D + d)] = 0.0f + acc;
            }
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "rank " << r;
    }
    // all_gather (equal blocks) and all_gather_v (the replicated-attention combine: rank r's pair
    // outputs into pair_offsets[r] of everyone's buffer).
    {
        const int64_t counts[N] = {3 * D, 1 * D}, offsets[N] = {0, 3 * D};
        std::vector<float*> d_mine(N), d_all(N), d_eq(N), d_eq_all(N);
        for (int r = 0; r < N; ++r) {
            const auto ur = static_cast<size_t>(r);
            CK(cudaSetDevice(r));
            std::vector<float> mine(static_cast<size_t>(counts[r]), static_cast<float>(r + 1));
            for (size_t i = 0; i < mine.size(); ++i) mine[i] += static_cast<float>(i);
            CK(cudaMalloc(&d_mine[ur], mine.size() * sizeof(float)));
            CK(cudaMemcpy(d_mine[ur], mine.data(), mine.size() * sizeof(float), cudaMemcpyHostToDevice));
            CK(cudaMalloc(&d_all[ur], 4 * D * sizeof(float)));
            CK(cudaMemset(d_all[ur], 0xFF, 4 * D * sizeof(float)));
            CK(cudaMalloc(&d_eq[ur], D * sizeof(float)));
            CK(cudaMemcpy(d_eq[ur], mine.data(), D * sizeof(float), cudaMemcpyHostToDevice));
            CK(cudaMalloc(&d_eq_all[ur], 2 * D * sizeof(float)));
        }
        {
            NcclGroup g;
            for (int r = 0; r < N; ++r)
                comms[static_cast<size_t>(r)].all_gather_v(d_mine[static_cast<size_t>(r)],
                                                           d_all[static_cast<size_t>(r)], counts, offsets, ncclFloat32,
                                                           streams[static_cast<size_t>(r)]);
            g.end();
        }
        {
            NcclGroup g;
            for (int r = 0; r < N; ++r)
                comms[static_cast<size_t>(r)].all_gather(d_eq[static_cast<size_t>(r)], d_eq_all[static_cast<size_t>(r)],
                                                         D, ncclFloat32, streams[static_cast<size_t>(r)]);
            g.end();
        }
        for (int r = 0; r < N; ++r) {
            const auto ur = static_cast<size_t>(r);
            CK(cudaSetDevice(r));
            CK(cudaStreamSynchronize(streams[ur]));
            std::vector<float> all(static_cast<size_t>(4 * D)), eq(static_cast<size_t>(2 * D));
            CK(cudaMemcpy(all.data(), d_all[ur], all.size() * sizeof(float), cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(eq.data(), d_eq_all[ur], eq.size() * sizeof(float), cudaMemcpyDeviceToHost));
            for (int s = 0; s < N; ++s)
                for (int64_t i = 0; i < counts[s]; ++i)
                    ASSERT_EQ(all[static_cast<size_t>(offsets[s] + i)], static_cast<float>(s + 1 + i)) << "rank " << r;
            for (int s = 0; s < N; ++s)
                for (int64_t i = 0; i < D; ++i)
                    ASSERT_EQ(eq[static_cast<size_t>(s * D + i)], static_cast<float>(s + 1 + i));
            cudaFree(d_mine[ur]);
            cudaFree(d_all[ur]);
            cudaFree(d_eq[ur]);
            cudaFree(d_eq_all[ur]);
        }
    }
    for (int r = 0; r < N; ++r) {
        const auto ur = static_cast<size_t>(r);
        cudaSetDevice(r);
        cudaFree(d_send[ur]);
        cudaFree(d_recv[ur]);
        cudaFree(d_back[ur]);
        cudaFree(d_out[ur]);
        cudaStreamDestroy(streams[ur]);
    }
}

// The bootstrap `onecard serve --gpus 2` uses (id file, ncclCommInitRank), with threads as the two
// processes, then one all_gather to prove the communicator works.
TEST(NcclExpertParallel, TwoRanksBootstrapThroughAnIdFile) {
    const int n_gpus = visible_gpus();
    if (n_gpus < 2) GTEST_SKIP() << "needs 2 GPUs (CUDA sees " << n_gpus << ")";
    test::TempDir dir("ep_nccl");
    const auto id_path = dir / "nccl.id";
    std::vector<float> result[2];
    std::string errors[2];
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
        ranks.emplace_back([&, r] {
            try {
                NcclComm comm = NcclComm::init_from_file(id_path, r, 2, r, std::chrono::seconds(60));
                float* d_in = nullptr;
                float* d_out = nullptr;
                cudaMalloc(&d_in, 8 * sizeof(float));
                cudaMalloc(&d_out, 16 * sizeof(float));
                std::vector<float> mine(8, static_cast<float>(10 * (r + 1)));
                cudaMemcpy(d_in, mine.data(), 8 * sizeof(float), cudaMemcpyHostToDevice);
                comm.all_gather(d_in, d_out, 8, ncclFloat32, nullptr);
                cudaDeviceSynchronize();
                result[r].resize(16);
                cudaMemcpy(result[r].data(), d_out, 16 * sizeof(float), cudaMemcpyDeviceToHost);
                cudaFree(d_in);
                cudaFree(d_out);
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    for (auto& t : ranks) t.join();
    for (int r = 0; r < 2; ++r) {
        ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
        ASSERT_EQ(result[r].size(), 16u);
        for (int i = 0; i < 16; ++i) EXPECT_EQ(result[r][static_cast<size_t>(i)], i < 8 ? 10.0f : 20.0f);
    }
    EXPECT_FALSE(std::filesystem::exists(id_path));  // rank 0 removed the spent id
}
#else
TEST(NcclExpertParallel, TwoGpuDispatchAndCombine) {
    GTEST_SKIP() << "built without CUDA + NCCL (onecard_parallel_nccl not configured)";
}
#endif

}  // namespace
}  // namespace onecard::parallel
