// Binding of official DeepSeek-V4 checkpoint names to typed weight structs (dsv4-model.md §7.2).
// One walk over the layout serves two visitors: the binder (looks every name up in a checkpoint
// and checks dtype and shape) and the spec collector (what `onecard synth` writes).
#include "model/weights.h"

#include "core/error.h"
#include "loader/checkpoint.h"

#include <algorithm>
#include <set>
#include <string>

namespace onecard {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

// Receives each expected tensor; returns the bound view (or an empty one naming the tensor).
class TensorVisitor {
public:
    virtual ~TensorVisitor() = default;
    // `dtypes`: accepted element types, the first one is canonical (what synth writes).
    virtual TensorView take(const std::string& name, std::initializer_list<DType> dtypes,
                            std::vector<int64_t> shape) = 0;
};

class LayoutWalker {
public:
    LayoutWalker(const ModelConfig& cfg, TensorVisitor& v) : c_(cfg), v_(v) {}

    ModelWeights walk() {
        ModelWeights w;
        const int64_t D = c_.hidden_size;
        w.embed = v_.take("embed.weight", {DType::BF16}, {c_.vocab_size, D});
        for (int64_t il = 0; il < c_.num_hidden_layers; ++il)
            w.layers.push_back(block(fmt::format("layers.{}", il), il));
        if (c_.dspark) {
            w.dspark = dspark();
        } else {
            for (int64_t i = 0; i < c_.n_mtp_blocks(); ++i) w.mtp.push_back(mtp(i));
        }
        w.norm = v_.take("norm.weight", {DType::BF16}, {D});
        w.hc_head = hc_head("");
        w.head = v_.take("head.weight", {DType::BF16}, {c_.vocab_size, D});
        return w;
    }

private:
    TensorView f32(const std::string& name, std::vector<int64_t> shape) { return v_.take(name, {DType::F32}, shape); }
    TensorView bf16(const std::string& name, std::vector<int64_t> shape) { return v_.take(name, {DType::BF16}, shape); }

    // FP8 E4M3 [out, in] + UE8M0 [ceil(out/128), ceil(in/128)].
    QuantLinear fp8_linear(const std::string& prefix, int64_t out, int64_t in) {
        QuantLinear q;
        const int64_t b = c_.weight_block_size;
        q.weight = v_.take(prefix + ".weight", {DType::F8_E4M3}, {out, in});
        q.scale = v_.take(prefix + ".scale", {DType::F8_E8M0}, {ceil_div(out, b), ceil_div(in, b)});
        return q;
    }

    // Routed expert: MXFP4 I8 [out, in/2] + UE8M0 [out, in/32]; or, for expert_dtype fp8 (the Base
    // model), FP8 blocks whose scales may be F32.
    QuantLinear expert_linear(const std::string& prefix, int64_t out, int64_t in) {
        if (c_.expert_dtype == "fp8") {
            QuantLinear q;
            const int64_t b = c_.weight_block_size;
            q.weight = v_.take(prefix + ".weight", {DType::F8_E4M3}, {out, in});
            q.scale = v_.take(prefix + ".scale", {DType::F8_E8M0, DType::F32}, {ceil_div(out, b), ceil_div(in, b)});
            return q;
        }
        QuantLinear q;
        q.weight = v_.take(prefix + ".weight", {DType::I8, DType::U8}, {out, in / 2});
        q.scale = v_.take(prefix + ".scale", {DType::F8_E8M0}, {out, in / 32});
        return q;
    }

    HCWeights hc(const std::string& prefix) {  // prefix: "layers.N.hc_attn" etc.
        const int64_t hc = c_.hc_mult, D = c_.hidden_size;
        HCWeights h;
        h.fn = f32(prefix + "_fn", {(2 + hc) * hc, hc * D});
        h.base = f32(prefix + "_base", {(2 + hc) * hc});
        h.scale = f32(prefix + "_scale", {3});
        return h;
    }

    HCWeights hc_head(const std::string& block_prefix) {  // "" for the model, "mtp.N." for a block
        const int64_t hc = c_.hc_mult, D = c_.hidden_size;
        HCWeights h;
        h.fn = f32(block_prefix + "hc_head_fn", {hc, hc * D});
        h.base = f32(block_prefix + "hc_head_base", {hc});
        h.scale = f32(block_prefix + "hc_head_scale", {1});
        return h;
    }

    CompressorWeights compressor(const std::string& prefix, int64_t ratio, int64_t d) {
        const int64_t cc = ratio == 4 ? 2 : 1;  // overlapping (CSA) compressors carry two halves
        CompressorWeights cw;
        cw.wkv = bf16(prefix + ".wkv.weight", {cc * d, c_.hidden_size});
        cw.wgate = bf16(prefix + ".wgate.weight", {cc * d, c_.hidden_size});
        cw.ape = f32(prefix + ".ape", {ratio, cc * d});
        cw.norm = bf16(prefix + ".norm.weight", {d});
        return cw;
    }

