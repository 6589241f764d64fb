"""Quantisation simulations of DeepSeek-V4 in torch (dsv4-model.md §10), written from the format
definitions so they run on PyTorch 1.13 (no float8 dtypes) and 2.x alike.

Each function returns the quantise-dequantise of its input. With `ste=True` the gradient passes
straight through (the rounding is treated as the identity), which is how the training script uses
them as fake quantisation; onecard's reference numerics (src/backend/cpu/quant_sim.cpp) are the
forward values, so the same code serves the parity test.
"""

import torch

FP8_MAX = 448.0
FP4_MAX = 6.0


def _straight_through(x: torch.Tensor, q: torch.Tensor, ste: bool) -> torch.Tensor:
    return x + (q - x).detach() if ste else q


def ue8m0_scale(amax: torch.Tensor, fmt_max: float, floor: float) -> torch.Tensor:
    """2^ceil(log2(max(amax, floor) / fmt_max)) as float32, computed in float64 like onecard."""
    ratio = amax.double().clamp_min(floor) / fmt_max
    mant, exp = torch.frexp(ratio)
    k = torch.where(mant == 0.5, exp - 1, exp).clamp(-127, 127)
    return torch.ldexp(torch.ones_like(ratio), k).float()


def round_e4m3(v: torch.Tensor) -> torch.Tensor:
    """Round float32 values already within ±448 to the nearest E4M3 (fn) value, ties to even."""
    a = v.abs()
    _, exp = torch.frexp(a)  # a = m·2^exp, m in [0.5, 1): floor(log2 a) = exp - 1
    e = (exp - 1).clamp_min(-6)  # below 2^-6 the subnormal quantum 2^-9 applies
    quantum = torch.ldexp(torch.ones_like(a), e - 3)
    return torch.sign(v) * torch.round(a / quantum) * quantum


def round_e2m1(v: torch.Tensor) -> torch.Tensor:
    """Round values within ±6 to E2M1 (0, .5, 1, 1.5, 2, 3, 4, 6), ties to the even code."""
    a = v.abs()
    q = torch.zeros_like(a)
    q = torch.where(a > 0.25, torch.full_like(a, 0.5), q)
    q = torch.where(a >= 0.75, torch.full_like(a, 1.0), q)
    q = torch.where(a > 1.25, torch.full_like(a, 1.5), q)
    q = torch.where(a >= 1.75, torch.full_like(a, 2.0), q)
    q = torch.where(a > 2.5, torch.full_like(a, 3.0), q)
    q = torch.where(a >= 3.5, torch.full_like(a, 4.0), q)
    q = torch.where(a > 5.0, torch.full_like(a, 6.0), q)
    return torch.sign(v) * q


def _blocks(x: torch.Tensor, block: int):
    """[..., n] -> [..., n_blocks, block] (n a multiple of block) and the original shape."""
    n = x.shape[-1]
    assert n % block == 0, f"last dim {n} is not a multiple of the block {block}"
    return x.reshape(*x.shape[:-1], n // block, block)


def fp8_act(x: torch.Tensor, block: int, ste: bool = False) -> torch.Tensor:
    """FP8 E4M3 quant-dequant along the last dim in blocks (1x128 activations, 64 for KV)."""
    xb = _blocks(x.float(), block)
    s = ue8m0_scale(xb.detach().abs().amax(-1, keepdim=True), FP8_MAX, 1e-4)
    q = round_e4m3((xb / s).clamp(-FP8_MAX, FP8_MAX)) * s
    return _straight_through(x, q.reshape(x.shape), ste)


def fp4_act(x: torch.Tensor, block: int = 32, ste: bool = False, floor: float = FP4_MAX * 2.0**-126) -> torch.Tensor:
    """FP4 E2M1 quant-dequant along the last dim in blocks of 32 (indexer q and keys)."""
    xb = _blocks(x.float(), block)
    s = ue8m0_scale(xb.detach().abs().amax(-1, keepdim=True), FP4_MAX, floor)
    q = round_e2m1((xb / s).clamp(-FP4_MAX, FP4_MAX)) * s
    return _straight_through(x, q.reshape(x.shape), ste)


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """Orthonormal Walsh-Hadamard transform (Sylvester order) along the last dim (a power of 2)."""
    n = x.shape[-1]
    assert n & (n - 1) == 0
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = torch.stack((a + b, a - b), dim=2)
        h *= 2
    return (y.reshape(x.shape) * (n ** -0.5)).to(x.dtype)


def fp8_weight(w: torch.Tensor, block: int = 128, ste: bool = False) -> torch.Tensor:
    """FP8 E4M3 with one UE8M0 scale per block x block tile (the checkpoint's linears)."""
    o, i = w.shape
    pad_o, pad_i = (-o) % block, (-i) % block
    wp = torch.nn.functional.pad(w.float(), (0, pad_i, 0, pad_o))
    t = wp.reshape((o + pad_o) // block, block, (i + pad_i) // block, block)
    s = ue8m0_scale(t.detach().abs().amax(dim=(1, 3), keepdim=True), FP8_MAX, 1e-4)
    q = (round_e4m3((t / s).clamp(-FP8_MAX, FP8_MAX)) * s).reshape(wp.shape)[:o, :i]
    return _straight_through(w, q, ste)


def mxfp4_weight(w: torch.Tensor, ste: bool = False) -> torch.Tensor:
    """MXFP4: E2M1 with one UE8M0 scale per 32 consecutive input elements of a row."""
    # The checkpoint writer floors amax at 1e-4 like the FP8 one (src/model/quantize.cpp).
    return fp4_act(w, 32, ste, floor=1e-4)


def bf16_round(x: torch.Tensor, ste: bool = False) -> torch.Tensor:
    return _straight_through(x, x.to(torch.bfloat16).float(), ste)
