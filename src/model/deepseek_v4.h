// The DeepSeek-V4 forward pass on the CPU backend (dsv4-model.md §2–§6): embedding -> hc streams ->
// decoder blocks (hyper-connections, SWA/CSA/HCA attention, MoE) -> HC head -> norm -> LM head.
// fp32 throughout; the oracle every GPU kernel is later checked against.
#pragma once

#include "model/config.h"
#include "model/dense_weights.h"
#include "model/expert_profile.h"
#include "model/sequence_state.h"
#include "model/storage_points.h"
#include "model/weights.h"

#include <cstdint>
#include <span>
#include <vector>

namespace onecard {

// Reference = DeepSeek's reference code including its QAT simulations (FP8 KV blocks of 64, Hadamard
// + FP4 indexer q/keys, FP8 1×128 activation quantisation in front of FP8/FP4 linears; wo_a, the
// compressors, weights_proj, router and head stay unquantised as in REF). Activations are NOT
// rounded to bf16 between ops (REF's bf16 storage is not simulated; DeepSeekV4::set_bf16_storage
// turns that on at the GPU backend's storage points), except stored KV: it is rounded
// to what the paged cache format holds (rope dims bf16 as in REF's bf16 KV cache, indexer keys
// additionally through the 132-byte FP8 key; see layer_attention.cpp), so the engine's paged store
// and the fp32 store give identical results.
// Exact = the same math in plain fp32 on dequantised weights: what transformers computes. Where REF
// and HF order fp32 operations differently, both modes follow HF (HC mixes: normalise, then project;
// router denominator + 1e-20), except that routed-expert weights multiply the expert OUTPUT in
// exact mode (HF) and the hidden activation before w2 in reference mode (REF, where the FP8
// quantisation of that activation sees the scaled values).
// Measured: exact vs transformers 5.17 (fp32, no TF32) median per-position relative L2 1.1e-6 (tiny
// preset, 600 tokens) and 1.8e-6 (real per-layer dims, 4 layers, 300 tokens), argmax and greedy
// continuations identical.
enum class Numerics { Reference, Exact };

const char* numerics_name(Numerics n);  // "reference", "exact"

// RoPE inverse frequencies [qk_rope_head_dim/2] of a layer kind: rope_theta for SWA layers and MTP,
// compress_rope_theta with YaRN (when the config asks for it) for CSA/HCA layers, their compressors
// and indexers. Shared by every backend.
std::vector<float> rope_inv_freqs_for(const ModelConfig& cfg, bool compressed);

struct ForwardOutput {
    std::vector<float> logits;   // [n_tokens, vocab]
    std::vector<float> streams;  // [n_tokens, hc, D]: final residual streams before hc_head (MTP input)
    std::vector<float> taps;     // [n_tokens, n_taps, D]: 0731 DSpark taps (docs/dspark.md §1); empty otherwise
};

// One pass of the DSpark drafter's block (docs/dspark.md §3).
struct DSparkBlockOutput {
    std::vector<float> base_logits;  // [B, vocab]: slot j's logits for the token at n + j + 1, no Markov bias
    std::vector<float> hidden;       // [B, D]: the last stage's hc_head output before its norm
};

class DeepSeekV4 {
public:
    // Dequantises every weight to fp32 once; `w` may be released afterwards.
    DeepSeekV4(const ModelConfig& cfg, const ModelWeights& w, Numerics numerics);

    // A sequence that keeps its KV in its own fp32 store (the calls without a SequenceKv).
    SequenceState new_sequence() const;
    // A sequence whose KV lives in a store the caller passes to every call (e.g. the engine's paged
    // pool, engine/paged_sequence_kv.h); the calls without a store throw for it.
    SequenceState new_sequence_external_kv() const;

    // Advances `state` by `tokens` (any count >= 1; positions continue from state.n_tokens()).
    // Returns logits [n_tokens, vocab] row-major fp32. Chunked prefill, 1-token decode and
    // multi-token verify are all this one call. Each row depends only on this sequence.
    std::vector<float> forward(SequenceState& state, std::span<const int32_t> tokens) const;
    // Same, reading and writing the sequence's stored KV through `kv` (always the same store for
    // one sequence).
    std::vector<float> forward(SequenceState& state, SequenceKv& kv, std::span<const int32_t> tokens) const;
    // Same, also returning the pre-hc_head streams.
    ForwardOutput forward_with_streams(SequenceState& state, std::span<const int32_t> tokens) const;
    ForwardOutput forward_with_streams(SequenceState& state, SequenceKv& kv, std::span<const int32_t> tokens) const;

    // The mtp.0 block (V4-Flash): streams [n, hc, D] are the main model's pre-hc_head streams at
    // positions p..p+n-1 and next_tokens[i] the token at position p+i+1. Returns logits [n, vocab]
    // predicting the token at p+i+2; advances the state's MTP window (its own positions).
    std::vector<float> forward_mtp(SequenceState& state, std::span<const float> streams,
                                   std::span<const int32_t> next_tokens) const;
    std::vector<float> forward_mtp(SequenceState& state, SequenceKv& kv, std::span<const float> streams,
                                   std::span<const int32_t> next_tokens) const;
    // Same, also returning the block's output streams [n, hc, D] before its hc_head: what drafting
    // k > 1 tokens feeds back as the next position's `streams` (dsv4-model.md §6.2, vLLM's recurrent
    // use of the one MTP block).
    ForwardOutput forward_mtp_with_streams(SequenceState& state, SequenceKv& kv, std::span<const float> streams,
                                           std::span<const int32_t> next_tokens) const;

