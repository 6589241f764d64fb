// CIDR allowlist (IPv4, IPv6, mapped addresses, refusals) and API-key checks of the server.
#include "core/error.h"
#include "server/access_control.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

using namespace onecard;
using namespace onecard::server;

TEST(ServerCidr, Ipv4NetworksMatchExactlyTheirRange) {
    CidrAllowlist l({"10.0.0.0/8", "192.168.1.128/25", "127.0.0.2"});
    EXPECT_TRUE(l.allows("10.0.0.1"));
    EXPECT_TRUE(l.allows("10.255.255.255"));
    EXPECT_FALSE(l.allows("11.0.0.0"));
    EXPECT_FALSE(l.allows("9.255.255.255"));
    EXPECT_TRUE(l.allows("192.168.1.128"));
    EXPECT_TRUE(l.allows("192.168.1.255"));
    EXPECT_FALSE(l.allows("192.168.1.127"));
    EXPECT_TRUE(l.allows("127.0.0.2"));
    EXPECT_FALSE(l.allows("127.0.0.1"));
    // An IPv4 client seen through a dual-stack socket.
    EXPECT_TRUE(l.allows("::ffff:10.1.2.3"));
    EXPECT_FALSE(l.allows("::ffff:127.0.0.1"));
    EXPECT_FALSE(l.allows("::1"));
    EXPECT_FALSE(l.allows("not an address"));
    EXPECT_FALSE(l.allows(""));
}

TEST(ServerCidr, Ipv6NetworksAndZones) {
    CidrAllowlist l({"fd00::/8", "::1", "2001:db8:abcd:12::/63"});
    EXPECT_TRUE(l.allows("::1"));
    EXPECT_FALSE(l.allows("::2"));
    EXPECT_TRUE(l.allows("fd12:3456::1"));
    EXPECT_FALSE(l.allows("fe00::1"));
    EXPECT_TRUE(l.allows("2001:db8:abcd:12::5"));
    EXPECT_TRUE(l.allows("2001:db8:abcd:13:ffff::1"));  // /63 covers ...:12 and ...:13
    EXPECT_FALSE(l.allows("2001:db8:abcd:14::1"));
    EXPECT_FALSE(l.allows("10.0.0.1"));
    CidrAllowlist link({"fe80::/10"});
    EXPECT_TRUE(link.allows("fe80::1%lo"));
}

TEST(ServerCidr, PrefixZeroAndEmptyListAllowEverything) {
    EXPECT_TRUE(CidrAllowlist().allows("203.0.113.9"));
    EXPECT_TRUE(CidrAllowlist({"0.0.0.0/0"}).allows("203.0.113.9"));
    EXPECT_FALSE(CidrAllowlist({"0.0.0.0/0"}).allows("2001:db8::1"));  // IPv4 /0 is all of IPv4 only
    EXPECT_TRUE(CidrAllowlist({"::/0"}).allows("2001:db8::1"));
}

TEST(ServerCidr, RandomAddressesAgreeWithAMaskComputation) {
    std::mt19937 rng(7);
    for (int iter = 0; iter < 2000; ++iter) {
        const uint32_t net = rng(), addr = rng();
        const int bits = static_cast<int>(rng() % 33);
        const uint32_t mask = bits == 0 ? 0 : ~uint32_t(0) << (32 - bits);
        auto text = [](uint32_t v) {
            return std::to_string(v >> 24) + "." + std::to_string((v >> 16) & 255) + "." +
                   std::to_string((v >> 8) & 255) + "." + std::to_string(v & 255);
        };
        const Cidr c = Cidr::parse(text(net & mask) + "/" + std::to_string(bits));
        // Half the probes inside the network, half anywhere.
        const uint32_t probe = iter % 2 ? ((net & mask) | (addr & ~mask)) : addr;
        EXPECT_EQ(c.contains(*parse_ip(text(probe))), (probe & mask) == (net & mask))
            << c.text << " vs " << text(probe);
    }
}

