// Per-sequence incremental state of the DeepSeek-V4 forward pass (dsv4-model.md §8): for every
// layer the sliding-window KV ring, the compressor buffers, the compressed entries and (CSA) the
// indexer keys; the MTP block keeps its own. Advancing it by any number of tokens per call is
// what makes chunked prefill, one-token decode and multi-token verification one code path.
//
// [KV_SEAM] Everything here is fp32 in plain vectors. The engine issue moves `window` and
// `compressed` into the paged 584-byte FP8 KV format (448 B E4M3 nope dims + 128 B bf16 rope dims
// + 7 UE8M0 scales + pad) and `index_keys` into the 132-byte indexer format; the forward pass reads
// them only through LayerState, so that change stays inside this type and its readers in
// layer_attention.cpp.
#pragma once

#include "backend/cpu/compressor.h"
#include "model/config.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace onecard {

struct LayerState {
    int64_t layer_id = 0;
    int64_t ratio = 0;                // compress ratio of this layer (0 = SWA)
    int64_t head_dim = 0;
    int64_t window_size = 0;          // sliding_window
    int64_t n_tokens = 0;             // tokens this layer has processed
    std::vector<float> window;        // ring [window_size, head_dim]: token p at slot p % window_size
    std::optional<cpu::CompressorState> compressor;        // CSA/HCA main stream
    std::vector<float> compressed;    // [n_entries, head_dim]: post-norm, post-RoPE (and post-QAT) entries
    std::optional<cpu::CompressorState> index_compressor;  // CSA only
    int64_t index_head_dim = 0;
    std::vector<float> index_keys;    // [n_entries, index_head_dim]

    int64_t n_compressed() const { return head_dim ? static_cast<int64_t>(compressed.size()) / head_dim : 0; }
    const float* window_row(int64_t pos) const { return window.data() + (pos % window_size) * head_dim; }
    // Throws onecard::Error naming the layer if any buffer disagrees with n_tokens.
    void check_integrity() const;
};

class SequenceState {
public:
    SequenceState() = default;
    // Empty state for every main layer and MTP block of `cfg`.
    explicit SequenceState(const ModelConfig& cfg);
    SequenceState(SequenceState&&) noexcept = default;
    SequenceState& operator=(SequenceState&&) noexcept = default;
    // Copyable on purpose: forking a sequence (tests, speculative drafts) is a deep copy.
    SequenceState(const SequenceState&) = default;
    SequenceState& operator=(const SequenceState&) = default;

    int64_t n_tokens() const { return n_tokens_; }      // main-model tokens consumed
    int64_t n_mtp_tokens() const { return n_mtp_tokens_; }  // positions the MTP block has consumed
    void check_integrity() const;

    std::vector<LayerState>& layers() { return layers_; }
    const std::vector<LayerState>& layers() const { return layers_; }
    std::vector<LayerState>& mtp_layers() { return mtp_layers_; }
    void advance(int64_t n) { n_tokens_ += n; }
    void advance_mtp(int64_t n) { n_mtp_tokens_ += n; }

private:
    int64_t n_tokens_ = 0;
    int64_t n_mtp_tokens_ = 0;
    std::vector<LayerState> layers_;      // one per main layer
    std::vector<LayerState> mtp_layers_;  // one per MTP block
};

}  // namespace onecard
