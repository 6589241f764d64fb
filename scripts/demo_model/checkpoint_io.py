"""Official-format checkpoint <-> dsv4_torch.DeepSeekV4.

Loading dequantises with scripts/golden/ckpt_reader.py (FP8 128x128 UE8M0, MXFP4, BF16, F32, I64).
Export writes the exact layout `onecard synth` writes for the same config: the caller passes a
template checkpoint directory made by `onecard synth` with this config (same tensor names,
dtypes, shapes, shard split and write order), and every tensor is re-encoded from the trained
values with the same quantisers (src/model/quantize.cpp): FP8 E4M3 with one UE8M0 scale per
128x128 block, MXFP4 (E2M1 pairs, low nibble first, UE8M0 per 32), BF16 round-to-nearest-even,
F32 and I64 as they are. config.json / generation_config.json / the index are copied unchanged
from the template (the template's total_size equals ours: same tensors and dtypes).
"""

import json
import re
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
import ckpt_reader  # noqa: E402

from dsv4_torch import Config, DeepSeekV4  # noqa: E402
import quant  # noqa: E402

_WEIGHT_SUFFIX = re.compile(r"(^|\.)(embed|head|norm|attn_norm|ffn_norm|q_norm|kv_norm|enorm|hnorm)$")


def official_name(name: str) -> str:
    """dsv4_torch parameter/buffer name -> official checkpoint name."""
    name = re.sub(r"^mtp\.(\d+)\.block\.", r"mtp.\1.", name)
    name = re.sub(r"hc_(attn|ffn|head)\.(fn|base|scale)$", r"hc_\1_\2", name)
    if _WEIGHT_SUFFIX.search(name):
        name += ".weight"
    return name


def model_tensors(model: DeepSeekV4) -> dict:
    """official name -> torch tensor (parameters and the routing buffers)."""
    out = {}
    for n, p in model.named_parameters():
        out[official_name(n)] = p
    for n, b in model.named_buffers():
        if n.endswith("gate.tid2eid") or n.endswith("gate.bias"):
            out[official_name(n)] = b
    return out


def load_config(ckpt: Path) -> Config:
    return Config.from_official(json.loads((ckpt / "config.json").read_text()))


def train_meta(model_pt: Path) -> dict:
    """The train_meta.json beside a model.pt (train.py's, respace.py model's, deepen.py's, soup.py's)."""
    return json.loads((Path(model_pt).parent / "train_meta.json").read_text())


def config_of(path: Path) -> Config:
    """The Config of what load_weights(path) reads: a checkpoint's config.json, or a model.pt's
    train_meta.json beside it."""
    path = Path(path)
    if path.is_dir():
        return load_config(path)
    return Config(**train_meta(path)["config"])


def load_model(ckpt: Path) -> DeepSeekV4:
    cfg = load_config(ckpt)
    model = DeepSeekV4(cfg)
    values, _ = ckpt_reader.dequantise(ckpt_reader.read_checkpoint(ckpt), 128)
    targets = model_tensors(model)
    missing = sorted(set(targets) - set(values))
    extra = sorted(set(values) - set(targets))
    if missing or extra:
        raise ValueError(f"{ckpt}: missing {missing[:5]}... extra {extra[:5]}...")
    with torch.no_grad():
        for name, t in targets.items():
            v = torch.from_numpy(np.ascontiguousarray(values[name]))
            if tuple(v.shape) != tuple(t.shape):
                raise ValueError(f"{name}: checkpoint {tuple(v.shape)} vs model {tuple(t.shape)}")
            t.copy_(v.to(t.dtype))
    return model


def load_weights(path: Path) -> dict:
    """A state dict from an official-format checkpoint directory (dequantised) or a train.py model.pt."""
    path = Path(path)
    if path.is_dir():
        return load_model(path).state_dict()
    return torch.load(path, map_location="cpu")


