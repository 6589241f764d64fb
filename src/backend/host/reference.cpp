// run_host_moe_reference: one pair after another, single thread, scalar kernel. The readable
// definition of a host MoE job; the pool computes the same bits with other kernels and threads.
#include "backend/host/host_experts.h"
#include "backend/host/mxfp4_dot.h"
#include "backend/host/pair_math.h"

#include <vector>

namespace onecard::host {

void run_host_moe_reference(const HostMoeJob& job) {
    validate_job(job);
    const int64_t D = job.dim, I = job.inter;
    float e4m3[256];
    detail::make_e4m3_table(e4m3);
    std::vector<float> x(D), g(I), u(I), h(I), y(D);  // natural fp32
    for (int64_t i = 0; i < job.n_pairs; ++i) {
        const HostExpertPair& p = job.pairs[i];
        detail::decode_act_row(job.xq + p.token * D, job.xs + p.token * (D / 128), D, e4m3, x.data());
        // 1. gate and up rows, each rounded to bf16.
        detail::dot_rows_scalar(p.expert.w1.packed, p.expert.w1.scale, D, I, x.data(), g.data());
        detail::dot_rows_scalar(p.expert.w3.packed, p.expert.w3.scale, D, I, x.data(), u.data());
        for (int64_t r = 0; r < I; ++r) {
            g[r] = detail::bf16_value(g[r]);
            u[r] = detail::bf16_value(u[r]);
        }
        // 2-3. weighted, clamped SwiGLU in bf16, FP8 1x128 quantised (kept dequantised: exact).
        for (int64_t b = 0; b < I; b += 128)
            detail::swiglu_quant_block(g.data() + b, u.data() + b, p.weight, job.swiglu_limit, h.data() + b);
        // 4. down rows in bf16.
        detail::dot_rows_scalar(p.expert.w2.packed, p.expert.w2.scale, I, D, h.data(), y.data());
        for (int64_t d = 0; d < D; ++d) p.out[d] = detail::bf16_bits(y[d]);
    }
}

}  // namespace onecard::host
