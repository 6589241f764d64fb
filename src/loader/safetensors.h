// Safetensors reader: the file is mmap'd read-only and its header validated strictly before any
// tensor is handed out, because checkpoints come from the network and a bad header must fail with
// a message, never a crash or an out-of-bounds read.
//
// File layout: [u64 little-endian header length N][N bytes of JSON header][data buffer]. The
// header maps tensor name -> {dtype, shape, data_offsets: [begin, end)} with offsets relative to
// the data buffer, plus an optional "__metadata__" string->string map.
#pragma once

#include "core/dtype.h"
#include "core/tensor.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace onecard {

// Largest header we accept; the reference implementation uses the same bound.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsEntry {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;  // for packed MXFP4 (I8/U8) this is the byte shape
    uint64_t begin = 0;          // byte range [begin, end) within the data buffer
    uint64_t end = 0;
};

struct SafetensorsHeader {
    uint64_t data_start = 0;  // file offset of the data buffer: 8 + header length
    std::map<std::string, std::string> metadata;
    std::vector<SafetensorsEntry> tensors;  // sorted by begin offset (file order)
};

// Validates a complete safetensors file image held in memory; `label` (normally the path) names
// the file in every error. Rules: header length in [2, 100 MB] and within the file; header is a
// JSON object without duplicate keys; "__metadata__" maps strings to strings; each tensor has
// exactly dtype/shape/data_offsets, a known dtype, non-negative integer dims, begin <= end,
// (product of dims) * dtype size == end - begin, the range inside the data buffer; non-empty
// ranges do not overlap and tile the data buffer exactly: from offset 0, back to back, ending at the
// end of the file (zero-byte tensors may sit anywhere inside). Throws onecard::Error naming the file,
// the tensor and the rule broken.
SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& label);

// One mmap'd, validated safetensors file. The mapping lives as long as the object; TensorViews
// point into it. Immutable after construction, so concurrent readers need no locking.
class SafetensorsFile {
public:
    // Opens, maps (PROT_READ, MAP_PRIVATE) and validates `path`. Throws onecard::Error.
    explicit SafetensorsFile(const std::filesystem::path& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::filesystem::path& path() const { return path_; }
    uint64_t file_size() const { return file_size_; }
    uint64_t data_start() const { return data_start_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // Every tensor, in file order (by byte offset).
    const std::vector<TensorView>& tensors() const { return tensors_; }
    // nullptr if absent.
    const TensorView* find(std::string_view name) const;

    // Re-checks the invariants the constructor established (views inside the mapping, sorted,
    // non-overlapping, sizes consistent); throws onecard::Error if one is broken.
    void check_integrity() const;

private:
    std::filesystem::path path_;
    const std::byte* map_ = nullptr;  // whole file; nullptr for an empty file
    uint64_t file_size_ = 0;
    uint64_t data_start_ = 0;
    std::map<std::string, std::string> metadata_;
    std::vector<TensorView> tensors_;
    std::vector<size_t> by_name_;  // indices into tensors_, sorted by name
};

}  // namespace onecard
