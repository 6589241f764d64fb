#include "backend/cpu/norm.h"

#include <cmath>

namespace onecard::cpu {

void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t dim, float eps, int64_t ld_x,
             int64_t ld_y) {
    if (ld_x == 0) ld_x = dim;
    if (ld_y == 0) ld_y = dim;
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x + r * ld_x;
        float* yr = y + r * ld_y;
        double sum_sq = 0.0;  // double accumulation: the mean of squares is the only long reduction here
        for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
        const float inv = 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(dim)) + eps);
        if (weight) {
            for (int64_t i = 0; i < dim; ++i) yr[i] = weight[i] * (xr[i] * inv);
        } else {
            for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv;
        }
    }
}

}  // namespace onecard::cpu
