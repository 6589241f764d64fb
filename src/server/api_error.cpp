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

nlohmann::json error_body(int status, const std::string& message, const std::string& param, const std::string& code) {
    nlohmann::json e;
    e["message"] = message;
    e["type"] = error_type_for_status(status);
    e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
    e["code"] = code.empty() ? nlohmann::json(status) : nlohmann::json(code);
    return nlohmann::json{{"error", std::move(e)}};
}

}  // namespace onecard::server
