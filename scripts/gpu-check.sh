#!/usr/bin/env bash
# GPU check for the CUDA backend: every GPU parity test (tests/ops) plus the GEMV/GEMM
# micro-benchmark, with logs and a summary written to an output folder.
#
# The GPU machine has the CUDA driver and pip's nvidia-cublas but none of the Debian -dev packages
# this project builds against, so binaries are built HERE and carried:
#
#   1. here:   scripts/gpu-check.sh --pack
#              builds the test_ops_* tests and gemv_cuda_bench into build-gpu (BUILD_DIR overrides;
#              sm_90a), strips them and packs them, with the Debian shared libraries they need that the
#              GPU image may lack (ldd), into .carry/gpu-check/gpu-check.tar.xz (git-ignored; < 64 MiB).
#   2. there:  scripts/gpu-check.sh --run [OUT_DIR]
#              (through the device tool: carry [".carry/gpu-check"], command
#               `bash scripts/gpu-check.sh --run $OUT`). Finds libcublasLt.so.13 in python3's
#              nvidia-cublas package, runs every test with --gtest_output=xml, then the benchmark,
#              and writes OUT_DIR/{gpu-check.log,tests.xml...,bench.jsonl,summary.txt}.
#              The last lines printed are the summary (pass/fail per test binary, benchmark table).
#
#   3. there:  scripts/gpu-check.sh --bench [OUT_DIR] [onecard bench args...]
#              `onecard bench --synth flash` with the packed binary (OUT_DIR/bench_model.json), then the
#              transformers peer baseline scripts/bench/peer_transformers.py (OUT_DIR/bench_peer.json;
#              SKIP_PEER=1 skips it, PEER_ARGS passes arguments).
#
#   4. there:  scripts/gpu-check.sh --serve-smoke [OUT_DIR] (carry demo/small/tokenizer.json too): `onecard
#              serve --device cuda` on a 4-layer synthetic checkpoint, its startup report, curl requests.
#
#   6. there:  scripts/gpu-check.sh --prefix-bench [OUT_DIR] (carry the tokenizer too): the prefix cache's
#              TTFT figures through serve (cold, cached, restored from the host tier; a 20-turn agent trace).
#
#   7. there:  scripts/gpu-check.sh --soak [OUT_DIR] (carry the tokenizer too): the soak tool against serve
#              on the GPU (dummy weights of a small preset): tools/soak/soak.mjs with node, else soak.py.
#
#   5. there:  scripts/gpu-check.sh --serve-bench [OUT_DIR] [bench-serve args...] (carry the tokenizer too):
#              `onecard serve --load-format dummy` on the full Flash shape, then `onecard bench-serve`
#              (and `onecard validate` with VALIDATE=1).
#
# ONLY=regex runs a subset of the test binaries; SKIP_GEMV_BENCH=1 skips the micro-benchmark.
# CARRY_DIR overrides .carry/gpu-check. SANITIZE=1 adds a compute-sanitizer memcheck pass over the tests. Without a GPU, --run still runs: every test skips with the
# reason and the benchmark reports that it needs a GPU (exit status 1).
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY_DIR=${CARRY_DIR:-.carry/gpu-check}
mode=${1:---help}

