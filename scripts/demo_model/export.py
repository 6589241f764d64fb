#!/usr/bin/env python3
"""Exports a trained demo model (train.py's OUT: model.pt, train_meta.json, tokenizer.json) as an
official-format DeepSeek-V4 checkpoint directory (written for onecard):

  config.json, generation_config.json, model.safetensors.index.json, model-00001-of-00001.safetensors
      exactly what `onecard synth` writes for this shape (names, dtypes, shapes, order, FP8 128x128
      UE8M0, MXFP4 experts, BF16/F32/I64), with the trained values (checkpoint_io.export);
  tokenizer.json, tokenizer_config.json   the trained BPE and the V4 tokenizer_config;
  SHA256SUMS                              `onecard manifest` of all of the above.

Usage: export.py --run DIR --onecard build-cpu/onecard --out models/demo
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint_io  # noqa: E402
from dsv4_torch import Config  # noqa: E402

# The `onecard synth` flag that sets each trained Config field; the tiny preset gives the rest (the layer
# schedule, rope, scaling), and main() refuses a template that still differs from the trained config.
SYNTH_DIMS = {"--vocab": "vocab_size", "--hidden": "hidden_size", "--layers": "num_hidden_layers",
              "--heads": "num_attention_heads", "--head-dim": "head_dim", "--rope-dim": "qk_rope_head_dim",
              "--q-lora-rank": "q_lora_rank", "--o-groups": "o_groups", "--o-lora-rank": "o_lora_rank",
              "--window": "sliding_window", "--index-heads": "index_n_heads", "--index-head-dim": "index_head_dim",
              "--index-topk": "index_topk", "--experts": "n_routed_experts", "--experts-per-tok": "num_experts_per_tok",
              "--moe-inter": "moe_intermediate_size", "--hash-layers": "num_hash_layers",
              "--mtp": "num_nextn_predict_layers"}


def synth_flags(cfg: Config) -> list:
    """`onecard synth` arguments for a template of the trained shape (any train.SHAPES entry)."""
    dims = [x for flag, field in SYNTH_DIMS.items() for x in (flag, str(getattr(cfg, field)))]
    return ["--preset", "tiny", "--shard-mb", "100", *dims]

TOKENIZER_CONFIG = {
    "add_bos_token": False, "add_eos_token": False, "bos_token": "<｜begin▁of▁sentence｜>",
    "clean_up_tokenization_spaces": False, "eos_token": "<｜end▁of▁sentence｜>", "legacy": True,
    "model_max_length": 1048576, "pad_token": "<｜end▁of▁sentence｜>", "tokenizer_class": "PreTrainedTokenizerFast",
    "unk_token": None,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--onecard", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    run, out = Path(a.run), Path(a.out)
    model = checkpoint_io.load_trained(run / "model.pt")
    cfg = model.cfg
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template"
        subprocess.run([a.onecard, "synth", *synth_flags(cfg), "--out", str(template), "--quiet"], check=True)
        got = json.loads((template / "config.json").read_text())
        for k in cfg.__dataclass_fields__:
            if k in got and got[k] != getattr(cfg, k) and k != "rope_scaling":
                raise SystemExit(f"synth template differs from the trained config in {k}: "
                                 f"{got[k]} vs {getattr(cfg, k)}")
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.safetensors"):
            old.unlink()
        checkpoint_io.export(model, template, out)
    (out / "tokenizer.json").write_bytes((run / "tokenizer.json").read_bytes())
    (out / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2, ensure_ascii=False) + "\n")
    manifest = out / "SHA256SUMS"
    if manifest.exists():
        manifest.unlink()
    sums = subprocess.run([a.onecard, "manifest", str(out)], check=True, capture_output=True, text=True).stdout
    manifest.write_text(sums)
    print(f"exported to {out}: {sum(f.stat().st_size for f in out.iterdir()) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