TEST(ServerCidr, BadTextIsRefusedNamingIt) {
    for (const char* bad :
         {"10.0.0.0/33", "10.0.0.1/8", "::1/129", "300.1.1.1", "10.0.0.0/", "10.0.0.0/x", "fd00::1/8", "abc"}) {
        try {
            (void)Cidr::parse(bad);
            ADD_FAILURE() << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
        }
    }
}

TEST(ServerPaths, ExactAndPrefixPatterns) {
    const PathAllowlist paths({"/v1/*", "/health"});
    EXPECT_TRUE(paths.allows("/v1/chat/completions"));
    EXPECT_TRUE(paths.allows("/v1/models/a/b"));
    EXPECT_TRUE(paths.allows("/health"));
    EXPECT_FALSE(paths.allows("/healthz"));  // exact means exact
    EXPECT_FALSE(paths.allows("/v1"));       // the prefix is "/v1/"
    EXPECT_FALSE(paths.allows("/metrics"));
    EXPECT_FALSE(paths.allows(""));
    EXPECT_TRUE(PathAllowlist().allows("/anything"));  // no list: everything
    EXPECT_TRUE(PathAllowlist(std::vector<std::string>{"/*"}).allows("/metrics"));
}

TEST(ServerPaths, BadPatternsAreRefusedNamingThem) {
    for (const char* bad : {"", "v1/*", "/v1/*/x", "/*/models", "**"}) {
        try {
            (void)PathPattern::parse(bad);
            ADD_FAILURE() << "'" << bad << "' was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
        }
    }
}

TEST(ServerApiKeys, ConstantTimeCompareIsExactEquality) {
    EXPECT_TRUE(constant_time_equal("sk-abc", "sk-abc"));
    EXPECT_FALSE(constant_time_equal("sk-abc", "sk-abd"));
    EXPECT_FALSE(constant_time_equal("sk-abc", "sk-ab"));
    EXPECT_FALSE(constant_time_equal("", "x"));
    EXPECT_TRUE(constant_time_equal("", ""));
    EXPECT_FALSE(constant_time_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(ServerApiKeys, BearerHeaderWithAnyConfiguredKey) {
    ApiKeys keys({"first-key", "second-key"});
    EXPECT_TRUE(keys.enabled());
    EXPECT_TRUE(keys.check_bearer("Bearer first-key"));
    EXPECT_TRUE(keys.check_bearer("Bearer second-key"));
    EXPECT_FALSE(keys.check_bearer("Bearer third-key"));
    EXPECT_FALSE(keys.check_bearer("first-key"));
    EXPECT_FALSE(keys.check_bearer("Basic first-key"));
    EXPECT_FALSE(keys.check_bearer("Bearer "));
    EXPECT_FALSE(keys.check_bearer(""));
    EXPECT_FALSE(keys.check_bearer("Bearer first-key "));
    EXPECT_FALSE(ApiKeys().enabled());
    EXPECT_THROW(ApiKeys({""}), Error);
}

TEST(ServerApiKeys, KeyFileSkipsCommentsAndBlankLines) {
    const auto path = std::filesystem::temp_directory_path() / ("onecard_keys_" + std::to_string(::getpid()));
    {
        std::ofstream f(path);
        f << "# team keys\n\n  alpha-key  \r\nbeta-key\n";
    }
    const auto keys = read_api_key_file(path.string());
    ASSERT_EQ(keys.size(), 2u);
    EXPECT_EQ(keys[0], "alpha-key");
    EXPECT_EQ(keys[1], "beta-key");
    {
        std::ofstream f(path);
        f << "# nothing\n";
    }
    EXPECT_THROW(read_api_key_file(path.string()), Error);
    std::filesystem::remove(path);
    EXPECT_THROW(read_api_key_file(path.string()), Error);
}
