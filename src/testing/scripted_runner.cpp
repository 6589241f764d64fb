#include "testing/scripted_runner.h"

#include "core/error.h"
#include "testing/fake_runner.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <thread>

namespace onecard::server {

ScriptedRunner::ScriptedRunner(const Tokenizer& tokenizer, const std::string& script_path, int64_t max_model_len,
                               int32_t eos_token_id)
    : tokenizer_(tokenizer),
      vocab_size_(static_cast<int64_t>(tokenizer.vocab_size())),
      max_model_len_(max_model_len),
      eos_(eos_token_id) {
    std::ifstream in(script_path);
    ONECARD_CHECK(in.good(), "--test-script '{}': cannot open", script_path);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
        fail("--test-script '{}': not valid JSON: {}", script_path, e.what());
    }
    ONECARD_CHECK(j.is_object(), "--test-script '{}': top level must be an object", script_path);
    auto load = [&](const nlohmann::json& e, const std::string& where) {
        ONECARD_CHECK(e.is_object() && e.contains("text") && e["text"].is_string(),
                      "--test-script '{}': {} needs a string 'text'", script_path, where);
        Script s;
        if (e.contains("when")) {
            ONECARD_CHECK(e["when"].is_string(), "--test-script '{}': {}.when must be a string", script_path, where);
            s.when = e["when"].get<std::string>();
        }
        s.tokens = tokenizer_.encode(e["text"].get<std::string>(), /*allow_special=*/true);
        if (e.value("eos", true)) s.tokens.push_back(eos_);
        return s;
    };
    if (j.contains("scripts")) {
        ONECARD_CHECK(j["scripts"].is_array(), "--test-script '{}': 'scripts' must be an array", script_path);
        for (size_t i = 0; i < j["scripts"].size(); ++i)
            scripts_.push_back(load(j["scripts"][i], "scripts[" + std::to_string(i) + "]"));
    }
    default_ = j.contains("default") ? load(j["default"], "default") : Script{"", {eos_}};
    step_delay_ = std::chrono::milliseconds(j.value("step_delay_ms", 0));
    // A slow "model load", for the tests of what the server answers while it loads.
    if (const int64_t load_ms = j.value("load_delay_ms", int64_t{0}); load_ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(load_ms));
}

KvModelShape ScriptedRunner::kv_model_shape() const {
    return FakeRunnerConfig::tiny_fake_kv_shape();
}

const ScriptedRunner::Script& ScriptedRunner::pick(const std::vector<int32_t>& prompt) const {
    const std::string text = tokenizer_.decode(prompt);
    for (const auto& s : scripts_)
        if (!s.when.empty() && text.find(s.when) != std::string::npos) return s;
    return default_;
}

RunnerOutput ScriptedRunner::execute(const SchedulerOutput& batch) {
    for (RequestId id : batch.finished_ids) states_.erase(id);
    // Preempted requests keep their script and prompt length: they resume from position 0 with the
    // prompt and what they already generated, and must continue the same script.
    if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
    RunnerOutput out;
    out.vocab_size = vocab_size_;
    for (const auto& e : batch.requests) {
        SeqState& st = states_[e.id];
        if (e.start_pos == 0) st.history.clear();
        ONECARD_CHECK(static_cast<int64_t>(st.history.size()) == e.start_pos,
                      "scripted runner: request {} scheduled at {} but holds {} tokens", e.id, e.start_pos,
                      st.history.size());
        st.history.insert(st.history.end(), e.token_ids.begin(), e.token_ids.end());
        if (!e.sample) continue;
        if (st.prompt_len < 0) {
            st.prompt_len = static_cast<int64_t>(st.history.size());
            st.script = &pick(st.history);
        }
        const size_t k = st.history.size() - static_cast<size_t>(st.prompt_len);
        const int32_t next = k < st.script->tokens.size() ? st.script->tokens[k] : eos_;
        const size_t row = out.row_ids.size();
        out.row_ids.push_back(e.id);
        out.logits.resize((row + 1) * static_cast<size_t>(vocab_size_), 0.0f);
        out.logits[row * static_cast<size_t>(vocab_size_) + static_cast<size_t>(next)] = 40.0f;
    }
    return out;
}

}  // namespace onecard::server