pack() {
    set -e
    local build=${BUILD_DIR:-build-gpu}
    local tests benches="gemv_cuda_bench host_experts_bench"
    tests=$(ls tests/ops/*_test.cpp | xargs -n1 basename | sed 's/\.cpp$//; s/^/test_ops_/')
    # PACK_TESTS="test_ops_a test_ops_b": only those test binaries and onecard, no benchmarks (a quick
    # check of a few tests; run it with SKIP_GEMV_BENCH=1).
    if [ -n "${PACK_TESTS:-}" ]; then tests=$PACK_TESTS; benches=""; fi
    BUILD_DIR=$build JOBS=${JOBS:-2} bash scripts/build.sh $tests $benches onecard
    rm -rf "$CARRY_DIR"
    mkdir -p "$CARRY_DIR/bin" "$CARRY_DIR/lib"
    for t in $tests; do strip --strip-unneeded -o "$CARRY_DIR/bin/$t" "$build/tests/$t"; done
    strip --strip-unneeded -o "$CARRY_DIR/bin/onecard" "$build/onecard"
    # The host expert kernels' benchmark (CPU only) runs there because its thread sweep needs the GPU
    # machine's 16 cores.
    for b in $benches; do strip --strip-unneeded -o "$CARRY_DIR/bin/$b" "$build/bench/$b"; done
    # Shared libraries outside glibc and the CUDA driver/toolkit (cuBLASLt comes from pip there).
    for b in "$CARRY_DIR"/bin/*; do
        ldd "$b" | awk '/=> \//{print $3}'
    done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libcublas[^/]*|libstdc\+\+|libgcc_s)\.so' |
        while read -r lib; do cp -L "$lib" "$CARRY_DIR/lib/"; done
    ls "$CARRY_DIR/lib"
    # The GPU machine gets no .git: record what the binaries were built from.
    echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests bench tools || echo '+dirty')" > "$CARRY_DIR/bin/COMMIT"
    # Ten statically linked test binaries compress ~4x; the tarball is what travels.
    tar -C "$CARRY_DIR" -cJf "$CARRY_DIR.tar.xz" bin lib
    rm -rf "$CARRY_DIR"/bin "$CARRY_DIR"/lib
    mv "$CARRY_DIR.tar.xz" "$CARRY_DIR/gpu-check.tar.xz"
    du -sh "$CARRY_DIR"
}

cublas_lib_dir() {
    local d
    d=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
    if [ -z "$d" ] || [ ! -e "$d/libcublasLt.so.13" ]; then
        d=$(dirname "$(find / -xdev -name 'libcublasLt.so.13' -print -quit 2>/dev/null)" 2>/dev/null)
    fi
    echo "$d"
}

# The carried binaries unpacked, and the libraries they load found (cuBLASLt from pip's package).
unpack() {
    if [ -f "$CARRY_DIR/gpu-check.tar.xz" ]; then tar -C "$CARRY_DIR" -xJf "$CARRY_DIR/gpu-check.tar.xz"; fi
    export LD_LIBRARY_PATH="$PWD/$CARRY_DIR/lib:$(cublas_lib_dir):${LD_LIBRARY_PATH:-}"
}

# Waits up to SECONDS for serve's `ready` line in LOG, or until process PID has exited.
wait_ready() {
    local log=$1 pid=$2 secs=$3
    for _ in $(seq 1 "$secs"); do
        grep -q '^ready$' "$log" && return 0
        kill -0 "$pid" 2> /dev/null || return 1
        sleep 1
    done
    return 1
}

run() {
    local out=${1:-${OUT:-gpu-check-out}}
    mkdir -p "$out"
    local log="$out/gpu-check.log" summary="$out/summary.txt" status=0
    unpack
    {
        echo "== gpu-check $(date -u +%FT%TZ) binaries built from $(cat "$CARRY_DIR/bin/COMMIT" 2>/dev/null || echo unknown)"
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 || true
        echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    } 2>&1 | tee "$log"
    : > "$summary"
    for t in "$CARRY_DIR"/bin/test_*; do
        local name one
        name=$(basename "$t")
        if [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]]; then continue; fi
        one="$out/$name.txt"
        echo "== $name" | tee -a "$log"
        "$t" --gtest_output="xml:$out/$name.xml" > "$one" 2>&1
        local rc=$?
        cat "$one" | tee -a "$log"
        local n_pass n_skip
        # Per-test result lines end in "(N ms)"; gtest repeats a skipped test's name in its closing list.
        n_pass=$(grep -cE '^\[       OK \] .* \([0-9]+ ms\)$' "$one")
        n_skip=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$one")
        if [ $rc -eq 0 ]; then
            echo "PASS $name ($n_pass passed, $n_skip skipped)" >> "$summary"
        else
            echo "FAIL $name (exit $rc): $(grep -m3 -E '^\[  FAILED  \]|error' "$one" | tr '\n' ' ')" >> "$summary"
            status=1
        fi
        grep '^\[probe\]' "$one" >> "$summary"
        rm -f "$one"
    done
    # Optional memory checker pass (SANITIZE=1): out-of-bounds and misaligned accesses in every kernel
    # the tests launch. Works on the Firecracker machines (KINDS.md), not under gVisor.
    if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
        for t in "$CARRY_DIR"/bin/test_*; do
            local name
            name=$(basename "$t")
            if compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 "$t" --gtest_brief=1 > "$out/san.txt" 2>&1; then
                echo "MEMCHECK-CLEAN $name" >> "$summary"
            else
                echo "MEMCHECK-FAIL $name: $(grep -m2 -E 'Invalid|ERROR SUMMARY' "$out/san.txt" | tr '\n' ' ')" >> "$summary"
                status=1
            fi
            cat "$out/san.txt" >> "$log"
        done
        rm -f "$out/san.txt"
    fi
    echo "== gemv_cuda_bench" | tee -a "$log"
    local brc=0
    if [ "${SKIP_GEMV_BENCH:-0}" = 1 ]; then echo "(skipped: SKIP_GEMV_BENCH=1)" > "$out/bench.txt"; else
    "$CARRY_DIR/bin/gemv_cuda_bench" --out "$out/bench.jsonl" > "$out/bench.txt" 2>&1
    brc=$?
    fi
    cat "$out/bench.txt" >> "$log"
    [ $brc -eq 0 ] || { echo "FAIL gemv_cuda_bench (exit $brc)" >> "$summary"; status=1; }
    # Keep within the device tool's 8 returned files: merge the per-test XML reports.
    cat "$out"/test_*.xml > "$out/tests.xml" 2>/dev/null && rm -f "$out"/test_*.xml
    echo
    echo "===== summary ====="
    cat "$summary"
    cat "$out/bench.txt"
    return $status
}

# Whole-model benchmark (docs/results.md): `onecard bench --synth flash` with the packed binary, then
# the transformers peer baseline. Extra arguments go to `onecard bench`.
bench() {
    local out=${1:-${OUT:-gpu-check-out}}
    shift || true
    mkdir -p "$out"
    unpack
    {
        echo "== onecard bench $(date -u +%FT%TZ) built from $(cat "$CARRY_DIR/bin/COMMIT" 2>/dev/null || echo unknown)"
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
    } | tee "$out/bench.log"
    local status=0
    "$CARRY_DIR/bin/onecard" bench --synth flash --out "$out/bench_model.json" "$@" 2>&1 | tee -a "$out/bench.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    if [ "${SKIP_PEER:-0}" != 1 ]; then
        python3 scripts/bench/peer_transformers.py --out "$out/bench_peer.json" ${PEER_ARGS:-} 2>&1 | tail -40 | tee -a "$out/bench.log"
    fi
    return $status
}

# Serving smoke test on the GPU: a 4-layer real-dimension synthetic checkpoint (real vocabulary),
# `onecard serve --device cuda` until `ready` (its startup report), one chat completion and one
# streamed completion through curl. Needs the demo tokenizer (carry demo/small/tokenizer.json, made
# by `onecard synth --preset small --out demo/small`).
serve_smoke() {
    local out=${1:-${OUT:-gpu-check-out}}
    mkdir -p "$out"
    unpack
    local bin="$CARRY_DIR/bin/onecard" dir=/tmp/onecard-smoke port=8011 status=0
    rm -rf "$dir"
    # SMOKE_EXPERTS=256 with SMOKE_ARGS="--gpu-memory-utilization F" makes a checkpoint whose experts
    # do not all fit, so serve must place some in host RAM (hybrid experts).
    # SMOKE_SYNTH_ARGS adds synth flags: "--mtp 1" (V4-Flash's MTP block) or "--dspark" (0731), for
    # SMOKE_ARGS="--speculative-config ..." (the step counters land in OUT_DIR/metrics.txt).
    "$bin" synth --preset flash --layers ${SMOKE_LAYERS:-4} --experts ${SMOKE_EXPERTS:-8} ${SMOKE_SYNTH_ARGS:---mtp 0} \
        --seed 3 --out "$dir" --quiet || return 1
    cp demo/small/tokenizer.json "$dir/" || return 1
    local launch=""
    command -v gdb > /dev/null && launch="gdb -q -batch -ex run -ex bt --args"
    $launch "$bin" serve --model "$dir" --device cuda --port $port --max-model-len 4096 ${SMOKE_ARGS:-} > "$out/serve.log" 2>&1 &
    local pid=$!
    wait_ready "$out/serve.log" $pid ${SMOKE_WAIT:-120}
    grep -q '^ready$' "$out/serve.log" || status=1
    curl -s --max-time 60 "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
        -d '{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16, "temperature": 0}' > "$out/chat.json" || status=1
    curl -sN --max-time 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt": "The capital of France is", "max_tokens": 8, "stream": true}' > "$out/stream.txt" || status=1
    curl -s --max-time 10 "http://127.0.0.1:$port/metrics" | grep -E '^vllm:(spec_decode|generation_tokens)' \
        > "$out/metrics.txt"
    kill -INT $pid; wait $pid
    tail -40 "$out/serve.log"
    cat "$out/metrics.txt"
    head -c 600 "$out/chat.json"; echo
    grep -c '^data:' "$out/stream.txt"
    grep -q '"finish_reason"' "$out/chat.json" || status=1
    return $status
}

# Serving benchmark on the full shape: `onecard serve --load-format dummy` on a config-only Flash
# directory (43 layers, all 256 experts: the plan puts what does not fit in host RAM, as for the real
# checkpoint), then `onecard bench-serve` against it (extra arguments go to bench-serve; default: a
# concurrency sweep). Writes OUT_DIR/{serve.log,bench_serve.json,bench_serve.svg,bench_serve.txt}.
# SERVE_ARGS adds serve flags; BENCH_LAYERS / BENCH_EXPERTS shrink the shape.
# Starts `onecard serve --load-format dummy` on the full Flash shape (BENCH_LAYERS, BENCH_EXPERTS) on
# port 8012, logging to $1/serve.log; sets SERVE_PID. BENCH_MAX_LEN (default 8192; "default": serve's
# own choice), SERVE_ARGS: more serve flags.
start_dummy_serve() {
    local out=$1 bin="$CARRY_DIR/bin/onecard" dir=/tmp/onecard-dummy port=8012
    rm -rf "$dir"
    "$bin" synth --preset flash --layers ${BENCH_LAYERS:-43} --experts ${BENCH_EXPERTS:-256} --mtp 0 --config-only \
        --out "$dir" || return 1
    local t0=$(date +%s)
    local len_flag="--max-model-len ${BENCH_MAX_LEN:-8192}"
    [ "${BENCH_MAX_LEN:-}" = default ] && len_flag=""
    "$bin" serve "$dir" --load-format dummy --tokenizer demo/small/tokenizer.json --device cuda --port $port \
        $len_flag --max-num-seqs ${BENCH_MAX_SEQS:-64} --no-access-log ${SERVE_ARGS:-} > "$out/serve.log" 2>&1 &
    SERVE_PID=$!
    wait_ready "$out/serve.log" $SERVE_PID ${SMOKE_WAIT:-300}
    echo "serve ready after $(( $(date +%s) - t0 )) s" | tee -a "$out/serve.log"
    grep -q '^ready$' "$out/serve.log" || { tail -30 "$out/serve.log"; kill $SERVE_PID; return 1; }
}

serve_bench() {
    local out=${1:-${OUT:-gpu-check-out}}
    shift || true
    mkdir -p "$out"
    unpack
    local bin="$CARRY_DIR/bin/onecard" port=8012 status=0
    start_dummy_serve "$out" || return 1
    local pid=$SERVE_PID
    local args=("$@")
    [ ${#args[@]} -gt 0 ] || args=(--max-concurrency 1,8,32,64 --num-prompts 64 --random-input-len 512
                                   --random-output-len 128 --ignore-eos)
    "$bin" bench-serve --base-url "http://127.0.0.1:$port" --out "$out/bench_serve.json" \
        --plot "$out/bench_serve.svg" "${args[@]}" 2>&1 | tee "$out/bench_serve.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    curl -s "http://127.0.0.1:$port/metrics" | grep -E '^vllm:(prompt_tokens|generation_tokens)_total|^onecard:' \
        > "$out/metrics_after.txt" || true
    # VALIDATE=1: `onecard validate` against the same server (VALIDATE_ARGS: gates and their sizes);
    # random weights fail the quality gates, so its exit status (the failed gates) is reported, not fatal.
    if [ "${VALIDATE:-0}" = 1 ]; then
        "$bin" validate --base-url "http://127.0.0.1:$port" --out "$out/validate.json" --no-progress \
            ${VALIDATE_ARGS:-} > "$out/validate.txt" 2>&1
        echo "validate: exit status $? (failed gates)" | tee -a "$out/validate.txt"
    fi
    kill -INT $pid; wait $pid
    tail -5 "$out/serve.log"
    return $status
}

# The prefix cache's figures (issue 15) through the server: TTFT of one long prompt cold, then sent
# again (served from the device pool), for PREFIX_LENS (default 32768 131072); with the pool sized by
# SERVE_ARGS to hold one such prompt, a second prompt of the last length pushes the first into the host
# tier, and the first once more measures a restore from host RAM; then the 20-turn agent trace
# (bench/data/agent_trace_20turns.json) for the share of prompt tokens served from the cache. Each
# bench-serve run is one request at concurrency 1 (its TTFT is the figure); the same --seed sends the
# same prompt. Writes prefix_bench.json (every run, keyed), prefix_bench.txt and serve.log.
prefix_bench() {
    local out=${1:-${OUT:-gpu-check-out}}
    mkdir -p "$out"
    unpack
    local bin="$CARRY_DIR/bin/onecard" port=8012 status=0 runs=()
    start_dummy_serve "$out" || return 1
    local pid=$SERVE_PID
    one() {  # name seed input_len
        "$bin" bench-serve --base-url "http://127.0.0.1:$port" --out "$out/run_$1.json" --no-progress \
            --max-concurrency 1 --num-prompts 1 --random-input-len $3 --random-output-len 2 --ignore-eos \
            --seed $2 --timeout 900 2>&1 | tee -a "$out/prefix_bench.txt" | tail -3
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
        runs+=("$1")
        curl -s "http://127.0.0.1:$port/metrics" | grep -E '^vllm:(external_)?prefix_cache|^onecard:(kv_host|prefix_snap)' \
            > "$out/run_$1.metrics" || true
    }
    local len last=""
    for len in ${PREFIX_LENS:-32768 131072}; do
        one "cold_$len" $len $len
        one "cached_$len" $len $len
        last=$len
    done
    one "other_$last" 7 $last            # pushes the first long prompt out of the device pool
    one "host_$last" $last $last         # ... which now comes back from the host tier
    "$bin" bench-serve --base-url "http://127.0.0.1:$port" --out "$out/run_agent20.json" --no-progress \
        --max-concurrency 1 --num-prompts 1 --dataset-name agent-trace \
        --dataset-path bench/data/agent_trace_20turns.json --ignore-eos --timeout 900 2>&1 | tee -a "$out/prefix_bench.txt" | tail -4
    runs+=(agent20)
    kill -INT $pid; wait $pid
    # One JSON of every run (the device tool returns a few files only).
    python3 - "$out" "${runs[@]}" > "$out/prefix_bench.json" <<'PY'
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
doc = {}
for n in names:
    p = os.path.join(out, f"run_{n}.json")
    m = os.path.join(out, f"run_{n}.metrics")
    doc[n] = {"bench_serve": json.load(open(p)) if os.path.exists(p) else None,
              "metrics_after": open(m).read().splitlines() if os.path.exists(m) else []}
json.dump(doc, sys.stdout, indent=1)
PY
    rm -f "$out"/run_*
    tail -8 "$out/serve.log"
    return $status
}

# The soak (issue 22) against `onecard serve --device cuda`: 4 layers of the Flash shape with dummy
# weights made on the GPU, then the soak tool (SOAK_ARGS, default 10,000 requests at concurrency 64
# with aborts, malformed and slow clients): tools/soak/soak.mjs where node is installed, otherwise its
# standard-library port tools/soak/soak.py (the GPU image has python3 but no node; same flags and report).
# SOAK_DEVICE=cpu serves real synth weights on the CPU backend instead (SOAK_PORT apart, both can run
# at once). Writes soak.json, soak.txt and serve.log.
soak() {
    local out=${1:-${OUT:-gpu-check-out}}
    mkdir -p "$out"
    local tool
    if command -v node > /dev/null; then tool=(node tools/soak/soak.mjs)
    elif command -v python3 > /dev/null; then tool=(python3 tools/soak/soak.py)
    else echo "soak: neither node nor python3 on this machine" | tee "$out/soak.txt"; return 1; fi
    unpack
    local bin="$CARRY_DIR/bin/onecard" device=${SOAK_DEVICE:-cuda} port=${SOAK_PORT:-8013} status=0
    local dir=/tmp/onecard-soak-$device
    rm -rf "$dir"
    if [ "$device" = cpu ]; then  # SOAK_DEVICE=cpu: the CPU backend on this machine's cores, real synth weights
        "$bin" synth --preset ${SOAK_PRESET:-small} --out "$dir" --seed 1 --quiet || return 1
        "$bin" serve "$dir" --device cpu --port $port --max-model-len 4096 --max-num-seqs 64 --no-access-log \
            ${SERVE_ARGS:-} > "$out/serve.log" 2>&1 &
    else
        # The CUDA backend needs the real per-layer dimensions (the small preset's are not supported):
        # SOAK_LAYERS layers of the Flash shape with SOAK_EXPERTS experts, dummy weights made on the GPU.
        "$bin" synth --preset flash --layers ${SOAK_LAYERS:-4} --experts ${SOAK_EXPERTS:-8} --mtp 0 --config-only \
            --out "$dir" > /dev/null || return 1
        "$bin" serve "$dir" --load-format dummy --tokenizer demo/small/tokenizer.json --device cuda --port $port \
            --max-model-len 4096 --max-num-seqs 64 --no-access-log ${SERVE_ARGS:-} > "$out/serve.log" 2>&1 &
    fi
    local pid=$!
    wait_ready "$out/serve.log" $pid ${SMOKE_WAIT:-300} || { tail -30 "$out/serve.log"; kill $pid; return 1; }
    echo "soak: ${tool[*]}" | tee "$out/soak.txt"
    # SOAK_ROUNDS (default 1) rounds against the same server, seeds 1, 2, ...: the RSS of a later
    # round tells warm-up from a leak. Round r writes soak.json (r = 1) or soak-r.json.
    local r json
    for r in $(seq 1 "${SOAK_ROUNDS:-1}"); do
        json="$out/soak.json"
        [ "$r" -eq 1 ] || json="$out/soak-$r.json"
        "${tool[@]}" --base-url "http://127.0.0.1:$port" --pid $pid --json "$json" --seed "$r" \
            ${SOAK_ARGS:---n 10000 --concurrency 64 --max-seconds 420} 2>&1 | tee -a "$out/soak.txt"
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    done
    kill -INT $pid; wait $pid
    tail -4 "$out/serve.log"
    return $status
}

case "$mode" in
    --pack) pack ;;
    --serve-smoke) shift; serve_smoke "$@" ;;
    --serve-bench) shift; serve_bench "$@" ;;
    --prefix-bench) shift; prefix_bench "$@" ;;
    --soak) shift; soak "$@" ;;
    --run) shift; run "$@" ;;
    --bench) shift; bench "$@" ;;
    *) sed -n '2,34p' "$0"; exit 2 ;;
esac
