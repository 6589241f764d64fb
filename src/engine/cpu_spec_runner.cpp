// CpuModelRunner's speculative decoding (issue 17): the mtp.0 drafter (V4-Flash) or the DSpark
// drafter (0731) and the one-step verify of engine/spec_decoder.h on the runner's sequences, whose KV
// is in the engine's pool (reference numerics) or in their own fp32 store (exact numerics).
#include "core/error.h"
#include "engine/cpu_model_runner.h"

#include <optional>

namespace onecard {

bool CpuModelRunner::supports_speculation(const std::string& method) const {
    return (method == "mtp" && model_.has_mtp()) || (method == "dspark" && model_.has_dspark());
}

void CpuModelRunner::enable_speculation(const SpeculativeConfig& config) {
    const std::string& method = config.method;
    const int64_t num_speculative_tokens = config.num_speculative_tokens;
    ONECARD_CHECK(supports_speculation(method), "cpu runner: speculative method '{}' is not supported ({})", method,
                  model_.has_dspark() ? "this 0731 checkpoint has the DSpark drafter: use 'dspark'"
                  : model_.has_mtp()  ? "this checkpoint has an mtp.0 block: use 'mtp'"
                                      : "the checkpoint has neither an mtp.0 block nor a DSpark drafter");
    ONECARD_CHECK(num_speculative_tokens >= 1, "cpu runner: {} speculative tokens", num_speculative_tokens);
    if (method == "dspark") {
        // The block is always dspark_block_size wide (its attention is bidirectional, so another width
        // changes every slot): at most that many drafts exist per step.
        const int64_t B = model_.config().dspark->block_size;
        ONECARD_CHECK(num_speculative_tokens <= B,
                      "cpu runner: num_speculative_tokens = {} exceeds the DSpark drafter's block of {} "
                      "(dspark_block_size): DSpark drafts at most {} tokens per step; use num_speculative_tokens <= {}",
                      num_speculative_tokens, B, B, B);
    }
    ONECARD_CHECK(config.confidence_threshold >= 0.0 && config.confidence_threshold < 1.0,
                  "cpu runner: confidence_threshold {} is outside [0, 1)", config.confidence_threshold);
    ONECARD_CHECK(config.confidence_threshold == 0.0 || method == "dspark",
                  "cpu runner: confidence_threshold needs the DSpark drafter's confidence head (method 'dspark')");
    ONECARD_CHECK(states_.empty(), "cpu runner: speculation is enabled before the first step");
    spec_k_ = num_speculative_tokens;
    spec_dspark_ = method == "dspark";
    spec_threshold_ = config.confidence_threshold;
}

void CpuModelRunner::execute_spec_row(Live& live, const ScheduledRequest& e, RunnerOutput& out) {
    ONECARD_CHECK(e.restore_snapshot < 0 && e.save_snapshots.empty(),
                  "cpu runner: prefix-cache snapshots are off with speculative decoding");
    std::optional<PagedSequenceKv> paged;
    if (paged_kv()) paged.emplace(*arena_, *layout_, live.slot, live.block_table);
    SequenceKv& kv = paged ? static_cast<SequenceKv&>(*paged) : live.state.own_kv();
    const auto V = static_cast<size_t>(vocab_size());
    if (e.n_draft_tokens == 0) {
        const std::vector<float> logits = forward_tracked(model_, live.state, kv, live.trail, e.token_ids);
        if (!e.sample) return;
        out.row_ids.push_back(e.id);
        out.tokens.push_back(-1);
        out.spec.emplace_back();
        out.logits.insert(out.logits.end(), logits.end() - static_cast<long>(V), logits.end());
        return;
    }
    ONECARD_CHECK(e.n_tokens() == 1 && e.sample && e.sampling && !e.sampling->fill_mask && e.n_draft_tokens <= spec_k_,
                  "cpu runner: request {} has {} drafts on a row of {} tokens that it may not sample itself", e.id,
                  e.n_draft_tokens, e.n_tokens());
    const RowSampling& rs = *e.sampling;
    const SamplingParams params = rs.params();
    const int32_t next = e.token_ids[0];
    const Draft d = spec_dspark_ ? draft_with_dspark(model_, live.state, next, params, rs.seed, rs.counter,
                                                     e.n_draft_tokens, spec_threshold_)
                                 : draft_with_mtp(model_, live.state, kv, live.trail, next, params, rs.seed, rs.counter,
                                                  e.n_draft_tokens);
    const SpecVerdict v = verify_draft(model_, live.state, kv, live.trail, next, d, params, rs.seed, rs.counter);
    RunnerOutput::SpecRow row;
    row.n_drafts = static_cast<int64_t>(d.tokens.size());
    row.tokens.assign(d.tokens.begin(), d.tokens.begin() + v.n_accepted);
    row.tokens.push_back(v.token);
    out.row_ids.push_back(e.id);
    out.tokens.push_back(row.tokens.front());
    out.spec.push_back(std::move(row));
}

}  // namespace onecard
