#!/usr/bin/env bash
# Measures one exported demo checkpoint on the CPU the way each round is judged (NEXT_RUN.md, docs/results.md),
# so every round runs the same sequence: exact tool calls with the grammar (`serve --strict-tools-all`, what
# `serve --demo` does) and without, bits per byte (measure_ppl.py), and with FULL=1 also MTP acceptance and
# greedy loops on the held-out chats (measure_spec.py), MTP on the tool requests, the teacher-forced first
# errors (first_errors.py) and `onecard validate` against the grammar serve.
# Usage: [FULL=1] [AGAINST_STRICT=F] [AGAINST_PLAIN=F] [AGAINST_CHATS=F] [PY=python3] [ONECARD=build/onecard]
#        measure_round.sh CKPT DATA OUT_DIR
#   DATA: make_data.py's output holding the held-out sets (tool_eval.jsonl, chat_test.jsonl, brown_test.jsonl).
#   AGAINST_*: an earlier checkpoint's strict.json / plain.json / spec_plain.json (measured on the same DATA)
#   to pair with (sign tests; for the chats, the looping pairs). PY needs numpy (measure_ppl, first_errors).
#   CONFIRM=DIR: a second held-out set (make_data.py's tool_eval.jsonl in DIR, every request of it) measured
#   with the grammar too, as confirm_strict.json; with AGAINST_CONFIRM=F (the earlier checkpoint's on DIR)
#   and AGAINST_STRICT, pooled.json pairs the two checkpoints over both sets at once (measure_tools --pool).
# Writes OUT_DIR/{strict,plain,ppl}.json (FULL=1: spec_plain, spec_mtp, plain_mtp, loops, first_errors,
# validate .json) with each step's stdout in a .txt beside it; servers listen on 127.0.0.1:18101-18104.
# A round's raw JSON for docs/bench/ is then round_json.py --out F --extra META.json [--run call1=RUN_DIR ...]
# call_A=OUT_DIR [call_B=...] (--run: each device call's unpacked run/, for the training rows).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ckpt=$(realpath "$1"); data=$(realpath "$2"); out=$3
mkdir -p "$out"; out=$(realpath "$out")
PY=${PY:-python3}
ONECARD=$(realpath "${ONECARD:-$root/build/onecard}")
S=$root/scripts/demo_model
export ONECARD_BIN=$ONECARD
pid=""
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""; fi; }
trap stop EXIT
serve() {  # PORT [serve flags...]: start onecard serve on CKPT and wait until it answers
    local port=$1; shift
    "$ONECARD" serve --model "$ckpt" --port "$port" "$@" > "$out/serve_$port.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 180); do
        curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
    done
    echo "measure_round: serve on port $port did not come up (see $out/serve_$port.log)" >&2
    return 1
}
against() { [ -n "${1:-}" ] && echo "--against $(realpath "$1")" || true; }
tools() {  # PORT NAME AGAINST [DATA N]
    "$PY" "$S/measure_tools.py" --url "http://127.0.0.1:$1" --data "${4:-$data}" --n "${5:-200}" --jobs 4 \
        --out "$out/$2.json" $(against "${3:-}") > "$out/$2.txt"
}

serve 18101 --strict-tools-all; tools 18101 strict "${AGAINST_STRICT:-}"
if [ -n "${CONFIRM:-}" ]; then
    confirm=$(realpath "$CONFIRM")
    tools 18101 confirm_strict "${AGAINST_CONFIRM:-}" "$confirm" "$(wc -l < "$confirm/tool_eval.jsonl")"
    if [ -n "${AGAINST_CONFIRM:-}" ] && [ -n "${AGAINST_STRICT:-}" ]; then
        "$PY" "$S/measure_tools.py" --pool "$out/strict.json" "$(realpath "$AGAINST_STRICT")" \
            "$out/confirm_strict.json" "$(realpath "$AGAINST_CONFIRM")" > "$out/pooled.json"
    fi
fi
stop
serve 18102; tools 18102 plain "${AGAINST_PLAIN:-}"
if [ "${FULL:-0}" = 1 ]; then
    "$PY" "$S/measure_spec.py" --url http://127.0.0.1:18102 --data "$data" --per-kind 20 \
        --out "$out/spec_plain.json" > "$out/spec_plain.txt"
fi
stop
"$PY" "$S/measure_ppl.py" --onecard "$ONECARD" --ckpt "$ckpt" --data "$data" --n 60 --out "$out/ppl.json" \
    > "$out/ppl.txt"
if [ "${FULL:-0}" = 1 ]; then
    # Speculation at a fixed draft length of 1: the drafter's own acceptance; greedy output must not change.
    serve 18103 --speculative-config '{"method":"mtp","num_speculative_tokens":1,"draft_length":"fixed"}'
    "$PY" "$S/measure_spec.py" --url http://127.0.0.1:18103 --data "$data" --per-kind 20 \
        --out "$out/spec_mtp.json" --against "$out/spec_plain.json" > "$out/spec_mtp.txt"
    tools 18103 plain_mtp "$out/plain.json"
    stop
    "$PY" "$S/measure_spec.py" --loops "$out/spec_plain.json" ${AGAINST_CHATS:+"$(realpath "$AGAINST_CHATS")"} \
        > "$out/loops.json"
    "$PY" "$S/first_errors.py" --onecard "$ONECARD" --ckpt "$ckpt" --data "$data" --n 200 \
        --out "$out/first_errors.json" > "$out/first_errors.txt"
    serve 18104 --strict-tools-all
    # validate exits non-zero when a gate fails (on the demo model some do): the report is the result.
    "$ONECARD" validate --base-url http://127.0.0.1:18104 --seed 7 --needle-len 2000 --mixed-prefill-len 6000 \
        --mixed-decode-tokens 64 --out "$out/validate.json" > "$out/validate.txt" 2>&1 || true
    stop
fi
echo "measure_round: done, $out"
