#!/usr/bin/env bash
# Builds .carry/demo-train (git-ignored) for the device run (NEXT_RUN.md): scripts/ = scripts/demo_model
# plus scripts/golden/ckpt_reader.py (also at golden/, where checkpoint_io.py looks for it), and
# data.tar.gz = DATA without tokenizer_corpus.txt (gpu_train.sh rebuilds it on the device).
# Usage: make_carry.sh DATA_DIR   (run from anywhere; writes under the repository root)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
data=$(realpath "$1")
dst=$root/.carry/demo-train
rm -rf "$dst"; mkdir -p "$dst/scripts" "$dst/golden"
cp "$root"/scripts/demo_model/*.py "$root"/scripts/demo_model/*.sh "$root"/scripts/demo_model/*.json "$dst/scripts/"
cp "$root/scripts/golden/ckpt_reader.py" "$dst/scripts/"
cp "$root/scripts/golden/ckpt_reader.py" "$dst/golden/"
files=$(cd "$data" && ls brown_train.jsonl brown_test.jsonl chat_train.jsonl chat_test.jsonl tool_eval.jsonl)
tar -czf "$dst/data.tar.gz" -C "$data" $files
du -sh "$dst" "$dst/data.tar.gz"
size=$(du -sm "$dst" | cut -f1)
[ "$size" -lt 60 ] || { echo "carry is ${size} MB (limit 60)"; exit 1; }
