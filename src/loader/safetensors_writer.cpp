#include "loader/safetensors_writer.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <set>
#include <utility>

namespace onecard {

size_t TensorSpec::nbytes() const {
    size_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
}

namespace {

// The header as the reference implementation lays it out: `__metadata__` first (when present),
// then the tensors in declaration order, each {dtype, shape, data_offsets}; offsets are relative
// to the start of the byte buffer that follows the header. Padded with spaces to a multiple of 8
// so the byte buffer starts 8-aligned in the file (8-byte length prefix + padded header).
std::string build_header(const std::filesystem::path& path, const std::vector<TensorSpec>& specs,
                         const std::map<std::string, std::string>& metadata) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json meta = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) meta[k] = v;
        header["__metadata__"] = std::move(meta);
    }
    std::set<std::string> seen;
    size_t offset = 0;
    for (const auto& spec : specs) {
        ONECARD_CHECK(!spec.name.empty(), "{}: tensor with an empty name", path.string());
        ONECARD_CHECK(spec.name != "__metadata__", "{}: tensor name __metadata__ is reserved", path.string());
        ONECARD_CHECK(seen.insert(spec.name).second, "{}: duplicate tensor name {}", path.string(), spec.name);
        for (int64_t d : spec.shape) {
            ONECARD_CHECK(d >= 0, "{}: tensor {} has a negative dimension in its shape", path.string(), spec.name);
        }
        const size_t n = spec.nbytes();
        nlohmann::ordered_json entry = nlohmann::ordered_json::object();
        entry["dtype"] = std::string(dtype_name(spec.dtype));
        entry["shape"] = spec.shape;
        entry["data_offsets"] = {offset, offset + n};
        header[spec.name] = std::move(entry);
        offset += n;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), specs_(std::move(specs)) {
    const std::string header = build_header(path_, specs_, metadata);
    out_.open(path_, std::ios::binary | std::ios::trunc);
    ONECARD_CHECK(out_.is_open(), "{}: cannot open for writing: {}", path_.string(), std::strerror(errno));
    // Length prefix: unsigned 64-bit little-endian (we only build on little-endian hosts).
    const uint64_t n = header.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    out_.write(reinterpret_cast<const char*>(len), 8);
    out_.write(header.data(), static_cast<std::streamsize>(header.size()));
    ONECARD_CHECK(out_.good(), "{}: write failed (header)", path_.string());
}

SafetensorsWriter::~SafetensorsWriter() {
    if (!closed_ && out_.is_open()) out_.close();
}

void SafetensorsWriter::write(const std::string& name, std::span<const std::byte> data) {
    ONECARD_CHECK(!closed_, "{}: write of tensor {} after close()", path_.string(), name);
    // Step past tensors that are complete (including zero-byte ones the caller never mentions).
    while (current_ < specs_.size() && specs_[current_].name != name &&
           written_in_current_ == specs_[current_].nbytes()) {
        ++current_;
        written_in_current_ = 0;
    }
    ONECARD_CHECK(current_ < specs_.size(), "{}: tensor {} written after every declared tensor was complete",
                  path_.string(), name);
    const TensorSpec& spec = specs_[current_];
    ONECARD_CHECK(spec.name == name, "{}: tensor {} written out of order: expected tensor {} ({} of {} bytes written)",
                  path_.string(), name, spec.name, written_in_current_, spec.nbytes());
    ONECARD_CHECK(written_in_current_ + data.size() <= spec.nbytes(),
                  "{}: tensor {}: {} bytes written but it holds {} bytes", path_.string(), name,
                  written_in_current_ + data.size(), spec.nbytes());
    if (!data.empty()) {
        out_.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
        ONECARD_CHECK(out_.good(), "{}: write failed (tensor {})", path_.string(), name);
    }
    written_in_current_ += data.size();
}

void SafetensorsWriter::close() {
    if (closed_) return;
    while (current_ < specs_.size() && written_in_current_ == specs_[current_].nbytes()) {
        ++current_;
        written_in_current_ = 0;
    }
    ONECARD_CHECK(current_ == specs_.size(), "{}: close() with tensor {} incomplete ({} of {} bytes written)",
                  path_.string(), specs_[current_].name, written_in_current_, specs_[current_].nbytes());
    out_.flush();
    ONECARD_CHECK(out_.good(), "{}: flush failed", path_.string());
    out_.close();
    ONECARD_CHECK(!out_.fail(), "{}: close failed", path_.string());
    closed_ = true;
}

}  // namespace onecard
