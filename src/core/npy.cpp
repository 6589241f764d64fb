#include "core/npy.h"

#include "core/error.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <string>

namespace onecard {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string shape_tuple(const std::vector<int64_t>& shape) {
    if (shape.size() == 1) return fmt::format("({},)", shape[0]);
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + ")";
}

void write_raw(const std::filesystem::path& path, const char* descr, const void* data, size_t elem_size, size_t n_elems,
               const std::vector<int64_t>& shape) {
    ONECARD_CHECK(numel_of(shape) == static_cast<int64_t>(n_elems), "npy {}: shape {} does not match {} elements",
                  path.string(), shape_tuple(shape), n_elems);
    std::string header =
        fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape_tuple(shape));
    // Magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64
    // and terminated by '\n' (the alignment numpy itself produces).
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header.push_back('\n');
    ONECARD_CHECK(header.size() < 65536, "npy {}: header too long", path.string());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    ONECARD_CHECK(out.good(), "npy {}: cannot open for writing", path.string());
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    out.write(magic, 8);
    uint16_t len = static_cast<uint16_t>(header.size());
    const char len_bytes[2] = {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8)};
    out.write(len_bytes, 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(elem_size * n_elems));
    ONECARD_CHECK(out.good(), "npy {}: write failed", path.string());
}

// Extracts the value text of `key` from the header dict (e.g. "'<f4'" or "(3, 4)").
std::string header_value(const std::string& header, const std::string& key, const std::filesystem::path& path) {
    size_t k = header.find("'" + key + "'");
    ONECARD_CHECK(k != std::string::npos, "npy {}: header lacks '{}'", path.string(), key);
    size_t colon = header.find(':', k);
    ONECARD_CHECK(colon != std::string::npos, "npy {}: malformed header", path.string());
    size_t start = colon + 1;
    while (start < header.size() && header[start] == ' ') ++start;
    size_t end = start;
    if (header[start] == '(') {
        end = header.find(')', start);
        ONECARD_CHECK(end != std::string::npos, "npy {}: malformed shape", path.string());
        ++end;
    } else {
        while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
    }
    return header.substr(start, end - start);
}

template <typename T>
NpyArray<T> read_raw(const std::filesystem::path& path, const char* want_descr) {
    std::ifstream in(path, std::ios::binary);
    ONECARD_CHECK(in.good(), "npy {}: cannot open", path.string());
    char magic[8];
    in.read(magic, 8);
    ONECARD_CHECK(in.good() && std::memcmp(magic, "\x93NUMPY", 6) == 0, "npy {}: not a .npy file", path.string());
    uint32_t header_len = 0;
    if (magic[6] == 1) {
        unsigned char b[2];
        in.read(reinterpret_cast<char*>(b), 2);
        header_len = b[0] | (b[1] << 8);
    } else {
        ONECARD_CHECK(magic[6] == 2 || magic[6] == 3, "npy {}: unsupported version {}", path.string(), int(magic[6]));
        unsigned char b[4];
        in.read(reinterpret_cast<char*>(b), 4);
        header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
    }
    std::string header(header_len, '\0');
    in.read(header.data(), header_len);
    ONECARD_CHECK(in.good(), "npy {}: truncated header", path.string());
    std::string descr = header_value(header, "descr", path);
    ONECARD_CHECK(descr == fmt::format("'{}'", want_descr), "npy {}: dtype {} (expected '{}')", path.string(), descr,
                  want_descr);
    ONECARD_CHECK(header_value(header, "fortran_order", path) == "False", "npy {}: fortran order is not supported",
                  path.string());
    std::string shape_text = header_value(header, "shape", path);
    NpyArray<T> arr;
    std::string num;
    for (char c : shape_text) {
        if (c >= '0' && c <= '9') {
            num.push_back(c);
        } else if (!num.empty()) {
            arr.shape.push_back(std::stoll(num));
            num.clear();
        }
    }
    int64_t n = numel_of(arr.shape);
    arr.data.resize(static_cast<size_t>(n));
    in.read(reinterpret_cast<char*>(arr.data.data()), static_cast<std::streamsize>(n * sizeof(T)));
    ONECARD_CHECK(in.gcount() == static_cast<std::streamsize>(n * sizeof(T)), "npy {}: truncated data ({} elements)",
                  path.string(), n);
    return arr;
}

}  // namespace

void npy_write_f32(const std::filesystem::path& path, std::span<const float> data, const std::vector<int64_t>& shape) {
    write_raw(path, "<f4", data.data(), sizeof(float), data.size(), shape);
}

void npy_write_i32(const std::filesystem::path& path, std::span<const int32_t> data,
                   const std::vector<int64_t>& shape) {
    write_raw(path, "<i4", data.data(), sizeof(int32_t), data.size(), shape);
}

NpyArray<float> npy_read_f32(const std::filesystem::path& path) {
    return read_raw<float>(path, "<f4");
}
NpyArray<int32_t> npy_read_i32(const std::filesystem::path& path) {
    return read_raw<int32_t>(path, "<i4");
}

}  // namespace onecard
