"""Tokenised training examples: ids plus a loss weight per token, and packing into rows.

Chat examples are (prompt, completion): the prompt ends with a control token (<think> or </think>
after <｜Assistant｜>, or a tool-result turn's transition) and the completion ends with EOS, so the
two can be encoded separately and concatenated: added tokens split the text first, hence the ids are
those of the whole string. The loss covers the completion only. Brown paragraphs are BOS + text with
the loss on the text.

Loss weights (float32): 0 on the prompt (never predicted), 1 on the completion, CALL_WEIGHT on the
DSML tool-call block (from the first "｜DSML｜" to the end of the completion: the tool name and
arguments, the part held-out tools test). "｜DSML｜" is an added token, so encoding the text before
it and the block separately gives the ids of the whole string, as with the prompt/completion split.
"""

import json
import random
import re
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


class Encoder:
    """tokenizer.json -> ids, through the `tokenizers` library when present; otherwise only a
    merge-free byte-level file (tokenizer_build.py bytes) is accepted, encoded here directly."""

    def __init__(self, path: Path):
        j = json.loads(Path(path).read_text())
        self.added = {a["content"]: a["id"] for a in j["added_tokens"]}
        self.vocab_size = max(list(j["model"]["vocab"].values()) + list(self.added.values())) + 1
        try:
            from tokenizers import Tokenizer
            self.tok = Tokenizer.from_file(str(path))
        except ImportError:
            self.tok = None
            assert not j["model"]["merges"], "without the tokenizers library only a merge-free tokenizer works"
            from tokenizer_build import byte_alphabet
            self.byte_ids = [j["model"]["vocab"][c] for c in byte_alphabet()]
            self.split = re.compile("(" + "|".join(re.escape(s) for s in sorted(self.added, key=len, reverse=True)) + ")")

    def encode(self, text: str) -> list:
        if self.tok is not None:
            return self.tok.encode(text, add_special_tokens=False).ids
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
        return [self.encode(t) for t in texts]


def load_examples(data: Path, enc: Encoder, split: str, max_len: int):
    """[(ids np.int32, weights np.float32, kind)] of one split ("train" / "test"); longer ones are dropped."""
    out = []
    brown = [json.loads(l)["text"] for l in open(data / f"brown_{split}.jsonl")]
    chats = [json.loads(l) for l in open(data / f"chat_{split}.jsonl")]
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
    parts = [split_call(c["completion"]) for c in chats]
    p_ids = enc.encode_batch([c["prompt"] for c in chats])
    c_ids = enc.encode_batch([p[0] for p in parts])
    k_ids = enc.encode_batch([p[1] for p in parts])
    dropped = 0
    for c, p, q, k in zip(chats, p_ids, c_ids, k_ids):
        if len(p) + len(q) + len(k) > max_len:
            dropped += 1
            continue
        w = np.concatenate([np.zeros(len(p), np.float32), np.ones(len(q), np.float32),
                            np.full(len(k), CALL_WEIGHT, np.float32)])
        out.append((np.array(p + q + k, np.int32), w, c["kind"]))
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
