// KV compressor of CSA/HCA layers (dsv4-model.md §4.5): gated per-channel softmax pooling of
// `ratio` consecutive tokens into one entry. Ratio 4 overlaps windows: entry w pools the A-halves
// (dims [0, d)) of window w−1's tokens and the B-halves (dims [d, 2d)) of window w's tokens over 2·ratio
// slots. The first window's previous slots are empty (score −∞, weight 0).
//
// CompressorState is incremental: tokens are pushed one at a time in position order, so chunked
// prefill, decode and multi-token verification produce the same entries. Post-processing of an
// emitted entry (RMSNorm, RoPE at the window start, quantisation simulation) is the caller's.
#pragma once

#include <cstdint>
#include <vector>

namespace onecard::cpu {

// out[i] = Σ_s softmax_s(score_rows[s][i]) · kv_rows[s][i] for i < d, over n_slots slots. Each row
// pointer addresses the d channels of that slot (already offset to the A or B half).
void compress_pool(const float* const* kv_rows, const float* const* score_rows, int64_t n_slots, int64_t d, float* out);

class CompressorState {
public:
    CompressorState() = default;
    // ratio 4 => overlapping (rows are 2·head_dim wide), any other ratio => plain windows.
    CompressorState(int64_t ratio, int64_t head_dim);

    int64_t ratio() const { return ratio_; }
    int64_t head_dim() const { return head_dim_; }
    bool overlap() const { return ratio_ == 4; }
    int64_t row_width() const { return overlap() ? 2 * head_dim_ : head_dim_; }  // c·d
    int64_t n_tokens() const { return n_tokens_; }                               // tokens pushed so far
    int64_t n_entries() const { return n_tokens_ / ratio_; }                     // windows closed so far

    // Pushes the token at position n_tokens(): kv, score [row_width()] with score = wgate·x + ape[pos % ratio].
    // Returns true if this token closed window w = pos / ratio; `entry` [head_dim] then holds its pooled,
    // not yet normalised value.
    // NOTE: a window is only finalised by its last token, so a speculative-decoding rollback that
    // never crosses a window end only has to rewind n_tokens (rows are addressed by position).
    bool push(const float* kv, const float* score, float* entry);

    // Window-boundary snapshots (prefix caching): when n_tokens() is a multiple of ratio, the only
    // rows a later push still reads are, overlapping, the closed window's `ratio` rows (the next
    // entry's A halves); a plain compressor reads none (the open window is refilled before it is
    // pooled). save_carry writes those rows [carry_floats()] (kv rows, then score rows);
    // restore_carry sets a compressor to n_tokens (a multiple of ratio) with them, the dead rows
    // reset as in a fresh state. Pushing after a restore gives bit for bit what pushing after the
    // saved state gives. Both throw off a boundary.
    int64_t carry_floats() const { return overlap() ? 2 * ratio_ * row_width() : 0; }
    void save_carry(float* out) const;
    void restore_carry(int64_t n_tokens, const float* in);

    // Speculative verification, rollback without replay: between begin_journal() and end_journal()
    // each push records what it overwrites (its slot's old kv/score row and, when an overlapping
    // window closes, the previous-window rows the shift replaces). rollback(n) undoes the pushes past
    // n, newest first, which leaves the buffers bit for bit as if only the first n tokens had been
    // pushed: rows written by kept pushes stay, nothing is recomputed. Cost per journaled push: one
    // row (2·row_width() floats), plus 2·ratio·row_width() floats for an overlapping window close.
    // Positions past the journal's start cannot be rolled back to (throws); end_journal() drops it.
    void begin_journal();
    void rollback(int64_t n_tokens);
    void end_journal();
    bool journaling() const { return journal_start_ >= 0; }
    int64_t journal_bytes() const;  // bytes the journal holds now

    // Throws onecard::Error if the buffers are inconsistent with ratio/head_dim/n_tokens.
    void check_integrity() const;

private:
    struct JournalRecord {
        int64_t slot = 0;
        std::vector<float> kv, score;            // [row_width] the slot's rows before the push
        std::vector<float> prev_kv, prev_score;  // [ratio, row_width] before an overlap shift (else empty)
    };

    int64_t ratio_ = 0;
    int64_t head_dim_ = 0;
    int64_t n_tokens_ = 0;
    // [n_slots, row_width]; overlap: slots [0, ratio) = previous window, [ratio, 2·ratio) = open window.
    std::vector<float> kv_;
    std::vector<float> score_;
    int64_t journal_start_ = -1;          // n_tokens at begin_journal(); -1: not journaling
    std::vector<JournalRecord> journal_;  // one per push since begin_journal(), in push order
};

}  // namespace onecard::cpu
