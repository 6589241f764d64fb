#include "server/config_file.h"

#include "core/error.h"

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace onecard::server {

namespace {

std::vector<ConfigValue> from_json(const std::string& path, const std::string& text) {
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail("--config '{}': not valid JSON: {}", path, e.what());
    }
    ONECARD_CHECK(j.is_object(), "--config '{}': top level must be an object of flag names", path);
    std::vector<ConfigValue> out;
    for (const auto& item : j.items()) {
        // Plain names, not a structured binding: clang 14 cannot capture those in a lambda (the
        // fuzz build uses clang).
        const std::string& key = item.key();
        const nlohmann::ordered_json& value = item.value();
        auto as_text = [&](const nlohmann::ordered_json& v) {
            ONECARD_CHECK(v.is_string() || v.is_number() || v.is_boolean(),
                          "--config '{}': '{}' must be a string, number or boolean (or an array of them)", path, key);
            return v.is_string() ? v.get<std::string>() : v.dump();
        };
        ConfigValue cv{key, {}};
        if (value.is_array()) {
            for (const auto& v : value) cv.values.push_back(as_text(v));
        } else {
            cv.values.push_back(as_text(value));
        }
        out.push_back(std::move(cv));
    }
    return out;
}

// YAML scalars keep their text ("0.9", "true", "deepseek_v4"); YAML 1.1 spellings of booleans
// (yes/no/on/off) are normalised so a CLI flag reads them as vLLM's argparse-from-YAML does.
std::string yaml_scalar(const std::string& path, const std::string& key, const YAML::Node& n) {
    ONECARD_CHECK(n.IsScalar(), "--config '{}': '{}' must be a scalar (or a list of scalars)", path, key);
    std::string v = n.Scalar();
    if (n.Tag() == "!") return v;  // quoted in the file: a string, whatever it spells
    bool b = false;
    if (YAML::convert<bool>::decode(n, b)) return b ? "true" : "false";
    return v;
}

std::vector<ConfigValue> from_yaml(const std::string& path, const std::string& text) {
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        fail("--config '{}': not valid YAML: {}", path, e.what());
    }
    if (root.IsNull()) return {};  // an empty file sets nothing
    ONECARD_CHECK(root.IsMap(), "--config '{}': top level must be a mapping of flag names", path);
    std::vector<ConfigValue> out;
    for (const auto& kv : root) {
        ONECARD_CHECK(kv.first.IsScalar(), "--config '{}': keys must be flag names", path);
        ConfigValue cv{kv.first.Scalar(), {}};
        const YAML::Node& v = kv.second;
        if (v.IsSequence()) {
            for (const auto& e : v) cv.values.push_back(yaml_scalar(path, cv.key, e));
        } else {
            ONECARD_CHECK(!v.IsNull(), "--config '{}': '{}' has no value", path, cv.key);
            cv.values.push_back(yaml_scalar(path, cv.key, v));
        }
        out.push_back(std::move(cv));
    }
    return out;
}

}  // namespace

std::vector<ConfigValue> read_config_file(const std::string& path) {
    std::ifstream in(path);
    ONECARD_CHECK(in.good(), "--config '{}': cannot open", path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const size_t first = text.find_first_not_of(" \t\r\n");
    const bool json = (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) ||
                      (first != std::string::npos && text[first] == '{');
    return json ? from_json(path, text) : from_yaml(path, text);
}

std::string config_key_to_flag(const std::string& key) {
    std::string name = key.rfind("--", 0) == 0 ? key.substr(2) : key;
    for (char& c : name)
        if (c == '_') c = '-';
    return name;
}

}  // namespace onecard::server
