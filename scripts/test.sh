#!/usr/bin/env bash
# The test command: install dependencies, check formatting and the module graph
# (scripts/check_format.py, check_layers.py), build, run the whole CTest suite, then run every
# libFuzzer target briefly (scripts/fuzz.sh, FUZZ_SECONDS each, default 3; it prints why when clang is
# missing, and ONECARD_SKIP_FUZZ=1 leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Formatting and the module graph: seconds, so before the long build (ctest runs the layering check too).
python3 scripts/check_format.py
python3 scripts/check_layers.py
bash scripts/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j "$(nproc)" --timeout 600)
if [ "${ONECARD_SKIP_FUZZ:-0}" = 1 ]; then
    echo "fuzz: skipped (ONECARD_SKIP_FUZZ=1)"
else
    JOBS="${JOBS:-$(nproc)}" FUZZ_MAX_LEN=4096 bash scripts/fuzz.sh "${FUZZ_SECONDS:-3}"
fi
