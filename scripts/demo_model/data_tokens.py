"""Tokenised training examples: ids plus a loss weight per token, and packing into rows.

Chat examples are (prompt, completion): the prompt ends with a control token (<think> or </think>
after <｜Assistant｜>, or a tool-result turn's transition) and the completion ends with EOS, so the
two can be encoded separately and concatenated: added tokens split the text first, hence the ids are
those of the whole string. The loss covers the completion only. Brown paragraphs are BOS + text with
the loss on the text.

Loss weights (float32): 0 on the prompt (never predicted) except the earlier assistant turns a row's
"spans" name (make_data.py --multi-call), 1 on the completion and those turns, CALL_WEIGHT on the
DSML tool-call block (from the first "｜DSML｜" to the end of the completion: the tool name and
arguments, the part held-out tools test). "｜DSML｜" is an added token, so encoding the text before
it and the block separately gives the ids of the whole string, as with the prompt/completion split.
"""

import json
import os
import random
import re
import subprocess
from pathlib import Path

import numpy as np

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
DSML = "｜DSML｜"
CALL_WEIGHT = 2.0


def split_call(completion: str):
    """(text before the tool-call block, the block from its first DSML token) of a completion;
    the block is "" when there is no call."""
    i = completion.find(DSML)
    return (completion, "") if i < 0 else (completion[:i], completion[i:])


def segments(chat: dict):
    """[(text, loss weight)] of a rendered chat row whose concatenation is prompt + completion: the prompt
    at 0 except its "spans" (earlier assistant turns, make_data.py --multi-call) and the completion, each
    at 1 with its tool-call block at CALL_WEIGHT. Every boundary falls after an added token (<think>,
    </think>, EOS) or before one (DSML), so encoding the pieces one by one gives the whole string's ids."""
    out, at, prompt = [], 0, chat["prompt"]

    def trained(text):
        before, block = split_call(text)
        out.extend([(before, 1.0), (block, CALL_WEIGHT)])

    for start, end in chat.get("spans", []):
        out.append((prompt[at:start], 0.0))
        trained(prompt[start:end])
        at = end
    out.append((prompt[at:], 0.0))
    trained(chat["completion"])
    return out


class Encoder:
    """tokenizer.json -> ids: through the `tokenizers` library when present; else through `onecard tokenize
    --jsonl` when `onecard` or the ONECARD_BIN environment variable names the binary (the CPU machine lacks
    the library; both implement the same byte-level BPE, and the e2e tests check onecard's ids against the
    library's); else, for a merge-free byte-level file only (tokenizer_build.py bytes), encoded here."""

    def __init__(self, path: Path, onecard=None):
        j = json.loads(Path(path).read_text())
        self.path = Path(path)
        self.added = {a["content"]: a["id"] for a in j["added_tokens"]}
        self.vocab_size = max(list(j["model"]["vocab"].values()) + list(self.added.values())) + 1
        self.onecard = None
        try:
            from tokenizers import Tokenizer
            self.tok = Tokenizer.from_file(str(path))
        except ImportError:
            self.tok = None
            onecard = onecard or os.environ.get("ONECARD_BIN")
            if j["model"]["merges"] and onecard:
                self.onecard = onecard
                return
            if j["model"]["merges"]:
                raise RuntimeError("without the tokenizers library only a merge-free tokenizer works, unless the "
                                   "onecard binary is given (ONECARD_BIN)")
            from tokenizer_build import byte_alphabet
            self.byte_ids = [j["model"]["vocab"][c] for c in byte_alphabet()]
            self.split = re.compile("(" + "|".join(re.escape(s) for s in sorted(self.added, key=len, reverse=True)) + ")")

    def encode(self, text: str) -> list:
        if self.tok is not None:
            return self.tok.encode(text, add_special_tokens=False).ids
        if self.onecard is not None:
            return self.encode_batch([text])[0]
        ids = []
        for part in self.split.split(text):
            if part in self.added:
                ids.append(self.added[part])
            else:
                ids.extend(self.byte_ids[b] for b in part.encode())
        return ids

    def encode_batch(self, texts: list) -> list:
        if self.tok is not None:
            return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]
        if self.onecard is not None:
            lines = "".join(json.dumps(t) + "\n" for t in texts)
            out = subprocess.run([self.onecard, "tokenize", "--tokenizer", str(self.path), "--jsonl"], input=lines,
                                 capture_output=True, text=True, check=True).stdout.splitlines()
            assert len(out) == len(texts), f"onecard tokenize --jsonl: {len(out)} lines for {len(texts)} texts"
            return [json.loads(o) for o in out]
        return [self.encode(t) for t in texts]


def load_examples(data: Path, enc: Encoder, split: str, max_len: int):
    """[(ids np.int32, weights np.float32, kind)] of one split ("train" / "test"); longer ones are dropped."""
    out = []
    with open(data / f"brown_{split}.jsonl") as f:
        brown = [json.loads(line)["text"] for line in f]
    with open(data / f"chat_{split}.jsonl") as f:
        chats = [json.loads(line) for line in f]
    bos = enc.added[BOS]
    for ids in enc.encode_batch(brown):
        ids = [bos] + ids
        # Paragraphs longer than a row are cut into row-sized pieces (each BOS-less after the first).
        for s in range(0, len(ids), max_len):
            piece = ids[s:s + max_len]
            m = np.ones(len(piece), np.float32)
            if s == 0:
                m[0] = 0
            out.append((np.array(piece, np.int32), m, "brown"))
    segs = [segments(c) for c in chats]
    flat = enc.encode_batch([text for sg in segs for text, _ in sg])
    dropped, at = 0, 0
    for c, sg in zip(chats, segs):
        pieces = flat[at:at + len(sg)]
        at += len(sg)
        if sum(len(p) for p in pieces) > max_len:
            dropped += 1
            continue
        w = np.concatenate([np.full(len(p), wt, np.float32) for p, (_, wt) in zip(pieces, sg)])
        out.append((np.array([t for p in pieces for t in p], np.int32), w, c["kind"]))
    return out, dropped


def pack_rows(examples, T: int, rng: random.Random):
    """Greedy packing of shuffled examples into rows of T+1 tokens (inputs T, targets shifted by 1);
    the tail of a row is EOS padding with weight 0. Returns ids [N, T+1] int64, weights [N, T+1] float32.
    Deterministic for the same examples and rng, so a continued run sees the same rows."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    rows, cur, cur_len = [], [], 0
    for i in order:
        n = len(examples[i][0])
        if cur and cur_len + n > T + 1:
            rows.append(cur)
            cur, cur_len = [], 0
        cur.append(i)
        cur_len += n
    if cur:
        rows.append(cur)
    ids = np.full((len(rows), T + 1), 1, np.int64)
    weights = np.zeros((len(rows), T + 1), np.float32)
    for r, members in enumerate(rows):
        o = 0
        for i in members:  # numpy slices, not Python lists: ~100M tokens pack in seconds
            a, w, _ = examples[i]
            ids[r, o:o + len(a)] = a
            weights[r, o:o + len(a)] = w
            o += len(a)
    return ids, weights