def load_fitting(model: DeepSeekV4, weights: dict, source, fits: str = "the model", hint: str = ""):
    """Loads `weights` into `model`, which must take every one and leave none out. load_state_dict with
    strict=False says nothing: a checkpoint deeper than the model (8 layers into 6) would lose its extra
    layers, and a shallower one keep random ones. `fits` names the model in the message, `hint` ends it."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise SystemExit(f"{source} does not fit {fits}: {len(missing)} weights missing {missing[:3]}, "
                         f"{len(unexpected)} unexpected {unexpected[:3]}" + (f"; {hint}" if hint else ""))


def load_trained(model_pt: Path) -> DeepSeekV4:
    """A model.pt as the model its train_meta.json describes (config_of); every weight must fit (load_fitting)."""
    model = DeepSeekV4(config_of(model_pt))
    load_fitting(model, load_weights(model_pt), model_pt)
    return model


# ---- encoders (numpy, bit-exact with src/model/quantize.cpp) ---------------------------------

def _ue8m0_bytes(amax: np.ndarray, fmt_max: float) -> np.ndarray:
    a = np.maximum(amax.astype(np.float64), 1e-4) / fmt_max
    m, e = np.frexp(a)
    k = np.where(m == 0.5, e - 1, e)
    return np.clip(k + 127, 0, 254).astype(np.uint8)


def _f32_to_e4m3(v: np.ndarray) -> np.ndarray:
    """float32 within ±448 -> E4M3 (fn) byte, round to nearest even (exact via the value table)."""
    table = ckpt_reader.E4M3_VALUES
    pos = np.arange(128)
    pos = pos[np.isfinite(table[pos])]  # 0x00..0x7E, ascending values
    vals = table[pos].astype(np.float64)
    a = np.abs(v.astype(np.float64))
    i = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
    lo, hi = vals[i - 1], vals[i]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & (pos[i] % 2 == 0))
    code = np.where(pick_hi, pos[i], pos[i - 1]).astype(np.uint8)
    code = np.where(a >= vals[-1], pos[-1], code).astype(np.uint8)
    return code | np.where(np.signbit(v) & (code != 0), 0x80, 0).astype(np.uint8)


def encode_fp8(w: np.ndarray, block: int = 128):
    o, i = w.shape
    po, pi = -(-o // block), -(-i // block)
    wp = np.zeros((po * block, pi * block), np.float32)
    wp[:o, :i] = w
    amax = np.abs(wp.reshape(po, block, pi, block)).max(axis=(1, 3))
    s = _ue8m0_bytes(amax, 448.0)
    inv = np.ldexp(np.float32(1.0), 127 - s.astype(np.int32)).astype(np.float32)
    inv_full = np.repeat(np.repeat(inv, block, 0), block, 1)[:o, :i]
    return _f32_to_e4m3(w.astype(np.float32) * inv_full), s


def _e2m1_code(v: np.ndarray) -> np.ndarray:
    a = np.abs(v)
    m = np.zeros(a.shape, np.uint8)
    for thr, code, strict in ((0.25, 1, True), (0.75, 2, False), (1.25, 3, True), (1.75, 4, False),
                              (2.5, 5, True), (3.5, 6, False), (5.0, 7, True)):
        m = np.where(a > thr if strict else a >= thr, code, m).astype(np.uint8)
    return m | np.where(np.signbit(v), 0x8, 0).astype(np.uint8)


def encode_mxfp4(w: np.ndarray):
    o, i = w.shape
    g = w.reshape(o, i // 32, 32)
    s = _ue8m0_bytes(np.abs(g).max(-1), 6.0)
    inv = np.ldexp(np.float32(1.0), 127 - s.astype(np.int32)).astype(np.float32)
    codes = _e2m1_code((g * inv[..., None]).astype(np.float32)).reshape(o, i)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), s


def encode_bf16(v: np.ndarray) -> np.ndarray:
    u = v.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


# ---- export ------------------------------------------------------------------------------------

def _read_header(path: Path):
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8:8 + n]


def export(model: DeepSeekV4, template: Path, out: Path) -> None:
    """Writes `model` in the official format with the template's layout into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    values = {n: t.detach().float().cpu().numpy() if t.is_floating_point() else t.detach().cpu().numpy()
              for n, t in model_tensors(model).items()}
    done = set()
    for shard in sorted(template.glob("*.safetensors")):
        header, header_bytes = _read_header(shard)
        items = sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                       key=lambda kv: kv[1]["data_offsets"][0])
        chunks = []
        for name, info in items:
            dtype, shape = info["dtype"], info["shape"]
            if name.endswith(".scale"):
                continue  # written with its weight below
            v = values[name]
            scale_name = name[: -len(".weight")] + ".scale"
            if dtype == "F8_E4M3":
                codes, s = encode_fp8(v)
                data = {name: codes.tobytes(), scale_name: s.tobytes()}
            elif dtype in ("I8", "U8"):
                codes, s = encode_mxfp4(v)
                data = {name: codes.tobytes(), scale_name: s.tobytes()}
            elif dtype == "BF16":
                data = {name: encode_bf16(v).tobytes()}
            elif dtype == "F32":
                data = {name: v.astype("<f4").tobytes()}
            elif dtype == "I64":
                data = {name: v.astype("<i8").tobytes()}
            else:
                raise ValueError(f"{name}: template dtype {dtype} not handled")
            if list(v.shape) != (shape if dtype not in ("I8", "U8") else [shape[0], shape[1] * 2]):
                raise ValueError(f"{name}: model shape {list(v.shape)} vs template {dtype}{shape}")
            for k, b in data.items():
                chunks.append((header[k]["data_offsets"][0], k, b))
                done.add(k)
        chunks.sort()
        blob = bytearray(8 + len(header_bytes))
        blob[:8] = struct.pack("<Q", len(header_bytes))
        blob[8:] = header_bytes  # same names, dtypes, shapes and offsets as the template
        for off, k, b in chunks:
            begin, end = header[k]["data_offsets"]
            if end - begin != len(b) or begin != len(blob) - 8 - len(header_bytes):
                raise ValueError(f"{k}: {len(b)} bytes do not fit offsets {begin}..{end}")
            blob += b
        (out / shard.name).write_bytes(bytes(blob))
    if not set(values) <= done:
        raise ValueError(f"tensors not in the template: {sorted(set(values) - done)[:5]}")
    for extra in ("config.json", "generation_config.json", "model.safetensors.index.json"):
        if (template / extra).exists():
            shutil.copy(template / extra, out / extra)


def quantise_like_export(model: DeepSeekV4) -> None:
    """Rounds the model's weights in place to what export stores (for fp32-vs-export comparisons)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            mod_name = name.rsplit(".", 1)[0]
            mod = model.get_submodule(mod_name) if mod_name else model
            fmt = getattr(mod, "fmt", None)
            if fmt == "fp8":
                p.copy_(quant.fp8_weight(p))
            elif fmt == "fp4":
                p.copy_(quant.mxfp4_weight(p))
