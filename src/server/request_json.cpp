#include "server/request_json.h"

#include "server/api_error.h"

#include <fmt/format.h>

namespace onecard::server {

namespace {

ApiError too_deep(int max_depth, const char* what) {
    return ApiError(400, fmt::format("{} is nested deeper than the limit of {} levels", what, max_depth), {},
                    "json_too_deep");
}

// Counts open containers and stops the parse (returns false) at the first one past the limit.
class DepthProbe final : public nlohmann::json_sax<Json> {
public:
    explicit DepthProbe(int max_depth) : max_depth_(max_depth) {}
    bool exceeded() const { return exceeded_; }

    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool key(string_t&) override { return true; }
    bool start_object(std::size_t) override { return open(); }
    bool start_array(std::size_t) override { return open(); }
    bool end_object() override { return close(); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

private:
    bool open() {
        if (++depth_ > max_depth_) exceeded_ = true;
        return !exceeded_;
    }
    bool close() {
        --depth_;
        return true;
    }
    int max_depth_;
    int depth_ = 0;
    bool exceeded_ = false;
};

}  // namespace

Json parse_body(std::string_view body, int max_depth) {
    // nlohmann's lexer treats a NUL byte as the end of the input, so `{...}\0anything` would parse as
    // the object alone. A raw NUL is never valid JSON (not whitespace, and unescaped in a string).
    if (const size_t nul = body.find('\0'); nul != std::string_view::npos)
        throw bad_request(fmt::format("request body is not valid JSON: NUL byte at offset {}", nul));
    // `depth` is the number of containers already open around the one starting.
    Json::parser_callback_t limit = [max_depth](int depth, Json::parse_event_t event, Json&) {
        if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
            depth >= max_depth)
            throw too_deep(max_depth, "request body");
        return true;
    };
    Json j;
    try {
        j = Json::parse(body.begin(), body.end(), limit, /*allow_exceptions=*/true);
    } catch (const Json::parse_error& e) {
        // e.what() quotes the bytes around the error ("last read: '...'"): body text stays out of
        // the response and the log; the offset is enough to find the problem.
        throw bad_request(fmt::format("request body is not valid JSON: syntax error at byte {}", e.byte));
    } catch (const Json::exception&) {  // out_of_range for numbers like 1e99999
        throw bad_request("request body is not valid JSON: a number is out of range");
    }
    if (!j.is_object()) throw bad_request(fmt::format("request body must be a JSON object, got {}", j.type_name()));
    return j;
}

bool json_text_exceeds_depth(std::string_view text, int max_depth) {
    DepthProbe probe(max_depth);
    // strict = false: what follows a complete value does not matter here, only how deep it opens.
    (void)Json::sax_parse(text.begin(), text.end(), &probe, nlohmann::json::input_format_t::json, /*strict=*/false);
    return probe.exceeded();
}

void check_tool_call_arguments(const Json& messages) {
    if (!messages.is_array()) return;
    for (size_t i = 0; i < messages.size(); ++i) {
        const Json& m = messages[i];
        auto calls = m.is_object() ? m.find("tool_calls") : m.end();
        if (!m.is_object() || calls == m.end() || !calls->is_array()) continue;
        for (size_t k = 0; k < calls->size(); ++k) {
            const Json& c = (*calls)[k];
            auto fn = c.is_object() ? c.find("function") : c.end();
            if (!c.is_object() || fn == c.end() || !fn->is_object()) continue;
            auto args = fn->find("arguments");
            if (args == fn->end() || !args->is_string()) continue;
            if (json_text_exceeds_depth(args->get_ref<const std::string&>())) {
                const std::string where = fmt::format("messages[{}].tool_calls[{}].function.arguments", i, k);
                throw ApiError(
                    400, fmt::format("{} is nested deeper than the limit of {} levels", where, kMaxRequestJsonDepth),
                    where, "json_too_deep");
            }
        }
    }
}

std::string dump_json(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace onecard::server
