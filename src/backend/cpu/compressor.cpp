#include "backend/cpu/compressor.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace onecard::cpu {

void compress_pool(const float* const* kv_rows, const float* const* score_rows, int64_t n_slots, int64_t d,
                   float* out) {
    std::vector<float> w(static_cast<size_t>(n_slots));
    for (int64_t i = 0; i < d; ++i) {
        float mx = -INFINITY;
        for (int64_t s = 0; s < n_slots; ++s) mx = std::max(mx, score_rows[s][i]);
        float sum = 0.0f;
        for (int64_t s = 0; s < n_slots; ++s) {
            w[s] = std::exp(score_rows[s][i] - mx);  // −∞ slots give exactly 0
            sum += w[s];
        }
        float acc = 0.0f;
        for (int64_t s = 0; s < n_slots; ++s) {
            if (w[s] != 0.0f) acc += (w[s] / sum) * kv_rows[s][i];
        }
        out[i] = acc;
    }
}

CompressorState::CompressorState(int64_t ratio, int64_t head_dim) : ratio_(ratio), head_dim_(head_dim) {
    ONECARD_CHECK(ratio > 0 && head_dim > 0, "compressor: ratio {} and head_dim {} must be positive", ratio, head_dim);
    const int64_t n_slots = overlap() ? 2 * ratio : ratio;
    kv_.assign(static_cast<size_t>(n_slots * row_width()), 0.0f);
    // Previous-window slots start empty: −∞ scores give them weight 0 in the first window.
    score_.assign(static_cast<size_t>(n_slots * row_width()), -INFINITY);
}

bool CompressorState::push(const float* kv, const float* score, float* entry) {
    const int64_t W = row_width();
    const int64_t slot = (overlap() ? ratio_ : 0) + n_tokens_ % ratio_;
    JournalRecord* rec = nullptr;
    if (journaling()) {
        rec = &journal_.emplace_back();
        rec->slot = slot;
        rec->kv.assign(kv_.begin() + slot * W, kv_.begin() + (slot + 1) * W);
        rec->score.assign(score_.begin() + slot * W, score_.begin() + (slot + 1) * W);
    }
    std::copy(kv, kv + W, kv_.begin() + slot * W);
    std::copy(score, score + W, score_.begin() + slot * W);
    ++n_tokens_;
    if (n_tokens_ % ratio_ != 0) return false;

    std::vector<const float*> kv_rows, score_rows;
    if (overlap()) {
        for (int64_t s = 0; s < ratio_; ++s) {  // previous window, A half
            kv_rows.push_back(kv_.data() + s * W);
            score_rows.push_back(score_.data() + s * W);
        }
        for (int64_t s = ratio_; s < 2 * ratio_; ++s) {  // this window, B half
            kv_rows.push_back(kv_.data() + s * W + head_dim_);
            score_rows.push_back(score_.data() + s * W + head_dim_);
        }
    } else {
        for (int64_t s = 0; s < ratio_; ++s) {
            kv_rows.push_back(kv_.data() + s * W);
            score_rows.push_back(score_.data() + s * W);
        }
    }
    compress_pool(kv_rows.data(), score_rows.data(), static_cast<int64_t>(kv_rows.size()), head_dim_, entry);
    if (overlap()) {
        // The closed window becomes the next entry's "previous" window.
        if (rec) {
            rec->prev_kv.assign(kv_.begin(), kv_.begin() + ratio_ * W);
            rec->prev_score.assign(score_.begin(), score_.begin() + ratio_ * W);
        }
        std::copy(kv_.begin() + ratio_ * W, kv_.end(), kv_.begin());
        std::copy(score_.begin() + ratio_ * W, score_.end(), score_.begin());
    }
    return true;
}

void CompressorState::begin_journal() {
    journal_.clear();
    journal_start_ = n_tokens_;
}

void CompressorState::end_journal() {
    journal_.clear();
    journal_start_ = -1;
}