    AttentionWeights attention(const std::string& p, int64_t ratio) {
        const int64_t D = c_.hidden_size, H = c_.num_attention_heads, hd = c_.head_dim;
        AttentionWeights a;
        a.wq_a = fp8_linear(p + ".wq_a", c_.q_lora_rank, D);
        a.q_norm = bf16(p + ".q_norm.weight", {c_.q_lora_rank});
        a.wq_b = fp8_linear(p + ".wq_b", H * hd, c_.q_lora_rank);
        a.wkv = fp8_linear(p + ".wkv", hd, D);
        a.kv_norm = bf16(p + ".kv_norm.weight", {hd});
        a.wo_a = fp8_linear(p + ".wo_a", c_.o_groups * c_.o_lora_rank, H * hd / c_.o_groups);
        a.wo_b = fp8_linear(p + ".wo_b", D, c_.o_groups * c_.o_lora_rank);
        a.attn_sink = f32(p + ".attn_sink", {H});
        if (ratio != 0) a.compressor = compressor(p + ".compressor", ratio, hd);
        if (ratio == 4) {
            IndexerWeights ix;
            ix.wq_b = fp8_linear(p + ".indexer.wq_b", c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank);
            ix.weights_proj = bf16(p + ".indexer.weights_proj.weight", {c_.index_n_heads, D});
            ix.compressor = compressor(p + ".indexer.compressor", ratio, c_.index_head_dim);
            a.indexer = ix;
        }
        return a;
    }

    ExpertWeights expert(const std::string& p, bool routed) {
        const int64_t D = c_.hidden_size, I = c_.moe_intermediate_size;
        ExpertWeights e;
        if (routed) {
            e.w1 = expert_linear(p + ".w1", I, D);
            e.w2 = expert_linear(p + ".w2", D, I);
            e.w3 = expert_linear(p + ".w3", I, D);
        } else {
            e.w1 = fp8_linear(p + ".w1", I, D);
            e.w2 = fp8_linear(p + ".w2", D, I);
            e.w3 = fp8_linear(p + ".w3", I, D);
        }
        return e;
    }

    MoEWeights moe(const std::string& p, bool hash) {
        MoEWeights m;
        const int64_t E = c_.n_routed_experts;
        m.gate_weight = bf16(p + ".gate.weight", {E, c_.hidden_size});
        if (hash) {
            // I64 in the checkpoint; DeepSeek's reference declares int32 — accept both.
            m.tid2eid = v_.take(p + ".gate.tid2eid", {DType::I64, DType::I32}, {c_.vocab_size, c_.num_experts_per_tok});
        } else {
            m.gate_bias = f32(p + ".gate.bias", {E});
        }
        m.shared = expert(p + ".shared_experts", false);
        for (int64_t e = 0; e < E; ++e) m.experts.push_back(expert(fmt::format("{}.experts.{}", p, e), true));
        return m;
    }

    // il: index into compress_ratios (MTP/DSpark blocks follow the main layers); hash routing only
    // for main layers below num_hash_layers.
    BlockWeights block(const std::string& p, int64_t il) {
        const int64_t D = c_.hidden_size;
        const bool main_layer = il < c_.num_hidden_layers;
        BlockWeights b;
        b.attn_norm = bf16(p + ".attn_norm.weight", {D});
        b.hc_attn = hc(p + ".hc_attn");
        b.attn = attention(p + ".attn", c_.compress_ratio(il));
        b.ffn_norm = bf16(p + ".ffn_norm.weight", {D});
        b.hc_ffn = hc(p + ".hc_ffn");
        b.ffn = moe(p + ".ffn", main_layer && c_.is_hash_layer(il));
        return b;
    }

    MTPWeights mtp(int64_t i) {
        const std::string p = fmt::format("mtp.{}", i);
        const int64_t D = c_.hidden_size;
        MTPWeights m;
        m.block = block(p, c_.num_hidden_layers + i);
        m.enorm = bf16(p + ".enorm.weight", {D});
        m.hnorm = bf16(p + ".hnorm.weight", {D});
        m.e_proj = fp8_linear(p + ".e_proj", D, D);
        m.h_proj = fp8_linear(p + ".h_proj", D, D);
        m.norm = bf16(p + ".norm.weight", {D});
        m.hc_head = hc_head(p + ".");
        return m;
    }

    DSparkWeights dspark() {
        const int64_t D = c_.hidden_size, n = c_.n_mtp_blocks();
        const int64_t n_taps = static_cast<int64_t>(c_.dspark->target_layer_ids.size());
        const int64_t rank = c_.dspark->markov_rank;
        DSparkWeights d;
        for (int64_t i = 0; i < n; ++i) {
            const std::string p = fmt::format("mtp.{}", i);
            d.stages.push_back(block(p, c_.num_hidden_layers + i));
            if (i == 0) {
                d.main_proj = fp8_linear(p + ".main_proj", D, n_taps * D);
                d.main_norm = bf16(p + ".main_norm.weight", {D});
            }
            if (i == n - 1) {
                d.norm = bf16(p + ".norm.weight", {D});
                d.hc_head = hc_head(p + ".");
                d.markov_w1 = bf16(p + ".markov_head.markov_w1.weight", {c_.vocab_size, rank});
                d.markov_w2 = bf16(p + ".markov_head.markov_w2.weight", {c_.vocab_size, rank});
                d.confidence_proj = bf16(p + ".confidence_head.proj.weight", {1, D + rank});
            }
        }
        return d;
    }

