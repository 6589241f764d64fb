#!/usr/bin/env bash
# Sanitizer builds of the CPU test suite (issue 22). Not part of CI's default run (too slow on 2 cores).
#
#   bash scripts/sanitize.sh asan [CTEST_REGEX]   # ASan + UBSan, build-asan, -DONECARD_CUDA=OFF
#   bash scripts/sanitize.sh tsan [CTEST_REGEX]   # TSan, build-tsan, the engine/server tests
#
# CTEST_REGEX picks tests by ctest name (test executables are test_<label>_<file stem>, e.g.
# "unit_safetensors|unit_dsml"); only the executables it can match are built (plus the onecard
# binary when an e2e test is picked). asan's default is the whole CPU suite; tsan's default is every
# test that runs the threaded engine or the HTTP server. UBSan findings and TSan races fail the test
# (halt_on_error); LeakSanitizer is on for asan. JOBS (default 2) sets build and ctest parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-}"
JOBS="${JOBS:-2}"
case "$mode" in
    asan)
        BUILD="${BUILD_DIR:-build-asan}"
        SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
        regex="${2:-.}"
        ;;
    tsan)
        BUILD="${BUILD_DIR:-build-tsan}"
        SAN="-fsanitize=thread -fno-omit-frame-pointer"
        regex="${2:-unit_engine|unit_scheduler|unit_sampler_stop|unit_server|e2e_server_http|e2e_server_ops|e2e_server_load}"
        ;;
    *)
        echo "usage: $0 asan|tsan [CTEST_REGEX]" >&2
        exit 2
        ;;
esac

bash scripts/setup.sh >/dev/null
# Test executables the regex can select (it is matched against "<label>_<file stem>").
targets=()
need_cli=0
for f in tests/unit/*_test.cpp tests/model/*_test.cpp tests/e2e/*_test.cpp; do
    label="$(basename "$(dirname "$f")")"
    exe="test_${label}_$(basename "$f" .cpp)"
    if [[ "${label}_$(basename "$f" .cpp)" =~ $regex ]] || [ "$regex" = . ]; then
        targets+=(--target "$exe")
        [ "$label" = e2e ] && need_cli=1
    fi
done
[ "$regex" = . ] && targets=()  # everything
[ "$need_cli" = 1 ] && [ ${#targets[@]} -gt 0 ] && targets+=(--target onecard)

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONECARD_CUDA=OFF -DONECARD_BENCH=OFF \
        -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" -DCMAKE_EXE_LINKER_FLAGS="$SAN" >/dev/null
fi
echo "sanitize[$mode]: building in $BUILD (JOBS=$JOBS${targets:+, $(( ${#targets[@]} / 2 )) targets})"
start=$(date +%s)
cmake --build "$BUILD" -j "$JOBS" "${targets[@]}" | tail -n 2
echo "sanitize[$mode]: build took $(( $(date +%s) - start )) s"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan_suppressions.txt}"
# Tests that bound wall-clock time scale their bounds by this (tests/support/time_scale.h).
if [ "$mode" = tsan ]; then scale=10; else scale=3; fi
export ONECARD_TEST_TIME_SCALE="${ONECARD_TEST_TIME_SCALE:-$scale}"
export OPENBLAS_NUM_THREADS=1  # OpenBLAS's own threads are not instrumented (TSan would report them)
cd "$BUILD"
start=$(date +%s)
set +e
if [ "$regex" = . ]; then
    ctest --output-on-failure -j "$JOBS" --timeout 1800
else
    # gtest_discover_tests names tests Suite.Case: select by the executable each test runs (or by the
    # test's own name), then hand ctest their numbers.
    sel="$(ctest --show-only=json-v1 | python3 -c '
import json, os, re, sys
rx = re.compile(sys.argv[1])
tests = json.load(sys.stdin)["tests"]
pick = [str(i + 1) for i, t in enumerate(tests)
        if rx.search(os.path.basename((t.get("command") or [""])[0]).removeprefix("test_")) or rx.search(t["name"])]
print(",".join(pick))' "$regex")"
    if [ -z "$sel" ]; then
        echo "sanitize[$mode]: no test matches $regex" >&2
        exit 2
    fi
    echo "sanitize[$mode]: $(tr ',' '\n' <<<"$sel" | wc -l) tests"
    ctest --output-on-failure -j "$JOBS" --timeout 1800 -I "0,0,0,$sel"
fi
rc=$?
set -e
echo "sanitize[$mode]: ctest exit $rc after $(( $(date +%s) - start )) s (regex: $regex)"
exit $rc
