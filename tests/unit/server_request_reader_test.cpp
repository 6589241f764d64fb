// RequestReader (src/server/request_reader.h): one request at a time from a connection's bytes, a stop
// at the end of the headers before any body byte is read, the limits enforced on the byte that crosses
// them, pipelined requests left for the next read, and the normalized form httplib is given.
#include "server/request_reader.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <string>

using namespace onecard::server;

namespace {

RequestLimits limits(size_t header = 1024, size_t body = 100) {
    RequestLimits l;
    l.max_header_bytes = header;
    l.max_field_bytes = 256;
    l.max_body_bytes = body;
    return l;
}

// Feeds `text` one byte at a time (the slowest client), going on past the end of the headers;
// returns the bytes consumed.
size_t feed_bytewise(RequestReader& r, const std::string& text) {
    size_t used = 0;
    while (used < text.size()) {
        const size_t n = r.feed(text.data() + used, 1);
        used += n;
        if (r.state() == ReadState::Head) {
            r.proceed();
        } else if (n == 0) {
            break;
        }
    }
    return used;
}

// Feeds `text` as one read, going on past the end of the headers (as the front end does for a head
// it accepts); returns the bytes consumed.
size_t feed_all(RequestReader& r, const std::string& text) {
    size_t used = r.feed(text.data(), text.size());
    if (r.state() == ReadState::Head) {
        r.proceed();
        used += r.feed(text.data() + used, text.size() - used);
    }
    return used;
}

}  // namespace

TEST(RequestReader, ContentLengthRequestIsNormalized) {
    RequestReader r(limits());
    const std::string req = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    EXPECT_EQ(feed_all(r, req), req.size());
    ASSERT_EQ(r.state(), ReadState::Complete);
    EXPECT_EQ(r.target(), "/tokenize");
    EXPECT_TRUE(r.keep_alive());
    EXPECT_EQ(r.normalized(), "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    EXPECT_NO_THROW(r.check_integrity());
}

TEST(RequestReader, ChunkedBodyIsDecodedAndExpectDropped) {
    RequestReader r(limits());
    const std::string req =
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\nX-K: v\r\n\r\n"
        "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    EXPECT_EQ(feed_bytewise(r, req), req.size());
    ASSERT_EQ(r.state(), ReadState::Complete);
    EXPECT_EQ(r.normalized(), "POST /a HTTP/1.1\r\nX-K: v\r\nContent-Length: 5\r\n\r\nabcde");
}

TEST(RequestReader, PipelinedRequestsAreReadOneAtATime) {
    RequestReader r(limits());
    const std::string one = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    const std::string two = "GET /version HTTP/1.1\r\nConnection: close\r\n\r\n";
    const std::string both = one + two;
    const size_t used = feed_all(r, both);
    EXPECT_EQ(used, one.size());
    ASSERT_EQ(r.state(), ReadState::Complete);
    EXPECT_EQ(r.feed(both.data() + used, both.size() - used), 0u) << "nothing more before reset()";
    r.reset();
    EXPECT_EQ(feed_all(r, both.substr(used)), two.size());
    ASSERT_EQ(r.state(), ReadState::Complete);
    EXPECT_EQ(r.target(), "/version");
    EXPECT_FALSE(r.keep_alive());
}

TEST(RequestReader, ContentLengthPastTheLimitIsRefusedAtTheHeaders) {
    RequestReader r(limits(1024, 100));
    const std::string head = "POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 101\r\n\r\n";
    r.feed(head.data(), head.size());
    EXPECT_EQ(r.state(), ReadState::Refused);
    EXPECT_EQ(r.refusal_status(), 413);
    EXPECT_FALSE(r.expects_continue()) << "no 100 Continue for a body that is refused";
    EXPECT_NO_THROW(r.check_integrity());
}

TEST(RequestReader, ExpectContinueOnlyForABodyWithinTheLimit) {
    RequestReader r(limits(1024, 100));
    const std::string head = "POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n";
    EXPECT_EQ(feed_all(r, head), head.size());
    EXPECT_EQ(r.state(), ReadState::Body);
    EXPECT_TRUE(r.expects_continue());
    const std::string body(100, 'x');
    r.feed(body.data(), body.size());
    EXPECT_EQ(r.state(), ReadState::Complete);
    EXPECT_FALSE(r.expects_continue());
}

TEST(RequestReader, ChunkedBodyPastTheLimitIsRefusedOnTheCrossingChunk) {
    RequestReader r(limits(1024, 100));
    const std::string head = "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    EXPECT_EQ(feed_all(r, head), head.size());
    const std::string chunk = "40\r\n" + std::string(64, 'y') + "\r\n";
    EXPECT_EQ(r.feed(chunk.data(), chunk.size()), chunk.size());
    EXPECT_EQ(r.state(), ReadState::Body);
    r.feed(chunk.data(), chunk.size());
    EXPECT_EQ(r.state(), ReadState::Refused);
    EXPECT_EQ(r.refusal_status(), 413);
    EXPECT_NO_THROW(r.check_integrity());
}

TEST(RequestReader, HeadersPastTheLimitGet431BeforeTheyEnd) {
    RequestReader r(limits(1024, 100));
    std::string req = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < 100; ++i) req += "X-H" + std::to_string(i) + ": vvvvvvvvvv\r\n";  // never ends
    const size_t used = r.feed(req.data(), req.size());
    EXPECT_EQ(r.state(), ReadState::Refused);
    EXPECT_EQ(r.refusal_status(), 431);
    EXPECT_LE(used, 1024u + 64u) << "stopped near the limit";
    RequestReader line(limits());
    const std::string one = "GET / HTTP/1.1\r\nX-Long: " + std::string(300, 'z');
    line.feed(one.data(), one.size());
    EXPECT_EQ(line.refusal_status(), 431) << "one header line past max_field_bytes";
}

