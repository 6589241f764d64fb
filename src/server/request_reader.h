// Internal: reads one HTTP/1.1 request at a time from a connection's bytes (Debian's http-parser does
// the parsing), enforcing the limits while the bytes arrive rather than after: header bytes -> 431,
// a Content-Length or a chunked body past the body limit -> 413, both decided on the byte that crosses
// the limit, so the server never buffers more than the limits allow. It stops at the end of the
// headers (ReadState::Head) until proceed(): the caller decides on the head alone (API key, path,
// Content-Type) before a byte of the body is read or "100 Continue" is sent.
//
// A complete request is handed on in a normalized form (normalized()): request line, the headers
// less Expect / Transfer-Encoding / Content-Length, then "Content-Length: <decoded size>" and the
// decoded body. httplib's request parser (which runs the routes) then never sees a chunked body or
// an Expect header: the front end has already answered "100 Continue" itself, and only for a body
// it will accept.
//
//   RequestReader r(limits);
//   size_t used = r.feed(buf, n);   // stops at the end of the headers, and at the end of one request
//   if (r.state() == ReadState::Head) { if (!acceptable(r)) refuse(); else r.proceed(); }  // then feed the rest
//   if (r.state() == ReadState::Complete) { serve(r.normalized()); r.reset(); }
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace onecard::server {

struct RequestLimits {
    size_t max_header_bytes = 64 * 1024;  // request line + every header line (and chunked trailers)
    size_t max_field_bytes = 8192;        // one header line; httplib refuses longer ones itself (400)
    size_t max_body_bytes = 16u << 20;    // decoded body, Content-Length and chunked alike
};

enum class ReadState {
    Idle,      // no byte of a request yet
    Header,    // inside the request line or the headers
    Head,      // headers complete, nothing of the body read: feed() reads no further until proceed()
    Body,      // reading the body (or its end)
    Complete,  // one whole request read; feed() consumes nothing more until reset()
    Refused,   // refusal_status() says why; the connection is answered and closed
};

class RequestReader {
public:
    explicit RequestReader(RequestLimits limits);
    RequestReader(const RequestReader&) = delete;
    RequestReader& operator=(const RequestReader&) = delete;

    // Consumes bytes of `data` up to the end of the headers, the end of the current request or the
    // point of refusal; returns how many it consumed (bytes after a complete request belong to the
    // next, pipelined one; at the end of the headers the last line feed may stay unconsumed).
    size_t feed(const char* data, size_t n);
    // From state() Head on to the body (state() Body, or Complete at the next feed() for a request
    // without one).
    void proceed();
    ReadState state() const { return state_; }
    // 400 (malformed), 413 (body too large), 414 (target too long) or 431 (headers too large) once
    // state() is Refused.
    int refusal_status() const { return refusal_status_; }
    const std::string& refusal_reason() const { return refusal_reason_; }
    // True from the end of the headers while the client waits for "100 Continue" before its body
    // (sent only for a body within the limit: a larger one is refused at once instead).
    bool expects_continue() const { return expects_continue_; }
    // The request line's method ("POST") and target ("/v1/chat/completions?x=1"), as far as read
    // (both complete from state() Head on; "" before the request line).
    const std::string& method() const { return method_; }
    const std::string& target() const { return url_; }
    // The header fields as received (complete from state() Head on).
    const std::vector<std::pair<std::string, std::string>>& fields() const { return headers_; }
    // Body bytes held now (decoded), for the front end's memory budget.
    size_t body_bytes() const { return body_.size(); }
    // Whether the connection stays open after this request (HTTP/1.1 without "Connection: close").
    bool keep_alive() const { return keep_alive_; }
    // The complete request in the form httplib reads (see the file comment). Only in state() Complete.
    std::string normalized() const;
    // Ready for the next request on the same connection.
    void reset();
    // Throws onecard::Error when the counters disagree with the state.
    void check_integrity() const;

private:
    static int on_message_begin(http_parser* p);
    static int on_url(http_parser* p, const char* at, size_t n);
    static int on_header_field(http_parser* p, const char* at, size_t n);
    static int on_header_value(http_parser* p, const char* at, size_t n);
    static int on_headers_complete(http_parser* p);
    static int on_body(http_parser* p, const char* at, size_t n);
    static int on_message_complete(http_parser* p);
    // Adds `n` header bytes; false (and Refused with 431) once past a limit.
    bool count_header_bytes(size_t n, size_t field_bytes);
    void refuse(int status, std::string reason);

    RequestLimits limits_;
    http_parser parser_{};
    http_parser_settings settings_{};
    ReadState state_ = ReadState::Idle;
    int refusal_status_ = 0;
    std::string refusal_reason_;
    bool expects_continue_ = false;
    bool keep_alive_ = true;
    bool had_length_ = false;  // Content-Length or chunked: the normalized form carries a Content-Length
    bool in_value_ = false;    // the last header callback was a value (a new field starts a new header)
    size_t header_bytes_ = 0;
    size_t field_bytes_ = 0;  // bytes of the header line being read
    std::string method_, url_;
    std::vector<std::pair<std::string, std::string>> headers_;
    std::string body_;  // decoded
};

}  // namespace onecard::server
