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
    s.window.assign(static_cast<size_t>(cfg.sliding_window * cfg.head_dim), 0.0f);
    if (s.ratio != 0) s.compressor.emplace(s.ratio, cfg.head_dim);
    if (s.ratio == 4) {
        s.index_head_dim = cfg.index_head_dim;
        s.index_compressor.emplace(s.ratio, cfg.index_head_dim);
    }
    return s;
}

}  // namespace

void LayerState::check_integrity() const {
    ONECARD_CHECK(window_size > 0 && static_cast<int64_t>(window.size()) == window_size * head_dim,
                  "layer {} state: window holds {} floats, expected {}", layer_id, window.size(), window_size * head_dim);
    if (ratio == 0) {
        ONECARD_CHECK(!compressor && compressed.empty() && !index_compressor && index_keys.empty(),
                      "layer {} state: sliding-window layer carries compressor state", layer_id);
        return;
    }
    ONECARD_CHECK(compressor.has_value(), "layer {} state: ratio {} but no compressor", layer_id, ratio);
    compressor->check_integrity();
    ONECARD_CHECK(compressor->n_tokens() == n_tokens, "layer {} state: compressor saw {} tokens, layer {}", layer_id,
                  compressor->n_tokens(), n_tokens);
    ONECARD_CHECK(n_compressed() == n_tokens / ratio && static_cast<int64_t>(compressed.size()) == n_compressed() * head_dim,
                  "layer {} state: {} compressed entries for {} tokens at ratio {}", layer_id, n_compressed(), n_tokens,
                  ratio);
    if (ratio == 4) {
        ONECARD_CHECK(index_compressor.has_value(), "layer {} state: CSA layer without indexer compressor", layer_id);
        index_compressor->check_integrity();
        ONECARD_CHECK(index_compressor->n_tokens() == n_tokens &&
                          static_cast<int64_t>(index_keys.size()) == (n_tokens / ratio) * index_head_dim,
                      "layer {} state: {} indexer key floats for {} tokens", layer_id, index_keys.size(), n_tokens);
    }
}

SequenceState::SequenceState(const ModelConfig& cfg) {
    for (int64_t il = 0; il < cfg.num_hidden_layers; ++il) layers_.push_back(make_layer(cfg, il));
    for (int64_t i = 0; i < cfg.num_nextn_predict_layers && !cfg.dspark; ++i)
        mtp_layers_.push_back(make_layer(cfg, cfg.num_hidden_layers + i));
}

void SequenceState::check_integrity() const {
    for (const LayerState& l : layers_) {
        l.check_integrity();
        ONECARD_CHECK(l.n_tokens == n_tokens_, "sequence state: layer {} processed {} tokens, sequence has {}",
                      l.layer_id, l.n_tokens, n_tokens_);
    }
    for (const LayerState& l : mtp_layers_) {
        l.check_integrity();
        ONECARD_CHECK(l.n_tokens == n_mtp_tokens_, "sequence state: MTP block {} processed {} tokens, expected {}",
                      l.layer_id, l.n_tokens, n_mtp_tokens_);
    }
}

}  // namespace onecard