TEST(RequestReader, MalformedAndOverlongTargets) {
    RequestReader bad(limits());
    const std::string junk = "NOT HTTP AT ALL\r\n\r\n";
    bad.feed(junk.data(), junk.size());
    EXPECT_EQ(bad.state(), ReadState::Refused);
    EXPECT_EQ(bad.refusal_status(), 400);
    RequestReader uri(limits());
    const std::string longer = "GET /" + std::string(300, 'a') + " HTTP/1.1\r\n\r\n";
    uri.feed(longer.data(), longer.size());
    EXPECT_EQ(uri.refusal_status(), 414);
}

TEST(RequestReader, Http10ClosesUnlessKeepAlive) {
    RequestReader r(limits());
    const std::string req = "GET / HTTP/1.0\r\n\r\n";
    EXPECT_EQ(feed_all(r, req), req.size());
    ASSERT_EQ(r.state(), ReadState::Complete);
    EXPECT_FALSE(r.keep_alive());
    EXPECT_EQ(r.normalized(), "GET / HTTP/1.0\r\n\r\n");
}

TEST(RequestReader, StopsAtTheEndOfTheHeadersBeforeAnyBodyByte) {
    RequestReader r(limits());
    const std::string head =
        "POST /v1/chat/completions?x=1 HTTP/1.1\r\nAuthorization: Bearer k\r\n"
        "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n";
    const std::string req = head + "hello";
    const size_t used = r.feed(req.data(), req.size());
    ASSERT_EQ(r.state(), ReadState::Head);
    EXPECT_LE(used, head.size()) << "no body byte consumed before proceed()";
    EXPECT_EQ(r.body_bytes(), 0u);
    EXPECT_EQ(r.method(), "POST");
    EXPECT_EQ(r.target(), "/v1/chat/completions?x=1");
    ASSERT_EQ(r.fields().size(), 3u);
    EXPECT_EQ(r.fields()[0].first, "Authorization");
    EXPECT_EQ(r.fields()[0].second, "Bearer k");
    EXPECT_TRUE(r.expects_continue());
    EXPECT_NO_THROW(r.check_integrity());
    EXPECT_EQ(r.feed(req.data() + used, req.size() - used), 0u) << "nothing more before proceed()";
    r.proceed();
    EXPECT_EQ(r.feed(req.data() + used, req.size() - used), req.size() - used);
    ASSERT_EQ(r.state(), ReadState::Complete);
    EXPECT_EQ(r.body_bytes(), 5u);
    EXPECT_NO_THROW(r.check_integrity());
}

TEST(RequestReader, ARequestWithoutABodyStopsAtItsHeadToo) {
    RequestReader r(limits());
    const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    const size_t used = r.feed(req.data(), req.size());
    ASSERT_EQ(r.state(), ReadState::Head);
    EXPECT_FALSE(r.expects_continue());
    r.proceed();
    EXPECT_EQ(used + r.feed(req.data() + used, req.size() - used), req.size());
    EXPECT_EQ(r.state(), ReadState::Complete);
    EXPECT_THROW(r.proceed(), onecard::Error) << "proceed() only at the end of the headers";
}
