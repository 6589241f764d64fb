"""A PyTorch model of the DeepSeek-V4 architecture that mirrors onecard's CPU forward pass
(src/model/*.cpp, src/backend/cpu/*.cpp; the math in dsv4-model.md §2-§6), vectorised over the
sequence so it can be trained: sliding-window, CSA (ratio 4, overlapping compressor + lightning
indexer) and HCA (ratio 128) attention with sinks, hash-routed and routed MoE with a shared expert,
hyper-connections with Sinkhorn, and the MTP block.

Two numerics, as onecard's `--numerics`:
  * "exact": plain fp32 on the given weights (what `onecard logits --numerics exact` computes);
  * "reference": DeepSeek's QAT simulations on top (FP8 1x128 activations in front of the FP8/FP4
    linears, FP8 KV blocks of 64 with bf16 rope dims, Hadamard + FP4 indexer q/keys, the 132-byte
    FP8 indexer key) and, with `quantize_weights`, the checkpoint's FP8 128x128 / MXFP4 weight
    rounding. In training every rounding is straight-through (`ste`), i.e. fake quantisation.
Parameter names are the official checkpoint names (dots as in `layers.3.attn.wq_a.weight`).
Runs on PyTorch 1.13 and 2.x; no torch features newer than 1.13 are used (the fused attention of
train.py --fast calls torch >= 2.1's scaled_dot_product_attention and falls back to the same math).
"""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

import quant


