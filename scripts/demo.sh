#!/usr/bin/env bash
# The main job on the embedded default: install, build, verify and inspect the trained demo model
# (models/demo: a small DeepSeek-V4-architecture checkpoint in the official format, trained for this
# demo by scripts/demo_model; see models/demo/README.md), then serve it with the OpenAI-compatible
# server in the foreground (Ctrl-C stops it; it prints a curl line to try). DEMO_DIR overrides the
# checkpoint, PORT the port (default 8000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh onecard
DEMO_DIR=${DEMO_DIR:-models/demo}
# The committed SHA-256 manifest: every start verifies the bytes that were measured.
./build/onecard verify "$DEMO_DIR"
./build/onecard inspect "$DEMO_DIR"
# --strict-tools-all: tool calls held to their schemas, as `serve --demo` does (the model is tiny).
exec ./build/onecard serve --model "$DEMO_DIR" --served-model-name onecard-demo --port "${PORT:-8000}" --strict-tools-all
