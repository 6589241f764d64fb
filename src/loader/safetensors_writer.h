// Streaming safetensors writer: the header (names, dtypes, shapes, offsets) is written first from
// the declared specs, then each tensor's bytes are streamed in declaration order, in as many
// chunks as the caller likes. Nothing larger than one chunk is held in memory, so a full-size
// checkpoint can be written on a machine with little RAM.
#pragma once

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace onecard {

struct TensorSpec {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    size_t nbytes() const;
};

class SafetensorsWriter {
public:
    // Opens `path` and writes the header. Throws onecard::Error on I/O failure or duplicate names.
    SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                      const std::map<std::string, std::string>& metadata = {});
    ~SafetensorsWriter();  // does not throw; an unfinished file is left truncated-looking on purpose

    // Appends bytes of tensor `name`, which must be the current tensor in declaration order.
    void write(const std::string& name, std::span<const std::byte> data);
    // Checks every declared byte was written, flushes and closes. Throws on mismatch.
    void close();

    const std::vector<TensorSpec>& specs() const { return specs_; }

private:
    std::filesystem::path path_;
    std::vector<TensorSpec> specs_;
    std::ofstream out_;
    size_t current_ = 0;  // index of the tensor being written
    size_t written_in_current_ = 0;
    bool closed_ = false;
};

}  // namespace onecard
