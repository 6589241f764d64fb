#!/usr/bin/env python3
"""Golden logits from transformers for synthetic DeepSeek-V4 checkpoints written by `onecard synth`.

For every golden in the spec file: synthesise the checkpoint with the given onecard binary (or
take an existing one), dequantise every tensor to float32 ourselves (ckpt_reader), rename onto
transformers' DeepseekV4ForCausalLM (hf_mapping), load it strictly in float32 on CUDA with TF32
off and eager attention, then write
  logits.npy         float32 [T, vocab]: one full prefill of the prompt, no cache
  decode_logits.npy  float32 [N, vocab]: the scores of transformers' own greedy `generate`
                     (row k = logits at position T-1+k, i.e. after feeding continuation[:k])
  meta.json          synth command and options, SHA-256 of every checkpoint file, tokens,
                     continuation, consistency checks, versions, device, date.
Runs on the GPU machine (torch + transformers); see run_device.sh. Nothing in the C++ build reads
this script; tests/model/golden_test.cpp reads its outputs from tests/data/golden/.
"""

import argparse
import datetime
import hashlib
import json
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ckpt_reader  # noqa: E402
import hf_mapping  # noqa: E402


def log(msg: str) -> None:
    print(f"[make_golden {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def rel_l2_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-row ||a-b|| / ||b||."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.linalg.norm(a64 - b64, axis=-1) / np.maximum(np.linalg.norm(b64, axis=-1), 1e-30)


def top2_margin(logits: np.ndarray) -> np.ndarray:
    part = np.sort(logits.astype(np.float64), axis=-1)
    return part[:, -1] - part[:, -2]


def synthesise(onecard: Path, spec: dict, ckpt_dir: Path) -> list:
    cmd = [str(onecard), "synth", *[str(a) for a in spec["synth_args"]], "--out", str(ckpt_dir)]
    log("synth: " + " ".join(cmd))
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True)
    print(res.stdout, res.stderr, sep="\n", flush=True)
    if res.returncode != 0:
        raise RuntimeError(f"onecard synth failed with exit code {res.returncode}")
    log(f"synth done in {time.time() - t0:.1f} s")
    return cmd


def check_decoders(torch) -> dict:
    """Our numpy FP8/UE8M0 tables against torch's own float8 dtypes (independent decoders)."""
    all_bytes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ours = ckpt_reader.E4M3_VALUES
    theirs = all_bytes.view(torch.float8_e4m3fn).float().numpy()
    bad = [b for b in range(256) if not (np.isnan(ours[b]) and np.isnan(theirs[b])) and ours[b] != theirs[b]]
    result = {"e4m3fn_mismatched_bytes": bad}
    if bad:
        raise RuntimeError(f"numpy E4M3 decoder disagrees with torch at bytes {bad}")
    try:
        e8 = all_bytes.view(torch.float8_e8m0fnu).float().numpy()
    except Exception as exc:  # noqa: BLE001 - older torch: no E8M0 dtype to compare with
        result["ue8m0"] = f"not checked: {exc}"
    else:
        ours8 = ckpt_reader.UE8M0_VALUES
        # Byte 0 (2^-127, a float32 subnormal) is recorded but never used by synth's scales.
        result["ue8m0_mismatched_bytes"] = [
            b for b in range(256) if not (np.isnan(ours8[b]) and np.isnan(e8[b])) and ours8[b] != e8[b]]
        if any(b != 0 for b in result["ue8m0_mismatched_bytes"]):
            raise RuntimeError(f"numpy UE8M0 decoder disagrees with torch: {result}")
    return result


