#include "server/request_reader.h"

#include "core/error.h"

#include <fmt/format.h>

#include <strings.h>

namespace onecard::server {

namespace {

RequestReader& self(http_parser* p) {
    return *static_cast<RequestReader*>(p->data);
}

bool iequals(const std::string& a, const char* b) {
    return ::strcasecmp(a.c_str(), b) == 0;
}

// Header lines cost their text plus ": " and CRLF, as on the wire.
constexpr size_t kLineOverhead = 4;

}  // namespace

RequestReader::RequestReader(RequestLimits limits) : limits_(limits) {
    settings_.on_message_begin = &RequestReader::on_message_begin;
    settings_.on_url = &RequestReader::on_url;
    settings_.on_header_field = &RequestReader::on_header_field;
    settings_.on_header_value = &RequestReader::on_header_value;
    settings_.on_headers_complete = &RequestReader::on_headers_complete;
    settings_.on_body = &RequestReader::on_body;
    settings_.on_message_complete = &RequestReader::on_message_complete;
    reset();
}

void RequestReader::reset() {
    http_parser_init(&parser_, HTTP_REQUEST);
    parser_.data = this;
    state_ = ReadState::Idle;
    refusal_status_ = 0;
    refusal_reason_.clear();
    expects_continue_ = false;
    keep_alive_ = true;
    had_length_ = false;
    in_value_ = false;
    header_bytes_ = 0;
    field_bytes_ = 0;
    method_.clear();
    url_.clear();
    headers_.clear();
    body_.clear();
}

size_t RequestReader::feed(const char* data, size_t n) {
    if (state_ == ReadState::Complete || state_ == ReadState::Refused || state_ == ReadState::Head || n == 0) return 0;
    const size_t used = http_parser_execute(&parser_, &settings_, data, n);
    const auto err = static_cast<http_errno>(parser_.http_errno);
    if (state_ == ReadState::Complete) return used;  // paused at the end of the message
    if (state_ == ReadState::Refused) return used;   // a callback refused it
    if (state_ == ReadState::Head) return used;      // paused at the end of the headers
    if (err == HPE_HEADER_OVERFLOW) {
        refuse(431, "request headers too large");
    } else if (err != HPE_OK) {
        refuse(400, fmt::format("malformed request: {}", http_errno_description(err)));
    } else if (parser_.upgrade) {
        refuse(400, "protocol upgrades are not supported");
    }
    return used;
}

void RequestReader::proceed() {
    ONECARD_CHECK(state_ == ReadState::Head, "RequestReader::proceed: not at the end of the headers");
    state_ = ReadState::Body;
    http_parser_pause(&parser_, 0);
}

void RequestReader::refuse(int status, std::string reason) {
    state_ = ReadState::Refused;
    refusal_status_ = status;
    refusal_reason_ = std::move(reason);
    expects_continue_ = false;
}

bool RequestReader::count_header_bytes(size_t n, size_t field_bytes) {
    header_bytes_ += n;
    if (header_bytes_ > limits_.max_header_bytes) {
        refuse(431, fmt::format("request headers exceed the limit of {} bytes", limits_.max_header_bytes));
        return false;
    }
    if (field_bytes > limits_.max_field_bytes) {
        refuse(431, fmt::format("a request header line exceeds the limit of {} bytes", limits_.max_field_bytes));
        return false;
    }
    return true;
}

int RequestReader::on_message_begin(http_parser* p) {
    self(p).state_ = ReadState::Header;
    return 0;
}

int RequestReader::on_url(http_parser* p, const char* at, size_t n) {
    RequestReader& r = self(p);
    // The method is parsed before the target starts.
    if (r.method_.empty()) r.method_ = http_method_str(static_cast<http_method>(p->method));
    r.url_.append(at, n);
    if (r.url_.size() > r.limits_.max_field_bytes) {
        r.refuse(414, fmt::format("request target exceeds the limit of {} bytes", r.limits_.max_field_bytes));
        return -1;
    }
    return r.count_header_bytes(n, 0) ? 0 : -1;
}

int RequestReader::on_header_field(http_parser* p, const char* at, size_t n) {
    RequestReader& r = self(p);
    if (r.headers_.empty() || r.in_value_) {
        r.headers_.emplace_back();
        r.field_bytes_ = 0;
        r.in_value_ = false;
        if (!r.count_header_bytes(kLineOverhead, 0)) return -1;
    }
    r.headers_.back().first.append(at, n);
    r.field_bytes_ += n;
    return r.count_header_bytes(n, r.field_bytes_) ? 0 : -1;
}

int RequestReader::on_header_value(http_parser* p, const char* at, size_t n) {
    RequestReader& r = self(p);
    r.in_value_ = true;
    if (r.headers_.empty()) return -1;  // the parser never gives a value first; refuse rather than guess
    r.headers_.back().second.append(at, n);
    r.field_bytes_ += n;
    return r.count_header_bytes(n, r.field_bytes_) ? 0 : -1;
}

int RequestReader::on_headers_complete(http_parser* p) {
    RequestReader& r = self(p);
    if (r.state_ == ReadState::Body) return 0;  // the end of a chunked body's trailers
    r.method_ = http_method_str(static_cast<http_method>(p->method));
    r.keep_alive_ = http_should_keep_alive(p) != 0;
    const bool chunked = (p->flags & F_CHUNKED) != 0;
    // http-parser sets content_length to ULLONG_MAX when there is none.
    const bool has_length = !chunked && p->content_length != ULLONG_MAX;
    r.had_length_ = chunked || has_length;
    if (has_length && p->content_length > r.limits_.max_body_bytes) {
        r.refuse(413, fmt::format("request body exceeds the limit of {} bytes", r.limits_.max_body_bytes));
        return -1;
    }
    const bool body_to_come = chunked || (has_length && p->content_length > 0);
    for (const auto& [name, value] : r.headers_)
        if (iequals(name, "Expect") && ::strcasecmp(value.c_str(), "100-continue") == 0)
            r.expects_continue_ = body_to_come;
    // Stop before the body: the caller decides on the head first (proceed()). http-parser leaves the
    // headers' last line feed unconsumed and takes it up again when resumed.
    r.state_ = ReadState::Head;
    http_parser_pause(p, 1);
    return 0;
}

int RequestReader::on_body(http_parser* p, const char* at, size_t n) {
    RequestReader& r = self(p);
    r.expects_continue_ = false;  // the client did not wait
    if (r.body_.size() + n > r.limits_.max_body_bytes) {
        r.refuse(413, fmt::format("request body exceeds the limit of {} bytes", r.limits_.max_body_bytes));
        return -1;
    }
    r.body_.append(at, n);
    return 0;
}

int RequestReader::on_message_complete(http_parser* p) {
    RequestReader& r = self(p);
    r.state_ = ReadState::Complete;
    r.expects_continue_ = false;
    // Stop here: the bytes after this message are the next request's (pipelining).
    http_parser_pause(p, 1);
    return 0;
}

std::string RequestReader::normalized() const {
    ONECARD_CHECK(state_ == ReadState::Complete, "RequestReader::normalized: no complete request");
    std::string out;
    out.reserve(url_.size() + header_bytes_ + body_.size() + 64);
    out += fmt::format("{} {} HTTP/{}.{}\r\n", method_, url_, parser_.http_major, parser_.http_minor);
    for (const auto& [name, value] : headers_) {
        if (iequals(name, "Expect") || iequals(name, "Transfer-Encoding") || iequals(name, "Content-Length")) continue;
        out += name;
        out += ": ";
        out += value;
        out += "\r\n";
    }
    if (had_length_) out += fmt::format("Content-Length: {}\r\n", body_.size());
    out += "\r\n";
    out += body_;
    return out;
}

void RequestReader::check_integrity() const {
    ONECARD_CHECK(body_.size() <= limits_.max_body_bytes, "RequestReader: body of {} bytes past the limit {}",
                  body_.size(), limits_.max_body_bytes);
    ONECARD_CHECK(state_ == ReadState::Refused || header_bytes_ <= limits_.max_header_bytes,
                  "RequestReader: {} header bytes past the limit {}", header_bytes_, limits_.max_header_bytes);
    ONECARD_CHECK((state_ == ReadState::Refused) == (refusal_status_ != 0),
                  "RequestReader: refusal status {} does not match the state", refusal_status_);
    ONECARD_CHECK(!expects_continue_ || state_ == ReadState::Head || state_ == ReadState::Body,
                  "RequestReader: expects 100-continue outside the body");
    ONECARD_CHECK(state_ != ReadState::Head || body_.empty(), "RequestReader: body bytes read before proceed()");
}

}  // namespace onecard::server
