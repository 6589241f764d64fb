#include "server/generation_config.h"

#include "core/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace onecard::server {

namespace fs = std::filesystem;

std::string SamplingDefaults::describe() const {
    std::string out;
    auto add = [&](const char* k, const std::string& v) {
        out += (out.empty() ? "" : ", ") + std::string(k) + "=" + v;
    };
    if (temperature) add("temperature", fmt::format("{}", *temperature));
    if (top_p) add("top_p", fmt::format("{}", *top_p));
    if (top_k) add("top_k", std::to_string(*top_k));
    if (min_p) add("min_p", fmt::format("{}", *min_p));
    if (repetition_penalty) add("repetition_penalty", fmt::format("{}", *repetition_penalty));
    if (max_tokens) add("max_tokens", std::to_string(*max_tokens));
    return out;
}

SamplingDefaults read_generation_config(const std::string& dir) {
    const fs::path path = fs::path(dir) / "generation_config.json";
    SamplingDefaults d;
    if (!fs::exists(path)) return d;
    std::ifstream in(path);
    ONECARD_CHECK(in.good(), "{}: cannot open", path.string());
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", path.string(), e.what());
    }
    ONECARD_CHECK(j.is_object(), "{}: the top level must be an object", path.string());
    auto number = [&](const char* key, double lo, double hi) -> std::optional<double> {
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) return std::nullopt;
        ONECARD_CHECK(
            it->is_number() && std::isfinite(it->get<double>()) && it->get<double>() >= lo && it->get<double>() <= hi,
            "{}: '{}' must be a number in [{}, {}], got {}", path.string(), key, lo, hi, it->dump());
        return it->get<double>();
    };
    if (auto v = number("temperature", 0.0, 100.0)) d.temperature = static_cast<float>(*v);
    if (auto v = number("top_p", 0.0, 1.0)) {
        ONECARD_CHECK(*v > 0.0, "{}: 'top_p' must be in (0, 1]", path.string());
        d.top_p = static_cast<float>(*v);
    }
    if (auto v = number("min_p", 0.0, 1.0)) d.min_p = static_cast<float>(*v);
    if (auto v = number("repetition_penalty", 0.0, 10.0)) {
        ONECARD_CHECK(*v > 0.0, "{}: 'repetition_penalty' must be > 0", path.string());
        d.repetition_penalty = static_cast<float>(*v);
    }
    // HF's top_k default is 50 but "absent" here means off, as in vLLM; -1 and 0 are off too.
    if (auto v = number("top_k", -1.0, 2147483647.0)) {
        ONECARD_CHECK(*v == std::floor(*v), "{}: 'top_k' must be an integer", path.string());
        if (*v > 0) d.top_k = static_cast<int32_t>(*v);
    }
    if (auto v = number("max_new_tokens", 1.0, 9.0e15)) {
        ONECARD_CHECK(*v == std::floor(*v), "{}: 'max_new_tokens' must be an integer", path.string());
        d.max_tokens = static_cast<int64_t>(*v);
    }
    return d;
}

SamplingDefaults resolve_generation_config(const std::string& flag, const std::string& model_dir) {
    if (flag == "vllm") return {};
    if (flag.empty() || flag == "auto")
        return model_dir.empty() ? SamplingDefaults{} : read_generation_config(model_dir);
    ONECARD_CHECK(fs::exists(fs::path(flag) / "generation_config.json"),
                  "serve: --generation-config '{}': no generation_config.json there (or give auto | vllm)", flag);
    return read_generation_config(flag);
}

}  // namespace onecard::server
