#include "server/access_control.h"

#include "core/error.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace onecard::server {

std::optional<std::array<uint8_t, 16>> parse_ip(std::string_view text) {
    std::array<uint8_t, 16> out{};
    const std::string s(text);
    in_addr v4{};
    if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
        out[10] = 0xff;
        out[11] = 0xff;
        std::memcpy(out.data() + 12, &v4, 4);
        return out;
    }
    in6_addr v6{};
    // Scoped addresses ("fe80::1%eth0") are matched without their zone.
    const std::string no_zone = s.substr(0, s.find('%'));
    if (inet_pton(AF_INET6, no_zone.c_str(), &v6) == 1) {
        std::memcpy(out.data(), &v6, 16);
        return out;
    }
    return std::nullopt;
}

Cidr Cidr::parse(std::string_view text) {
    Cidr c;
    c.text = std::string(text);
    const size_t slash = text.find('/');
    const std::string_view addr_text = text.substr(0, slash);
    const auto addr = parse_ip(addr_text);
    ONECARD_CHECK(addr.has_value(), "--allow-cidr '{}': '{}' is not an IPv4 or IPv6 address", text, addr_text);
    const bool v4 = addr_text.find(':') == std::string_view::npos;
    const int max_bits = v4 ? 32 : 128;
    int bits = max_bits;
    if (slash != std::string_view::npos) {
        const std::string_view p = text.substr(slash + 1);
        ONECARD_CHECK(!p.empty() && p.size() <= 3 && p.find_first_not_of("0123456789") == std::string_view::npos,
                      "--allow-cidr '{}': prefix '{}' is not a number", text, p);
        bits = std::stoi(std::string(p));
        ONECARD_CHECK(bits <= max_bits, "--allow-cidr '{}': prefix /{} is longer than {} bits", text, bits, max_bits);
    }
    c.addr = *addr;
    c.prefix_bits = v4 ? 96 + bits : bits;
    // Host bits set usually means a typo ("10.0.0.1/8" meant "10.0.0.0/8"): refuse rather than guess.
    for (int i = c.prefix_bits; i < 128; ++i) {
        const bool bit = (c.addr[static_cast<size_t>(i / 8)] >> (7 - i % 8)) & 1;
        ONECARD_CHECK(!bit, "--allow-cidr '{}': address has bits set beyond the /{} prefix", text, bits);
    }
    return c;
}

bool Cidr::contains(const std::array<uint8_t, 16>& a) const {
    const int full = prefix_bits / 8, rest = prefix_bits % 8;
    for (int i = 0; i < full; ++i)
        if (a[static_cast<size_t>(i)] != addr[static_cast<size_t>(i)]) return false;
    if (rest == 0) return true;
    const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
    return (a[static_cast<size_t>(full)] & mask) == (addr[static_cast<size_t>(full)] & mask);
}

CidrAllowlist::CidrAllowlist(const std::vector<std::string>& cidrs) {
    for (const auto& c : cidrs) nets_.push_back(Cidr::parse(c));
}

bool CidrAllowlist::allows(std::string_view addr_text) const {
    if (nets_.empty()) return true;
    const auto addr = parse_ip(addr_text);
    if (!addr) return false;
    for (const auto& n : nets_)
        if (n.contains(*addr)) return true;
    return false;
}

PathPattern PathPattern::parse(std::string_view text) {
    PathPattern p;
    p.text = std::string(text);
    ONECARD_CHECK(!text.empty() && text.front() == '/', "--allow-path '{}': a path starts with '/'", text);
    const size_t star = text.find('*');
    ONECARD_CHECK(star == std::string_view::npos || star + 1 == text.size(),
                  "--allow-path '{}': '*' may only end a pattern (\"/v1/*\")", text);
    p.prefix = star != std::string_view::npos;
    p.path = std::string(text.substr(0, star));
    return p;
}

bool PathPattern::matches(std::string_view request_path) const {
    return prefix ? request_path.substr(0, path.size()) == path : request_path == path;
}

PathAllowlist::PathAllowlist(const std::vector<std::string>& patterns) {
    for (const auto& p : patterns) patterns_.push_back(PathPattern::parse(p));
}

bool PathAllowlist::allows(std::string_view request_path) const {
    if (patterns_.empty()) return true;
    for (const auto& p : patterns_)
        if (p.matches(request_path)) return true;
    return false;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
    unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(a.data()), a.size(), da);
    SHA256(reinterpret_cast<const unsigned char*>(b.data()), b.size(), db);
    return CRYPTO_memcmp(da, db, SHA256_DIGEST_LENGTH) == 0;
}

ApiKeys::ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {
    for (const auto& k : keys_) ONECARD_CHECK(!k.empty(), "api key: an empty key is not allowed");
}

bool ApiKeys::check_bearer(std::string_view authorization) const {
    constexpr std::string_view kBearer = "Bearer ";
    if (authorization.size() <= kBearer.size() || authorization.substr(0, kBearer.size()) != kBearer) return false;
    return check_key(authorization.substr(kBearer.size()));
}

bool ApiKeys::check_key(std::string_view key) const {
    if (key.empty()) return false;
    bool ok = false;
    for (const auto& k : keys_) ok |= constant_time_equal(key, k);
    return ok;
}

std::vector<std::string> read_api_key_file(const std::string& path) {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    ONECARD_CHECK(std::filesystem::exists(st), "--api-key-file '{}': no such file", path);
    // A directory opens "successfully" and then reads nothing: name it rather than "no key".
    ONECARD_CHECK(std::filesystem::is_regular_file(st), "--api-key-file '{}': not a regular file", path);
    std::ifstream in(path);
    const int err = errno;
    ONECARD_CHECK(in.good(), "--api-key-file '{}': cannot be read ({})", path, std::strerror(err));
    std::vector<std::string> keys;
    std::string line;
    while (std::getline(in, line)) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
        size_t b = line.find_first_not_of(" \t");
        if (b == std::string::npos || line[b] == '#') continue;
        keys.push_back(line.substr(b));
    }
    ONECARD_CHECK(!keys.empty(), "--api-key-file '{}': no key in the file", path);
    return keys;
}

}  // namespace onecard::server
