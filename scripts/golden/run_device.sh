#!/usr/bin/env bash
# Device-side driver for make_golden.py (run from the repo root on the GPU machine, with .carry/ made
# by prepare_carry.sh: the onecard wrapper sets LD_LIBRARY_PATH to .carry/lib for onecard alone, never for
# python, whose torch needs the machine's own libstdc++).
# Writes to $OUT: log.txt, golden.tar (one directory per golden), hf_src.tar (the installed
# transformers sources the goldens came from, to diff against what was read when writing this).
set -uo pipefail
: "${OUT:?OUT must be set}"
export PYTHONUNBUFFERED=1
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # cuBLAS determinism under use_deterministic_algorithms
WORK=${WORK:-/tmp/golden_ckpt}
RESULT=${RESULT:-/tmp/golden_out}
rm -rf "$WORK" "$RESULT"
mkdir -p "$WORK" "$RESULT"

{
    date -u
    nvidia-smi -L
    python3 -c 'import torch, transformers, numpy; print("torch", torch.__version__, "transformers", transformers.__version__, "numpy", numpy.__version__, "cuda", torch.cuda.is_available())'
    ldd .carry/onecard.bin
    .carry/onecard --help | head -20
    python3 scripts/golden/make_golden.py --spec scripts/golden/specs.json --onecard .carry/onecard \
        --work "$WORK" --out "$RESULT" "$@"
    echo "make_golden exit code $?"
    ls -la "$WORK"/* "$RESULT"/*
} 2>&1 | tee "$OUT/log.txt"

tar -C "$RESULT" -cf "$OUT/golden.tar" .
HF_DIR=$(python3 -c 'import os, transformers; print(os.path.dirname(transformers.__file__))')
tar -C "$HF_DIR" -cf "$OUT/hf_src.tar" models/deepseek_v4 cache_utils.py modeling_rope_utils.py masking_utils.py \
    configuration_utils.py 2>>"$OUT/log.txt"
ls -la "$OUT"