def build_hf_model(torch, transformers, official: dict, sd_np: dict):
    try:
        from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    except ImportError:
        from transformers.models.deepseek_v4 import DeepseekV4Config, DeepseekV4ForCausalLM

    kwargs = hf_mapping.hf_config_kwargs(official)
    config = DeepseekV4Config(**kwargs)
    try:
        config._attn_implementation = "eager"  # V4 supports nothing else; be explicit anyway
    except Exception as exc:  # noqa: BLE001
        log(f"could not set _attn_implementation: {exc}")
    notes = {"translated_config": kwargs}
    # Does the class take the official config.json directly? Recorded only, never used.
    try:
        raw = {k: v for k, v in official.items() if k not in ("quantization_config", "architectures")}
        direct = DeepseekV4Config(**raw)
        notes["official_config_accepted"] = {
            "layer_types_match": direct.layer_types == config.layer_types,
            "mlp_layer_types_match": direct.mlp_layer_types == config.mlp_layer_types,
            "rope_parameters": direct.rope_parameters,
            "qk_rope_head_dim": getattr(direct, "qk_rope_head_dim", None),
        }
    except Exception as exc:  # noqa: BLE001 - diagnostic only
        notes["official_config_accepted"] = f"rejected: {type(exc).__name__}: {exc}"
    log(f"official config.json directly: {notes['official_config_accepted']}")

    with torch.device("cuda"):
        model = DeepseekV4ForCausalLM(config)
    model = model.to(torch.float32).eval()

    expected = model.state_dict()
    sd = {}
    for name, arr in sd_np.items():
        t = torch.from_numpy(np.ascontiguousarray(arr))
        if name in expected and expected[name].dtype != t.dtype:
            t = t.to(expected[name].dtype)
        sd[name] = t.to("cuda")
    missing = sorted(set(expected) - set(sd))
    unexpected = sorted(set(sd) - set(expected))
    shape_bad = sorted(k for k in sd if k in expected and tuple(sd[k].shape) != tuple(expected[k].shape))
    log(f"state dict: {len(sd)} tensors, missing {missing}, unexpected {unexpected}, bad shapes "
        f"{[(k, tuple(sd[k].shape), tuple(expected[k].shape)) for k in shape_bad]}")
    if missing or unexpected or shape_bad:
        for k, v in expected.items():  # the whole expected layout, to fix the mapping in one go
            print(f"  expected {k} {tuple(v.shape)} {v.dtype}")
        raise RuntimeError("checkpoint does not map one-to-one onto transformers' parameters")
    model.load_state_dict(sd, strict=True)
    # Every loaded tensor must read back bit-identical (catches tying or dtype casts on load).
    after = model.state_dict()
    changed = [k for k in sd if not torch.equal(after[k], sd[k])]
    if changed:
        raise RuntimeError(f"tensors changed after load (tied?): {changed}")
    notes["n_parameters"] = int(sum(p.numel() for p in model.parameters()))

    try:
        rot = model.model.rotary_emb
        hf_compress = getattr(rot, "compress_inv_freq").double().cpu().numpy()
        ref_compress = hf_mapping.deepseek_yarn_inv_freq(official)
        notes["compress_inv_freq_max_rel_diff_vs_deepseek_formula"] = float(
            np.max(np.abs(hf_compress - ref_compress) / ref_compress))
        notes["compress_inv_freq"] = hf_compress.tolist()
        notes["main_inv_freq"] = getattr(rot, "main_inv_freq").double().cpu().numpy().tolist()
        notes["compress_attention_scaling"] = float(getattr(rot, "compress_attention_scaling"))
        notes["main_attention_scaling"] = float(getattr(rot, "main_attention_scaling"))
    except Exception as exc:  # noqa: BLE001 - diagnostic only
        notes["rope_check"] = f"failed: {type(exc).__name__}: {exc}"
    log(f"rope: { {k: v for k, v in notes.items() if 'inv_freq' not in k or 'diff' in k} }")
    return model, config, notes


def greedy_generate(torch, model, config, ids, n_new: int, pad_id: int) -> tuple:
    """transformers' own generate(); if this release cannot run it for V4, fall back to a greedy
    loop over the model's cached forward, then to stateless recompute (recorded in meta)."""
    from transformers import DynamicCache, GenerationConfig

    n_prompt = ids.shape[1]
    try:
        gen_cfg = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=n_new, eos_token_id=None,
                                   pad_token_id=pad_id)
        model.generation_config = gen_cfg
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen_cfg,
                             return_dict_in_generate=True, output_logits=True)
        cont = gen.sequences[0, n_prompt:].tolist()
        rows = torch.stack([x[0] for x in gen.logits]).float().cpu().numpy()
        return cont, rows, "transformers generate(do_sample=False, num_beams=1)"
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        log("generate failed; falling back to a greedy loop over the cached forward")
    try:
        cache = DynamicCache(config=config)
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        rows, cont = [], []
        for _ in range(n_new):
            row = out.logits[0, -1].float()
            rows.append(row.cpu().numpy())
            cont.append(int(row.argmax()))
            nxt = torch.tensor([[cont[-1]]], dtype=torch.long, device=ids.device)
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        return cont, np.stack(rows), "greedy loop over transformers forward with DynamicCache (generate failed)"
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        log("cached loop failed; falling back to stateless recompute")
    seq = ids
    rows, cont = [], []
    for _ in range(n_new):
        row = model(input_ids=seq, use_cache=False).logits[0, -1].float()
        rows.append(row.cpu().numpy())
        cont.append(int(row.argmax()))
        seq = torch.cat([seq, torch.tensor([[cont[-1]]], dtype=torch.long, device=ids.device)], dim=1)
    return cont, np.stack(rows), "greedy stateless recompute (generate and cached loop failed)"


