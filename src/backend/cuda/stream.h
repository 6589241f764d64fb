// RAII wrappers for a CUDA stream and event, and checked host<->device copies. Host-only header.
// Every op in ops/ takes the cudaStream_t it is queued on; nothing uses the legacy default stream,
// so decode steps can be captured into CUDA graphs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace onecard::cuda {

class Stream {
public:
    Stream();  // non-blocking with respect to the legacy default stream
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    cudaStream_t get() const { return stream_; }
    // Blocks until all queued work is done; throws onecard::Error on an execution fault.
    void sync() const;

private:
    cudaStream_t stream_ = nullptr;
};

class Event {
public:
    explicit Event(bool timing = true);
    ~Event();
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;

    cudaEvent_t get() const { return event_; }
    void record(cudaStream_t stream);
    void sync() const;
    // Milliseconds from `start` to this event; both recorded with timing enabled, this one completed.
    float elapsed_ms_since(const Event& start) const;

private:
    cudaEvent_t event_ = nullptr;
};

// Checked synchronous copies (tests, setup); the decode loop uses the stream-ordered ops instead.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
template <typename T>
void copy_to_device(T* dst, const std::vector<T>& src) {
    copy_to_device(static_cast<void*>(dst), src.data(), src.size() * sizeof(T));
}
template <typename T>
std::vector<T> copy_to_host(const T* src, size_t n) {
    std::vector<T> out(n);
    copy_to_host(out.data(), static_cast<const void*>(src), n * sizeof(T));
    return out;
}
// Fills `bytes` bytes at dst with `value` (tests poison outputs with 0xFF = NaN in fp32/bf16/e4m3).
void fill_bytes(void* dst, int value, size_t bytes);
// cudaDeviceSynchronize with the check: surfaces execution faults of all queued work.
void device_sync();

}  // namespace onecard::cuda
