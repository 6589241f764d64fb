// The rendezvous of `onecard serve --gpus N` (one process per GPU on one host): rank 0 creates
// NCCL's unique id (128 opaque bytes) and publishes it as a file at a path every rank is given;
// the others wait for the file and read it. Byte-level and NCCL-free so CI tests the protocol.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace onecard::parallel {

// Rank 0: writes `bytes` to `path` atomically (a temporary name in the same directory, then a
// rename), so a polling rank never reads a half-written id. Refuses (onecard::Error) when `path`
// already exists: a file left by an earlier, crashed launch would hand the other ranks a dead id and
// they would hang in NCCL init instead of failing here; the launcher gives each launch a fresh path.
void publish_bootstrap_id(const std::filesystem::path& path, const void* bytes, size_t n_bytes);

// Ranks > 0: polls every 10 ms until `path` holds exactly n_bytes, then returns them. Throws
// onecard::Error after `timeout` (rank 0 never started, or another path was given), or when the file
// has a different size after the rename (not an id of this NCCL).
std::vector<uint8_t> wait_bootstrap_id(const std::filesystem::path& path, size_t n_bytes,
                                       std::chrono::milliseconds timeout);

}  // namespace onecard::parallel
