#!/usr/bin/env bash
# The test command: install dependencies, check formatting and the module graph
# (scripts/check_format.py, check_layers.py), build (without debug info), run the whole CTest suite, then run every
# libFuzzer target briefly (scripts/fuzz.sh, FUZZ_SECONDS each, default 3; it prints why when clang is
# missing, and ONECARD_SKIP_FUZZ=1 leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Formatting and the module graph: seconds, so before the long build (ctest runs the layering check too).
python3 scripts/check_format.py
python3 scripts/check_layers.py
# Without debug info (ONECARD_DEBUG_INFO=ON keeps it): CI's build is mostly compiling and linking test
# binaries, and -g is most of their bytes. The option stays in the build directory's cache.
CMAKE_ARGS="-DONECARD_DEBUG_INFO=${ONECARD_DEBUG_INFO:-OFF} ${CMAKE_ARGS:-}" bash scripts/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j "$(nproc)" --timeout 600)
if [ "${ONECARD_SKIP_FUZZ:-0}" = 1 ]; then
    echo "fuzz: skipped (ONECARD_SKIP_FUZZ=1)"
else
    JOBS="${JOBS:-$(nproc)}" FUZZ_MAX_LEN=4096 bash scripts/fuzz.sh "${FUZZ_SECONDS:-3}"
fi
