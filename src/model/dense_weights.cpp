#include "model/dense_weights.h"

#include "backend/cpu/linear.h"
#include "core/error.h"

namespace onecard {
namespace {

DenseLinear dense(const QuantLinear& q) {
    DenseLinear l;
    l.w = cpu::dequant_linear(q.weight, q.scale);
    l.n_out = q.out_features();
    l.n_in = q.in_features();
    l.quantized = q.weight.dtype == DType::F8_E4M3 || q.is_mxfp4();
    ONECARD_CHECK(static_cast<int64_t>(l.w.size()) == l.n_out * l.n_in,
                  "tensor {}: dequantised to {} values, expected {}", q.weight.name, l.w.size(), l.n_out * l.n_in);
    return l;
}

DenseLinear dense(const TensorView& t) {
    ONECARD_CHECK(t.shape.size() == 2, "tensor {}: expected a 2-D weight, got {}", t.name, shape_str(t.shape));
    DenseLinear l;
    l.w = cpu::to_f32(t);
    l.n_out = t.shape[0];
    l.n_in = t.shape[1];
    return l;
}

DenseHC dense(const HCWeights& h) {
    return {cpu::to_f32(h.fn), cpu::to_f32(h.base), cpu::to_f32(h.scale)};
}

DenseCompressor dense(const CompressorWeights& c, int64_t ratio, int64_t head_dim) {
    DenseCompressor d;
    d.ratio = ratio;
    d.head_dim = head_dim;
    d.wkv = dense(c.wkv);
    d.wgate = dense(c.wgate);
    d.ape = cpu::to_f32(c.ape);
    d.norm = cpu::to_f32(c.norm);
    const int64_t width = (ratio == 4 ? 2 : 1) * head_dim;
    ONECARD_CHECK(d.wkv.n_out == width && static_cast<int64_t>(d.ape.size()) == ratio * width,
                  "tensor {}: compressor of ratio {} needs {} channels, has {}", c.wkv.name, ratio, width, d.wkv.n_out);
    return d;
}

DenseExpert dense(const ExpertWeights& e) {
    return {dense(e.w1), dense(e.w2), dense(e.w3)};
}

DenseBlock dense_block(const ModelConfig& cfg, const BlockWeights& b, int64_t layer_id) {
    DenseBlock d;
    d.layer_id = layer_id;
    d.attn_norm = cpu::to_f32(b.attn_norm);
    d.ffn_norm = cpu::to_f32(b.ffn_norm);
    d.hc_attn = dense(b.hc_attn);
    d.hc_ffn = dense(b.hc_ffn);
    const AttentionWeights& a = b.attn;
    d.attn.wq_a = dense(a.wq_a);
    d.attn.q_norm = cpu::to_f32(a.q_norm);
    d.attn.wq_b = dense(a.wq_b);
    d.attn.wkv = dense(a.wkv);
    d.attn.kv_norm = cpu::to_f32(a.kv_norm);
    d.attn.wo_a = dense(a.wo_a);
    // REF converts wo_a to bf16 at load time and runs a bf16 einsum: no activation quantisation.
    d.attn.wo_a.quantized = false;
    d.attn.wo_b = dense(a.wo_b);
    d.attn.sink = cpu::to_f32(a.attn_sink);
    const int64_t ratio = cfg.compress_ratio(layer_id);
    if (ratio != 0) {
        ONECARD_CHECK(a.compressor.has_value(), "layer {}: compress ratio {} but no compressor weights", layer_id,
                      ratio);
        d.attn.compressor = dense(*a.compressor, ratio, cfg.head_dim);
    }
    if (ratio == 4) {
        ONECARD_CHECK(a.indexer.has_value(), "layer {}: CSA layer without indexer weights", layer_id);
        DenseIndexer ix;
        ix.wq_b = dense(a.indexer->wq_b);
        ix.weights_proj = dense(a.indexer->weights_proj);
        ix.compressor = dense(a.indexer->compressor, ratio, cfg.index_head_dim);
        d.attn.indexer = std::move(ix);
    }
    const MoEWeights& m = b.ffn;
    d.ffn.gate = dense(m.gate_weight);
    if (m.gate_bias) d.ffn.bias = cpu::to_f32(*m.gate_bias);
    if (m.tid2eid) d.ffn.tid2eid = hash_routing_table(*m.tid2eid, cfg.n_routed_experts);
    ONECARD_CHECK(!d.ffn.tid2eid.empty() || !d.ffn.bias.empty() || !cfg.is_hash_layer(layer_id),
                  "layer {}: hash layer without tid2eid", layer_id);
    for (const ExpertWeights& e : m.experts) d.ffn.experts.push_back(dense(e));
    d.ffn.shared = dense(m.shared);
    return d;
}

}  // namespace

DenseModel densify(const ModelConfig& cfg, const ModelWeights& w) {
    DenseModel d;
    d.embed = cpu::to_f32(w.embed);
    d.head = cpu::to_f32(w.head);
    d.norm = cpu::to_f32(w.norm);
    d.hc_head = dense(w.hc_head);
    for (size_t il = 0; il < w.layers.size(); ++il) d.layers.push_back(dense_block(cfg, w.layers[il], int64_t(il)));
    for (size_t i = 0; i < w.mtp.size(); ++i) {
        const MTPWeights& m = w.mtp[i];
        DenseMTP t;
        t.block = dense_block(cfg, m.block, cfg.num_hidden_layers + int64_t(i));
        t.enorm = cpu::to_f32(m.enorm);
        t.hnorm = cpu::to_f32(m.hnorm);
        t.norm = cpu::to_f32(m.norm);
        t.e_proj = dense(m.e_proj);
        t.h_proj = dense(m.h_proj);
        t.hc_head = dense(m.hc_head);
        d.mtp.push_back(std::move(t));
    }
    if (w.dspark) {
        const DSparkWeights& s = *w.dspark;
        DenseDSpark t;
        for (size_t i = 0; i < s.stages.size(); ++i)
            t.stages.push_back(dense_block(cfg, s.stages[i], cfg.num_hidden_layers + int64_t(i)));
        t.main_proj = dense(s.main_proj);
        t.main_norm = cpu::to_f32(s.main_norm);
        t.norm = cpu::to_f32(s.norm);
        t.hc_head = dense(s.hc_head);
        t.markov_w1 = cpu::to_f32(s.markov_w1);
        t.markov_w2 = cpu::to_f32(s.markov_w2);
        t.confidence = cpu::to_f32(s.confidence_proj);
        t.rank = s.markov_w1.shape.at(1);
        d.dspark = std::move(t);
    }
    return d;
}

}  // namespace onecard
