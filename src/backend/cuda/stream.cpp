#include "backend/cuda/stream.h"

#include "backend/cuda/cuda_check.h"

namespace onecard::cuda {

Stream::Stream() {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
    if (stream_) cudaStreamDestroy(stream_);
}

void Stream::sync() const {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(bool timing) {
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
    if (event_) cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) {
    CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::sync() const {
    CUDA_CHECK(cudaEventSynchronize(event_));
}

float Event::elapsed_ms_since(const Event& start) const {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void fill_bytes(void* dst, int value, size_t bytes) {
    CUDA_CHECK(cudaMemset(dst, value, bytes));
}

void device_sync() {
    CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace onecard::cuda
