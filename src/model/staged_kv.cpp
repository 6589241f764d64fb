#include "model/staged_kv.h"

#include "core/error.h"

#include <algorithm>

namespace onecard {

void StagedSequenceKv::put(Kind kind, int64_t layer, int64_t i, const float* v) {
    ONECARD_CHECK(i >= 0, "staged kv: layer {} vector #{}", layer, i);
    staged_[Key{layer, kind, i}].assign(v, v + width(kind));
}

bool StagedSequenceKv::get(Kind kind, int64_t layer, int64_t i, float* v) const {
    const auto it = staged_.find(Key{layer, kind, i});
    if (it == staged_.end()) return false;
    std::copy(it->second.begin(), it->second.end(), v);
    return true;
}

void StagedSequenceKv::write_window(int64_t layer, int64_t pos, const float* row) {
    put(Kind::Window, layer, pos, row);
}

void StagedSequenceKv::read_window(int64_t layer, int64_t pos, float* row) const {
    if (!get(Kind::Window, layer, pos, row)) store_.read_window(layer, pos, row);
}

void StagedSequenceKv::write_entry(int64_t layer, int64_t i, const float* entry) {
    put(Kind::Entry, layer, i, entry);
}

void StagedSequenceKv::read_entry(int64_t layer, int64_t i, float* entry) const {
    if (!get(Kind::Entry, layer, i, entry)) store_.read_entry(layer, i, entry);
}

void StagedSequenceKv::write_index_key(int64_t layer, int64_t i, const float* key) {
    put(Kind::IndexKey, layer, i, key);
}

void StagedSequenceKv::read_index_key(int64_t layer, int64_t i, float* key) const {
    if (!get(Kind::IndexKey, layer, i, key)) store_.read_index_key(layer, i, key);
}

void StagedSequenceKv::publish(const SequenceState& state) {
    std::map<int64_t, const LayerState*> by_id;
    for (const auto* layers : {&state.layers(), &state.mtp_layers()})
        for (const LayerState& l : *layers) by_id[l.layer_id] = &l;
    for (const auto& [key, v] : staged_) {
        const auto& [layer, kind, i] = key;
        const auto it = by_id.find(layer);
        ONECARD_CHECK(it != by_id.end(), "staged kv: a vector of layer {}, which the sequence does not have", layer);
        const LayerState& l = *it->second;
        switch (kind) {
            case Kind::Window:
                if (i < l.n_tokens) store_.write_window(layer, i, v.data());
                break;
            case Kind::Entry:
                if (i < l.n_compressed()) store_.write_entry(layer, i, v.data());
                break;
            case Kind::IndexKey:
                if (i < l.n_compressed()) store_.write_index_key(layer, i, v.data());
                break;
        }
    }
    staged_.clear();
}

int64_t StagedSequenceKv::staged_bytes() const {
    size_t floats = 0;
    for (const auto& kv : staged_) floats += kv.second.size();
    return static_cast<int64_t>(floats * sizeof(float));
}

void StagedSequenceKv::check_integrity() const {
    ONECARD_CHECK(head_dim_ > 0, "staged kv: head_dim {}", head_dim_);
    for (const auto& [key, v] : staged_)
        ONECARD_CHECK(static_cast<int64_t>(v.size()) == width(std::get<1>(key)),
                      "staged kv: layer {} vector #{} holds {} floats", std::get<0>(key), std::get<2>(key), v.size());
}

}  // namespace onecard
