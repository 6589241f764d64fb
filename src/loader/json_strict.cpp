#include "loader/json_strict.h"

#include "core/error.h"

#include <set>
#include <vector>

namespace onecard {

namespace {

// One open container during parsing: its keys so far (arrays keep none) and the key it sits under.
struct OpenContainer {
    bool is_object = false;
    std::string key_in_parent;
    std::set<std::string> keys;
};

}  // namespace

nlohmann::json parse_json_strict(std::string_view text, const std::string& label, const JsonStrictOptions& options) {
    std::vector<OpenContainer> stack;
    std::string last_key;
    auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) -> bool {
        using Event = nlohmann::json::parse_event_t;
        switch (event) {
            case Event::object_start:
            case Event::array_start: {
                ONECARD_CHECK(static_cast<int>(stack.size()) < options.max_depth,
                              "{}: JSON nested deeper than {} levels", label, options.max_depth);
                OpenContainer c;
                c.is_object = event == Event::object_start;
                c.key_in_parent = (!stack.empty() && stack.back().is_object) ? last_key : std::string();
                stack.push_back(std::move(c));
                break;
            }
            case Event::object_end:
            case Event::array_end:
                if (!stack.empty()) stack.pop_back();
                break;
            case Event::key: {
                last_key = parsed.get<std::string>();
                if (stack.empty()) break;
                if (!stack.back().keys.insert(last_key).second) {
                    if (stack.size() == 1) fail("{}: duplicate {} \"{}\"", label, options.top_level_key_noun, last_key);
                    fail("{}: duplicate key \"{}\" in the object under \"{}\"", label, last_key,
                         stack.back().key_in_parent);
                }
                break;
            }
            case Event::value:
                break;
        }
        return true;
    };
    try {
        return nlohmann::json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: invalid JSON: {}", label, e.what());
    }
}

}  // namespace onecard
