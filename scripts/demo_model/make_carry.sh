#!/usr/bin/env bash
# Builds .carry/demo-train (git-ignored) for the device run (NEXT_RUN.md): scripts/ = scripts/demo_model
# plus scripts/golden/ckpt_reader.py (also at golden/, where checkpoint_io.py looks for it), and
# data.tar.xz = DATA without tokenizer_corpus.txt (gpu_train.sh rebuilds it on the device).
# With INIT (an exported demo checkpoint in the repository, e.g. models/demo) the run starts warm:
# its path goes to init_path (gpu_train.sh passes it to train.py --resume, which dequantises it; the
# tracked tree travels with the carry) and its tokenizer to tokenizer.json (so the device builds no new one).
# With RESPACE=1 (and INIT) the run starts from INIT carried over to respace.py's tokenizer: tokenizer.json
# is respace.py's rebuild of INIT's, and the marker file `respace` tells gpu_train.sh to carry the weights
# over (respace.py model) before the first call trains.
# With WIDEN=N (and INIT) the marker file `widen` holds N: gpu_train.sh grows the warm start's experts to N
# intermediate units (widen.py) before training; pass the matching shape in TRAIN_ARGS (--shape demo-wide).
# With RESPACE=1, RESPACE_FROM=BPE.json picks the BPE to respace instead of INIT's tokenizer, and MERGES=N
# keeps its first N merges (respace.py --merges: a smaller vocabulary; respace.py model starts the tokens
# INIT never had from their pieces).
# With DEEPEN=SHAPE (and INIT) the marker file `deepen` holds a train.py shape: gpu_train.sh appends the
# layers it has beyond INIT's (deepen.py, function-preserving) before training; pass --shape SHAPE too.
# Usage: [RESPACE=1 [RESPACE_FROM=BPE.json] [MERGES=N]] [WIDEN=N] [DEEPEN=SHAPE] [CARRY_NAME=demo-train]
#        [PYTHON=python3] make_carry.sh DATA_DIR [INIT]
#   (run from anywhere; writes .carry/CARRY_NAME under the repository root; PYTHON needs numpy with RESPACE)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
data=$(realpath "$1")
dst=$root/.carry/${CARRY_NAME:-demo-train}
rm -rf "$dst"; mkdir -p "$dst/scripts" "$dst/golden"
cp "$root"/scripts/demo_model/*.py "$root"/scripts/demo_model/*.sh "$root"/scripts/demo_model/*.json "$dst/scripts/"
cp "$root/scripts/golden/ckpt_reader.py" "$dst/scripts/"
cp "$root/scripts/golden/ckpt_reader.py" "$dst/golden/"
files=$(cd "$data" && ls brown_train.jsonl brown_test.jsonl chat_train.jsonl chat_test.jsonl tool_eval.jsonl)
# xz: the carry travels with the tracked tree (64 MiB in all), and xz packs the JSON text ~1/3 smaller.
# No times or owners in the archive: the same data packs to the same bytes (and size) every time.
tar -cf - --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$data" $files | xz -T2 -6 > "$dst/data.tar.xz"
if [ -n "${2:-}" ]; then  # a path inside the repository, which travels anyway: recorded, not copied
    (cd "$root" && realpath --relative-to=. "$2") > "$dst/init_path"
    if [ "${RESPACE:-0}" = 1 ]; then
        # Tokens DATA's training text never uses are dropped (the checkpoint stays under 20 MB); the data
        # is tokenised by onecard here (ONECARD_BIN, default build/onecard) when python lacks `tokenizers`.
        ONECARD_BIN=${ONECARD_BIN:-$root/build/onecard} ${PYTHON:-python3} "$root/scripts/demo_model/respace.py" tokenizer \
            "${RESPACE_FROM:-$2/tokenizer.json}" "$dst/tokenizer.json" --prune-with "$data" ${MERGES:+--merges $MERGES}
        touch "$dst/respace"
    else
        cp "$2/tokenizer.json" "$dst/tokenizer.json"
    fi
elif [ "${RESPACE:-0}" = 1 ]; then
    echo "RESPACE=1 needs INIT (the checkpoint whose tokenizer and weights are carried over)"; exit 1
fi
if [ -n "${WIDEN:-}" ]; then
    [ -n "${2:-}" ] || { echo "WIDEN needs INIT (the checkpoint whose experts are widened)"; exit 1; }
    echo "$WIDEN" > "$dst/widen"
fi
if [ -n "${DEEPEN:-}" ]; then
    [ -n "${2:-}" ] || { echo "DEEPEN needs INIT (the checkpoint that grows layers)"; exit 1; }
    echo "$DEEPEN" > "$dst/deepen"
fi
du -sh "$dst" "$dst/data.tar.xz"
# The carry travels with the working tree (tracked and untracked-not-ignored files, models/demo as it is
# now) and both must fit in 64 MiB.
carry_bytes=$(du -sb "$dst" | cut -f1)
tree_bytes=$(cd "$root" && { git ls-files -z --cached --others --exclude-standard \
    | xargs -0 stat -c %s 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}')
limit=${TRAVEL_LIMIT:-$(( 64 << 20 ))}  # TRAVEL_LIMIT: for the test only
echo "travels: carry $carry_bytes + working tree $tree_bytes bytes, limit $limit"
[ $(( carry_bytes + tree_bytes )) -le $limit ] || {
    echo "over the device's limit ($limit bytes): make the data smaller (fewer --chats)"; exit 1; }