@dataclass
class Config:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    head_dim: int
    qk_rope_head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    sliding_window: int
    compress_ratios: list
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    n_routed_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    num_hash_layers: int
    num_nextn_predict_layers: int = 1
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    rope_scaling: dict = field(default_factory=lambda: {
        "type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1})
    routed_scaling_factor: float = 1.5
    swiglu_limit: float = 10.0
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    rms_norm_eps: float = 1e-6

    @staticmethod
    def from_official(j: dict) -> "Config":
        names = [f for f in Config.__dataclass_fields__]
        return Config(**{k: j[k] for k in names if k in j})


def rope_inv_freqs(cfg: Config, compressed: bool) -> torch.Tensor:
    """onecard rope_inv_freqs_for: theta^(-2i/n); CSA/HCA layers: compress theta with YaRN ramp."""
    n = cfg.qk_rope_head_dim
    theta = cfg.compress_rope_theta if compressed else cfg.rope_theta
    f = torch.tensor([1.0 / theta ** (2 * i / n) for i in range(n // 2)], dtype=torch.float64).float()
    rs = cfg.rope_scaling
    if not compressed or rs.get("type") != "yarn" or rs["factor"] <= 1.0:
        return f
    orig = rs["original_max_position_embeddings"]

    def corr(rot):
        return n * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
    low = max(math.floor(corr(rs["beta_fast"])), 0)
    high = min(math.ceil(corr(rs["beta_slow"])), n - 1)
    hi = high + 0.001 if low == high else float(high)
    ramp = torch.tensor([(i - low) / (hi - low) for i in range(n // 2)], dtype=torch.float64).float().clamp(0, 1)
    interp = f / float(rs["factor"])
    return interp * ramp + f * (1.0 - ramp)


def apply_rope(x: torch.Tensor, inv_freq: torch.Tensor, pos: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Interleaved (GPT-J) rotation of the trailing 2*len(inv_freq) dims of x [..., T, (H,) d] at
    positions pos [T]; the angle is formed in fp32 as in onecard, cos/sin in float64."""
    n_rope = 2 * inv_freq.shape[0]
    angle = (inv_freq[None, :].to(x.device) * pos[:, None].float()).double()
    c, s = torch.cos(angle).float(), torch.sin(angle).float()
    if inverse:
        s = -s
    while c.dim() < x.dim() - 1:  # broadcast over head dims between T and the pair dim
        c, s = c.unsqueeze(-2), s.unsqueeze(-2)
    nope, rope = x[..., :-n_rope], x[..., -n_rope:]
    a, b = rope[..., 0::2], rope[..., 1::2]
    ra, rb = a * c - b * s, b * c + a * s
    return torch.cat((nope, torch.stack((ra, rb), dim=-1).flatten(-2)), dim=-1)


def rmsnorm(x: torch.Tensor, w, eps: float) -> torch.Tensor:
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


class Numerics:
    """What a forward pass simulates: mode "exact" or "reference"; `ste` makes roundings straight-
    through (training); `quantize_weights` rounds FP8/FP4 linears' weights as the export will."""

    def __init__(self, mode: str = "exact", ste: bool = False, quantize_weights: bool = False, sdpa: bool = False):
        assert mode in ("exact", "reference")
        self.reference = mode == "reference"
        self.ste = ste
        self.quantize_weights = quantize_weights
        # Training speed only (train.py --fast): attention through torch's fused scaled_dot_product_attention
        # (attend_fused) instead of dense masked logits. The same softmax, another summation order.
        self.sdpa = sdpa


class QLinear(nn.Module):
    """A linear stored quantised in the checkpoint ("fp8" 128x128 blocks or "fp4" MXFP4), or plain
    ("bf16"). Reference numerics quantise the activation (FP8, 1x128) in front of quantised ones."""

    def __init__(self, n_in: int, n_out: int, fmt: str, act_quant: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        self.fmt = fmt
        self.act_quant = act_quant and fmt != "bf16"

    def effective_weight(self, num: Numerics) -> torch.Tensor:
        if not num.quantize_weights or self.fmt == "bf16":
            return self.weight
        if self.fmt == "fp8":
            return quant.fp8_weight(self.weight, 128, num.ste)
        return quant.mxfp4_weight(self.weight, num.ste)

    def forward(self, x: torch.Tensor, num: Numerics) -> torch.Tensor:
        if num.reference and self.act_quant:
            x = quant.fp8_act(x, 128 if x.shape[-1] % 128 == 0 else x.shape[-1], num.ste)
        return F.linear(x, self.effective_weight(num))


class HyperConnection(nn.Module):
    """mHC parameters of one sub-block (fn [(2+hc)·hc, hc·D], base, scale [3]) or of a head ([hc, ...], [1])."""

    def __init__(self, cfg: Config, head: bool):
        super().__init__()
        hc, D = cfg.hc_mult, cfg.hidden_size
        n_mix = hc if head else (2 + hc) * hc
        self.fn = nn.Parameter(torch.empty(n_mix, hc * D))
        self.base = nn.Parameter(torch.empty(n_mix))
        self.scale = nn.Parameter(torch.empty(1 if head else 3))
        self.cfg = cfg

    def mixes(self, X: torch.Tensor) -> torch.Tensor:
        flat = X.flatten(-2)
        return F.linear(rmsnorm(flat, None, self.cfg.rms_norm_eps), self.fn)

    def pre_post_comb(self, X: torch.Tensor):
        cfg, hc = self.cfg, self.cfg.hc_mult
        m = self.mixes(X)
        pre = torch.sigmoid(m[..., :hc] * self.scale[0] + self.base[:hc]) + cfg.hc_eps
        post = 2.0 * torch.sigmoid(m[..., hc:2 * hc] * self.scale[1] + self.base[hc:2 * hc])
        comb = (m[..., 2 * hc:] * self.scale[2] + self.base[2 * hc:]).unflatten(-1, (hc, hc))
        comb = torch.softmax(comb, dim=-1) + cfg.hc_eps
        comb = comb / (comb.sum(-2, keepdim=True) + cfg.hc_eps)
        for _ in range(cfg.hc_sinkhorn_iters - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + cfg.hc_eps)
            comb = comb / (comb.sum(-2, keepdim=True) + cfg.hc_eps)
        return pre, post, comb

    def head(self, X: torch.Tensor) -> torch.Tensor:
        pre = torch.sigmoid(self.mixes(X) * self.scale[0] + self.base) + self.cfg.hc_eps
        return (pre.unsqueeze(-1) * X).sum(-2)


class Compressor(nn.Module):
    """Gated pooling of `ratio` tokens into one entry of width d (ratio 4: overlapping, 2d rows)."""

    def __init__(self, cfg: Config, ratio: int, d: int):
        super().__init__()
        c = 2 if ratio == 4 else 1
        D = cfg.hidden_size
        self.ratio, self.d, self.overlap = ratio, d, ratio == 4
        self.wkv = QLinear(D, c * d, "bf16")
        self.wgate = QLinear(D, c * d, "bf16")
        self.ape = nn.Parameter(torch.empty(ratio, c * d))
        self.norm = nn.Parameter(torch.empty(d))

    def forward(self, x: torch.Tensor, num: Numerics, eps: float, inv_freq: torch.Tensor) -> torch.Tensor:
        """x [B, T, D] -> entries [B, E, d] for the E = T // ratio complete windows (normed, rotated)."""
        B, T, _ = x.shape
        m = self.ratio
        E = T // m
        if E == 0:
            return x.new_zeros(B, 0, self.d)
        kv = self.wkv(x[:, :E * m], num)
        score = self.wgate(x[:, :E * m], num) + self.ape.repeat(E, 1)
        kv, score = kv.unflatten(1, (E, m)), score.unflatten(1, (E, m))  # [B, E, m, c·d]
        if self.overlap:
            d = self.d
            prev_kv = F.pad(kv[:, :-1, :, :d], (0, 0, 0, 0, 1, 0))
            prev_s = F.pad(score[:, :-1, :, :d], (0, 0, 0, 0, 1, 0), value=float("-inf"))
            kv = torch.cat((prev_kv, kv[:, :, :, d:]), dim=2)  # [B, E, 2m, d]
            score = torch.cat((prev_s, score[:, :, :, d:]), dim=2)
        entry = (torch.softmax(score, dim=2) * kv).sum(2)
        entry = rmsnorm(entry, self.norm, eps)
        pos = torch.arange(E, device=x.device) * m
        return apply_rope(entry, inv_freq, pos)


def _fused_attention():
    """F.scaled_dot_product_attention where it takes `scale` (torch >= 2.1), else None."""
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return getattr(F, "scaled_dot_product_attention", None) if (major, minor) >= (2, 1) else None


_FUSED = _fused_attention()


def _sdpa_reference(q, k, v, attn_mask, scale):
    """What F.scaled_dot_product_attention computes (boolean mask: True = attend), for PyTorch < 2.1,
    which lacks it or its `scale` argument (the CPU test machine's Debian torch is 1.13)."""
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale
    return torch.matmul(torch.softmax(logits.masked_fill(~attn_mask, float("-inf")), dim=-1), v)


def attend_fused(q: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor, sink: torch.Tensor,
                 scale: float) -> torch.Tensor:
    """The attention of Attention.forward's dense path through one fused call: q [B, T, H, hd], keys
    [B, S, hd] (keys are also the values), mask [B, T, S] bool, sink [H] -> o [B, T, H, hd].
    The sink (a per-head logit with a zero value) becomes one more key: every query gets an extra
    dimension holding 1, every real key 0 there, and the sink key sink_h / scale there and 0 elsewhere,
    so its logit is exactly sink_h. 8 extra dimensions keep the width a multiple of 8 for the kernels."""
    B, T, H, hd = q.shape
    S = keys.shape[1]
    pad = 8
    qx = torch.cat((q, torch.ones_like(q[..., :1]), torch.zeros_like(q[..., :pad - 1])), dim=-1).transpose(1, 2)
    kx = torch.cat((keys, torch.zeros_like(keys[..., :pad])), dim=-1).unsqueeze(1).expand(B, H, S, hd + pad)
    sink_key = torch.zeros(B, H, 1, hd + pad, dtype=kx.dtype, device=kx.device)
    sink_key[..., hd] = (sink / scale).to(kx.dtype).view(1, H, 1)
    k_all = torch.cat((kx, sink_key), dim=2)  # [B, H, S + 1, hd + 8]; the values too (the sink's row is 0 below)
    v_all = torch.cat((kx, torch.zeros_like(sink_key)), dim=2)
    m = torch.cat((mask, torch.ones_like(mask[..., :1])), dim=-1).unsqueeze(1)  # [B, 1, T, S + 1]
    o = (_FUSED or _sdpa_reference)(qx, k_all, v_all, attn_mask=m, scale=scale)
    return o[..., :hd].transpose(1, 2)  # [B, T, H, hd]


def round_kv_format(kv: torch.Tensor, n_rope: int, ste: bool) -> torch.Tensor:
    """Reference numerics: a 512-like KV row as the 584-byte cache entry holds it."""
    nope = quant.fp8_act(kv[..., :-n_rope], 64, ste)
    rope = quant.bf16_round(kv[..., -n_rope:], ste)
    return torch.cat((nope, rope), dim=-1)


class Indexer(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.wq_b = QLinear(cfg.q_lora_rank, cfg.index_n_heads * cfg.index_head_dim, "fp8")
        self.weights_proj = QLinear(cfg.hidden_size, cfg.index_n_heads, "bf16")
        self.compressor = Compressor(cfg, 4, cfg.index_head_dim)


class Attention(nn.Module):
    def __init__(self, cfg: Config, ratio: int):
        super().__init__()
        D, H, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        self.cfg, self.ratio = cfg, ratio
        self.wq_a = QLinear(D, cfg.q_lora_rank, "fp8")
        self.q_norm = nn.Parameter(torch.empty(cfg.q_lora_rank))
        self.wq_b = QLinear(cfg.q_lora_rank, H * hd, "fp8")
        self.wkv = QLinear(D, hd, "fp8")
        self.kv_norm = nn.Parameter(torch.empty(hd))
        self.wo_a = QLinear(H * hd // cfg.o_groups, cfg.o_groups * cfg.o_lora_rank, "fp8", act_quant=False)
        self.wo_b = QLinear(cfg.o_groups * cfg.o_lora_rank, D, "fp8")
        self.attn_sink = nn.Parameter(torch.empty(H))
        self.compressor = Compressor(cfg, ratio, hd) if ratio else None
        self.indexer = Indexer(cfg) if ratio == 4 else None
        self.index_kl = None  # training: KL(attention over entries || indexer), set by forward
        self._index_scores = None

    def forward(self, x, num: Numerics, rope_main, rope_comp, want_index_loss=False):
        cfg = self.cfg
        B, T, _ = x.shape
        H, hd, nr, eps = cfg.num_attention_heads, cfg.head_dim, cfg.qk_rope_head_dim, cfg.rms_norm_eps
        freqs = rope_comp if self.ratio else rope_main
        pos = torch.arange(T, device=x.device)
        qr = rmsnorm(self.wq_a(x, num), self.q_norm, eps)
        q = rmsnorm(self.wq_b(qr, num).unflatten(-1, (H, hd)), None, eps)
        q = apply_rope(q, freqs, pos)  # [B, T, H, hd]
        kv = apply_rope(rmsnorm(self.wkv(x, num), self.kv_norm, eps), freqs, pos)  # [B, T, hd]
        if num.reference:
            kv = round_kv_format(kv, nr, num.ste)

        # Window keys: s in (t - W, t].
        t_idx = pos[:, None]
        s_idx = pos[None, :]
        win_mask = (s_idx <= t_idx) & (s_idx > t_idx - cfg.sliding_window)  # [T, T]
        keys = kv
        mask = win_mask[None].expand(B, T, T)
        self.index_kl = None
        self._index_scores = None
        if self.compressor is not None:
            entries = self.compressor(x, num, eps, freqs)  # [B, E, hd]
            if num.reference:
                entries = round_kv_format(entries, nr, num.ste)
            E = entries.shape[1]
            n_vis = (pos + 1) // self.ratio  # entries visible to query t
            visible = torch.arange(E, device=x.device)[None, :] < n_vis[:, None]  # [T, E]
            if self.indexer is not None and E > 0:
                sel = self.index_select(x, qr, num, freqs, visible)  # [B, T, E] bool
            else:
                sel = visible[None].expand(B, T, E)
            keys = torch.cat((kv, entries), dim=1)
            mask = torch.cat((mask, sel), dim=2)
        if want_index_loss and self.indexer is not None and self._index_scores is not None:
            self._index_kl_from(q, keys[:, T:], visible)
        if num.sdpa:
            o = attend_fused(q, keys, mask, self.attn_sink, hd ** -0.5)
        else:
            logits = torch.einsum("bthd,bsd->bhts", q, keys) * (hd ** -0.5)
            logits = logits.masked_fill(~mask[:, None], float("-inf"))
            sink = self.attn_sink.view(1, H, 1, 1).expand(B, H, T, 1)
            p = torch.softmax(torch.cat((logits, sink), dim=-1), dim=-1)[..., :-1]
            o = torch.einsum("bhts,bsd->bthd", p, keys)
        o = apply_rope(o, freqs, pos, inverse=True).flatten(-2)  # [B, T, H·hd]
        G, r = cfg.o_groups, cfg.o_lora_rank
        og = o.unflatten(-1, (G, H * hd // G))
        wa = self.wo_a.effective_weight(num).unflatten(0, (G, r))
        z = torch.einsum("btgi,gri->btgr", og, wa).flatten(-2)
        return self.wo_b(z, num)

    def index_select(self, x, qr, num, freqs, visible):
        """Lightning indexer: top-k of the visible compressed entries per query -> bool [B, T, E]."""
        cfg, idx = self.cfg, self.indexer
        B, T, _ = x.shape
        nI, dI = cfg.index_n_heads, cfg.index_head_dim
        pos = torch.arange(T, device=x.device)
        keys = idx.compressor(x, num, cfg.rms_norm_eps, freqs)  # [B, E, dI]
        iq = apply_rope(idx.wq_b(qr, num).unflatten(-1, (nI, dI)), freqs, pos)
        if num.reference:
            keys = quant.fp4_act(quant.hadamard(keys), 32, num.ste)
            keys = quant.fp8_act(keys, dI, num.ste)
            iq = quant.fp4_act(quant.hadamard(iq), 32, num.ste)
        iw = idx.weights_proj(x, num) * (nI ** -0.5)  # [B, T, nI]
        dots = torch.einsum("bthd,bsd->bths", iq, keys) * (dI ** -0.5)
        scores = (F.relu(dots) * iw[..., None]).sum(2)  # [B, T, E]
        E = scores.shape[-1]
        masked = scores.masked_fill(~visible[None], float("-inf"))
        k = min(cfg.index_topk, E)
        # Ties go to the lower index (onecard's partial_sort order): a tiny index-ordered offset
        # would change values, so sort stably on (-score) instead.
        order = torch.sort(-masked.detach(), dim=-1, stable=True).indices[..., :k]
        sel = torch.zeros_like(masked, dtype=torch.bool).scatter_(-1, order, True)
        self._index_scores = masked
        return sel & visible[None]

    def _index_kl_from(self, q, entries, visible):
        """Training signal for the indexer (it gets no gradient through top-k): KL divergence from
        the main heads' attention over ALL visible entries (detached) to softmax(indexer scores)."""
        cfg = self.cfg
        with torch.no_grad():
            lg = torch.einsum("bthd,bsd->bhts", q, entries) * (cfg.head_dim ** -0.5)
            lg = lg.masked_fill(~visible[None, None], float("-inf"))
            target = torch.softmax(lg, dim=-1).nan_to_num(0.0).mean(1)  # [B, T, E]
        rows = visible.any(-1)  # queries with at least one visible entry
        logp = torch.log_softmax(self._index_scores[:, rows], dim=-1)
        tgt = target[:, rows]
        self.index_kl = (tgt * (torch.log(tgt.clamp_min(1e-9)) - logp.masked_fill(tgt == 0, 0.0))).sum(-1).mean()


class Expert(nn.Module):
    def __init__(self, cfg: Config, fmt: str):
        super().__init__()
        D, I = cfg.hidden_size, cfg.moe_intermediate_size
        self.w1, self.w2, self.w3 = QLinear(D, I, fmt), QLinear(I, D, fmt), QLinear(D, I, fmt)


class MoE(nn.Module):
    def __init__(self, cfg: Config, hash_layer: bool):
        super().__init__()
        self.cfg, self.hash_layer = cfg, hash_layer
        E, K = cfg.n_routed_experts, cfg.num_experts_per_tok
        self.gate = nn.Module()
        self.gate.weight = nn.Parameter(torch.empty(E, cfg.hidden_size))
        if hash_layer:
            self.gate.register_buffer("tid2eid", torch.zeros(cfg.vocab_size, K, dtype=torch.long))
        else:
            # Selection-only bias, updated outside autograd (aux-loss-free balancing).
            self.gate.register_buffer("bias", torch.zeros(E))
        self.experts = nn.ModuleList(Expert(cfg, "fp4") for _ in range(E))
        self.shared_experts = Expert(cfg, "fp8")
        self.last_load = None  # [E] fraction of picks per expert in the last forward

    def _hidden(self, e: Expert, x, num, row_w=None):
        lim = self.cfg.swiglu_limit
        g = e.w1(x, num).clamp(max=lim)
        u = e.w3(x, num).clamp(-lim, lim)
        h = F.silu(g) * u
        return h if row_w is None else h * row_w

    def forward(self, x, tokens, num: Numerics):
        cfg = self.cfg
        E, K = cfg.n_routed_experts, cfg.num_experts_per_tok
        with torch.autocast(device_type=x.device.type, enabled=False):  # the router in fp32 under --fast too
            s = torch.sqrt(F.softplus(F.linear(x.float(), self.gate.weight.float())))  # [B, T, E]
        if self.hash_layer:
            idx = self.gate.tid2eid[tokens]
        else:
            biased = (s + self.gate.bias).detach()
            idx = torch.sort(-biased, dim=-1, stable=True).indices[..., :K]
        sk = torch.gather(s, -1, idx)
        w = sk / (sk.sum(-1, keepdim=True) + 1e-20) * cfg.routed_scaling_factor  # [B, T, K]
        dense_w = torch.zeros_like(s).scatter(-1, idx, w)  # [B, T, E]; 0 where not picked
        self.last_load = torch.zeros(E, device=x.device).scatter_add_(
            0, idx.flatten(), torch.ones(idx.numel(), device=x.device)).detach() / idx.numel()
        out = self.shared_experts.w2(self._hidden(self.shared_experts, x, num), num)
        # Every expert runs on every token (the experts are small), weighted by dense_w: an unpicked
        # expert contributes exactly 0, so this equals the sparse computation without data-dependent
        # shapes. Stacked weights: w1/w3 [E, I, D], w2 [E, D, I].
        lim = cfg.swiglu_limit
        w1 = torch.stack([e.w1.effective_weight(num) for e in self.experts])
        w3 = torch.stack([e.w3.effective_weight(num) for e in self.experts])
        w2 = torch.stack([e.w2.effective_weight(num) for e in self.experts])
        xq = quant.fp8_act(x, 128, num.ste) if num.reference else x
        g = torch.einsum("btd,eid->btei", xq, w1).clamp(max=lim)
        u = torch.einsum("btd,eid->btei", xq, w3).clamp(-lim, lim)
        h = F.silu(g) * u
        if num.reference:  # REF: the routing weight scales the hidden activation before w2's FP8 quantisation
            h = quant.fp8_act(h * dense_w.unsqueeze(-1), 128, num.ste)
            routed = torch.einsum("btei,edi->btd", h, w2)
        else:
            routed = (torch.einsum("btei,edi->bted", h, w2) * dense_w.unsqueeze(-1)).sum(2)  # HF: weight the output
        return routed + out


class Block(nn.Module):
    def __init__(self, cfg: Config, layer_id: int):
        super().__init__()
        self.layer_id = layer_id
        self.ratio = cfg.compress_ratios[layer_id]
        self.attn_norm = nn.Parameter(torch.empty(cfg.hidden_size))
        self.ffn_norm = nn.Parameter(torch.empty(cfg.hidden_size))
        self.attn = Attention(cfg, self.ratio)
        self.ffn = MoE(cfg, layer_id < cfg.num_hash_layers and layer_id < cfg.num_hidden_layers)
        self.hc_attn = HyperConnection(cfg, head=False)
        self.hc_ffn = HyperConnection(cfg, head=False)
        self.cfg = cfg

    def _sub(self, hc: HyperConnection, norm, X, f):
        pre, post, comb = hc.pre_post_comb(X)
        x = rmsnorm((pre.unsqueeze(-1) * X).sum(-2), norm, self.cfg.rms_norm_eps)
        a = f(x)
        return post.unsqueeze(-1) * a.unsqueeze(-2) + torch.einsum("btjk,btjd->btkd", comb, X)

    def forward(self, X, tokens, num, rope_main, rope_comp, want_index_loss=False):
        X = self._sub(self.hc_attn, self.attn_norm, X,
                      lambda x: self.attn(x, num, rope_main, rope_comp, want_index_loss))
        return self._sub(self.hc_ffn, self.ffn_norm, X, lambda x: self.ffn(x, tokens, num))


class MTPBlock(nn.Module):
    def __init__(self, cfg: Config, layer_id: int):
        super().__init__()
        D = cfg.hidden_size
        self.block = Block(cfg, layer_id)
        self.enorm = nn.Parameter(torch.empty(D))
        self.hnorm = nn.Parameter(torch.empty(D))
        self.norm = nn.Parameter(torch.empty(D))
        self.e_proj = QLinear(D, D, "fp8")
        self.h_proj = QLinear(D, D, "fp8")
        self.hc_head = HyperConnection(cfg, head=True)


class DeepSeekV4(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        D = cfg.hidden_size
        self.embed = nn.Parameter(torch.empty(cfg.vocab_size, D))
        self.head = nn.Parameter(torch.empty(cfg.vocab_size, D))
        self.norm = nn.Parameter(torch.empty(D))
        self.hc_head = HyperConnection(cfg, head=True)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_hidden_layers))
        self.mtp = nn.ModuleList(MTPBlock(cfg, cfg.num_hidden_layers + i) for i in range(cfg.num_nextn_predict_layers))
        self.register_buffer("rope_main", rope_inv_freqs(cfg, False), persistent=False)
        self.register_buffer("rope_comp", rope_inv_freqs(cfg, True), persistent=False)

    def tie_twins(self, bare: torch.Tensor, spaced: torch.Tensor) -> None:
        """Ties each bare token's rows to its space-led token's (train.py --tie-twins): embedding and output
        row of bare[i] ("Boston", a DSML value's first word) become those of spaced[i] (" Boston", the same
        word in running text) plus one offset shared by every pair, and the pair shares its hash routes.
        Why: an untied bare output row is trained only where a value or line starts, so copying a request's
        first word into a call needs a row of its own for every word (round 10's twins against their space-led
        tokens, median cosine: output rows 0.38, input rows 0.999 already). Tied, copying " W" and writing "W"
        differ by one direction. The offsets start at the pairs' mean difference, so a warm start moves
        the least; the bare tokens' own rows are unused while tied (`export_state` writes the tied ones)."""
        bare, spaced = bare.long(), spaced.long()
        self.register_buffer("twin_bare", bare.to(self.embed.device), persistent=False)
        self.register_buffer("twin_spaced", spaced.to(self.embed.device), persistent=False)
        with torch.no_grad():
            off_e = (self.embed[bare] - self.embed[spaced]).mean(0) if len(bare) else torch.zeros_like(self.norm)
            off_h = (self.head[bare] - self.head[spaced]).mean(0) if len(bare) else torch.zeros_like(self.norm)
            for ffn in self.moe_layers():
                if ffn.hash_layer:
                    ffn.gate.tid2eid[bare] = ffn.gate.tid2eid[spaced]
        self.embed_twin_offset = nn.Parameter(off_e.clone())
        self.head_twin_offset = nn.Parameter(off_h.clone())

    def tables(self):
        """(embedding [V, D], output rows [V, D]) as the model uses them: with tie_twins, the bare tokens'
        rows are their space-led twins' plus the shared offsets."""
        if not hasattr(self, "twin_bare"):
            return self.embed, self.head
        b, s = self.twin_bare, self.twin_spaced
        return (self.embed.index_copy(0, b, self.embed[s] + self.embed_twin_offset),
                self.head.index_copy(0, b, self.head[s] + self.head_twin_offset))

    def export_state(self) -> dict:
        """The state dict an untied model loads (export.py, evaluate.py): embed and head as tables() gives
        them, without the offsets."""
        st = {k: v.detach().cpu() for k, v in self.state_dict().items() if not k.endswith("_twin_offset")}
        emb, head = self.tables()
        st["embed"], st["head"] = emb.detach().cpu(), head.detach().cpu()
        return st

    def forward(self, tokens: torch.Tensor, num: Numerics, want_index_loss: bool = False):
        """tokens [B, T] -> (logits [B, T, V], final streams [B, T, hc, D] before hc_head)."""
        emb, head = self.tables()
        X = emb[tokens].unsqueeze(-2).expand(-1, -1, self.cfg.hc_mult, -1)
        for layer in self.layers:
            X = layer(X, tokens, num, self.rope_main, self.rope_comp, want_index_loss)
        return self.logits_from(X, self.hc_head, self.norm, head), X

    def logits_from(self, X, hc_head: HyperConnection, norm, head=None):
        y = rmsnorm(hc_head.head(X), norm, self.cfg.rms_norm_eps)
        return F.linear(y, self.head if head is None else head)

    def forward_mtp(self, streams: torch.Tensor, next_tokens: torch.Tensor, num: Numerics, k: int = 0):
        """MTP block k on the main streams at t [B, T, hc, D] and the tokens t+1 [B, T]: logits for t+2."""
        m = self.mtp[k]
        eps = self.cfg.rms_norm_eps
        emb, head = self.tables()
        pe = m.e_proj(rmsnorm(emb[next_tokens], m.enorm, eps), num)
        X = m.h_proj(rmsnorm(streams, m.hnorm, eps), num) + pe.unsqueeze(-2)
        X = m.block(X, next_tokens, num, self.rope_main, self.rope_comp)
        return self.logits_from(X, m.hc_head, m.norm, head), X

    def index_losses(self):
        blocks = list(self.layers) + [m.block for m in self.mtp]
        return [b.attn.index_kl for b in blocks if b.attn.index_kl is not None]

    def moe_layers(self):
        return [b.ffn for b in list(self.layers) + [m.block for m in self.mtp]]


def init_weights(model: DeepSeekV4, seed: int = 0) -> None:
    """Training initialisation, on the lines of `onecard synth` (src/model/synth.cpp): linears
    N(0, 1/fan_in) (output projections scaled down so the residual starts near identity), norms 1,
    hyper-connection biases giving an average pre-mix, unit post-mix and a diagonal-heavy comb,
    hash routing drawn at random (distinct experts per token id)."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.cfg
    hc = cfg.hc_mult

    def normal(t, std):
        t.copy_(torch.randn(t.shape, generator=g) * std)

    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if name.endswith("hc_head.fn") or name.endswith(".fn"):
                normal(p, 0.2 / math.sqrt(p.shape[1]))
            elif leaf == "base":
                n = p.shape[0]
                v = torch.zeros(n)
                v[:hc] = math.log(1.0 / (hc - 1))  # sigmoid = 1/hc: average the streams
                if n > hc:
                    comb = torch.full((hc, hc), 0.0)
                    comb.fill_diagonal_(3.0)
                    v[2 * hc:] = comb.flatten()
                p.copy_(v)
            elif leaf == "scale":
                p.fill_(1.0)
            elif leaf in ("attn_norm", "ffn_norm", "q_norm", "kv_norm", "norm", "enorm", "hnorm"):
                p.fill_(1.0)
            elif leaf == "attn_sink" or leaf == "ape":
                p.zero_()
            elif name == "embed":
                normal(p, 1.0)
            elif name == "head":
                normal(p, 1.0 / math.sqrt(cfg.hidden_size))
            elif leaf == "weight":
                gain = 0.5 if (".wo_b." in name or ".w2." in name) else 1.0
                normal(p, gain / math.sqrt(p.shape[1]))
            else:
                raise ValueError(f"init: no rule for {name}")
        for ffn in model.moe_layers():
            if ffn.hash_layer:
                E, K = cfg.n_routed_experts, cfg.num_experts_per_tok
                ffn.gate.tid2eid.copy_(torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(cfg.vocab_size)]))
