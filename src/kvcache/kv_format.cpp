#include "kvcache/kv_format.h"

#include "core/error.h"
#include "core/fp_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace onecard {

namespace {
constexpr float kE4m3Max = 448.0f;
constexpr float kAmaxFloor = 1e-4f;

float block_amax(const float* x, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    return amax;
}

// Quantise n values with the scale 2^k into E4M3 codes (values clamped to +-448 first, as the
// reference's act_quant does before the cast).
void quantise_block(const float* x, int64_t n, int k, uint8_t* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float v = std::ldexp(x[i], -k);  // exact: division by a power of two
        out[i] = f32_to_e4m3fn(std::clamp(v, -kE4m3Max, kE4m3Max));
    }
}
}  // namespace

KvEntryFormat make_kv_entry_format(int64_t head_dim, int64_t rope_dim, int64_t quant_block) {
    ONECARD_CHECK(head_dim > 0 && rope_dim >= 0 && rope_dim < head_dim,
                  "kv entry format: need 0 <= qk_rope_head_dim ({}) < head_dim ({})", rope_dim, head_dim);
    ONECARD_CHECK(quant_block > 0 && (head_dim - rope_dim) % quant_block == 0,
                  "kv entry format: nope dims ({} = head_dim {} - qk_rope_head_dim {}) must be a multiple of "
                  "the FP8 block {}",
                  head_dim - rope_dim, head_dim, rope_dim, quant_block);
    ONECARD_CHECK((head_dim - rope_dim) / quant_block <= 255, "kv entry format: too many scale blocks");
    return KvEntryFormat{head_dim, rope_dim, quant_block};
}

IndexerKeyFormat make_indexer_key_format(int64_t index_head_dim) {
    ONECARD_CHECK(index_head_dim > 0 && index_head_dim % 4 == 0,
                  "indexer key format: index_head_dim ({}) must be a positive multiple of 4 (fp32 scale alignment)",
                  index_head_dim);
    return IndexerKeyFormat{index_head_dim};
}

int ue8m0_exponent_for_amax(float amax, float fmt_max) {
    // The reference multiplies by the fp32 reciprocal (not a division): the two can differ by an ulp
    // right at a power of two, which would change the scale.
    const float y = std::max(amax, kAmaxFloor) * (1.0f / fmt_max);
    int e = 0;
    const float fr = std::frexp(y, &e);  // y = fr * 2^e, fr in [0.5, 1)
    // log2(y) = e + log2(fr) with log2(fr) in [-1, 0): the ceiling is e unless y is a power of two.
    return fr == 0.5f ? e - 1 : e;
}

void encode_kv_entry(const KvEntryFormat& fmt, const float* x, uint8_t* out) {
    const int64_t n_blocks = fmt.n_scale_blocks();
    uint8_t* scales = out + fmt.scale_offset();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float* xb = x + b * fmt.quant_block;
        const int k = ue8m0_exponent_for_amax(block_amax(xb, fmt.quant_block), kE4m3Max);
        quantise_block(xb, fmt.quant_block, k, out + b * fmt.quant_block);
        scales[b] = static_cast<uint8_t>(std::clamp(k + 127, 0, 254));
    }
    uint8_t* rope = out + fmt.rope_offset();
    for (int64_t i = 0; i < fmt.rope_dim; ++i) {
        const uint16_t h = f32_to_bf16(x[fmt.nope_dim() + i]);
        std::memcpy(rope + 2 * i, &h, 2);  // little-endian bf16, unaligned-safe
    }
    const int64_t used = fmt.scale_offset() + n_blocks;
    std::memset(out + used, 0, static_cast<size_t>(fmt.entry_bytes() - used));
}

void decode_kv_entry(const KvEntryFormat& fmt, const uint8_t* in, float* x) {
    const uint8_t* scales = in + fmt.scale_offset();
    for (int64_t b = 0; b < fmt.n_scale_blocks(); ++b) {
        const float s = ue8m0_to_f32(scales[b]);
        for (int64_t i = 0; i < fmt.quant_block; ++i) {
            const int64_t d = b * fmt.quant_block + i;
            x[d] = e4m3fn_to_f32(in[d]) * s;
        }
    }
    const uint8_t* rope = in + fmt.rope_offset();
    for (int64_t i = 0; i < fmt.rope_dim; ++i) {
        uint16_t h;
        std::memcpy(&h, rope + 2 * i, 2);
        x[fmt.nope_dim() + i] = bf16_to_f32(h);
    }
}

void encode_indexer_key(const IndexerKeyFormat& fmt, const float* x, uint8_t* out) {
    const int k = ue8m0_exponent_for_amax(block_amax(x, fmt.index_head_dim), kE4m3Max);
    quantise_block(x, fmt.index_head_dim, k, out);
    const float scale = std::ldexp(1.0f, k);
    std::memcpy(out + fmt.scale_offset(), &scale, 4);
}

void decode_indexer_key(const IndexerKeyFormat& fmt, const uint8_t* in, float* x) {
    float scale;
    std::memcpy(&scale, in + fmt.scale_offset(), 4);
    for (int64_t i = 0; i < fmt.index_head_dim; ++i) x[i] = e4m3fn_to_f32(in[i]) * scale;
}

}  // namespace onecard
