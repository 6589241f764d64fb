#include "model/sequence_state.h"

#include "core/error.h"

namespace onecard {
namespace {

LayerState make_layer(const ModelConfig& cfg, int64_t layer_id) {
    LayerState s;
    s.layer_id = layer_id;
    s.ratio = cfg.compress_ratio(layer_id);
    s.head_dim = cfg.head_dim;
    s.window_size = cfg.sliding_window;
    if (s.ratio != 0) s.compressor.emplace(s.ratio, cfg.head_dim);
    if (s.ratio == 4) {
        s.index_head_dim = cfg.index_head_dim;
        s.index_compressor.emplace(s.ratio, cfg.index_head_dim);
    }
    return s;
}

}  // namespace

void LayerState::check_integrity() const {
    ONECARD_CHECK(window_size > 0 && head_dim > 0, "layer {} state: window {} x head_dim {}", layer_id, window_size,
                  head_dim);
    if (ratio == 0) {
        ONECARD_CHECK(!compressor && !index_compressor, "layer {} state: sliding-window layer carries compressor state",
                      layer_id);
        return;
    }
    ONECARD_CHECK(compressor.has_value(), "layer {} state: ratio {} but no compressor", layer_id, ratio);
    compressor->check_integrity();
    ONECARD_CHECK(compressor->n_tokens() == n_tokens, "layer {} state: compressor saw {} tokens, layer {}", layer_id,
                  compressor->n_tokens(), n_tokens);
    if (ratio == 4) {
        ONECARD_CHECK(index_compressor.has_value(), "layer {} state: CSA layer without indexer compressor", layer_id);
        index_compressor->check_integrity();
        ONECARD_CHECK(index_compressor->n_tokens() == n_tokens,
                      "layer {} state: indexer compressor saw {} tokens, layer {}", layer_id,
                      index_compressor->n_tokens(), n_tokens);
    }
}

SequenceState::SequenceState(const ModelConfig& cfg, bool own_kv) {
    for (int64_t il = 0; il < cfg.num_hidden_layers; ++il) layers_.push_back(make_layer(cfg, il));
    for (int64_t i = 0; i < cfg.num_nextn_predict_layers && !cfg.dspark; ++i)
        mtp_layers_.push_back(make_layer(cfg, cfg.num_hidden_layers + i));
    if (own_kv) own_kv_.emplace(cfg);
    if (cfg.dspark)
        dspark_ring_floats_ =
            static_cast<int64_t>(cfg.dspark->target_layer_ids.size()) * cfg.sliding_window * cfg.head_dim;
}

std::vector<float>& SequenceState::dspark_ring() {
    ONECARD_CHECK(dspark_ring_floats_ > 0, "sequence state: not a DSpark (0731) model");
    if (dspark_ring_.empty()) dspark_ring_.assign(static_cast<size_t>(dspark_ring_floats_), 0.0f);
    return dspark_ring_;
}

Fp32SequenceKv& SequenceState::own_kv() {
    ONECARD_CHECK(own_kv_.has_value(), "sequence state: the KV of this sequence is kept outside (pass its store)");
    return *own_kv_;
}

const Fp32SequenceKv& SequenceState::own_kv() const {
    ONECARD_CHECK(own_kv_.has_value(), "sequence state: the KV of this sequence is kept outside (pass its store)");
    return *own_kv_;
}

void SequenceState::check_layer_kv(const LayerState& l) const {
    if (!own_kv_) return;
    const Fp32SequenceKv& kv = *own_kv_;
    ONECARD_CHECK(kv.window_end(l.layer_id) == l.n_tokens,
                  "sequence state: layer {} window ends at {}, layer has {} tokens", l.layer_id,
                  kv.window_end(l.layer_id), l.n_tokens);
    ONECARD_CHECK(kv.n_entries(l.layer_id) == l.n_compressed(),
                  "sequence state: layer {} stores {} compressed entries for {} tokens at ratio {}", l.layer_id,
                  kv.n_entries(l.layer_id), l.n_tokens, l.ratio);
    const int64_t want_keys = l.ratio == 4 ? l.n_compressed() : 0;
    ONECARD_CHECK(kv.n_index_keys(l.layer_id) == want_keys,
                  "sequence state: layer {} stores {} indexer keys, expected {}", l.layer_id,
                  kv.n_index_keys(l.layer_id), want_keys);
}

int64_t SequenceState::boundary_carry_floats() const {
    int64_t n = 0;
    for (const LayerState& l : layers_) {
        if (l.compressor) n += l.compressor->carry_floats();
        if (l.index_compressor) n += l.index_compressor->carry_floats();
    }
    return n;
}

std::vector<float> SequenceState::boundary_carry() const {
    ONECARD_CHECK(!own_kv_ && n_mtp_tokens_ == 0,
                  "sequence state: a boundary snapshot needs external KV and an unused MTP block");
    std::vector<float> out(static_cast<size_t>(boundary_carry_floats()));
    float* p = out.data();
    for (const LayerState& l : layers_) {
        for (const auto* c : {&l.compressor, &l.index_compressor}) {
            if (!c->has_value()) continue;
            (*c)->save_carry(p);  // throws off a boundary
            p += (*c)->carry_floats();
        }
    }
    return out;
}

void SequenceState::restore_boundary(int64_t n_tokens, const std::vector<float>& carry) {
    ONECARD_CHECK(!own_kv_ && n_tokens_ == 0 && n_mtp_tokens_ == 0,
                  "sequence state: a boundary snapshot restores into a fresh state with external KV");
    ONECARD_CHECK(static_cast<int64_t>(carry.size()) == boundary_carry_floats(),
                  "sequence state: snapshot carry of {} floats, this model's is {}", carry.size(),
                  boundary_carry_floats());
    const float* p = carry.data();
    for (LayerState& l : layers_) {
        for (auto* c : {&l.compressor, &l.index_compressor}) {
            if (!c->has_value()) continue;
            (*c)->restore_carry(n_tokens, p);
            p += (*c)->carry_floats();
        }
        l.n_tokens = n_tokens;
    }
    n_tokens_ = n_tokens;
}

namespace {

template <typename F>
void for_each_compressor(std::vector<LayerState>& layers, F&& f) {
    for (LayerState& l : layers) {
        if (l.compressor) f(*l.compressor);
        if (l.index_compressor) f(*l.index_compressor);
    }
}

void rollback_layers(std::vector<LayerState>& layers, int64_t n_tokens) {
    for (LayerState& l : layers) {
        ONECARD_CHECK(n_tokens <= l.n_tokens, "sequence state: layer {} cannot roll forward from {} to {} tokens",
                      l.layer_id, l.n_tokens, n_tokens);
        if (l.compressor) l.compressor->rollback(n_tokens);  // throws below the journal's start
        if (l.index_compressor) l.index_compressor->rollback(n_tokens);
        l.n_tokens = n_tokens;
    }
}

}  // namespace

void SequenceState::begin_journal() {
    for_each_compressor(layers_, [](cpu::CompressorState& c) { c.begin_journal(); });
    for_each_compressor(mtp_layers_, [](cpu::CompressorState& c) { c.begin_journal(); });
    journal_n_tokens_ = n_tokens_;
    journal_n_mtp_tokens_ = n_mtp_tokens_;
}

void SequenceState::rollback(int64_t n_tokens, int64_t n_mtp_tokens) {
    ONECARD_CHECK(journal_n_tokens_ >= 0, "sequence state: rollback without begin_journal()");
    // SWA layers keep no journal, so the journal's start is checked here for every layer kind.
    ONECARD_CHECK(n_tokens >= journal_n_tokens_ && n_tokens <= n_tokens_ && n_mtp_tokens >= journal_n_mtp_tokens_ &&
                      n_mtp_tokens <= n_mtp_tokens_,
                  "sequence state: rollback to ({}, mtp {}) outside [({}, mtp {}), ({}, mtp {})]", n_tokens,
                  n_mtp_tokens, journal_n_tokens_, journal_n_mtp_tokens_, n_tokens_, n_mtp_tokens_);
    ONECARD_CHECK(!has_dspark() || n_mtp_tokens == n_mtp_tokens_,
                  "sequence state: the DSpark context ring holds only kept positions and is never rolled back "
                  "(from {} to {})",
                  n_mtp_tokens_, n_mtp_tokens);
    rollback_layers(layers_, n_tokens);
    rollback_layers(mtp_layers_, n_mtp_tokens);
    n_tokens_ = n_tokens;
    n_mtp_tokens_ = n_mtp_tokens;
}

void SequenceState::end_journal() {
    for_each_compressor(layers_, [](cpu::CompressorState& c) { c.end_journal(); });
    for_each_compressor(mtp_layers_, [](cpu::CompressorState& c) { c.end_journal(); });
    journal_n_tokens_ = journal_n_mtp_tokens_ = -1;
}

int64_t SequenceState::journal_bytes() const {
    int64_t n = 0;
    for (const auto* layers : {&layers_, &mtp_layers_})
        for (const LayerState& l : *layers) {
            if (l.compressor) n += l.compressor->journal_bytes();
            if (l.index_compressor) n += l.index_compressor->journal_bytes();
        }
    return n;
}

void SequenceState::check_integrity() const {
    if (own_kv_) {
        own_kv_->check_integrity();
        ONECARD_CHECK(own_kv_->n_layers() == static_cast<int64_t>(layers_.size() + mtp_layers_.size()),
                      "sequence state: KV store has {} layers, state {}", own_kv_->n_layers(),
                      layers_.size() + mtp_layers_.size());
    }
    for (const LayerState& l : layers_) {
        l.check_integrity();
        check_layer_kv(l);
        ONECARD_CHECK(l.n_tokens == n_tokens_, "sequence state: layer {} processed {} tokens, sequence has {}",
                      l.layer_id, l.n_tokens, n_tokens_);
    }
    for (const LayerState& l : mtp_layers_) {
        l.check_integrity();
        check_layer_kv(l);
        ONECARD_CHECK(l.n_tokens == n_mtp_tokens_, "sequence state: MTP block {} processed {} tokens, expected {}",
                      l.layer_id, l.n_tokens, n_mtp_tokens_);
    }
    ONECARD_CHECK(dspark_ring_.empty() || static_cast<int64_t>(dspark_ring_.size()) == dspark_ring_floats_,
                  "sequence state: DSpark ring of {} floats, expected {}", dspark_ring_.size(), dspark_ring_floats_);
    ONECARD_CHECK(!has_dspark() || (n_mtp_tokens_ <= n_tokens_ && (n_mtp_tokens_ == 0 || !dspark_ring_.empty())),
                  "sequence state: the DSpark drafter read {} positions of {} (ring {})", n_mtp_tokens_, n_tokens_,
                  dspark_ring_.empty() ? "unused" : "in use");
}

}  // namespace onecard
