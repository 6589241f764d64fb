// The front end screens a request's head with the router's own rules (src/server/request_gate.h); for
// that it derives httplib's Request::path and Request::headers from the raw request line and header
// fields. These must be what httplib itself makes of the same request, or the two would judge
// different requests (a key with '%', a path with an escape, a fragment).
#include "server/request_gate.h"

#include <gtest/gtest.h>

using namespace onecard::server;

TEST(RequestGate, PathIsHttplibs) {
    EXPECT_EQ(request_path_of("/v1/chat/completions"), "/v1/chat/completions");
    EXPECT_EQ(request_path_of("/v1/models?x=1&y=2"), "/v1/models");
    EXPECT_EQ(request_path_of("/v1/models/a%2Fb"), "/v1/models/a/b");
    EXPECT_EQ(request_path_of("/hea%6Cth"), "/health");
    EXPECT_EQ(request_path_of("/a+b"), "/a+b") << "'+' is a space only in a query";
    EXPECT_EQ(request_path_of("/health#top"), "/health");
    EXPECT_EQ(request_path_of(""), "");
}

TEST(RequestGate, HeadersAreHttplibs) {
    const httplib::Headers h = request_headers_of({{"authorization", "Bearer a%20b  "},
                                                   {"X-Empty", "   "},
                                                   {"content-type", "\tapplication/json; charset=utf-8"},
                                                   {"X-Two", "1"},
                                                   {"x-two", "2"}});
    EXPECT_EQ(httplib::detail::get_header_value(h, "Authorization", 0, ""), std::string("Bearer a b"));
    EXPECT_EQ(h.count("X-Empty"), 0u) << "httplib drops a header without a value";
    EXPECT_EQ(httplib::detail::get_header_value(h, "Content-Type", 0, ""),
              std::string("application/json; charset=utf-8"));
    EXPECT_EQ(httplib::detail::get_header_value(h, "X-TWO", 0, ""), std::string("1")) << "the first one counts";
}

TEST(RequestGate, JsonContentTypes) {
    EXPECT_TRUE(is_json_content_type("application/json"));
    EXPECT_TRUE(is_json_content_type(" Application/JSON ; charset=utf-8"));
    EXPECT_FALSE(is_json_content_type("text/plain"));
    EXPECT_FALSE(is_json_content_type("application/jsonx"));
    EXPECT_FALSE(is_json_content_type(""));
}
