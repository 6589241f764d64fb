// The points of the forward pass where the GPU model (GpuModel, src/model_cuda) stores an activation
// in bf16, or one of its fused kernels rounds it to bf16 internally. This file is the one home of
// that fact: each point names the buffer (GpuModel::Buffers, `b.*`) and the kernel that writes it.
//
// The CPU oracle (DeepSeekV4) is the math of dsv4-model.md with these points marked
// (`ctx.storage.at(StoragePoint::QNorm, q, n)`): a set of points chooses where it rounds. The empty
// set is the plain fp32 oracle; the whole set (DeepSeekV4::set_bf16_storage) is what the bf16 GPU
// stores, so the GPU parity tests compare against an oracle that differs from the GPU only by fp32
// summation order and by what no CPU order reproduces (AttentionOutput below). A GPU fusion that
// moves a rounding edits this list and the one mark, not the math around it.
//
// Not storage points (fp32 on the GPU too): router logits (b.router), the compressors' kv and score
// projections (b.ckv, b.ikv), the indexer head weights (b.iw), the hyper-connection mixes (b.pre,
// b.post, b.comb), the logits, and everything from the embedding to the head along the residual
// streams: the streams themselves (b.X, written by embed_streams, hc_post, add_to_streams), the head's
// collapse and its norm (b.head_y; GpuLinears::bf16_f32 feeds the bf16 head weight ~16 bits of it).
// REF stores the streams in bf16; onecard does not, because a rounding there is a rounding of the
// whole model's state: every sub-block's difference from the oracle reaches the next layer through
// it, grown to sqrt(e·2^-8) (a flip of one bf16 step at a share e/2^-8 of elements), and that is
// what bounded issue 23's one-ulp floor at ~5e-3. Within a sub-block the points below stay: their
// growth is scaled down by the post-mix weight before it reaches the streams.
#pragma once

#include <cstdint>
#include <string_view>

namespace onecard {

enum class StoragePoint : uint8_t {
    // ---- residual streams and hyper-connections (deepseek_v4.cpp)
    HcCollapse,     // hc_pre_finish_kernel (hyper_connection.cu) rounds the collapse before its fused RMSNorm
    SubBlockInput,  // b.x: hc_pre's normed output (attn_norm / ffn_norm), what the sub-block reads

    // ---- attention (layer_attention.cpp)
    QLoraLinear,   // b.qkv (or b.qr): the FP8 wq_a|wkv linear writes bf16
    QLoraNorm,     // b.qr: rmsnorm_bf16_pair (q_norm)
    QLinear,       // b.q: the FP8 wq_b linear
    QHeadNorm,     // b.q: rmsnorm_bf16 per head, in place
    QRope,         // b.q: rope_bf16_pair rounds the rotated pairs
    KvLinear,      // b.qkv (or b.kv): the FP8 wq_a|wkv linear
    KvNorm,        // b.kv: rmsnorm_bf16_pair (kv_norm)
    KvRope,        // b.kv: rope_bf16_pair; kv_write_entries reads it (then the cache format's own rounding)
    IndexQLinear,  // b.iq: the FP8 indexer wq_b linear
    // rope_hadamard_fp4_sim (kv_write.cu) rounds the rotated pairs before its Hadamard; the FP4
    // result it stores in b.iq is exact in bf16.
    IndexQRope,
    // b.centries: compressor_pool pools, norms and rotates in fp32 and rounds the entry once.
    CompressedEntry,
    // b.ientries: compressor_pool's bf16 entry; hadamard_fp4_sim's FP4 result is exact in bf16.
    IndexKeyEntry,
    // b.o: sparse_attention writes bf16. Its tensor-core kernel also rounds the probabilities to bf16
    // for p·v, relative to a running max that depends on its key tiles and splits (flash-decoding);
    // no CPU order reproduces those bits, so the oracle's softmax stays fp32 (not a point).
    AttentionOutput,
    AttentionOutputRope,  // b.o: rope_bf16 (inverse), in place
    GroupedOutput,        // b.z: the bf16 grouped wo_a linear
    AttentionResult,      // b.a: the FP8 wo_b linear (what hc_post reads)

    // ---- MoE (layer_moe.cpp). The decode path's MXFP4 GEMV experts (mxfp4_grouped_gemv ->
    // swiglu_clamp_quant -> mxfp4_grouped_gemv -> moe_combine) and the many-token path (MoeExperts::run,
    // moe_experts.cu) round at the same points.
    ExpertGateUp,  // b.s13 (shared) / b.y1, b.y3 (routed): the FP8 and MXFP4 GEMVs write gate and up
    // swiglu_clamp(_quant) (moe.cu) rounds the (weighted) SwiGLU output before w2's FP8 quantisation
    // (b.sh, or in registers where it is fused with the quantisation).
    ExpertHidden,
    // b.y2: one bf16 row per (token, pick); in reference numerics after the routing weight (REF scales
    // the hidden activation), in exact numerics before it (HF scales the output).
    ExpertOutput,
    SharedExpertOutput,  // b.shared: the FP8 shared w2 linear
    // b.a: moe_combine sums a token's K expert rows in fp32 (in pick order; the oracle in ascending
    // expert id, an fp32 summation-order difference only), adds the shared output and rounds once.
    MoeResult,

    // ---- the MTP block's input glue (mtp.cpp; GpuModel::mtp_forward, gpu_model_mtp.cpp)
    MtpHiddenNorm,  // b.q: rmsnorm_bf16 of the main streams by hnorm
    MtpStreamProj,  // b.o: the FP8 h_proj linear writes each stream's projection (widened into b.X)
    MtpEmbedNorm,   // b.x: rmsnorm_bf16 of the next token's embedding by enorm
    MtpEmbedProj,   // b.a: the FP8 e_proj linear (add_to_streams adds it to the fp32 streams)

    kCount
};

inline constexpr int kStoragePointCount = static_cast<int>(StoragePoint::kCount);

std::string_view storage_point_name(StoragePoint p);

// A set of storage points: where an oracle rounds to bf16.
class StoragePoints {
public:
    static StoragePoints none() { return StoragePoints(); }
    static StoragePoints all();
    static StoragePoints only(StoragePoint p) { return none().with(p); }

    StoragePoints& with(StoragePoint p, bool on = true);
    bool has(StoragePoint p) const { return (bits_ >> static_cast<int>(p)) & 1u; }
    bool empty() const { return bits_ == 0; }
    bool operator==(const StoragePoints&) const = default;

    // The oracle's mark at point p: x [n] rounded to bf16 in place when p is in the set.
    void at(StoragePoint p, float* x, int64_t n) const;

private:
    uint32_t bits_ = 0;
    static_assert(kStoragePointCount <= 32, "StoragePoints keeps one bit per point in 32 bits");
};

}  // namespace onecard
