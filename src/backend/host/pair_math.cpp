// Element-wise pair steps and job validation (the fp32 operations are written out one by one and the
// module is compiled without contraction, so they are exactly moe.cu swiglu_quant_kernel's).
#include "backend/host/pair_math.h"

#include "backend/host/host_experts.h"
#include "core/error.h"
#include "core/fp_formats.h"

#include <bit>
#include <cmath>

namespace onecard::host {

void validate_job(const HostMoeJob& job) {
    ONECARD_CHECK(job.dim > 0 && job.dim % 128 == 0, "host moe job: dim {} is not a positive multiple of 128", job.dim);
    ONECARD_CHECK(job.inter > 0 && job.inter % 128 == 0, "host moe job: inter {} is not a positive multiple of 128",
                  job.inter);
    ONECARD_CHECK(job.n_tokens >= 0 && job.n_pairs >= 0, "host moe job: negative count (n_tokens {}, n_pairs {})",
                  job.n_tokens, job.n_pairs);
    ONECARD_CHECK(std::isfinite(job.swiglu_limit), "host moe job: swiglu_limit is not finite");
    if (job.n_pairs == 0) return;
    ONECARD_CHECK(job.pairs != nullptr, "host moe job: pairs is null with n_pairs {}", job.n_pairs);
    ONECARD_CHECK(job.n_tokens > 0 && job.xq != nullptr && job.xs != nullptr,
                  "host moe job: activations missing (n_tokens {}, xq {}, xs {})", job.n_tokens,
                  job.xq ? "set" : "null", job.xs ? "set" : "null");
    for (int64_t i = 0; i < job.n_pairs; ++i) {
        const HostExpertPair& p = job.pairs[i];
        ONECARD_CHECK(p.token >= 0 && p.token < job.n_tokens, "host moe job: pair {} token {} outside [0, {})", i,
                      p.token, job.n_tokens);
        ONECARD_CHECK(std::isfinite(p.weight), "host moe job: pair {} weight is not finite", i);
        ONECARD_CHECK(p.out != nullptr, "host moe job: pair {} output is null", i);
        const MxMatrixView* m[3] = {&p.expert.w1, &p.expert.w3, &p.expert.w2};
        const char* names[3] = {"w1", "w3", "w2"};
        for (int j = 0; j < 3; ++j)
            ONECARD_CHECK(m[j]->packed != nullptr && m[j]->scale != nullptr,
                          "host moe job: pair {} expert {} has a null packed or scale pointer", i, names[j]);
    }
}

namespace detail {

void make_e4m3_table(float* table) {
    for (int c = 0; c < 256; ++c) table[c] = e4m3fn_to_f32(static_cast<uint8_t>(c));
}

void decode_act_row(const uint8_t* xq, const float* xs, int64_t dim, const float* e4m3_table, float* x) {
    for (int64_t b = 0; b < dim; b += 128) {
        const float s = xs[b / 128];
        for (int64_t k = b; k < b + 128; ++k) x[k] = e4m3_table[xq[k]] * s;
    }
}

namespace {
// 2^ceil(log2(amax / 448)) the way ue8m0_scale_for (common.cuh) and cpu::ue8m0_block_scale compute it:
// multiply by the fp32 reciprocal, then the exponent of the bits, +1 if any mantissa bit is set.
float ue8m0_scale_e4m3(float amax) {
    const float v = amax * (1.0f / 448.0f);
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    const int e = static_cast<int>((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
    // 2^e from its bits where it is a normal number (always, for amax >= 1e-4 and finite); ldexp else.
    if (e >= -126 && e <= 127) return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
    return std::ldexp(1.0f, e);
}
}  // namespace

void swiglu_quant_block(const float* g_in, const float* u_in, float weight, float limit, float* h_deq, uint8_t* codes,
                        float* scale_out) {
    float h[128];
    float amax = 0.0f;
    for (int i = 0; i < 128; ++i) {
        float g = g_in[i], u = u_in[i];
        if (limit > 0.0f) {  // fminf/fmaxf as the kernel (NaN-ignoring, unlike std::min)
            g = std::fmin(g, limit);
            u = std::fmin(std::fmax(u, -limit), limit);
        }
        float v = g / (1.0f + std::exp(-g));
        v = v * u;
        v = v * weight;
        h[i] = bf16_value(v);
        amax = std::fmax(amax, std::fabs(h[i]));
    }
    const float s = ue8m0_scale_e4m3(std::fmax(amax, 1e-4f));
    for (int i = 0; i < 128; ++i) {
        const float q = std::fmin(std::fmax(h[i] / s, -448.0f), 448.0f);
        const uint8_t c = f32_to_e4m3fn(q);
        if (codes) codes[i] = c;
        h_deq[i] = e4m3fn_to_f32(c) * s;
    }
    if (scale_out) *scale_out = s;
}

}  // namespace detail
}  // namespace onecard::host
