#include "kvcache/kv_disk_entry.h"

#include "core/error.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <bit>
#include <charconv>
#include <cstring>
#include <memory>

namespace onecard {
namespace {

// The header is written with memcpy of host integers; the format says little-endian.
static_assert(std::endian::native == std::endian::little, "kv_disk_entry: the entry format assumes little-endian");

constexpr std::array<uint8_t, 8> kMagic = {'O', 'C', 'K', 'V', 'D', 'I', 'S', 'K'};
constexpr size_t kOffVersion = 8, kOffKind = 12, kOffFingerprint = 16, kOffHash = 24, kOffLength = 32, kOffDigest = 40;
constexpr size_t kDigestBytes = 32;
static_assert(kOffDigest + kDigestBytes == kKvDiskHeaderBytes);

template <typename T>
void put_le(KvDiskHeaderBytes& h, size_t off, T v) {
    std::memcpy(h.data() + off, &v, sizeof(T));
}
template <typename T>
T get_le(const KvDiskHeaderBytes& h, size_t off) {
    T v;
    std::memcpy(&v, h.data() + off, sizeof(T));
    return v;
}

struct EvpCtxDeleter {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// SHA-256 of the header's fields (bytes [0, kOffDigest)) followed by the payload.
std::array<uint8_t, kDigestBytes> entry_digest(const KvDiskHeaderBytes& header, std::span<const uint8_t> payload) {
    std::unique_ptr<EVP_MD_CTX, EvpCtxDeleter> ctx(EVP_MD_CTX_new());
    std::array<uint8_t, kDigestBytes> out{};
    unsigned int n = 0;
    // A failure here is OpenSSL out of memory or misconfigured, not a property of the entry.
    ONECARD_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1 &&
                      EVP_DigestUpdate(ctx.get(), header.data(), kOffDigest) == 1 &&
                      EVP_DigestUpdate(ctx.get(), payload.data(), payload.size()) == 1 &&
                      EVP_DigestFinal_ex(ctx.get(), out.data(), &n) == 1 && n == kDigestBytes,
                  "kv disk entry: SHA-256 failed");
    return out;
}

bool parse_hex16(std::string_view s, uint64_t& v) {
    if (s.size() != 16) return false;
    for (char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;  // lower case only: one name per key
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v, 16);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

std::string kv_disk_entry_name(uint64_t fingerprint, const KvTierKey& key) {
    const char kind = key.kind == KvTierKind::Block ? 'b' : 's';
    return fmt::format("{:016x}-{}-{:016x}{}", fingerprint, kind, key.hash, kKvDiskEntrySuffix);
}

std::optional<KvDiskEntryName> parse_kv_disk_entry_name(std::string_view name) {
    // "<16 hex>-<b|s>-<16 hex>.kv"
    constexpr size_t kLen = 16 + 1 + 1 + 1 + 16;
    if (name.size() != kLen + kKvDiskEntrySuffix.size() || !name.ends_with(kKvDiskEntrySuffix)) return std::nullopt;
    if (name[16] != '-' || name[18] != '-') return std::nullopt;
    KvDiskEntryName out;
    if (name[17] == 'b') {
        out.key.kind = KvTierKind::Block;
    } else if (name[17] == 's') {
        out.key.kind = KvTierKind::Snapshot;
    } else {
        return std::nullopt;
    }
    if (!parse_hex16(name.substr(0, 16), out.fingerprint) || !parse_hex16(name.substr(19, 16), out.key.hash))
        return std::nullopt;
    return out;
}

KvDiskHeaderBytes encode_kv_disk_header(uint64_t fingerprint, const KvTierKey& key, std::span<const uint8_t> payload) {
    KvDiskHeaderBytes h{};
    std::memcpy(h.data(), kMagic.data(), kMagic.size());
    put_le<uint32_t>(h, kOffVersion, kKvDiskFormatVersion);
    put_le<uint8_t>(h, kOffKind, static_cast<uint8_t>(key.kind));
    put_le<uint64_t>(h, kOffFingerprint, fingerprint);
    put_le<uint64_t>(h, kOffHash, key.hash);
    put_le<uint64_t>(h, kOffLength, static_cast<uint64_t>(payload.size()));
    const auto digest = entry_digest(h, payload);
    std::memcpy(h.data() + kOffDigest, digest.data(), digest.size());
    return h;
}

const char* kv_disk_entry_check_name(KvDiskEntryCheck c) {
    switch (c) {
        case KvDiskEntryCheck::Ok:
            return "ok";
        case KvDiskEntryCheck::BadMagic:
            return "bad magic";
        case KvDiskEntryCheck::BadVersion:
            return "unknown format version";
        case KvDiskEntryCheck::BadFingerprint:
            return "other layout fingerprint";
        case KvDiskEntryCheck::BadKey:
            return "header names another key";
        case KvDiskEntryCheck::BadLength:
            return "payload length does not match the file size";
        case KvDiskEntryCheck::BadDigest:
            return "checksum mismatch";
    }
    return "?";
}

KvDiskEntryCheck check_kv_disk_header(const KvDiskHeaderBytes& header, uint64_t fingerprint, const KvTierKey& key,
                                      int64_t file_bytes) {
    if (std::memcmp(header.data(), kMagic.data(), kMagic.size()) != 0) return KvDiskEntryCheck::BadMagic;
    if (get_le<uint32_t>(header, kOffVersion) != kKvDiskFormatVersion) return KvDiskEntryCheck::BadVersion;
    // The three zero bytes after the kind are covered by the digest; checked here too so that a header
    // from a future format that uses them is refused before the payload is read.
    if (header[kOffKind + 1] != 0 || header[kOffKind + 2] != 0 || header[kOffKind + 3] != 0)
        return KvDiskEntryCheck::BadVersion;
    if (get_le<uint64_t>(header, kOffFingerprint) != fingerprint) return KvDiskEntryCheck::BadFingerprint;
    if (get_le<uint8_t>(header, kOffKind) != static_cast<uint8_t>(key.kind) ||
        get_le<uint64_t>(header, kOffHash) != key.hash)
        return KvDiskEntryCheck::BadKey;
    const uint64_t length = get_le<uint64_t>(header, kOffLength);
    if (file_bytes < kKvDiskHeaderBytes || length != static_cast<uint64_t>(file_bytes - kKvDiskHeaderBytes))
        return KvDiskEntryCheck::BadLength;
    return KvDiskEntryCheck::Ok;
}

KvDiskEntryCheck check_kv_disk_entry(const KvDiskHeaderBytes& header, std::span<const uint8_t> payload,
                                     uint64_t fingerprint, const KvTierKey& key) {
    const auto c =
        check_kv_disk_header(header, fingerprint, key, kKvDiskHeaderBytes + static_cast<int64_t>(payload.size()));
    if (c != KvDiskEntryCheck::Ok) return c;
    const auto digest = entry_digest(header, payload);
    if (std::memcmp(header.data() + kOffDigest, digest.data(), digest.size()) != 0) return KvDiskEntryCheck::BadDigest;
    return KvDiskEntryCheck::Ok;
}

}  // namespace onecard
