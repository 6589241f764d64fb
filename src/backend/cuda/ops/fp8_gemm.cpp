#include "backend/cuda/ops/fp8_gemm.cuh"

#include "backend/cuda/cuda_check.h"

#include <cublasLt.h>

#include <cstring>

namespace onecard::cuda {
namespace {

#define CUBLASLT_CHECK(call)                                                                \
    do {                                                                                    \
        const cublasStatus_t st_ = (call);                                                  \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                   \
            ::onecard::fail("cuBLASLt error {} ({}) in {} at {}:{}", static_cast<int>(st_), \
                            cublasLtGetStatusString(st_), #call, __FILE__, __LINE__);       \
    } while (0)

// Descriptor owners, so an exception in the middle of run() frees what was created.
struct MatmulDesc {
    cublasLtMatmulDesc_t d = nullptr;
    ~MatmulDesc() {
        if (d) cublasLtMatmulDescDestroy(d);
    }
    template <typename T>
    void set(cublasLtMatmulDescAttributes_t a, const T& v) {
        CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
    }
};
struct Layout {
    cublasLtMatrixLayout_t d = nullptr;
    Layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
        CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&d, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
    }
    ~Layout() {
        if (d) cublasLtMatrixLayoutDestroy(d);
    }
};
struct Pref {
    cublasLtMatmulPreference_t d = nullptr;
    Pref() { CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&d)); }
    ~Pref() {
        if (d) cublasLtMatmulPreferenceDestroy(d);
    }
};

}  // namespace

struct Fp8GemmLt::Impl {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
};

Fp8GemmLt::Fp8GemmLt(void* workspace, size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
    CUBLASLT_CHECK(cublasLtCreate(&impl_->handle));
    impl_->workspace = workspace;
    impl_->workspace_bytes = workspace_bytes;
}

Fp8GemmLt::~Fp8GemmLt() {
    if (impl_ && impl_->handle) cublasLtDestroy(impl_->handle);
}

void Fp8GemmLt::run(const uint8_t* xq, const float* xs, const uint8_t* w, const float* ws, __nv_bfloat16* y, int64_t m,
                    int64_t n, int64_t k, cudaStream_t stream) {
    ONECARD_CHECK(n % 128 == 0 && k % 128 == 0 && m > 0,
                  "fp8 gemm: shape m {} n {} k {} (n, k must be multiples of 128)", m, n, k);
    ONECARD_CHECK(m % kFp8GemmRowMultiple == 0,
                  "fp8 gemm: m {} is not a multiple of {} (cuBLASLt has no block-scaled kernel for it; pad the rows)",
                  m, kFp8GemmRowMultiple);
    MatmulDesc desc;
    CUBLASLT_CHECK(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode);
    desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode);
    const void* a_scale = ws;
    const void* b_scale = xs;
    desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
    desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);

    Layout a(CUDA_R_8F_E4M3, k, n, k);
    Layout b(CUDA_R_8F_E4M3, k, m, k);
    Layout d(CUDA_R_16BF, n, m, n);
    Pref pref;
    const uint64_t ws_bytes = impl_->workspace_bytes;
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                        sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t heur{};
    int n_found = 0;
    const cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(impl_->handle, desc.d, a.d, b.d, d.d, d.d, pref.d, 1, &heur, &n_found);
    if (hs != CUBLAS_STATUS_SUCCESS || n_found == 0) {
        fail("fp8 gemm: cuBLASLt has no block-scaled FP8 algorithm for m {} n {} k {} (status {})", m, n, k,
             cublasLtGetStatusString(hs));
    }
    const float alpha = 1.0f, beta = 0.0f;
    CUBLASLT_CHECK(cublasLtMatmul(impl_->handle, desc.d, &alpha, w, a.d, xq, b.d, &beta, y, d.d, y, d.d, &heur.algo,
                                  impl_->workspace, impl_->workspace_bytes, stream));
}

void fp8_gemm_prepare_weight_scales(const uint8_t* ue8m0, float* out, int64_t n, int64_t k, cudaStream_t stream) {
    ue8m0_to_f32(ue8m0, out, (n + 127) / 128, k / 128, false, stream, fp8_gemm_weight_scale_ld(k));
}

}  // namespace onecard::cuda
