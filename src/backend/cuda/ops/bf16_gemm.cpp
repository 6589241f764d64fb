#include "backend/cuda/ops/bf16_gemm.cuh"

#include "backend/cuda/cuda_check.h"

#include <cublas_v2.h>

namespace onecard::cuda {
namespace {

#define CUBLAS_CHECK(call)                                                                                            \
    do {                                                                                                              \
        const cublasStatus_t st_ = (call);                                                                            \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                                             \
            ::onecard::fail("cuBLAS error {} ({}) in {} at {}:{}", static_cast<int>(st_), cublasGetStatusString(st_), \
                            #call, __FILE__, __LINE__);                                                               \
    } while (0)

// Default math (tensor cores with bf16 products, exact in fp32, and fp32 accumulation) with
// split-K reductions forced to fp32 even when the output is bf16. TF32 never applies: the inputs
// are bf16 and the compute type is plain CUBLAS_COMPUTE_32F. CUBLAS_PEDANTIC_MATH would also keep
// fp32 throughout, but may drop to non-tensor-core kernels (prefill-sized LM head), for no
// accuracy the parity test can see.
constexpr cublasMath_t kMathMode =
    static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);

cudaDataType_t out_type(GemmOut out) {
    return out == GemmOut::Bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// cuBLAS takes int dimensions and leading dimensions.
int to_int(int64_t v, const char* what) {
    ONECARD_CHECK(v >= 0 && v <= INT32_MAX, "bf16 gemm: {} = {} does not fit cuBLAS's int", what, v);
    return static_cast<int>(v);
}

}  // namespace

struct Bf16Gemm::Impl {
    cublasHandle_t handle = nullptr;
};

Bf16Gemm::Bf16Gemm(void* workspace, size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
    CUBLAS_CHECK(cublasCreate(&impl_->handle));
    try {
        CUBLAS_CHECK(cublasSetMathMode(impl_->handle, kMathMode));
        CUBLAS_CHECK(cublasSetPointerMode(impl_->handle, CUBLAS_POINTER_MODE_HOST));
        if (workspace != nullptr && workspace_bytes > 0)
            CUBLAS_CHECK(cublasSetWorkspace(impl_->handle, workspace, workspace_bytes));
    } catch (...) {
        cublasDestroy(impl_->handle);
        throw;
    }
}

Bf16Gemm::~Bf16Gemm() {
    if (impl_ && impl_->handle) cublasDestroy(impl_->handle);
}

void Bf16Gemm::run(const __nv_bfloat16* x, int64_t ld_x, const __nv_bfloat16* w, void* y, GemmOut out, int64_t ld_y,
                   int64_t m, int64_t n, int64_t k, cudaStream_t stream, float beta) {
    if (ld_x == 0) ld_x = k;
    if (ld_y == 0) ld_y = n;
    gemm_nt(x, ld_x, w, CUDA_R_16BF, y, out_type(out), ld_y, m, n, k, stream, beta);
}

// Group g reads columns [g·k, (g+1)·k) of x (row stride groups·k), its own [n, k] weight, and writes
// columns [g·n, (g+1)·n) of y (row stride groups·n): one strided batch with the group as the batch index.
void Bf16Gemm::run_grouped_columns(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, GemmOut out, int64_t m,
                                   int64_t n, int64_t k, int64_t groups, cudaStream_t stream) {
    ONECARD_CHECK(m >= 0 && n > 0 && k > 0 && groups > 0, "bf16 grouped gemm: m {} n {} k {} groups {}", m, n, k,
                  groups);
    if (m == 0) return;
    CUBLAS_CHECK(cublasSetStream(impl_->handle, stream));
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        impl_->handle, CUBLAS_OP_T, CUBLAS_OP_N, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha, w, CUDA_R_16BF,
        to_int(k, "k"), n * k, x, CUDA_R_16BF, to_int(groups * k, "groups*k"), k, &beta, y, out_type(out),
        to_int(groups * n, "groups*n"), n, to_int(groups, "groups"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The same layout in plain fp32: CUBLAS_COMPUTE_32F on fp32 inputs is an fp32 SGEMM (the handle's math
// mode allows no TF32 and no reduced-precision reductions).
void Bf16Gemm::run_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
    gemm_nt(x, k, w, CUDA_R_32F, y, CUDA_R_32F, n, m, n, k, stream, 0.0f);
}

// Row-major y[m, n] = x[m, k] · W[n, k]ᵀ is column-major yᵀ[n, m] = W'ᵀ · x' where W' is W read as a
// column-major [k, n] matrix (ld k) and x' is x read as column-major [k, m] (ld ld_x): op(A) = T on
// the weight, op(B) = N on the activations, and yᵀ column-major [n, m] with ld ld_y is y row-major.
// x and W share `in_type`; the compute type is always CUBLAS_COMPUTE_32F.
void Bf16Gemm::gemm_nt(const void* x, int64_t ld_x, const void* w, cudaDataType_t in_type, void* y,
                       cudaDataType_t y_type, int64_t ld_y, int64_t m, int64_t n, int64_t k, cudaStream_t stream,
                       float beta) {
    ONECARD_CHECK(m >= 0 && n > 0 && k > 0 && ld_x >= k && ld_y >= n, "gemm: m {} n {} k {} ld_x {} ld_y {}", m, n, k,
                  ld_x, ld_y);
    if (m == 0) return;
    CUBLAS_CHECK(cublasSetStream(impl_->handle, stream));
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(impl_->handle, CUBLAS_OP_T, CUBLAS_OP_N, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"),
                              &alpha, w, in_type, to_int(k, "k"), x, in_type, to_int(ld_x, "ld_x"), &beta, y, y_type,
                              to_int(ld_y, "ld_y"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace onecard::cuda
