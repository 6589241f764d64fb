#include "backend/cpu/hyper_connection.h"

#include "backend/cpu/linear.h"
#include "backend/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace onecard::cpu {
namespace {

float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace

void hc_mixes(const float* X, const float* fn, int64_t n_tok, int64_t n_mix, const HCParams& p, float* mixes) {
    const int64_t flat = p.hc * p.dim;
    // HF normalises the flattened streams first and then projects (REF projects, then scales the
    // 24 mixes by the same rsqrt); identical math, HF's order for the fp32 goldens.
    std::vector<float> normed(static_cast<size_t>(n_tok * flat));
    rmsnorm(X, nullptr, normed.data(), n_tok, flat, p.norm_eps);
    matmul_nt(normed.data(), fn, mixes, n_tok, flat, n_mix);
}

void hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, const HCParams& p, float* pre,
                       float* post, float* comb) {
    const int64_t hc = p.hc;
    for (int64_t j = 0; j < hc; ++j) {
        pre[j] = sigmoid(mixes[j] * scale[0] + base[j]) + p.hc_eps;
        post[j] = 2.0f * sigmoid(mixes[hc + j] * scale[1] + base[hc + j]);
    }
    std::vector<float> row_sum(static_cast<size_t>(hc)), col_sum(static_cast<size_t>(hc));
    // comb[j][k]: row j = source stream, column k = destination stream.
    for (int64_t j = 0; j < hc; ++j) {
        float* row = comb + j * hc;
        float mx = -INFINITY;
        for (int64_t k = 0; k < hc; ++k) {
            row[k] = mixes[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
            mx = std::max(mx, row[k]);
        }
        float sum = 0.0f;
        for (int64_t k = 0; k < hc; ++k) {
            row[k] = std::exp(row[k] - mx);
            sum += row[k];
        }
        // The first row normalisation is the softmax itself, with eps added AFTER it (not in a denominator).
        for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + p.hc_eps;
    }
    auto normalise_cols = [&] {
        std::fill(col_sum.begin(), col_sum.end(), 0.0f);
        for (int64_t j = 0; j < hc; ++j)
            for (int64_t k = 0; k < hc; ++k) col_sum[k] += comb[j * hc + k];
        for (int64_t j = 0; j < hc; ++j)
            for (int64_t k = 0; k < hc; ++k) comb[j * hc + k] /= col_sum[k] + p.hc_eps;
    };
    auto normalise_rows = [&] {
        for (int64_t j = 0; j < hc; ++j) {
            row_sum[j] = 0.0f;
            for (int64_t k = 0; k < hc; ++k) row_sum[j] += comb[j * hc + k];
        }
        for (int64_t j = 0; j < hc; ++j)
            for (int64_t k = 0; k < hc; ++k) comb[j * hc + k] /= row_sum[j] + p.hc_eps;
    };
    normalise_cols();
    for (int64_t it = 1; it < p.sinkhorn_iters; ++it) {
        normalise_rows();
        normalise_cols();
    }
}

void hc_collapse(const float* X, const float* pre, const HCParams& p, float* x) {
    for (int64_t d = 0; d < p.dim; ++d) {
        float acc = 0.0f;
        for (int64_t j = 0; j < p.hc; ++j) acc += pre[j] * X[j * p.dim + d];
        x[d] = acc;
    }
}

void hc_post(const float* a, const float* post, const float* comb, const HCParams& p, float* X) {
    const int64_t hc = p.hc, D = p.dim;
    std::vector<float> mixed(static_cast<size_t>(hc * D));
    for (int64_t k = 0; k < hc; ++k) {
        for (int64_t d = 0; d < D; ++d) {
            // Sum over the FIRST index of comb (combᵀ·X): comb is not symmetric.
            float acc = 0.0f;
            for (int64_t j = 0; j < hc; ++j) acc += comb[j * hc + k] * X[j * D + d];
            mixed[k * D + d] = post[k] * a[d] + acc;
        }
    }
    std::copy(mixed.begin(), mixed.end(), X);
}

void hc_head(const float* X, const float* fn, const float* base, const float* scale, int64_t n_tok, const HCParams& p,
             float* y) {
    std::vector<float> mixes(static_cast<size_t>(n_tok * p.hc));
    hc_mixes(X, fn, n_tok, p.hc, p, mixes.data());
    std::vector<float> pre(static_cast<size_t>(p.hc));
    for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t j = 0; j < p.hc; ++j) pre[j] = sigmoid(mixes[t * p.hc + j] * scale[0] + base[j]) + p.hc_eps;
        hc_collapse(X + t * p.hc * p.dim, pre.data(), p, y + t * p.dim);
    }
}

}  // namespace onecard::cpu
