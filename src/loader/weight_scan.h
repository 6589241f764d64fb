// A scan of checkpoint weights for values no trained model holds: NaN and Inf in floating tensors
// (F32, BF16, F16, F8 E4M3/E5M2) and the NaN code 0xFF of UE8M0 block scales. A header can be
// perfectly valid around such bytes, and one NaN in a weight or scale turns every logit of every
// request it touches into NaN, so `onecard verify --weights` looks before a checkpoint is served.
// Integer tensors (packed MXFP4 included: E2M1 has no NaN or Inf) are not scanned.
#pragma once

#include "core/dtype.h"
#include "core/tensor.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace onecard {

class Checkpoint;

struct NonFiniteCount {
    uint64_t n_nan = 0;
    uint64_t n_inf = 0;
    int64_t first = -1;  // element index of the first NaN/Inf, -1 when none
    bool clean() const { return n_nan == 0 && n_inf == 0; }
};

// Whether the scan looks at tensors of this dtype (the floating ones and F8_E8M0).
bool scannable_dtype(DType t);

// NaN/Inf elements in `bytes` read as little-endian elements of `t` (nothing for unscanned dtypes).
// E4M3 is the OCP "fn" variant: no Inf, NaN is S.1111.111. F8_E8M0: 0xFF is NaN, nothing is Inf.
NonFiniteCount count_non_finite(DType t, std::span<const std::byte> bytes);

struct BadTensor {
    std::string name;
    DType dtype = DType::F32;
    NonFiniteCount count;
};

struct WeightScanReport {
    uint64_t n_tensors = 0;      // tensors scanned
    uint64_t n_elements = 0;     // their elements
    uint64_t n_skipped = 0;      // integer tensors not scanned
    std::vector<BadTensor> bad;  // in checkpoint order
    bool ok() const { return bad.empty(); }
};

// Scans every tensor of `ck` on `n_threads` threads (0: hardware concurrency, at most 16).
WeightScanReport scan_weights(const Checkpoint& ck, unsigned n_threads = 0);

}  // namespace onecard
