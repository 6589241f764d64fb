#include "loader/safetensors.h"

#include "core/error.h"
#include "loader/json_strict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace onecard {

namespace {

std::string json_type(const nlohmann::json& j) {
    return j.type_name();
}

uint64_t read_u64_le(std::span<const std::byte> b) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
    return v;
}

std::vector<int64_t> parse_shape(const nlohmann::json& j, const std::string& label, const std::string& name) {
    ONECARD_CHECK(j.is_array(), "{}: tensor {}: shape is a JSON {}, not an array", label, name, json_type(j));
    std::vector<int64_t> shape;
    shape.reserve(j.size());
    for (const auto& d : j) {
        if (d.is_number_integer() && !d.is_number_unsigned()) {
            fail("{}: tensor {}: negative dimension {} in shape", label, name, d.get<int64_t>());
        }
        ONECARD_CHECK(d.is_number_unsigned(), "{}: tensor {}: shape entry {} is not a non-negative integer", label,
                      name, d.dump());
        const uint64_t v = d.get<uint64_t>();
        ONECARD_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                      "{}: tensor {}: dimension {} is too large", label, name, v);
        shape.push_back(static_cast<int64_t>(v));
    }
    return shape;
}

SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& j, uint64_t buffer_size,
                             const std::string& label) {
    ONECARD_CHECK(!name.empty(), "{}: tensor with an empty name", label);
    ONECARD_CHECK(j.is_object(), "{}: tensor {}: entry is a JSON {}, not an object", label, name, json_type(j));
    for (const auto& [key, value] : j.items()) {
        ONECARD_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
                      "{}: tensor {}: unexpected field \"{}\"", label, name, key);
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
        ONECARD_CHECK(j.contains(key), "{}: tensor {}: missing field \"{}\"", label, name, key);
    }

    SafetensorsEntry e;
    e.name = name;
    const auto& dtype = j.at("dtype");
    ONECARD_CHECK(dtype.is_string(), "{}: tensor {}: dtype is a JSON {}, not a string", label, name, json_type(dtype));
    const auto parsed = dtype_from_name(dtype.get<std::string>());
    ONECARD_CHECK(parsed.has_value(), "{}: tensor {}: unknown dtype \"{}\"", label, name, dtype.get<std::string>());
    e.dtype = *parsed;
    e.shape = parse_shape(j.at("shape"), label, name);

    const auto& offsets = j.at("data_offsets");
    ONECARD_CHECK(
        offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
        "{}: tensor {}: data_offsets {} is not a pair of non-negative integers", label, name, offsets.dump());
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    ONECARD_CHECK(e.begin <= e.end, "{}: tensor {}: data_offsets [{}, {}) begin after end", label, name, e.begin,
                  e.end);

    // shape x dtype must cover the byte range exactly (overflow-checked: dims are attacker-chosen).
    uint64_t n_bytes = dtype_size(e.dtype);
    for (int64_t d : e.shape) {
        ONECARD_CHECK(!__builtin_mul_overflow(n_bytes, static_cast<uint64_t>(d), &n_bytes),
                      "{}: tensor {}: size of shape {} overflows", label, name, shape_str(e.shape));
    }
    ONECARD_CHECK(n_bytes == e.end - e.begin,
                  "{}: tensor {}: size mismatch: shape {} of {} needs {} bytes but data_offsets [{}, {}) hold {}",
                  label, name, shape_str(e.shape), dtype_name(e.dtype), n_bytes, e.begin, e.end, e.end - e.begin);
    ONECARD_CHECK(e.end <= buffer_size,
                  "{}: tensor {}: data_offsets [{}, {}) lie outside the data buffer of {} bytes (file truncated or "
                  "offsets corrupt)",
                  label, name, e.begin, e.end, buffer_size);
    return e;
}

}  // namespace

SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& label) {
    const uint64_t size = file.size();
    ONECARD_CHECK(size >= 8, "{}: file truncated: {} bytes, shorter than the 8-byte header length", label, size);
    const uint64_t n_header = read_u64_le(file.first(8));
    ONECARD_CHECK(n_header >= 2, "{}: header length {} is too small (the smallest header, {{}}, has 2 bytes)", label,
                  n_header);
    ONECARD_CHECK(n_header <= kSafetensorsMaxHeaderBytes, "{}: header length {} exceeds the {}-byte limit", label,
                  n_header, kSafetensorsMaxHeaderBytes);
    ONECARD_CHECK(n_header <= size - 8, "{}: file truncated: header length {} runs past the end of the file ({} bytes)",
                  label, n_header, size);

    const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, n_header);
    JsonStrictOptions options;
    options.top_level_key_noun = "tensor name";
    const nlohmann::json header = parse_json_strict(text, label, options);
    ONECARD_CHECK(header.is_object(), "{}: header is a JSON {}, not an object", label, json_type(header));

    SafetensorsHeader out;
    out.data_start = 8 + n_header;
    const uint64_t buffer_size = size - out.data_start;
    for (const auto& [key, value] : header.items()) {
        if (key == "__metadata__") {
            ONECARD_CHECK(value.is_object(), "{}: __metadata__ is a JSON {}, not an object", label, json_type(value));
            for (const auto& [mk, mv] : value.items()) {
                ONECARD_CHECK(mv.is_string(), "{}: __metadata__ value of \"{}\" is a JSON {}, not a string", label, mk,
                              json_type(mv));
                out.metadata.emplace(mk, mv.get<std::string>());
            }
            continue;
        }
        out.tensors.push_back(parse_entry(key, value, buffer_size, label));
    }

    std::sort(out.tensors.begin(), out.tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    // Zero-byte tensors occupy no bytes, so they cannot overlap anything.
    const SafetensorsEntry* prev = nullptr;
    for (const auto& e : out.tensors) {
        if (e.begin == e.end) continue;
        if (prev != nullptr) {
            ONECARD_CHECK(e.begin >= prev->end, "{}: tensors {} [{}, {}) and {} [{}, {}) have overlapping byte ranges",
                          label, prev->name, prev->begin, prev->end, e.name, e.begin, e.end);
        }
        prev = &e;
    }
    // The data buffer must be exactly the tensors' bytes, back to back from offset 0 (what the
    // reference implementation writes and requires). Slack or a gap is how a header length that
    // absorbed padding shifts every tensor onto the wrong bytes while all ranges still fit.
    uint64_t expect = 0;
    for (const auto& e : out.tensors) {
        if (e.begin == e.end) continue;  // zero-byte tensors occupy nothing
        ONECARD_CHECK(e.begin == expect,
                      "{}: tensor {} starts at data offset {} but the previous tensor ends at {}: the data buffer "
                      "must hold the tensors back to back (gap, or header length off by {} bytes?)",
                      label, e.name, e.begin, expect, e.begin - expect);
        expect = e.end;
    }
    ONECARD_CHECK(expect == buffer_size,
                  "{}: data buffer is {} bytes but the tensors occupy {}: {} bytes of slack after the last tensor "
                  "(the header length {} may have absorbed padding, shifting the data)",
                  label, buffer_size, expect, buffer_size - expect, n_header);
    return out;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
    const std::string label = path.string();
    const int fd = ::open(label.c_str(), O_RDONLY | O_CLOEXEC);
    ONECARD_CHECK(fd >= 0, "{}: cannot open: {}", label, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        const int err = errno;
        ::close(fd);
        fail("{}: not a readable regular file{}", label, err != 0 ? fmt::format(" ({})", std::strerror(err)) : "");
    }
    file_size_ = static_cast<uint64_t>(st.st_size);
    if (file_size_ > 0) {
        void* p = ::mmap(nullptr, file_size_, PROT_READ, MAP_PRIVATE, fd, 0);
        const int err = errno;
        ::close(fd);
        ONECARD_CHECK(p != MAP_FAILED, "{}: mmap of {} bytes failed: {}", label, file_size_, std::strerror(err));
        map_ = static_cast<const std::byte*>(p);
    } else {
        ::close(fd);
    }

    SafetensorsHeader header;
    try {
        header = parse_safetensors(std::span<const std::byte>(map_, file_size_), label);
    } catch (...) {
        // The destructor does not run for a throwing constructor: release the mapping here.
        if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), file_size_);
        map_ = nullptr;
        throw;
    }
    data_start_ = header.data_start;
    metadata_ = std::move(header.metadata);
    tensors_.reserve(header.tensors.size());
    for (auto& e : header.tensors) {
        TensorView v;
        v.name = std::move(e.name);
        v.dtype = e.dtype;
        v.shape = std::move(e.shape);
        v.data = map_ + data_start_ + e.begin;
        v.nbytes = e.end - e.begin;
        tensors_.push_back(std::move(v));
    }
    by_name_.resize(tensors_.size());
    for (size_t i = 0; i < by_name_.size(); ++i) by_name_[i] = i;
    std::sort(by_name_.begin(), by_name_.end(),
              [this](size_t a, size_t b) { return tensors_[a].name < tensors_[b].name; });
}

SafetensorsFile::~SafetensorsFile() {
    if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), file_size_);
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
    const auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                                     [this](size_t i, std::string_view n) { return tensors_[i].name < n; });
    if (it == by_name_.end() || tensors_[*it].name != name) return nullptr;
    return &tensors_[*it];
}

void SafetensorsFile::check_integrity() const {
    const std::string label = path_.string();
    ONECARD_CHECK(data_start_ >= 10 && data_start_ <= file_size_,
                  "{}: integrity: data start {} outside file of {} bytes", label, data_start_, file_size_);
    ONECARD_CHECK(by_name_.size() == tensors_.size(), "{}: integrity: name index has {} entries for {} tensors", label,
                  by_name_.size(), tensors_.size());
    const std::byte* buffer_begin = map_ + data_start_;
    const std::byte* buffer_end = map_ + file_size_;
    const std::byte* prev_end = buffer_begin;
    const std::byte* prev_begin = buffer_begin;
    for (const auto& t : tensors_) {
        uint64_t n = dtype_size(t.dtype);
        for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
        ONECARD_CHECK(n == t.nbytes, "{}: integrity: tensor {} has {} bytes for shape {}", label, t.name, t.nbytes,
                      shape_str(t.shape));
        ONECARD_CHECK(t.data >= buffer_begin && t.data + t.nbytes <= buffer_end,
                      "{}: integrity: tensor {} points outside the data buffer", label, t.name);
        ONECARD_CHECK(t.data >= prev_begin, "{}: integrity: tensor {} is out of file order", label, t.name);
        ONECARD_CHECK(t.nbytes == 0 || t.data >= prev_end, "{}: integrity: tensor {} overlaps its predecessor", label,
                      t.name);
        prev_begin = t.data;
        if (t.nbytes > 0) prev_end = t.data + t.nbytes;
    }
    for (size_t i = 1; i < by_name_.size(); ++i) {
        ONECARD_CHECK(tensors_[by_name_[i - 1]].name < tensors_[by_name_[i]].name,
                      "{}: integrity: name index unsorted or duplicate at {}", label, tensors_[by_name_[i]].name);
    }
}

}  // namespace onecard
