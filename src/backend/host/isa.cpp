// Runtime ISA detection, the kernel registry and the vector layouts the kernels read.
#include "backend/host/host_experts.h"
#include "backend/host/mxfp4_dot.h"

#include "core/error.h"
#include "core/fp_formats.h"

#include <cstring>

namespace onecard::host {
namespace {

struct CpuFeatures {
    bool avx2_fma = false, avx512 = false, avx512_bf16 = false;
};

const CpuFeatures& cpu_features() {
    // Detected once; the OS support for the wide registers is part of what __builtin_cpu_supports checks.
    static const CpuFeatures f = [] {
        __builtin_cpu_init();
        CpuFeatures c;
        c.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        c.avx512 = c.avx2_fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
        c.avx512_bf16 = c.avx512 && __builtin_cpu_supports("avx512bf16");
        return c;
    }();
    return f;
}

}  // namespace

bool isa_supported(Isa isa) {
    switch (isa) {
        case Isa::Scalar:
            return true;
        case Isa::Avx2:
            return cpu_features().avx2_fma;
        case Isa::Avx512:
            return cpu_features().avx512;
    }
    return false;
}

Isa best_isa() {
    if (isa_supported(Isa::Avx512)) return Isa::Avx512;
    if (isa_supported(Isa::Avx2)) return Isa::Avx2;
    return Isa::Scalar;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar:
            return "scalar";
        case Isa::Avx2:
            return "avx2";
        case Isa::Avx512:
            return "avx512";
    }
    return "?";
}

namespace detail {

bool cpu_has_avx512_bf16() {
    return cpu_features().avx512_bf16;
}

const std::vector<DotKernel>& dot_kernels() {
    static const std::vector<DotKernel> k = {
        {"scalar", Isa::Scalar, false, VecLayout::F32Natural, dot_rows_scalar, dot_multi_scalar},
        {"avx2", Isa::Avx2, false, VecLayout::F32Split, dot_rows_avx2, dot_multi_avx2},
        {"avx512", Isa::Avx512, false, VecLayout::F32Split, dot_rows_avx512, dot_multi_avx512},
        {"avx512_bf16", Isa::Avx512, true, VecLayout::Bf16Natural, dot_rows_avx512_bf16, dot_multi_avx512_bf16},
    };
    return k;
}

bool kernel_supported(const DotKernel& k) {
    return isa_supported(k.isa) && (!k.needs_bf16 || cpu_has_avx512_bf16());
}

int kernel_index_for(Isa isa, bool allow_bf16) {
    ONECARD_CHECK(isa_supported(isa), "host experts: ISA {} is not supported by this CPU", isa_name(isa));
    switch (isa) {
        case Isa::Scalar:
            return 0;
        case Isa::Avx2:
            return 1;
        case Isa::Avx512:
            return allow_bf16 && cpu_has_avx512_bf16() ? 3 : 2;
    }
    return 0;
}

size_t layout_bytes(VecLayout layout, int64_t n) {
    return static_cast<size_t>(n) * (layout == VecLayout::Bf16Natural ? sizeof(uint16_t) : sizeof(float));
}

void to_layout(VecLayout layout, const float* x, int64_t n, void* dst) {
    switch (layout) {
        case VecLayout::F32Natural:
            std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
            return;
        case VecLayout::F32Split: {
            float* d = static_cast<float*>(dst);
            for (int64_t g = 0; g < n; g += 32)
                for (int l = 0; l < 16; ++l) {
                    d[g + l] = x[g + 2 * l];
                    d[g + 16 + l] = x[g + 2 * l + 1];
                }
            return;
        }
        case VecLayout::Bf16Natural: {
            uint16_t* d = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(x[i]);
            return;
        }
    }
}

}  // namespace detail
}  // namespace onecard::host
