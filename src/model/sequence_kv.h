// SequenceKv: where one sequence's attention KV lives, as the forward pass sees it. The model writes
// every stored vector once, in position order, and reads back only vectors of the sequence's current
// life; it never learns how a store keeps them. Two stores exist:
//  * Fp32SequenceKv (here): plain fp32 vectors. Numerics::Exact always uses it (bit-for-bit what
//    transformers computes); a SequenceState made by DeepSeekV4::new_sequence() owns one.
//  * PagedSequenceKv (engine/paged_sequence_kv.h): kvcache's byte format in the engine's pool
//    (window rows in the sequence's slot, compressed entries and indexer keys in its paged blocks).
//    The engine uses it in Numerics::Reference, where the model rounds every stored vector to what
//    that format holds before writing it, so both stores give back identical values.
// The interface lives in model/ (not kvcache/) so the model never includes kvcache headers; the
// engine, which links both, adapts the arena to it (house-style §8: the view is passed explicitly).
//
// Layers are numbered like ModelConfig / KvCacheSpec: main layers 0..L-1, then the MTP blocks.
#pragma once

#include "model/config.h"

#include <cstdint>
#include <vector>

namespace onecard {

class SequenceKv {
public:
    virtual ~SequenceKv() = default;

    // Sliding-window ring of `layer`: the [head_dim] row of the token at position `pos`. A store keeps
    // the last sliding_window positions written.
    virtual void write_window(int64_t layer, int64_t pos, const float* row) = 0;
    virtual void read_window(int64_t layer, int64_t pos, float* row) const = 0;
    // Compressed entry i [head_dim] of a CSA/HCA layer (post-norm, post-RoPE, post-QAT).
    virtual void write_entry(int64_t layer, int64_t i, const float* entry) = 0;
    virtual void read_entry(int64_t layer, int64_t i, float* entry) const = 0;
    // Indexer key i [index_head_dim] of a CSA layer (Hadamard-rotated in reference numerics).
    virtual void write_index_key(int64_t layer, int64_t i, const float* key) = 0;
    virtual void read_index_key(int64_t layer, int64_t i, float* key) const = 0;

    // The store the vectors finally live in: itself, or for a view that stages writes in front of
    // another store (model/staged_kv.h) that store's backing. Lets a sequence that owns its store
    // accept a staging view of it.
    virtual const SequenceKv& backing() const { return *this; }
};

// fp32 store: growable vectors per layer. Reading a window position that is not among the last
// sliding_window written, or an entry/key past the end, throws (catches state/KV mix-ups).
class Fp32SequenceKv final : public SequenceKv {
public:
    Fp32SequenceKv() = default;
    // Empty storage for every main layer and MTP block of `cfg`.
    explicit Fp32SequenceKv(const ModelConfig& cfg);

    void write_window(int64_t layer, int64_t pos, const float* row) override;
    void read_window(int64_t layer, int64_t pos, float* row) const override;
    void write_entry(int64_t layer, int64_t i, const float* entry) override;
    void read_entry(int64_t layer, int64_t i, float* entry) const override;
    void write_index_key(int64_t layer, int64_t i, const float* key) override;
    void read_index_key(int64_t layer, int64_t i, float* key) const override;

    int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }
    int64_t n_entries(int64_t layer) const;
    int64_t n_index_keys(int64_t layer) const;
    int64_t window_end(int64_t layer) const;  // 1 + the last window position written (0: none)
    // Throws onecard::Error naming the layer if a buffer is not a whole number of rows.
    void check_integrity() const;

private:
    struct Layer {
        int64_t head_dim = 0, index_head_dim = 0, window_size = 0;
        int64_t window_end = 0;
        std::vector<float> window;      // ring [window_size, head_dim]: token p at row p % window_size
        std::vector<float> entries;     // [n_entries, head_dim]
        std::vector<float> index_keys;  // [n_index_keys, index_head_dim]
    };
    const Layer& layer_at(int64_t layer) const;
    Layer& layer_at(int64_t layer);

    std::vector<Layer> layers_;
};

}  // namespace onecard
