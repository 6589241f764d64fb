// RMSNorm: y = w ⊙ (x · rsqrt(mean(x²) + eps)), fp32 throughout (dsv4-model.md §6.1).
#pragma once

#include <cstdint>

namespace onecard::cpu {

// x, y: [n_rows, dim] with row strides ld_x / ld_y (0 = dim); y may alias x. `weight` [dim] may be
// nullptr for the unweighted variant (per-head q norm, hyper-connection input norm).
void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t dim, float eps, int64_t ld_x = 0,
             int64_t ld_y = 0);

}  // namespace onecard::cpu
