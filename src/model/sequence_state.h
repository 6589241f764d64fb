// Per-sequence incremental state of the DeepSeek-V4 forward pass (dsv4-model.md §8), apart from the
// stored KV: for every layer the token count and the compressor buffers (fp32, as the KV spec keeps
// them); the MTP block keeps its own. Advancing it by any number of tokens per call is what makes
// chunked prefill, one-token decode and multi-token verification one code path.
//
// The stored KV (window rings, compressed entries, indexer keys) lives in a SequenceKv
// (model/sequence_kv.h). A state either owns an Fp32SequenceKv (DeepSeekV4::new_sequence(); the
// plain forward(state, tokens) calls use it) or keeps its KV outside
// (DeepSeekV4::new_sequence_external_kv(); the caller passes the same store to every call, e.g. the
// engine's paged pool). The two are never mixed for one sequence.
#pragma once

#include "backend/cpu/compressor.h"
#include "model/config.h"
#include "model/sequence_kv.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace onecard {

struct LayerState {
    int64_t layer_id = 0;
    int64_t ratio = 0;  // compress ratio of this layer (0 = SWA)
    int64_t head_dim = 0;
    int64_t window_size = 0;                               // sliding_window
    int64_t n_tokens = 0;                                  // tokens this layer has processed
    std::optional<cpu::CompressorState> compressor;        // CSA/HCA main stream
    std::optional<cpu::CompressorState> index_compressor;  // CSA only
    int64_t index_head_dim = 0;

    // Compressed entries (and, CSA, indexer keys) stored so far: one per closed window.
    int64_t n_compressed() const { return ratio ? n_tokens / ratio : 0; }
    // Throws onecard::Error naming the layer if the compressor buffers disagree with n_tokens.
    void check_integrity() const;
};

class SequenceState {
public:
    SequenceState() = default;
    // Empty state for every main layer and MTP block of `cfg`; own_kv: keep the KV in an owned
    // Fp32SequenceKv (else the caller passes a SequenceKv to every forward call).
    explicit SequenceState(const ModelConfig& cfg, bool own_kv = true);
    SequenceState(SequenceState&&) noexcept = default;
    SequenceState& operator=(SequenceState&&) noexcept = default;
    // Copyable on purpose: forking a sequence (tests, speculative drafts) is a deep copy (of the
    // owned KV too; an external store is the caller's to fork).
    SequenceState(const SequenceState&) = default;
    SequenceState& operator=(const SequenceState&) = default;

    int64_t n_tokens() const { return n_tokens_; }          // main-model tokens consumed
    int64_t n_mtp_tokens() const { return n_mtp_tokens_; }  // positions the MTP block has consumed
    // Throws unless every layer agrees with the token counts and, for an owned store, the store holds
    // exactly the entries and keys the counts imply.
    void check_integrity() const;

    bool owns_kv() const { return own_kv_.has_value(); }
    // The owned store; throws if the state keeps its KV outside.
    Fp32SequenceKv& own_kv();
    const Fp32SequenceKv& own_kv() const;

    std::vector<LayerState>& layers() { return layers_; }
    const std::vector<LayerState>& layers() const { return layers_; }
    std::vector<LayerState>& mtp_layers() { return mtp_layers_; }
    const std::vector<LayerState>& mtp_layers() const { return mtp_layers_; }
    void advance(int64_t n) { n_tokens_ += n; }

    // Prefix-cache snapshots. At a token count that is a multiple of every compress ratio (a KV
    // block boundary: kvcache's block_size is a multiple of every ratio) all this state carries
    // besides the stored KV is each compressor's carry (CompressorState::save_carry: the CSA
    // compressors' closed-window rows; nothing for HCA). boundary_carry() is that, layer by layer
    // [boundary_carry_floats()]; restore_boundary() puts a fresh state at n_tokens with it. Only for
    // states whose KV is kept outside (the caller snapshots the window rings it stores) and whose
    // MTP blocks have not run (their own positions are not snapshotted); both throw otherwise or off
    // a boundary.
    int64_t boundary_carry_floats() const;
    std::vector<float> boundary_carry() const;
    void restore_boundary(int64_t n_tokens, const std::vector<float>& carry);
    void advance_mtp(int64_t n) { n_mtp_tokens_ += n; }

    // 0731 DSpark drafter context (docs/dspark.md §2; DeepSeekV4::dspark_push_context writes it): per
    // stage the window ring [n_stages, sliding_window, head_dim] of the rows made from the main
    // model's taps at positions < n_mtp_tokens(), position p in slot p mod sliding_window. Empty until
    // the first push. It only ever holds kept positions, so rollback() never moves n_mtp_tokens back
    // for it.
    bool has_dspark() const { return dspark_ring_floats_ > 0; }
    std::vector<float>& dspark_ring();
    const std::vector<float>& dspark_ring() const { return dspark_ring_; }

    // Speculative steps (model/spec_checkpoint.h drives these): begin_journal() makes every
    // compressor record what later pushes overwrite; rollback(n, n_mtp) returns the main layers to n
    // tokens and the MTP blocks to n_mtp positions (neither below the counts at begin_journal(), nor
    // above the current ones) without recomputing anything; end_journal() drops the journals. The
    // stored KV is not touched here (the checkpoint stages its writes).
    void begin_journal();
    void rollback(int64_t n_tokens, int64_t n_mtp_tokens);
    void end_journal();
    int64_t journal_bytes() const;  // bytes the compressors' journals hold now

private:
    void check_layer_kv(const LayerState& l) const;

    int64_t n_tokens_ = 0;
    int64_t n_mtp_tokens_ = 0;
    std::vector<LayerState> layers_;      // one per main layer
    std::vector<LayerState> mtp_layers_;  // one per MTP block
    std::optional<Fp32SequenceKv> own_kv_;
    std::vector<float> dspark_ring_;     // see dspark_ring()
    int64_t dspark_ring_floats_ = 0;     // its size once used; 0: not a DSpark model
    int64_t journal_n_tokens_ = -1;      // n_tokens_ at begin_journal(); -1: no journal
    int64_t journal_n_mtp_tokens_ = -1;  // n_mtp_tokens_ at begin_journal()
};

}  // namespace onecard