    const ModelConfig& c_;
    TensorVisitor& v_;
};

std::string dtype_list(std::initializer_list<DType> dtypes) {
    std::string s;
    for (DType t : dtypes) {
        if (!s.empty()) s += " or ";
        s += dtype_name(t);
    }
    return s;
}

class BindVisitor final : public TensorVisitor {
public:
    explicit BindVisitor(const Checkpoint& ckpt) : ckpt_(ckpt) {}

    TensorView take(const std::string& name, std::initializer_list<DType> dtypes, std::vector<int64_t> shape) override {
        const TensorView* t = ckpt_.find(name);
        if (t == nullptr) {
            missing_.push_back(fmt::format("missing    {} ({} {})", name, dtype_list(dtypes), shape_str(shape)));
            TensorView empty;
            empty.name = name;
            empty.dtype = *dtypes.begin();
            empty.shape = std::move(shape);
            return empty;
        }
        taken_.insert(name);
        const bool dtype_ok = std::find(dtypes.begin(), dtypes.end(), t->dtype) != dtypes.end();
        if (!dtype_ok || t->shape != shape)
            mismatched_.push_back(fmt::format("mismatch   {}: checkpoint has {} {}, config expects {} {}", name,
                                              dtype_name(t->dtype), shape_str(t->shape), dtype_list(dtypes),
                                              shape_str(shape)));
        return *t;
    }

    // Throws one Error listing every problem (first kMaxLines lines, then a count).
    void finish() {
        std::vector<std::string> unexpected;
        for (const TensorView& t : ckpt_.tensors())
            if (!taken_.count(t.name))
                unexpected.push_back(
                    fmt::format("unexpected {} ({} {})", t.name, dtype_name(t.dtype), shape_str(t.shape)));
        const size_t n = missing_.size() + unexpected.size() + mismatched_.size();
        if (n == 0) return;
        std::string msg = fmt::format(
            "checkpoint {} does not match its config: {} problem(s): {} missing, {} unexpected, {} mismatched",
            ckpt_.dir().string(), n, missing_.size(), unexpected.size(), mismatched_.size());
        // Share the kMaxLines lines round-robin between the three kinds, so a flood of one kind
        // (say every expert missing) cannot hide the others.
        constexpr size_t kMaxLines = 20;
        const std::vector<std::string>* lists[3] = {&mismatched_, &missing_, &unexpected};
        size_t quota[3] = {0, 0, 0};
        size_t shown = 0;
        for (bool progress = true; progress && shown < kMaxLines;) {
            progress = false;
            for (int k = 0; k < 3 && shown < kMaxLines; ++k) {
                if (quota[k] < lists[k]->size()) {
                    ++quota[k];
                    ++shown;
                    progress = true;
                }
            }
        }
        for (int k = 0; k < 3; ++k)
            for (size_t i = 0; i < quota[k]; ++i) msg += "\n  " + (*lists[k])[i];
        if (n > shown) msg += fmt::format("\n  ... and {} more", n - shown);
        throw Error(msg);
    }

private:
    const Checkpoint& ckpt_;
    std::set<std::string> taken_;
    std::vector<std::string> missing_;
    std::vector<std::string> mismatched_;
};

class SpecVisitor final : public TensorVisitor {
public:
    TensorView take(const std::string& name, std::initializer_list<DType> dtypes, std::vector<int64_t> shape) override {
        specs.push_back(TensorSpec{name, *dtypes.begin(), shape});
        TensorView v;
        v.name = name;
        v.dtype = *dtypes.begin();
        v.shape = std::move(shape);
        return v;
    }
    std::vector<TensorSpec> specs;
};

}  // namespace

std::vector<int32_t> hash_routing_table(const TensorView& t, int64_t n_routed_experts) {
    ONECARD_CHECK(t.dtype == DType::I64 || t.dtype == DType::I32, "tensor {}: expected I64 or I32, got {}", t.name,
                  dtype_name(t.dtype));
    std::vector<int32_t> ids(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) {
        const int64_t e = t.dtype == DType::I64 ? tensor_element<int64_t>(t, i) : tensor_element<int32_t>(t, i);
        ONECARD_CHECK(e >= 0 && e < n_routed_experts, "tensor {}: expert id {} at {} out of range [0, {})", t.name, e,
                      i, n_routed_experts);
        ids[static_cast<size_t>(i)] = static_cast<int32_t>(e);
    }
    return ids;
}

ModelWeights bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt) {
    BindVisitor v(ckpt);
    ModelWeights w = LayoutWalker(cfg, v).walk();
    v.finish();
    return w;
}

std::vector<TensorSpec> checkpoint_layout(const ModelConfig& cfg) {
    SpecVisitor v;
    LayoutWalker(cfg, v).walk();
    return std::move(v.specs);
}

}  // namespace onecard
