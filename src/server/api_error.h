// OpenAI-style API errors: every failure the server reports becomes
//   {"error": {"message": ..., "type": ..., "param": ..., "code": "..."}}   (code: always a string)
// with the HTTP status OpenAI (and vLLM) use for that class. Handlers throw ApiError; the server
// turns it into the response. Input problems are always 4xx and name the offending field in `param`.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace onecard::server {

class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string message, std::string param = {}, std::string code = {})
        : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)), code_(std::move(code)) {}

    int status() const { return status_; }
    const std::string& param() const { return param_; }
    const std::string& code() const { return code_; }
    // Seconds a client should wait before retrying (429/503); 0 = no Retry-After header.
    int retry_after_s() const { return retry_after_s_; }
    ApiError& with_retry_after(int s) {
        retry_after_s_ = s;
        return *this;
    }

private:
    int status_;
    std::string param_;
    std::string code_;
    int retry_after_s_ = 0;
};

// 400 naming the request field.
inline ApiError bad_request(std::string message, std::string param = {}) {
    return ApiError(400, std::move(message), std::move(param));
}

// obj[key] as a string, or a 400 naming "where.key" (request converters: Anthropic, Responses).
inline std::string required_string(const nlohmann::json& obj, const char* key, const std::string& where) {
    auto v = obj.find(key);
    if (v == obj.end() || !v->is_string())
        throw bad_request(where + "." + key + " must be a string", where + "." + key);
    return v->get<std::string>();
}

// The OpenAI error type string for an HTTP status ("invalid_request_error", "authentication_error", ...).
const char* error_type_for_status(int status);

// The `code` an error without a specific one gets: always a string, as OpenAI's own codes are
// ("invalid_request" for 400, "not_found" for 404, "internal_error" for 5xx, ...), never the status number.
const char* error_code_for_status(int status);

// The error body for a status and message (param omitted -> null; code omitted -> error_code_for_status).
nlohmann::json error_body(int status, const std::string& message, const std::string& param = {},
                          const std::string& code = {});
inline nlohmann::json error_body(const ApiError& e) {
    return error_body(e.status(), e.what(), e.param(), e.code());
}

// Which error object a route answers with: OpenAI's, or Anthropic's on the /v1/messages routes
//   {"type": "error", "error": {"type": "invalid_request_error", "message": ...}}
// (the Anthropic clients read error.type and error.message; they have no param or code).
enum class ErrorShape { OpenAI, Anthropic };

// The Anthropic error type for an HTTP status (invalid_request_error, authentication_error,
// permission_error, not_found_error, request_too_large, rate_limit_error, api_error, overloaded_error).
const char* anthropic_error_type_for_status(int status);

// The error body in `shape`. Anthropic has no field for param: the message names the field already.
nlohmann::json error_body(ErrorShape shape, int status, const std::string& message, const std::string& param = {},
                          const std::string& code = {});

}  // namespace onecard::server
