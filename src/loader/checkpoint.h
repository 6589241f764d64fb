// A checkpoint directory: config.json + safetensors shards (via model.safetensors.index.json, or a
// single model.safetensors). All shards are mmap'd read-only and validated when opened.
#pragma once

#include "core/tensor.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace onecard {

class SafetensorsFile;

class Checkpoint {
public:
    // Opens and validates every shard (throws onecard::Error naming file and tensor).
    static Checkpoint open(const std::filesystem::path& dir);

    Checkpoint(Checkpoint&&) noexcept;
    Checkpoint& operator=(Checkpoint&&) noexcept;
    ~Checkpoint();

    const std::filesystem::path& dir() const { return dir_; }
    // nullptr if absent.
    const TensorView* find(const std::string& name) const;
    // Throws onecard::Error("tensor NAME not found in DIR") if absent.
    const TensorView& get(const std::string& name) const;
    // Every tensor, in a stable order (by shard, then by offset).
    const std::vector<TensorView>& tensors() const { return tensors_; }
    std::vector<std::filesystem::path> shard_paths() const;
    // Re-checks every shard's invariants and the name index; throws onecard::Error if broken.
    void check_integrity() const;

private:
    Checkpoint() = default;
    std::filesystem::path dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> shards_;
    std::vector<TensorView> tensors_;
    std::vector<size_t> sorted_index_;  // indices of tensors_ sorted by name, for find()
};

}  // namespace onecard
