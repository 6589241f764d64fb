#include "model_cuda/host_embedding.h"

#include "backend/cpu/linear.h"
#include "backend/cuda/ops/elementwise.cuh"
#include "core/error.h"
#include "core/fp_formats.h"

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

namespace onecard {

HostEmbedding::HostEmbedding(int64_t vocab, int64_t hidden) : vocab_(vocab), hidden_(hidden) {
    ONECARD_CHECK(vocab > 0 && hidden > 0, "host embedding: empty table [{}, {}]", vocab, hidden);
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes(), cudaHostAllocMapped | cudaHostAllocPortable);
    ONECARD_CHECK(err == cudaSuccess, "host embedding: cannot pin {:.2f} GiB of host RAM for the embedding table: {}",
                  bytes() / double(1ull << 30), cudaGetErrorString(err));
    host_ = static_cast<__nv_bfloat16*>(p);
    void* d = nullptr;
    const cudaError_t derr = cudaHostGetDevicePointer(&d, p, 0);
    if (derr != cudaSuccess) {
        cudaFreeHost(p);
        throw Error(
            fmt::format("host embedding: the pinned table has no device address: {}", cudaGetErrorString(derr)));
    }
    dev_ = static_cast<__nv_bfloat16*>(d);
}

HostEmbedding::~HostEmbedding() {
    if (host_) cudaFreeHost(host_);
}

void HostEmbedding::fill_from(const TensorView& t) {
    ONECARD_CHECK(t.shape.size() == 2 && t.shape[0] == vocab_ && t.shape[1] == hidden_,
                  "tensor {}: the embedding table must be [{}, {}], got {}", t.name, vocab_, hidden_,
                  shape_str(t.shape));
    if (t.dtype == DType::BF16) {
        ONECARD_CHECK(t.nbytes == bytes(), "tensor {}: {} bytes, a [{}, {}] bf16 table has {}", t.name, t.nbytes,
                      vocab_, hidden_, bytes());
        std::memcpy(host_, t.data, bytes());
        return;
    }
    const std::vector<float> v = cpu::to_f32(t);
    auto* out = reinterpret_cast<uint16_t*>(host_);
    for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
}

void HostEmbedding::check_integrity() const {
    ONECARD_CHECK(host_ != nullptr && dev_ != nullptr && vocab_ > 0 && hidden_ > 0,
                  "host embedding: table [{}, {}] without memory", vocab_, hidden_);
}

}  // namespace onecard
