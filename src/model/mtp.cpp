// The V4-Flash MTP block mtp.0 (dsv4-model.md §6.2): a decoder block fed with the main model's
// pre-hc_head streams and the embedding of the next token; shares embed and head with the model.
#include "backend/cpu/linear.h"
#include "backend/cpu/norm.h"
#include "core/error.h"
#include "model/block_forward.h"
#include "model/deepseek_v4.h"

namespace onecard {

std::vector<float> DeepSeekV4::forward_mtp(SequenceState& state, std::span<const float> streams,
                                           std::span<const int32_t> next_tokens) const {
    return forward_mtp(state, state.own_kv(), streams, next_tokens);
}

std::vector<float> DeepSeekV4::forward_mtp(SequenceState& state, SequenceKv& kv, std::span<const float> streams,
                                           std::span<const int32_t> next_tokens) const {
    return forward_mtp_with_streams(state, kv, streams, next_tokens).logits;
}

ForwardOutput DeepSeekV4::forward_mtp_with_streams(SequenceState& state, SequenceKv& kv, std::span<const float> streams,
                                                   std::span<const int32_t> next_tokens) const {
    check_store(state, kv);
    ONECARD_CHECK(!dense_.mtp.empty(), "forward_mtp: the checkpoint has no mtp.0 block");
    const DenseMTP& m = dense_.mtp[0];
    const int64_t n = static_cast<int64_t>(next_tokens.size());
    const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    ONECARD_CHECK(n >= 1 && static_cast<int64_t>(streams.size()) == n * hc * D,
                  "forward_mtp: {} next tokens need {} stream floats ([n, hc, D]), got {}", n, n * hc * D,
                  streams.size());
    ONECARD_CHECK(!state.mtp_layers().empty(), "forward_mtp: sequence state has no MTP window");
    for (int32_t t : next_tokens)
        ONECARD_CHECK(t >= 0 && t < cfg_.vocab_size, "forward_mtp: token id {} out of range [0, {})", t,
                      cfg_.vocab_size);

    // e = e_proj · enorm(embed[next])        [n, D]
    std::vector<float> e(static_cast<size_t>(n * D)), pe(static_cast<size_t>(n * D));
    for (int64_t i = 0; i < n; ++i)
        std::copy(dense_.embed.begin() + int64_t(next_tokens[i]) * D,
                  dense_.embed.begin() + (int64_t(next_tokens[i]) + 1) * D, e.begin() + i * D);
    cpu::rmsnorm(e.data(), m.enorm.data(), e.data(), n, D, eps);
    storage_.at(StoragePoint::MtpEmbedNorm, e.data(), n * D);
    detail::apply_linear(m.e_proj, e.data(), n, pe.data(), numerics_);
    storage_.at(StoragePoint::MtpEmbedProj, pe.data(), n * D);
    // X = h_proj · hnorm(H) per stream + e  [n, hc, D]
    std::vector<float> h(streams.begin(), streams.end()), X(static_cast<size_t>(n * hc * D));
    cpu::rmsnorm(h.data(), m.hnorm.data(), h.data(), n * hc, D, eps);
    storage_.at(StoragePoint::MtpHiddenNorm, h.data(), n * hc * D);
    detail::apply_linear(m.h_proj, h.data(), n * hc, X.data(), numerics_);
    storage_.at(StoragePoint::MtpStreamProj, X.data(), n * hc * D);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hc; ++j)
            for (int64_t d = 0; d < D; ++d) X[(i * hc + j) * D + d] += pe[i * D + d];

    const bool compressed = cfg_.compress_ratio(m.block.layer_id) != 0;
    // The block marks a main block's storage points; the glue above marks the MTP points.
    detail::BlockContext ctx{cfg_, numerics_, compressed ? rope_compress_ : rope_main_, rope_compress_,
                             bf16_linear_inputs_};
    ctx.storage = storage_;
    detail::block_forward(ctx, m.block, state.mtp_layers()[0], kv, next_tokens.data(), X.data(), n);
    state.advance_mtp(n);
    ForwardOutput out;
    out.logits = logits_from_streams(X.data(), n, m.hc_head, m.norm);
    out.streams = std::move(X);
    return out;
}

}  // namespace onecard
