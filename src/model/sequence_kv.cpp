#include "model/sequence_kv.h"

#include "core/error.h"

#include <algorithm>

namespace onecard {
namespace {

// Writes row [width] as vector i of v ([n, width]): i == n appends, i < n overwrites.
void put_row(std::vector<float>& v, int64_t width, int64_t i, const float* row, const char* what, int64_t layer) {
    const int64_t n = width ? static_cast<int64_t>(v.size()) / width : 0;
    ONECARD_CHECK(width > 0 && i >= 0 && i <= n, "fp32 kv: layer {} has {} {}, cannot write #{}", layer, n, what, i);
    if (i == n) v.resize(v.size() + static_cast<size_t>(width));
    std::copy(row, row + width, v.begin() + i * width);
}

void get_row(const std::vector<float>& v, int64_t width, int64_t i, float* row, const char* what, int64_t layer) {
    const int64_t n = width ? static_cast<int64_t>(v.size()) / width : 0;
    ONECARD_CHECK(i >= 0 && i < n, "fp32 kv: layer {} has {} {}, cannot read #{}", layer, n, what, i);
    std::copy(v.begin() + i * width, v.begin() + (i + 1) * width, row);
}

}  // namespace

Fp32SequenceKv::Fp32SequenceKv(const ModelConfig& cfg) {
    const int64_t n_mtp = cfg.dspark ? 0 : cfg.num_nextn_predict_layers;
    for (int64_t il = 0; il < cfg.num_hidden_layers + n_mtp; ++il) {
        Layer l;
        l.head_dim = cfg.head_dim;
        l.window_size = cfg.sliding_window;
        l.index_head_dim = cfg.compress_ratio(il) == 4 ? cfg.index_head_dim : 0;
        l.window.assign(static_cast<size_t>(l.window_size * l.head_dim), 0.0f);
        layers_.push_back(std::move(l));
    }
}

const Fp32SequenceKv::Layer& Fp32SequenceKv::layer_at(int64_t layer) const {
    ONECARD_CHECK(layer >= 0 && layer < n_layers(), "fp32 kv: layer {} outside [0, {})", layer, n_layers());
    return layers_[static_cast<size_t>(layer)];
}

Fp32SequenceKv::Layer& Fp32SequenceKv::layer_at(int64_t layer) {
    return const_cast<Layer&>(static_cast<const Fp32SequenceKv*>(this)->layer_at(layer));
}

void Fp32SequenceKv::write_window(int64_t layer, int64_t pos, const float* row) {
    Layer& l = layer_at(layer);
    ONECARD_CHECK(pos >= 0, "fp32 kv: layer {} window position {}", layer, pos);
    std::copy(row, row + l.head_dim, l.window.begin() + (pos % l.window_size) * l.head_dim);
    l.window_end = std::max(l.window_end, pos + 1);
}

void Fp32SequenceKv::read_window(int64_t layer, int64_t pos, float* row) const {
    const Layer& l = layer_at(layer);
    // Only the last window_size positions are still in the ring.
    ONECARD_CHECK(pos >= 0 && pos < l.window_end && pos >= l.window_end - l.window_size,
                  "fp32 kv: layer {} window holds positions [{}, {}), not {}", layer,
                  std::max<int64_t>(0, l.window_end - l.window_size), l.window_end, pos);
    const auto* src = l.window.data() + (pos % l.window_size) * l.head_dim;
    std::copy(src, src + l.head_dim, row);
}

void Fp32SequenceKv::write_entry(int64_t layer, int64_t i, const float* entry) {
    Layer& l = layer_at(layer);
    put_row(l.entries, l.head_dim, i, entry, "compressed entries", layer);
}

void Fp32SequenceKv::read_entry(int64_t layer, int64_t i, float* entry) const {
    const Layer& l = layer_at(layer);
    get_row(l.entries, l.head_dim, i, entry, "compressed entries", layer);
}

void Fp32SequenceKv::write_index_key(int64_t layer, int64_t i, const float* key) {
    Layer& l = layer_at(layer);
    put_row(l.index_keys, l.index_head_dim, i, key, "indexer keys", layer);
}

void Fp32SequenceKv::read_index_key(int64_t layer, int64_t i, float* key) const {
    const Layer& l = layer_at(layer);
    get_row(l.index_keys, l.index_head_dim, i, key, "indexer keys", layer);
}

int64_t Fp32SequenceKv::n_entries(int64_t layer) const {
    const Layer& l = layer_at(layer);
    return static_cast<int64_t>(l.entries.size()) / l.head_dim;
}

int64_t Fp32SequenceKv::n_index_keys(int64_t layer) const {
    const Layer& l = layer_at(layer);
    return l.index_head_dim ? static_cast<int64_t>(l.index_keys.size()) / l.index_head_dim : 0;
}

int64_t Fp32SequenceKv::window_end(int64_t layer) const {
    return layer_at(layer).window_end;
}

void Fp32SequenceKv::check_integrity() const {
    for (size_t il = 0; il < layers_.size(); ++il) {
        const Layer& l = layers_[il];
        ONECARD_CHECK(
            l.head_dim > 0 && l.window_size > 0 && static_cast<int64_t>(l.window.size()) == l.window_size * l.head_dim,
            "fp32 kv: layer {} window holds {} floats, expected {}", il, l.window.size(), l.window_size * l.head_dim);
        ONECARD_CHECK(static_cast<int64_t>(l.entries.size()) % l.head_dim == 0,
                      "fp32 kv: layer {} entries are not whole rows", il);
        ONECARD_CHECK(
            l.index_head_dim ? static_cast<int64_t>(l.index_keys.size()) % l.index_head_dim == 0 : l.index_keys.empty(),
            "fp32 kv: layer {} indexer keys are not whole rows", il);
    }
}

}  // namespace onecard