    // The 0731 DSpark drafter (docs/dspark.md; its heads: model/dspark_heads.h).
    // Context: the main model's taps [m, n_taps, D] (ForwardOutput::taps) at the positions the
    // drafter has not read yet, n_mtp_tokens()..+m-1, which must end at the main model's count: each
    // stage's window ring gets their rows ctx_s = RoPE(kv_norm_s(wkv_s(main_norm(main_proj(taps))))).
    // Only kept positions are pushed, so the ring never needs a rollback.
    void dspark_push_context(SequenceState& state, std::span<const float> taps) const;
    // The block after `next` (the sampled token at position n = state.n_tokens(), not yet fed): slots
    // [next, noise x (B-1)] at positions n..n+B-1 through every stage, attending to the ring and,
    // bidirectionally, to the whole block. Reads the state, changes nothing.
    DSparkBlockOutput dspark_block(const SequenceState& state, int32_t next) const;
    bool has_dspark() const { return dense_.dspark.has_value(); }
    // The drafter's weights (throws without them): the Markov and confidence heads read them.
    const DenseDSpark& dspark_weights() const;

    // Teacher forcing (tests): one sub-block of main layer il alone. X [n, hc, D] (the streams at the
    // sub-block's input, positions continuing from that layer's state) is replaced by the streams at its
    // output; the layer's state and KV advance as in a forward (state's token count does not: the
    // caller drives each layer on a state of its own). A GPU test feeds each sub-block the GPU's own
    // input, so a difference is that sub-block's alone, not the sum of everything before it.
    enum class SubBlock { Attention, Moe };
    void forward_sub_block(SequenceState& state, int64_t il, SubBlock which, std::span<const int32_t> tokens,
                           float* X) const;

    const ModelConfig& config() const { return cfg_; }
    Numerics numerics() const { return numerics_; }
    // Round the input of every linear that the checkpoint quantises to bf16 first, as REF's bf16
    // activation storage does (in reference numerics before the FP8 quantisation; in exact numerics
    // the same linears, unquantised). Not a serving mode: it measures how far bf16 storage alone
    // moves the output, the yardstick for comparing the bf16 GPU backend with this fp32 oracle
    // (tests/ops/gpu_model_test.cpp), and in exact numerics the same perturbation without the FP8
    // steps that amplify it (tests/model/forward_test.cpp).
    void set_bf16_linear_inputs(bool on) { bf16_linear_inputs_ = on; }
    // REF's bf16 activation storage simulated at the GPU's storage points (model/storage_points.h):
    // every activation GpuModel keeps in a bf16 buffer, or rounds to bf16 inside a fused kernel, is
    // rounded here at the same point, and nothing else is. With it on, this oracle computes what the
    // bf16 GPU computes up to fp32 summation order and the rounding a CPU cannot mirror (the sparse
    // attention kernel's bf16 probabilities), so the GPU parity tests compare against what the GPU
    // computes (their bars: tests/ops/gpu_model_test.cpp). Meant for Numerics::Reference (the GPU's
    // numerics); in exact numerics the same points are rounded. A diagnostic mode, not a serving
    // mode. Independent of set_bf16_linear_inputs.
    void set_bf16_storage(bool on) { storage_ = on ? StoragePoints::all() : StoragePoints::none(); }
    // Any subset of the points (a diagnostic: which point's rounding moves the output).
    void set_storage_points(StoragePoints points) { storage_ = points; }
    const StoragePoints& storage_points() const { return storage_; }
    // Counts every routing pick of the main layers into `sink` (shape num_hidden_layers x
    // n_routed_experts; nullptr: stop counting). Results are unchanged. The model does not own the
    // sink; a counting model must not run forwards concurrently (one sink, no locking).
    void set_expert_use_sink(ExpertUseProfile* sink);
    bool has_mtp() const { return !dense_.mtp.empty(); }

private:
    ModelConfig cfg_;
    Numerics numerics_;
    bool bf16_linear_inputs_ = false;
    StoragePoints storage_;                   // none: the plain fp32 oracle
    ExpertUseProfile* expert_use_ = nullptr;  // set_expert_use_sink
    DenseModel dense_;
    std::vector<float> rope_main_;      // [qk_rope_head_dim/2] inverse frequencies, SWA layers and MTP
    std::vector<float> rope_compress_;  // [qk_rope_head_dim/2] compress θ with YaRN, CSA/HCA layers

    // Throws unless `kv` may serve `state` (an owning state accepts only its own store).
    static void check_store(const SequenceState& state, const SequenceKv& kv);
    std::vector<float> logits_from_streams(const float* streams, int64_t n_tok, const DenseHC& hc_head,
                                           const std::vector<float>& norm) const;
};

}  // namespace onecard
