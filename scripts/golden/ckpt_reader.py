"""Read a DeepSeek-V4 checkpoint in the official layout and dequantise it to float32 with numpy.

The format (dsv4-model.md §7): FP8 E4M3 linears with one UE8M0 scale per 128x128 block, MXFP4
routed experts (I8 bytes, two E2M1 codes per byte, low nibble = even element) with one UE8M0
scale per 32 inputs, and BF16 / F32 / I64 tensors as they are. The safetensors header is parsed
here with json so the script does not depend on the safetensors package knowing F8_E8M0.

Every decode is written from the format definition, not from torch, so the torch decode on the
GPU machine can be used as an independent cross-check (see make_golden.check_fp8_decode).
"""

import json
import math
import struct
from pathlib import Path

import numpy as np

# Raw numpy storage of each safetensors dtype; F8/I8 stay bytes until dequantised.
_RAW_DTYPES = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "F8_E4M3": np.dtype("u1"),
    "F8_E8M0": np.dtype("u1"),
    "I8": np.dtype("u1"),
    "U8": np.dtype("u1"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
}

# E2M1 code -> value; bit 3 is the sign (code 8 is -0).
E2M1_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=np.float32,
)


def e4m3fn_table() -> np.ndarray:
    """All 256 OCP E4M3 (fn) byte values as float32: bias 7, no inf, S.1111.111 = NaN."""
    table = np.empty(256, dtype=np.float32)
    for byte in range(256):
        sign = -1.0 if byte & 0x80 else 1.0
        exp = (byte >> 3) & 0xF
        man = byte & 0x7
        if exp == 0xF and man == 0x7:
            table[byte] = np.nan
        elif exp == 0:
            table[byte] = sign * (man / 8.0) * 2.0**-6  # subnormal
        else:
            table[byte] = sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)
    return table


def ue8m0_table() -> np.ndarray:
    """All 256 UE8M0 byte values: 2^(b-127), exact in float32 (2^-127 is a subnormal); 0xFF = NaN."""
    table = np.full(256, np.nan, dtype=np.float32)
    table[:255] = np.ldexp(np.float64(1.0), np.arange(255, dtype=np.int64) - 127).astype(np.float32)
    return table


E4M3_VALUES = e4m3fn_table()
UE8M0_VALUES = ue8m0_table()


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.uint32) << 16).view(np.float32)


class RawTensor:
    """One tensor as stored: safetensors dtype name, shape and raw numpy array."""

    def __init__(self, name: str, dtype: str, shape: list, data: np.ndarray, file: str):
        self.name, self.dtype, self.shape, self.data, self.file = name, dtype, list(shape), data, file


def read_safetensors(path: Path) -> dict:
    """name -> RawTensor for one file; validates offsets against the file size."""
    blob = path.read_bytes()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + header_len])
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        if dtype not in _RAW_DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        begin, end = info["data_offsets"]
        shape = info["shape"]
        np_dtype = _RAW_DTYPES[dtype]
        n_elem = math.prod(shape) if shape else 1
        if end - begin != n_elem * np_dtype.itemsize or base + end > len(blob):
            raise ValueError(f"{path}: tensor {name} offsets {begin}..{end} do not match {dtype}{shape}")
        arr = np.frombuffer(blob, dtype=np_dtype, count=n_elem, offset=base + begin).reshape(shape)
        out[name] = RawTensor(name, dtype, shape, arr, path.name)
    return out


def read_checkpoint(ckpt_dir: Path) -> dict:
    """Every tensor of every *.safetensors shard in the directory (index or single file)."""
    tensors = {}
    shards = sorted(ckpt_dir.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"no *.safetensors in {ckpt_dir}")
    for shard in shards:
        for name, t in read_safetensors(shard).items():
            if name in tensors:
                raise ValueError(f"tensor {name} appears in both {tensors[name].file} and {shard.name}")
            tensors[name] = t
    return tensors


def dequant_fp8_block(weight: RawTensor, scale: RawTensor, block: int) -> np.ndarray:
    """[out, in] E4M3 * per-(block x block) scale -> float32 [out, in]."""
    out_f, in_f = weight.shape
    want = [-(-out_f // block), -(-in_f // block)]
    if scale.shape != want:
        raise ValueError(f"{scale.name}: shape {scale.shape}, expected {want} for {weight.name}{weight.shape}")
    if scale.dtype == "F8_E8M0":
        s = UE8M0_VALUES[scale.data]
    elif scale.dtype == "F32":
        s = scale.data.astype(np.float32)
    else:
        raise ValueError(f"{scale.name}: unsupported scale dtype {scale.dtype}")
    s_full = np.repeat(np.repeat(s, block, axis=0), block, axis=1)[:out_f, :in_f]
    return E4M3_VALUES[weight.data] * s_full


def dequant_mxfp4(weight: RawTensor, scale: RawTensor, group: int = 32) -> np.ndarray:
    """[out, in/2] packed E2M1 (low nibble = element 2j) * per-32 UE8M0 -> float32 [out, in]."""
    out_f, half_in = weight.shape
    in_f = 2 * half_in
    if scale.dtype != "F8_E8M0" or scale.shape != [out_f, in_f // group]:
        raise ValueError(f"{scale.name}: {scale.dtype}{scale.shape}, expected F8_E8M0[{out_f}, {in_f // group}]")
    codes = np.empty((out_f, in_f), dtype=np.uint8)
    codes[:, 0::2] = weight.data & 0x0F
    codes[:, 1::2] = weight.data >> 4
    return E2M1_VALUES[codes] * np.repeat(UE8M0_VALUES[scale.data], group, axis=1)


def dequantise(raw: dict, block: int) -> tuple:
    """Dequantise every tensor to float32 (integer tensors stay int64).

    Returns (tensors, formats): tensors maps the weight name (".scale" companions folded in) to a
    numpy array; formats maps it to how it was stored ("fp8", "mxfp4", "bf16", "f32", "i64", ...).
    """
    tensors, formats = {}, {}
    for name, t in raw.items():
        if name.endswith(".scale"):
            weight_name = name[: -len(".scale")] + ".weight"
            if weight_name not in raw:
                raise ValueError(f"scale {name} has no weight {weight_name}")
            continue
        scale = raw.get(name[: -len(".weight")] + ".scale") if name.endswith(".weight") else None
        if scale is not None:
            if t.dtype == "F8_E4M3":
                tensors[name], formats[name] = dequant_fp8_block(t, scale, block), "fp8"
            elif t.dtype in ("I8", "U8"):
                tensors[name], formats[name] = dequant_mxfp4(t, scale), "mxfp4"
            else:
                raise ValueError(f"{name}: {t.dtype} weight with a scale tensor")
        elif t.dtype == "BF16":
            tensors[name], formats[name] = bf16_to_f32(t.data), "bf16"
        elif t.dtype in ("F32", "F16"):
            tensors[name], formats[name] = t.data.astype(np.float32), t.dtype.lower()
        elif t.dtype in ("I32", "I64"):
            tensors[name], formats[name] = t.data.astype(np.int64), t.dtype.lower()
        else:
            raise ValueError(f"{name}: {t.dtype} tensor without a scale")
        if tensors[name].dtype == np.float32 and not np.isfinite(tensors[name]).all():
            raise ValueError(f"{name}: non-finite values after dequantisation")
    return tensors, formats
