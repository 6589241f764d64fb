// One entry file of the KV disk tier (kv_disk_store.h): its name and its byte format. Pure functions
// over names and bytes; the store does the file I/O.
//
// File name: "<fingerprint>-<b|s>-<hash>.kv", both numbers as 16 lower-case hex digits, b for a paged
// block, s for a sequence-state snapshot. The fingerprint in the name lets the store sort out a
// directory written under another KV layout without opening each file; the header repeats every field
// so that a renamed or copied file is still caught.
//
// File bytes (integers little-endian, which is the host order on every platform onecard builds for):
//   offset  size  field
//        0     8  magic "OCKVDISK"
//        8     4  format version (kKvDiskFormatVersion)
//       12     1  kind (KvTierKind)
//       13     3  zero
//       16     8  layout fingerprint
//       24     8  key hash
//       32     8  payload length in bytes
//       40    32  SHA-256 over bytes [0, 40) and then the payload
//       72     -  payload
// The digest covers the header fields too, so a flipped bit anywhere in the file is a mismatch.
// SHA-256 rather than a CRC: OpenSSL is already linked by the project (no new dependency), and a
// corrupt entry passing the check would be wrong KV served silently.
#pragma once

#include "kvcache/kv_disk_store.h"

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace onecard {

inline constexpr uint32_t kKvDiskFormatVersion = 1;
inline constexpr int64_t kKvDiskHeaderBytes = 72;
inline constexpr std::string_view kKvDiskEntrySuffix = ".kv";
// A file being written: "<entry name>.tmp". Only the process holding the directory lock writes, so a
// temp file seen when the lock is taken is a torn write of a process that died.
inline constexpr std::string_view kKvDiskTempSuffix = ".kv.tmp";

using KvDiskHeaderBytes = std::array<uint8_t, kKvDiskHeaderBytes>;

// The entry file name of key under fingerprint (no directory).
std::string kv_disk_entry_name(uint64_t fingerprint, const KvTierKey& key);

struct KvDiskEntryName {
    uint64_t fingerprint = 0;
    KvTierKey key;
};
// Parses an entry file name; nullopt unless it is exactly what kv_disk_entry_name writes.
std::optional<KvDiskEntryName> parse_kv_disk_entry_name(std::string_view name);

// The header of an entry holding payload (digest included).
KvDiskHeaderBytes encode_kv_disk_header(uint64_t fingerprint, const KvTierKey& key, std::span<const uint8_t> payload);

// Why an entry is refused (Ok: it is usable).
enum class KvDiskEntryCheck : uint8_t { Ok, BadMagic, BadVersion, BadFingerprint, BadKey, BadLength, BadDigest };
const char* kv_disk_entry_check_name(KvDiskEntryCheck c);

// Checks everything in the header but the digest: magic, version, fingerprint, kind and hash against
// the expected ones, and that the payload length agrees with file_bytes (the file's size).
KvDiskEntryCheck check_kv_disk_header(const KvDiskHeaderBytes& header, uint64_t fingerprint, const KvTierKey& key,
                                      int64_t file_bytes);
// check_kv_disk_header, then the digest over the header fields and payload.
KvDiskEntryCheck check_kv_disk_entry(const KvDiskHeaderBytes& header, std::span<const uint8_t> payload,
                                     uint64_t fingerprint, const KvTierKey& key);

}  // namespace onecard
