#!/usr/bin/env bash
# The main job on the embedded default: install, build, synthesise the small demo DeepSeek-V4
# checkpoint (random weights, real tokenizer), inspect it, then serve it with the OpenAI-compatible
# server in the foreground (Ctrl-C stops it; it prints a curl line to try). DEMO_DIR overrides the
# checkpoint location, PORT the port (default 8000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh onecard
DEMO_DIR=${DEMO_DIR:-demo/small}
if [ ! -f "$DEMO_DIR/config.json" ]; then
    ./build/onecard synth --preset small --seed 1 --out "$DEMO_DIR"
    # Record the checkpoint's SHA-256 manifest once, so every later start verifies the same bytes.
    ./build/onecard manifest "$DEMO_DIR" > "$DEMO_DIR/SHA256SUMS.tmp"
    mv "$DEMO_DIR/SHA256SUMS.tmp" "$DEMO_DIR/SHA256SUMS"
fi
./build/onecard verify "$DEMO_DIR"
./build/onecard inspect "$DEMO_DIR"
# The server needs the tokenizer next to the weights; `serve --demo` writes both into ~/.cache/onecard.
if [ -f "$DEMO_DIR/tokenizer.json" ]; then
    exec ./build/onecard serve --model "$DEMO_DIR" --served-model-name onecard-demo --port "${PORT:-8000}"
else
    exec ./build/onecard serve --demo --port "${PORT:-8000}"
fi
