#include "server/api_error.h"

namespace onecard::server {

const char* error_type_for_status(int status) {
    switch (status) {
        case 401:
            return "authentication_error";
        case 403:
            return "permission_error";
        case 404:
            return "not_found_error";
        case 405:
            return "invalid_request_error";
        case 413:
            return "invalid_request_error";
        case 429:
            return "rate_limit_error";
        case 503:
            return "service_unavailable_error";
        default:
            return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

const char* error_code_for_status(int status) {
    switch (status) {
        case 400:
            return "invalid_request";
        case 401:
            return "invalid_api_key";
        case 403:
            return "permission_denied";
        case 404:
            return "not_found";
        case 405:
            return "method_not_allowed";
        case 408:
            return "request_timeout";
        case 413:
            return "request_too_large";
        case 415:
            return "unsupported_media_type";
        case 429:
            return "rate_limit_exceeded";
        case 503:
            return "service_unavailable";
        default:
            return status >= 500 ? "internal_error" : "invalid_request";
    }
}

nlohmann::json error_body(int status, const std::string& message, const std::string& param, const std::string& code) {
    nlohmann::json e;
    e["message"] = message;
    e["type"] = error_type_for_status(status);
    e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
    e["code"] = code.empty() ? std::string(error_code_for_status(status)) : code;
    return nlohmann::json{{"error", std::move(e)}};
}

const char* anthropic_error_type_for_status(int status) {
    switch (status) {
        case 401:
            return "authentication_error";
        case 403:
            return "permission_error";
        case 404:
            return "not_found_error";
        case 413:
            return "request_too_large";
        case 429:
            return "rate_limit_error";
        case 503:
            return "overloaded_error";
        default:
            return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

nlohmann::json error_body(ErrorShape shape, int status, const std::string& message, const std::string& param,
                          const std::string& code) {
    if (shape == ErrorShape::OpenAI) return error_body(status, message, param, code);
    return nlohmann::json{{"type", "error"},
                          {"error", {{"type", anthropic_error_type_for_status(status)}, {"message", message}}}};
}

}  // namespace onecard::server
