// Manifold-constrained hyper-connections (dsv4-model.md §3): the residual is hc parallel streams
// [hc, D] per token; each sub-block reads a weighted collapse of them (pre), and writes back
// post·output + combᵀ·streams with comb projected towards a doubly-stochastic matrix (Sinkhorn).
#pragma once

#include <cstdint>

namespace onecard::cpu {

struct HCParams {
    int64_t hc = 4;   // streams
    int64_t dim = 0;  // D
    int64_t sinkhorn_iters = 20;
    float hc_eps = 1e-6f;
    float norm_eps = 1e-6f;  // rms_norm_eps of the input normalisation
};

// mixes[n_tok, n_mix] = rmsnorm_unweighted(flatten(X)) · fnᵀ for X [n_tok, hc, D], fn [n_mix, hc·D].
// n_mix = (2+hc)·hc for sub-block HCs, hc for the head.
void hc_mixes(const float* X, const float* fn, int64_t n_tok, int64_t n_mix, const HCParams& p, float* mixes);

// One token: splits mixes [(2+hc)·hc] into pre [hc] (sigmoid + eps), post [hc] (2·sigmoid) and
// comb [hc, hc] (row softmax + eps, then column normalisation, then iters−1 rounds of row and
// column normalisation, every denominator + eps). scale [3], base [(2+hc)·hc].
void hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, const HCParams& p, float* pre,
                       float* post, float* comb);

// x[D] = Σ_j pre[j] · X[j, :] for one token (X [hc, D]).
void hc_collapse(const float* X, const float* pre, const HCParams& p, float* x);

// In place for one token: X'[k] = post[k] · a + Σ_j comb[j, k] · X[j] (a [D], X [hc, D]).
void hc_post(const float* a, const float* post, const float* comb, const HCParams& p, float* X);

// LM-head collapse of X [n_tok, hc, D] -> y [n_tok, D]: pre = sigmoid(mix·scale[0] + base) + eps,
// fn [hc, hc·D], base [hc], scale [1]. No post, no Sinkhorn.
void hc_head(const float* X, const float* fn, const float* base, const float* scale, int64_t n_tok, const HCParams& p,
             float* y);

}  // namespace onecard::cpu
