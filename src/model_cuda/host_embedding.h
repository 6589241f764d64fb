// The token embedding table kept in pinned, device-mapped host RAM instead of HBM (the memory plan's
// embed_on_host: only when routed experts must leave the GPU too). A step's embedding kernel reads
// just its tokens' rows straight from host RAM over PCIe (zero-copy: a decode token is one 8 KB row,
// a few µs; a 2048-token prefill chunk 16 MB), and the ~1 GiB it frees in HBM holds ~80 more
// (layer, expert) pairs, which the host would otherwise stream from RAM on every decode step.
// The kernel reads through the device alias of the same bytes, so graphs capture it unchanged.
#pragma once

#include "model/weights.h"

#include <cuda_bf16.h>

#include <cstdint>

namespace onecard {

class HostEmbedding {
public:
    // Pins (and maps into the device's address space) vocab x hidden bf16 values; nothing is written yet.
    HostEmbedding(int64_t vocab, int64_t hidden);
    ~HostEmbedding();
    HostEmbedding(const HostEmbedding&) = delete;
    HostEmbedding& operator=(const HostEmbedding&) = delete;

    // The checkpoint's table (bf16 as stored; other dtypes converted as upload_weights converts them).
    // Throws onecard::Error naming the tensor when its shape is not [vocab, hidden].
    void fill_from(const TensorView& embed);

    __nv_bfloat16* host() { return host_; }         // [vocab, hidden], for the host to write
    __nv_bfloat16* device() const { return dev_; }  // the same bytes as the GPU addresses them
    uint64_t bytes() const { return static_cast<uint64_t>(vocab_ * hidden_) * 2; }
    int64_t vocab() const { return vocab_; }
    int64_t hidden() const { return hidden_; }
    void check_integrity() const;

private:
    int64_t vocab_ = 0, hidden_ = 0;
    __nv_bfloat16* host_ = nullptr;  // cudaHostAlloc(mapped, portable)
    __nv_bfloat16* dev_ = nullptr;   // cudaHostGetDevicePointer(host_)
};

}  // namespace onecard
