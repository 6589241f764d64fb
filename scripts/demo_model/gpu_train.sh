#!/usr/bin/env bash
# The demo model's training on the GPU machine, in one or several device calls (each at most 600 s).
# Usage: gpu_train.sh CARRY_DIR OUT_DIR MINUTES [KEEP_DIR [last]]
#   CARRY_DIR holds scripts/ (a copy of scripts/demo_model and scripts/golden/ckpt_reader.py) and
#   data.tar.xz (make_data.py's output without tokenizer_corpus.txt, which is rebuilt here).
#   MINUTES caps this call's training; it also stops by the call's deadline (CALL_LIMIT s, default 600,
#   from this script's start, less the time saving, packing and, in the last call, evaluation take).
#   KEEP_DIR (optional) is a directory that survives between calls: the tokenizer (built by the first
#   call, reused by later ones), the packed rows and state.pt (train.py --state-dir: model, optimiser,
#   step, elapsed time, data position; saved every 60 s and at the end). The whole schedule is
#   TOTAL_MINUTES (env, default 19.5) long across the calls.
#   VOCAB (env, default 8192): the size of the BPE a run from scratch trains (no carried tokenizer).
#   `last` (5th arg): this call ends the schedule (train.py --final, so the quantisation-aware phase
#   runs), evaluates (evaluate.py) and packs the run; other calls print the losses and pack the logs.
#   Without KEEP_DIR it is a single call that trains MINUTES from scratch and evaluates.
# Everything it returns goes to OUT_DIR: demo_run.tar.gz split into 15 MB parts (pack_run.sh: the device
# returns at most 16 MiB a file and 64 MiB in all; what does not fit is named in a LEFT ON THE DEVICE
# line), or train_logs.tar.gz after a non-last call.
set -uo pipefail
t0=$(date +%s)
repo=$(pwd); carry=$(realpath "$1"); out=$(realpath "$2"); minutes=$3
keep=${4:-}; last=${5:-}
call_limit=${CALL_LIMIT:-600}
total_minutes=${TOTAL_MINUTES:-19.5}  # 7 + 7.5 + 5 (NEXT_RUN.md)
eval_s=${EVAL_SECONDS:-150}   # evaluate.py took 69 s in round 2; a margin for the longer prompts
if [ -z "$keep" ]; then
    last=last; total_minutes=$minutes
    keep_args=""
else
    mkdir -p "$keep"; keep=$(realpath "$keep")
    keep_args="--state-dir $keep"
    [ -f $keep/state.pt ] && echo "continuing from $keep/state.pt" || echo "no $keep/state.pt: training starts from scratch"
fi
work=/tmp/demo_work; rm -rf $work; mkdir -p $work/data $work/run
export PYTHONUNBUFFERED=1
cd $work
tar -xf $carry/data.tar.* -C data
S=$carry/scripts
python3 -c 'import torch, tokenizers; print("torch", torch.__version__, "tokenizers", tokenizers.__version__, torch.cuda.get_device_name())'
if [ -n "$keep" ] && [ -f $keep/tokenizer.json ]; then  # a continued run keeps the first call's tokenizer
    cp $keep/tokenizer.json run/tokenizer.json
elif [ -f $carry/tokenizer.json ]; then
    cp $carry/tokenizer.json run/tokenizer.json
else
    python3 $S/tokenizer_build.py corpus data
    python3 $S/tokenizer_build.py train data $S/tokenizer_template.json run/tokenizer.json ${VOCAB:-8192} || exit 1
    rm -f data/tokenizer_corpus.txt
    python3 $S/copy_distance.py --data data --tokenizer run/tokenizer.json --limit 4000 2>&1 | tee run/copy_distance.txt
fi
[ -n "$keep" ] && [ ! -f $keep/tokenizer.json ] && cp run/tokenizer.json $keep/tokenizer.json
python3 - <<'PY'
import json, sys
from tokenizers import Tokenizer
t = Tokenizer.from_file("run/tokenizer.json")
row = json.loads(open("data/chat_train.jsonl").readline())
text = row["prompt"] + row["completion"]
ids = t.encode(text, add_special_tokens=False).ids
if t.decode(ids, skip_special_tokens=False) != text:
    print("WARNING: decode(encode(text)) != text")
