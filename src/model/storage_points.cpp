#include "model/storage_points.h"

#include "core/error.h"
#include "core/fp_formats.h"

namespace onecard {

std::string_view storage_point_name(StoragePoint p) {
    switch (p) {
        case StoragePoint::HcCollapse:
            return "hc_collapse";
        case StoragePoint::SubBlockInput:
            return "sub_block_input";
        case StoragePoint::QLoraLinear:
            return "q_lora_linear";
        case StoragePoint::QLoraNorm:
            return "q_lora_norm";
        case StoragePoint::QLinear:
            return "q_linear";
        case StoragePoint::QHeadNorm:
            return "q_head_norm";
        case StoragePoint::QRope:
            return "q_rope";
        case StoragePoint::KvLinear:
            return "kv_linear";
        case StoragePoint::KvNorm:
            return "kv_norm";
        case StoragePoint::KvRope:
            return "kv_rope";
        case StoragePoint::IndexQLinear:
            return "index_q_linear";
        case StoragePoint::IndexQRope:
            return "index_q_rope";
        case StoragePoint::CompressedEntry:
            return "compressed_entry";
        case StoragePoint::IndexKeyEntry:
            return "index_key_entry";
        case StoragePoint::AttentionOutput:
            return "attention_output";
        case StoragePoint::AttentionOutputRope:
            return "attention_output_rope";
        case StoragePoint::GroupedOutput:
            return "grouped_output";
        case StoragePoint::AttentionResult:
            return "attention_result";
        case StoragePoint::ExpertGateUp:
            return "expert_gate_up";
        case StoragePoint::ExpertHidden:
            return "expert_hidden";
        case StoragePoint::ExpertOutput:
            return "expert_output";
        case StoragePoint::SharedExpertOutput:
            return "shared_expert_output";
        case StoragePoint::MoeResult:
            return "moe_result";
        case StoragePoint::MtpHiddenNorm:
            return "mtp_hidden_norm";
        case StoragePoint::MtpStreamProj:
            return "mtp_stream_proj";
        case StoragePoint::MtpEmbedNorm:
            return "mtp_embed_norm";
        case StoragePoint::MtpEmbedProj:
            return "mtp_embed_proj";
        case StoragePoint::kCount:
            break;
    }
    throw Error("storage point " + std::to_string(static_cast<int>(p)) + " is not declared");
}

StoragePoints StoragePoints::all() {
    StoragePoints s;
    for (int i = 0; i < kStoragePointCount; ++i) s.with(static_cast<StoragePoint>(i));
    return s;
}

StoragePoints& StoragePoints::with(StoragePoint p, bool on) {
    ONECARD_CHECK(static_cast<int>(p) < kStoragePointCount, "storage point {} is not declared", static_cast<int>(p));
    const uint32_t bit = 1u << static_cast<int>(p);
    bits_ = on ? (bits_ | bit) : (bits_ & ~bit);
    return *this;
}

void StoragePoints::at(StoragePoint p, float* x, int64_t n) const {
    if (!has(p)) return;
    for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

}  // namespace onecard