void CompressorState::rollback(int64_t n_tokens) {
    ONECARD_CHECK(journaling() && n_tokens >= journal_start_ && n_tokens <= n_tokens_,
                  "compressor: rollback to {} tokens outside the journal's [{}, {}]", n_tokens, journal_start_,
                  n_tokens_);
    const int64_t W = row_width();
    while (n_tokens_ > n_tokens) {  // newest push first: each record restores what its push overwrote
        const JournalRecord& rec = journal_.back();
        if (!rec.prev_kv.empty()) {
            std::copy(rec.prev_kv.begin(), rec.prev_kv.end(), kv_.begin());
            std::copy(rec.prev_score.begin(), rec.prev_score.end(), score_.begin());
        }
        std::copy(rec.kv.begin(), rec.kv.end(), kv_.begin() + rec.slot * W);
        std::copy(rec.score.begin(), rec.score.end(), score_.begin() + rec.slot * W);
        journal_.pop_back();
        --n_tokens_;
    }
}

int64_t CompressorState::journal_bytes() const {
    size_t floats = 0;
    for (const JournalRecord& r : journal_)
        floats += r.kv.size() + r.score.size() + r.prev_kv.size() + r.prev_score.size();
    return static_cast<int64_t>(floats * sizeof(float));
}

void CompressorState::save_carry(float* out) const {
    ONECARD_CHECK(ratio_ > 0 && n_tokens_ % ratio_ == 0, "compressor: carry saved at {} tokens, not a multiple of {}",
                  n_tokens_, ratio_);
    if (!overlap()) return;
    const auto n = static_cast<size_t>(ratio_ * row_width());  // slots [0, ratio): the closed window
    std::copy(kv_.begin(), kv_.begin() + static_cast<long>(n), out);
    std::copy(score_.begin(), score_.begin() + static_cast<long>(n), out + n);
}

void CompressorState::restore_carry(int64_t n_tokens, const float* in) {
    ONECARD_CHECK(ratio_ > 0 && n_tokens >= 0 && n_tokens % ratio_ == 0,
                  "compressor: carry restored at {} tokens, not a multiple of {}", n_tokens, ratio_);
    std::fill(kv_.begin(), kv_.end(), 0.0f);
    std::fill(score_.begin(), score_.end(), -INFINITY);
    end_journal();  // a restored state has no pushes to undo
    n_tokens_ = n_tokens;
    // Before the first window closes the previous slots stay empty (-inf), as in a fresh state.
    if (!overlap() || n_tokens < ratio_) return;
    const auto n = static_cast<size_t>(ratio_ * row_width());
    std::copy(in, in + n, kv_.begin());
    std::copy(in + n, in + 2 * n, score_.begin());
}

void CompressorState::check_integrity() const {
    ONECARD_CHECK(ratio_ > 0 && head_dim_ > 0, "compressor state: not initialised");
    const size_t n = static_cast<size_t>((overlap() ? 2 * ratio_ : ratio_) * row_width());
    ONECARD_CHECK(kv_.size() == n && score_.size() == n, "compressor state: buffers hold {}/{} floats, expected {}",
                  kv_.size(), score_.size(), n);
    ONECARD_CHECK(n_tokens_ >= 0, "compressor state: negative token count {}", n_tokens_);
    ONECARD_CHECK(journaling() ? static_cast<int64_t>(journal_.size()) == n_tokens_ - journal_start_ : journal_.empty(),
                  "compressor state: journal of {} pushes from {} tokens, state at {}", journal_.size(), journal_start_,
                  n_tokens_);
    if (overlap() && n_tokens_ < ratio_) {
        for (int64_t i = 0; i < ratio_ * row_width(); ++i)
            ONECARD_CHECK(std::isinf(score_[i]) && score_[i] < 0,
                          "compressor state: previous-window score slot {} is set before the first window closed", i);
    }
}

}  // namespace onecard::cpu
