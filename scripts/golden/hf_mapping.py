"""Map an official DeepSeek-V4 checkpoint (config.json + tensor names) onto transformers' classes.

transformers' `DeepseekV4Config` folds some official keys in itself (compress_ratios,
num_hash_layers, qk_rope_head_dim) but reads YaRN from `rope_parameters`; we translate every
field explicitly so nothing depends on which legacy spellings a given release accepts, and
make_golden.py separately records what the class does with the raw official dict.

Names (official -> transformers), from modeling_deepseek_v4.py:
  embed -> model.embed_tokens, head -> lm_head, norm -> model.norm, hc_head_* -> model.hc_head.hc_*
  layers.N.attn_norm / ffn_norm -> model.layers.N.input_layernorm / post_attention_layernorm
  layers.N.hc_{attn,ffn}_{fn,base,scale} -> model.layers.N.{attn,ffn}_hc.{fn,base,scale}
  attn.wq_a/q_norm/wq_b/wkv/kv_norm/wo_a/wo_b/attn_sink
      -> self_attn.q_a_proj/q_a_norm/q_b_proj/kv_proj/kv_norm/o_a_proj/o_b_proj/sinks
  attn.compressor.{wkv,wgate,ape,norm} -> self_attn.compressor.{kv_proj,gate_proj,position_bias,kv_norm}
  attn.indexer.compressor.* -> self_attn.compressor.indexer.* (same renames)
  attn.indexer.wq_b / weights_proj -> self_attn.compressor.indexer.q_b_proj / scorer.weights_proj
  ffn.gate.{weight,bias,tid2eid} -> mlp.gate.{weight,e_score_correction_bias,tid2eid}
  ffn.shared_experts.w1/w3/w2 -> mlp.shared_experts.gate_proj/up_proj/down_proj
  ffn.experts.E.w1,w3 -> mlp.experts.gate_up_proj[E] = [w1; w3] (gate rows first: HF chunks the
      product in two along the output and clamps/SiLUs the first half), ffn.experts.E.w2 -> down_proj[E]
mtp.* has no transformers module (HF drops it on load too: _keys_to_ignore_on_load_unexpected).
"""

import re

import numpy as np

LAYER_TYPE_OF_RATIO = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}

_TOP_LEVEL = {
    "embed.weight": "model.embed_tokens.weight",
    "head.weight": "lm_head.weight",
    "norm.weight": "model.norm.weight",
    "hc_head_fn": "model.hc_head.hc_fn",
    "hc_head_base": "model.hc_head.hc_base",
    "hc_head_scale": "model.hc_head.hc_scale",
}

_COMPRESSOR = {"wkv.weight": "kv_proj.weight", "wgate.weight": "gate_proj.weight", "ape": "position_bias",
               "norm.weight": "kv_norm.weight"}

_PER_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn.wq_a.weight": "self_attn.q_a_proj.weight",
    "attn.q_norm.weight": "self_attn.q_a_norm.weight",
    "attn.wq_b.weight": "self_attn.q_b_proj.weight",
    "attn.wkv.weight": "self_attn.kv_proj.weight",
    "attn.kv_norm.weight": "self_attn.kv_norm.weight",
    "attn.wo_a.weight": "self_attn.o_a_proj.weight",
    "attn.wo_b.weight": "self_attn.o_b_proj.weight",
    "attn.attn_sink": "self_attn.sinks",
    "attn.indexer.wq_b.weight": "self_attn.compressor.indexer.q_b_proj.weight",
    "attn.indexer.weights_proj.weight": "self_attn.compressor.indexer.scorer.weights_proj.weight",
    "ffn.gate.weight": "mlp.gate.weight",
    "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.gate.tid2eid": "mlp.gate.tid2eid",
    "ffn.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
    "ffn.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
}
for _part in ("attn", "ffn"):
    for _what in ("fn", "base", "scale"):
        _PER_LAYER[f"hc_{_part}_{_what}"] = f"{_part}_hc.{_what}"
for _src, _dst in _COMPRESSOR.items():
    _PER_LAYER[f"attn.compressor.{_src}"] = f"self_attn.compressor.{_dst}"
    _PER_LAYER[f"attn.indexer.compressor.{_src}"] = f"self_attn.compressor.indexer.{_dst}"

_LAYER_RE = re.compile(r"^layers\.(\d+)\.(.+)$")
_EXPERT_RE = re.compile(r"^ffn\.experts\.(\d+)\.(w[123])\.weight$")