for s in ["<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜", "<｜end▁of▁sentence｜>"]:
    if len(t.encode(s, add_special_tokens=False).ids) != 1:
        print("WARNING: not one token:", s)
print("tokenizer ok:", t.get_vocab_size(), "ids;", len(text), "chars ->", len(ids), "tokens")
PY
[ $? -eq 0 ] || echo "tokenizer check could not run"
# respace.py's promise, checked with the library that trains (onecard's BPE is checked in CI): the new
# tokenizer's "words_breaking_the_rule" must be 0.
[ -f $carry/respace ] && [ -f $carry/init_path ] && \
    python3 $S/respace.py check $repo/$(cat $carry/init_path)/tokenizer.json run/tokenizer.json --data data
echo "tokenizer: $(( $(date +%s) - t0 )) s"
# Training stops by this time at the latest: what is left is for saving, packing and evaluation.
if [ "$last" = "last" ]; then
    stop_at=$(( t0 + call_limit - 40 - eval_s )); final="--final"
else
    stop_at=$(( t0 + call_limit - 40 )); final=""
fi
# A warm start: CARRY_DIR/model.pt (fp32 weights), or CARRY_DIR/init_path naming an official-format
# checkpoint in the repository (e.g. models/demo; train.py dequantises it). Used only while KEEP_DIR
# has no state.pt (train.py prefers the state).
# With CARRY_DIR/respace (make_carry.sh RESPACE=1) that checkpoint is first carried over to the carry's
# tokenizer (respace.py model: the twins' rows copied from their space-led tokens').
resume=""
[ -f $carry/init_path ] && resume="--resume $repo/$(cat $carry/init_path)"
if [ -f $carry/init_path ] && [ -f $carry/respace ]; then
    python3 $S/respace.py model --ckpt $repo/$(cat $carry/init_path) --tokenizer run/tokenizer.json --out $work/init \
        && resume="--resume $work/init/model.pt" || { echo "respace.py model failed"; exit 1; }
fi
[ -f $carry/model.pt ] && resume="--resume $carry/model.pt"
# With CARRY_DIR/widen (make_carry.sh WIDEN=N) the warm start's experts are first grown to N intermediate
# units (widen.py, function-preserving; a start already N wide is unchanged). TRAIN_ARGS names the shape.
if [ -f $carry/widen ] && [ -n "$resume" ]; then
    python3 $S/widen.py --from ${resume#--resume } --inter $(cat $carry/widen) --out $work/widened.pt \
        && resume="--resume $work/widened.pt" || { echo "widen.py failed"; exit 1; }
fi
# With CARRY_DIR/deepen (make_carry.sh DEEPEN=SHAPE) the warm start first grows the shape's extra layers
# (deepen.py, function-preserving; a start already that deep is unchanged). TRAIN_ARGS names the shape.
if [ -f $carry/deepen ] && [ -n "$resume" ]; then
    python3 $S/deepen.py --from ${resume#--resume } --shape $(cat $carry/deepen) --out $work/deepened.pt \
        && resume="--resume $work/deepened.pt" || { echo "deepen.py failed"; exit 1; }
fi
python3 $S/train.py --data data --tokenizer run/tokenizer.json --out run --minutes $minutes \
    --total-minutes $total_minutes --stop-at $stop_at $final $keep_args $resume ${TRAIN_ARGS:-} 2>&1 | tee run/train_stdout.log
echo "after training: $(( $(date +%s) - t0 )) s"
if [ "$last" = "last" ]; then
    python3 $S/evaluate.py --model run/model.pt --data data --tokenizer run/tokenizer.json --out run --tool-limit 200 ${EVAL_ARGS:-} 2>&1 | tee run/eval_stdout.log
    echo "total: $(( $(date +%s) - t0 )) s"
    bash $S/pack_run.sh $work $out
else
    python3 - <<'PY'
import json
rows = [json.loads(l) for l in open("run/train_log.jsonl")]
for r in rows[:: max(1, len(rows) // 12)] + rows[-1:]:
    print({k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in r.items()})
PY
    rm -f run/model.pt  # the state in KEEP_DIR holds the weights; only the last call returns a model
    tar -czf $out/train_logs.tar.gz -C $work run
    echo "total: $(( $(date +%s) - t0 )) s"
fi
ls -la $out
