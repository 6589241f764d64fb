#include "loader/weight_scan.h"

#include "loader/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

namespace onecard {

namespace {

enum class Code { Finite, NaN, Inf };

template <typename U, typename Classify>
NonFiniteCount count_codes(std::span<const std::byte> bytes, Classify classify) {
    NonFiniteCount c;
    const size_t n = bytes.size() / sizeof(U);
    for (size_t i = 0; i < n; ++i) {
        U v;
        std::memcpy(&v, bytes.data() + i * sizeof(U), sizeof(U));  // little-endian host, as the loader assumes
        const Code code = classify(v);
        if (code == Code::Finite) continue;
        ++(code == Code::NaN ? c.n_nan : c.n_inf);
        if (c.first < 0) c.first = static_cast<int64_t>(i);
    }
    return c;
}

// IEEE-style formats: an all-ones exponent is Inf with a zero mantissa, NaN otherwise.
template <typename U>
auto ieee(U exp_mask, U mant_mask) {
    return [=](U v) {
        if ((v & exp_mask) != exp_mask) return Code::Finite;
        return (v & mant_mask) != 0 ? Code::NaN : Code::Inf;
    };
}

}  // namespace

bool scannable_dtype(DType t) {
    switch (t) {
        case DType::F32:
        case DType::BF16:
        case DType::F16:
        case DType::F8_E4M3:
        case DType::F8_E5M2:
        case DType::F8_E8M0:
            return true;
        default:
            return false;
    }
}

NonFiniteCount count_non_finite(DType t, std::span<const std::byte> bytes) {
    switch (t) {
        case DType::F32:
            return count_codes<uint32_t>(bytes, ieee<uint32_t>(0x7F800000u, 0x007FFFFFu));
        case DType::BF16:
            return count_codes<uint16_t>(bytes, ieee<uint16_t>(0x7F80, 0x007F));
        case DType::F16:
            return count_codes<uint16_t>(bytes, ieee<uint16_t>(0x7C00, 0x03FF));
        case DType::F8_E5M2:
            return count_codes<uint8_t>(bytes, ieee<uint8_t>(0x7C, 0x03));
        case DType::F8_E4M3:
            // OCP e4m3fn has no Inf: S.1111.111 is NaN, S.1111.110 is +-448.
            return count_codes<uint8_t>(bytes, [](uint8_t v) { return (v & 0x7F) == 0x7F ? Code::NaN : Code::Finite; });
        case DType::F8_E8M0:
            // The whole byte is a biased exponent; 0xFF is NaN.
            return count_codes<uint8_t>(bytes, [](uint8_t v) { return v == 0xFF ? Code::NaN : Code::Finite; });
        default:
            return {};
    }
}

WeightScanReport scan_weights(const Checkpoint& ck, unsigned n_threads) {
    const std::vector<TensorView>& tensors = ck.tensors();
    std::vector<NonFiniteCount> counts(tensors.size());
    if (n_threads == 0) n_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    n_threads = static_cast<unsigned>(std::min<size_t>(n_threads, std::max<size_t>(tensors.size(), 1)));
    // Largest first, taken from a shared counter: one huge expert tensor does not leave the other
    // threads idle at the end.
    std::vector<size_t> order(tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].nbytes > tensors[b].nbytes; });
    std::atomic<size_t> next{0};
    auto work = [&] {
        for (size_t k; (k = next.fetch_add(1)) < order.size();) {
            const TensorView& t = tensors[order[k]];
            counts[order[k]] = count_non_finite(t.dtype, std::span<const std::byte>(t.data, t.nbytes));
        }
    };
    std::vector<std::thread> pool;
    for (unsigned i = 1; i < n_threads; ++i) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();

    WeightScanReport r;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const TensorView& t = tensors[i];
        if (!scannable_dtype(t.dtype)) {
            ++r.n_skipped;
            continue;
        }
        ++r.n_tensors;
        r.n_elements += static_cast<uint64_t>(t.numel());
        if (!counts[i].clean()) r.bad.push_back({t.name, t.dtype, counts[i]});
    }
    return r;
}

}  // namespace onecard
