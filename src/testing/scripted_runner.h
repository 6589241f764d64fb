// TEST ONLY: a ModelRunner that "generates" fixed text from a script instead of running a model, so
// end-to-end tests can make the server emit exact completions (DSML tool calls, reasoning, stop
// strings) through the real scheduler, KV manager, sampler, detokenizer and parsers. Enabled only by
// `onecard serve --test-script FILE`, which refuses to start unless ONECARD_TEST_MODE=1 is set in the
// environment (the test harness sets it; a deployment never should).
//
// Script file (JSON):
//   {"step_delay_ms": 0, "load_delay_ms": 0,
//    "scripts": [{"when": "weather", "text": "<think>...</think>...", "eos": true}, ...],
//    "default": {"text": "Hello!", "eos": true}}
// The first entry whose `when` occurs in the decoded prompt is used; else `default`. Its text is
// tokenized (special tokens recognised) and emitted one token per step, then EOS (if `eos`), then
// EOS forever. `load_delay_ms` makes the constructor sleep (a slow model load). Logits put the
// scripted token far above every other, so any sampling setting picks it.
#pragma once

#include "engine/model_runner.h"
#include "tokenizer/tokenizer.h"

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

namespace onecard::server {

class ScriptedRunner : public ModelRunner {
public:
    // `tokenizer` must outlive the runner. Throws onecard::Error naming the file and field.
    ScriptedRunner(const Tokenizer& tokenizer, const std::string& script_path, int64_t max_model_len,
                   int32_t eos_token_id);

    int64_t vocab_size() const override { return vocab_size_; }
    int64_t max_model_len() const override { return max_model_len_; }
    KvModelShape kv_model_shape() const override;
    RunnerOutput execute(const SchedulerOutput& batch) override;

private:
    struct Script {
        std::string when;
        std::vector<int32_t> tokens;  // EOS appended when the entry asks for it
    };
    struct SeqState {
        std::vector<int32_t> history;  // every token fed so far (prompt, then sampled tokens)
        int64_t prompt_len = -1;       // fixed at the first sample; survives preemption
        const Script* script = nullptr;
    };
    const Script& pick(const std::vector<int32_t>& prompt) const;

    const Tokenizer& tokenizer_;
    int64_t vocab_size_;
    int64_t max_model_len_;
    int32_t eos_;
    std::chrono::milliseconds step_delay_{0};
    std::vector<Script> scripts_;
    Script default_;
    std::unordered_map<RequestId, SeqState> states_;
};

}  // namespace onecard::server
