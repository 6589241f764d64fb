// Who may talk to the server: a CIDR allowlist over client addresses (IPv4 and IPv6; IPv4-mapped
// IPv6 addresses count as IPv4), a path allowlist (--allow-path) and API keys compared in constant time.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace onecard::server {

// One network: 16 address bytes (IPv4 stored as its IPv4-mapped IPv6 form) and a prefix length
// counted over those 128 bits.
struct Cidr {
    std::array<uint8_t, 16> addr{};
    int prefix_bits = 0;  // over the 128-bit form (an IPv4 /24 is 96 + 24)
    std::string text;     // as given, for logs

    // "10.0.0.0/8", "127.0.0.1" (= /32), "::1", "fd00::/8". Throws onecard::Error naming the text
    // when it is not an address, the prefix is out of range or host bits are set.
    static Cidr parse(std::string_view text);
    bool contains(const std::array<uint8_t, 16>& a) const;
};

// An address as httplib reports it ("127.0.0.1", "::1", "::ffff:10.1.2.3"); nullopt if unparsable.
std::optional<std::array<uint8_t, 16>> parse_ip(std::string_view text);

class CidrAllowlist {
public:
    CidrAllowlist() = default;  // empty: everyone allowed
    explicit CidrAllowlist(const std::vector<std::string>& cidrs);

    bool empty() const { return nets_.empty(); }
    // False for an unparsable address when the list is not empty.
    bool allows(std::string_view addr) const;
    const std::vector<Cidr>& nets() const { return nets_; }

private:
    std::vector<Cidr> nets_;
};

// One --allow-path pattern: an exact path ("/v1/chat/completions"), or every path that starts with
// what comes before a final '*' ("/v1/*", "/v1/models/*").
struct PathPattern {
    std::string text;  // as given
    bool prefix = false;
    std::string path;  // the exact path, or the prefix without its '*'

    // Throws onecard::Error naming the text when it does not start with '/' or holds a '*' elsewhere
    // than at its end.
    static PathPattern parse(std::string_view text);
    bool matches(std::string_view request_path) const;
};

// --allow-path: which request paths the server answers at all (like a reverse proxy that forwards
// only some routes). Empty: every path.
class PathAllowlist {
public:
    PathAllowlist() = default;
    explicit PathAllowlist(const std::vector<std::string>& patterns);

    bool allows(std::string_view request_path) const;
    const std::vector<PathPattern>& patterns() const { return patterns_; }

private:
    std::vector<PathPattern> patterns_;
};

// True when a == b, in time that depends on neither content nor the position of a difference (both
// sides are hashed with SHA-256 first, so the length of the secret does not leak either; the digests
// are compared with CRYPTO_memcmp).
bool constant_time_equal(std::string_view a, std::string_view b);

class ApiKeys {
public:
    ApiKeys() = default;  // no keys: authentication off
    explicit ApiKeys(std::vector<std::string> keys);

    bool enabled() const { return !keys_.empty(); }
    // `authorization` is the Authorization header value ("Bearer <key>"); every configured key is
    // compared (no early exit) so timing does not tell which key nearly matched.
    bool check_bearer(std::string_view authorization) const;
    // `key` is the bare key (the x-api-key header of the Anthropic routes); compared as check_bearer does.
    bool check_key(std::string_view key) const;

private:
    std::vector<std::string> keys_;
};

// Keys from a file: one per line; blank lines and lines starting with '#' are skipped. Throws
// onecard::Error naming the file when it cannot be read or holds no key.
std::vector<std::string> read_api_key_file(const std::string& path);

}  // namespace onecard::server
