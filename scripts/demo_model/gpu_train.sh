#!/usr/bin/env bash
# The demo model's training run on the GPU machine (one device call): tokenizer, training, evaluation.
# Usage: gpu_train.sh CARRY_DIR OUT_DIR MINUTES
#   CARRY_DIR holds scripts/ (a copy of scripts/demo_model and scripts/golden/ckpt_reader.py) and
#   data.tar.gz (make_data.py's output without tokenizer_corpus.txt); with model.pt and tokenizer.json
#   there too, training continues from them. Everything it writes goes to
#   OUT_DIR as demo_run.tar.gz split into 15 MB parts (the device returns at most 16 MiB a file).
set -uo pipefail
carry=$(realpath "$1"); out=$(realpath "$2"); minutes=$3
work=/tmp/demo_work; rm -rf $work; mkdir -p $work/data $work/run
export PYTHONUNBUFFERED=1
cd $work
tar -xzf $carry/data.tar.gz -C data
S=$carry/scripts
python3 -c 'import torch, tokenizers; print("torch", torch.__version__, "tokenizers", tokenizers.__version__, torch.cuda.get_device_name())'
t0=$(date +%s)
if [ -f $carry/tokenizer.json ]; then  # a continued run keeps the first run's tokenizer
    cp $carry/tokenizer.json run/tokenizer.json
else
    python3 $S/tokenizer_build.py corpus data
    python3 $S/tokenizer_build.py train data $S/tokenizer_template.json run/tokenizer.json 8192 || exit 1
fi
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
echo "tokenizer: $(( $(date +%s) - t0 )) s"
resume=""; [ -f $carry/model.pt ] && resume="--resume $carry/model.pt"
python3 $S/train.py --data data --tokenizer run/tokenizer.json --out run --minutes $minutes $resume ${TRAIN_ARGS:-} 2>&1 | tee run/train_stdout.log
python3 $S/evaluate.py --model run/model.pt --data data --tokenizer run/tokenizer.json --out run --tool-limit 200 ${EVAL_ARGS:-} 2>&1 | tee run/eval_stdout.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $work/demo_run.tar.gz -C $work run
split -b 15000000 -d $work/demo_run.tar.gz $out/demo_run.tar.gz.part
ls -la $out