def hf_config_kwargs(official: dict) -> dict:
    """DeepseekV4Config keyword arguments equivalent to an official config.json."""
    n_layers = official["num_hidden_layers"]
    ratios = official["compress_ratios"][:n_layers]  # the trailing entries belong to MTP blocks
    bad = [r for r in ratios if r not in LAYER_TYPE_OF_RATIO]
    if bad:
        raise ValueError(f"config.json compress_ratios has values {bad}; transformers knows only 0/4/128")
    if official.get("n_shared_experts", 1) != 1:
        raise ValueError("transformers' DeepseekV4 has exactly one shared expert")
    head_dim, rope_dim = official["head_dim"], official["qk_rope_head_dim"]
    partial = rope_dim / head_dim
    scaling = official["rope_scaling"]
    if scaling.get("type", scaling.get("rope_type")) != "yarn":
        raise ValueError(f"config.json rope_scaling is {scaling}, expected yarn")
    n_hash = official.get("num_hash_layers", 0)
    copy_keys = [
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "q_lora_rank", "o_groups", "o_lora_rank", "sliding_window", "max_position_embeddings",
        "index_n_heads", "index_head_dim", "index_topk", "n_routed_experts", "n_shared_experts",
        "num_experts_per_tok", "moe_intermediate_size", "scoring_func", "norm_topk_prob",
        "routed_scaling_factor", "swiglu_limit", "hc_mult", "hc_sinkhorn_iters", "hc_eps", "rms_norm_eps",
        "rope_theta", "compress_rope_theta", "bos_token_id", "eos_token_id", "tie_word_embeddings",
    ]
    kwargs = {k: official[k] for k in copy_keys if k in official}
    kwargs.update(
        layer_types=[LAYER_TYPE_OF_RATIO[r] for r in ratios],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        mlp_layer_types=["hash_moe"] * min(n_hash, n_layers) + ["moe"] * max(0, n_layers - n_hash),
        partial_rotary_factor=partial,
        rope_parameters={
            "main": {"rope_type": "default", "rope_theta": official["rope_theta"], "partial_rotary_factor": partial},
            "compress": {
                "rope_type": "yarn",
                "rope_theta": official["compress_rope_theta"],
                "partial_rotary_factor": partial,
                "factor": scaling["factor"],
                "original_max_position_embeddings": scaling["original_max_position_embeddings"],
                "beta_fast": scaling["beta_fast"],
                "beta_slow": scaling["beta_slow"],
                # DeepSeek's YaRN interpolates frequencies only; cos/sin are not rescaled.
                "attention_factor": 1.0,
            },
        },
        num_nextn_predict_layers=official.get("num_nextn_predict_layers", 0),
        hidden_act=official.get("hidden_act", "silu"),
        attention_bias=False,
        use_cache=True,
    )
    return kwargs


def deepseek_yarn_inv_freq(official: dict) -> np.ndarray:
    """DeepSeek's reference precompute_freqs_cis frequencies for CSA/HCA layers (float64), written
    from the formula in dsv4-model.md §4.4, to cross-check what transformers builds."""
    dim = official["qk_rope_head_dim"]
    base = official["compress_rope_theta"]
    sc = official["rope_scaling"]
    factor, orig = sc["factor"], sc["original_max_position_embeddings"]
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))

    def corr_dim(n_rot):
        return dim * np.log(orig / (n_rot * 2 * np.pi)) / (2 * np.log(base))

    low = max(int(np.floor(corr_dim(sc["beta_fast"]))), 0)
    high = min(int(np.ceil(corr_dim(sc["beta_slow"]))), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    smooth = 1.0 - ramp
    return freqs / factor * (1.0 - smooth) + freqs * smooth


def map_state_dict(tensors: dict, n_routed_experts: int) -> tuple:
    """Official-name float32/int64 numpy tensors -> (transformers-name numpy dict, ignored names).

    Raises on any tensor that has no destination, so a rename never silently drops a weight."""
    out, ignored, unknown = {}, [], []
    experts = {}  # layer -> expert -> {"w1": ..., "w2": ..., "w3": ...}
    for name, value in tensors.items():
        if name.startswith("mtp."):
            ignored.append(name)
            continue
        if name in _TOP_LEVEL:
            out[_TOP_LEVEL[name]] = value
            continue
        m = _LAYER_RE.match(name)
        if not m:
            unknown.append(name)
            continue
        layer, rest = int(m.group(1)), m.group(2)
        e = _EXPERT_RE.match(rest)
        if e:
            experts.setdefault(layer, {}).setdefault(int(e.group(1)), {})[e.group(2)] = value
        elif rest in _PER_LAYER:
            out[f"model.layers.{layer}.{_PER_LAYER[rest]}"] = value
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(f"checkpoint tensors with no transformers destination: {sorted(unknown)}")
    for layer, per_expert in sorted(experts.items()):
        if sorted(per_expert) != list(range(n_routed_experts)):
            raise ValueError(f"layers.{layer}: routed experts {sorted(per_expert)} != 0..{n_routed_experts - 1}")
        gate_up, down = [], []
        for idx in range(n_routed_experts):
            w = per_expert[idx]
            missing = {"w1", "w2", "w3"} - set(w)
            if missing:
                raise ValueError(f"layers.{layer}.ffn.experts.{idx}: missing {sorted(missing)}")
            gate_up.append(np.concatenate([w["w1"], w["w3"]], axis=0))  # [2*inter, D]
            down.append(w["w2"])                                          # [D, inter]
        out[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = np.stack(gate_up)  # [E, 2*inter, D]
        out[f"model.layers.{layer}.mlp.experts.down_proj"] = np.stack(down)        # [E, D, inter]
    return out, sorted(ignored)