def run_one(torch, transformers, spec: dict, args, out_root: Path) -> None:
    name = spec["name"]
    out_dir = out_root / name
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_dir = Path(args.work) / name
    synth_cmd = None
    if args.onecard:
        if ckpt_dir.exists():
            raise RuntimeError(f"{ckpt_dir} exists; refusing to mix old and new files")
        synth_cmd = synthesise(Path(args.onecard), spec, ckpt_dir)
    files = sorted(p for p in ckpt_dir.iterdir() if p.is_file())
    hashes = {p.name: sha256_file(p) for p in files}
    log(f"{name}: checkpoint files {list(hashes)}")

    official = json.loads((ckpt_dir / "config.json").read_text())
    block = official.get("quantization_config", {}).get("weight_block_size", [128, 128])[0]
    t0 = time.time()
    raw = ckpt_reader.read_checkpoint(ckpt_dir)
    tensors, formats = ckpt_reader.dequantise(raw, block)
    del raw
    fmt_count = {}
    for f in formats.values():
        fmt_count[f] = fmt_count.get(f, 0) + 1
    log(f"{name}: dequantised {len(tensors)} tensors in {time.time() - t0:.1f} s: {fmt_count}")
    sd_np, ignored = hf_mapping.map_state_dict(tensors, official["n_routed_experts"])
    del tensors
    log(f"{name}: ignored (no transformers module): {len(ignored)} tensors, e.g. {ignored[:3]}")
    if args.dry_run:  # everything up to transformers, for machines without torch
        kwargs = hf_mapping.hf_config_kwargs(official)
        log(f"{name}: dry run: {len(sd_np)} transformers tensors, config {json.dumps(kwargs)[:300]}...")
        return

    model, config, notes = build_hf_model(torch, transformers, official, sd_np)
    del sd_np

    rng = np.random.default_rng(spec["token_seed"])
    n_tokens = spec["n_tokens"]
    tokens = rng.integers(0, official["vocab_size"], size=n_tokens).tolist()
    ids = torch.tensor([tokens], dtype=torch.long, device="cuda")
    checks = {}
    with torch.no_grad():
        t0 = time.time()
        logits = model(input_ids=ids, use_cache=False).logits[0].float().cpu().numpy()
        torch.cuda.synchronize()
        log(f"{name}: prefill [{n_tokens}] in {time.time() - t0:.2f} s, logits {logits.shape}")
        if not np.isfinite(logits).all():
            raise RuntimeError("non-finite prefill logits")
        margins = top2_margin(logits)
        checks["prefill_min_top2_margin"] = float(margins.min())
        checks["prefill_positions_margin_below_1e-3"] = int((margins < 1e-3).sum())
        checks["logit_std"] = float(logits.std())

        # transformers' cached path (one call, then chunks of 64) against the stateless prefill.
        for label, chunk in (("cached_full", n_tokens), ("cached_chunk64", 64)):
            try:
                from transformers import DynamicCache
                cache = DynamicCache(config=config)
                parts = []
                for begin in range(0, n_tokens, chunk):
                    r = model(input_ids=ids[:, begin : begin + chunk], past_key_values=cache, use_cache=True)
                    parts.append(r.logits[0].float().cpu().numpy())
                alt = np.concatenate(parts)
                checks[f"hf_{label}_max_rel_l2_vs_prefill"] = float(rel_l2_rows(alt, logits).max())
            except Exception as exc:  # noqa: BLE001 - diagnostic only
                checks[f"hf_{label}_max_rel_l2_vs_prefill"] = f"failed: {type(exc).__name__}: {exc}"
            log(f"{name}: {label}: {checks[f'hf_{label}_max_rel_l2_vs_prefill']}")

        n_new = spec["n_generate"]
        t0 = time.time()
        continuation, decode_logits, gen_method = greedy_generate(
            torch, model, config, ids, n_new, official.get("eos_token_id", 1))
        log(f"{name}: {gen_method}: {len(continuation)} tokens in {time.time() - t0:.2f} s: {continuation}")
        if len(continuation) != n_new:
            raise RuntimeError(f"generate returned {len(continuation)} tokens, wanted {n_new}")
        checks["continuation_is_argmax_of_decode_logits"] = bool(
            np.array_equal(decode_logits.argmax(-1), np.array(continuation)))
        checks["decode_min_top2_margin"] = float(top2_margin(decode_logits).min())
        checks["decode_row0_rel_l2_vs_prefill_last"] = float(rel_l2_rows(decode_logits[:1], logits[-1:])[0])

        # The same continuation by stateless recompute of prompt + continuation.
        full = torch.tensor([tokens + continuation[:-1]], dtype=torch.long, device="cuda")
        recompute = model(input_ids=full, use_cache=False).logits[0].float().cpu().numpy()[n_tokens - 1 :]
        checks["recompute_argmax_equals_continuation"] = bool(
            np.array_equal(recompute.argmax(-1), np.array(continuation)))
        checks["recompute_max_rel_l2_vs_decode_logits"] = float(rel_l2_rows(decode_logits, recompute).max())
        log(f"{name}: checks {json.dumps(checks)}")

    np.save(out_dir / "logits.npy", logits.astype(np.float32))
    np.save(out_dir / "decode_logits.npy", decode_logits.astype(np.float32))
    meta = {
        "name": name,
        "description": spec.get("description", ""),
        "synth": {
            "command": ["onecard", *synth_cmd[1:-2]] if synth_cmd else None,
            "args": spec["synth_args"],
            "options": spec.get("synth_options"),
        },
        "checkpoint_sha256": hashes,
        "config": official,
        "tokens": tokens,
        "token_seed": spec["token_seed"],
        "continuation": continuation,
        "files": {
            "logits.npy": {"shape": list(logits.shape), "dtype": "float32",
                           "what": "full prefill of tokens, no cache"},
            "decode_logits.npy": {"shape": list(decode_logits.shape), "dtype": "float32",
                                  "what": "generate scores; row k = logits at position T-1+k"},
        },
        "generation": {"method": gen_method, "do_sample": False, "num_beams": 1,
                       "max_new_tokens": n_new, "stop_on_eos": False},
        "transformers_notes": notes,
        "ignored_checkpoint_tensors": ignored,
        "checks": checks,
        "numerics": {"dtype": "float32", "tf32": False, "attn_implementation": "eager"},
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "cuda": torch.version.cuda,
        },
        "device": torch.cuda.get_device_name(0),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    log(f"{name}: wrote {out_dir}")
    del model
    torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", required=True, help="JSON list of goldens (see specs.json)")
    ap.add_argument("--onecard", help="onecard binary; without it, checkpoints must already be in --work")
    ap.add_argument("--work", required=True, help="directory for synthesised checkpoints (one subdir each)")
    ap.add_argument("--out", required=True, help="output root; one subdirectory per golden")
    ap.add_argument("--only", nargs="*", help="names of goldens to make (default all)")
    ap.add_argument("--dry-run", action="store_true", help="stop before transformers (no torch needed)")
    args = ap.parse_args()
    if args.dry_run:
        failures = 0
        for spec in json.loads(Path(args.spec).read_text()):
            if not args.only or spec["name"] in args.only:
                run_one(None, None, spec, args, Path(args.out))
        return failures

    import torch
    import transformers

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True, warn_only=True)
    log(f"torch {torch.__version__} transformers {transformers.__version__} on {torch.cuda.get_device_name(0)}")
    log(f"decoders: {check_decoders(torch)}")

    specs = json.loads(Path(args.spec).read_text())
    failures = []
    for spec in specs:
        if args.only and spec["name"] not in args.only:
            continue
        try:
            run_one(torch, transformers, spec, args, Path(args.out))
        except Exception:  # noqa: BLE001 - keep going so one call yields every golden it can
            traceback.print_exc()
            failures.append(spec["name"])
    if failures:
        log(f"FAILED: {failures}")
        return 1
    log("all goldens written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
