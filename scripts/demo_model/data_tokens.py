"""Tokenised training examples: ids plus a loss mask (1 = predicted), and packing into rows.

Chat examples are (prompt, completion): the prompt ends with a control token (<think> or </think>
after <｜Assistant｜>, or a tool-result turn's transition) and the completion ends with EOS, so the
two can be encoded separately and concatenated: added tokens split the text first, hence the ids are
those of the whole string. The loss covers the completion only. Brown paragraphs are BOS + text with
the loss on the text.
"""

import json
import random
import re
from pathlib import Path

import numpy as np

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


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
    """[(ids np.int32, mask np.uint8, kind)] of one split ("train" / "test"); longer ones are dropped."""
    out = []
    brown = [json.loads(l)["text"] for l in open(data / f"brown_{split}.jsonl")]
    chats = [json.loads(l) for l in open(data / f"chat_{split}.jsonl")]
    bos = enc.added[BOS]
    for ids in enc.encode_batch(brown):
        ids = [bos] + ids
        # Paragraphs longer than a row are cut into row-sized pieces (each BOS-less after the first).
        for s in range(0, len(ids), max_len):
            piece = ids[s:s + max_len]
            m = np.ones(len(piece), np.uint8)
            if s == 0:
                m[0] = 0
            out.append((np.array(piece, np.int32), m, "brown"))
    p_ids = enc.encode_batch([c["prompt"] for c in chats])
    c_ids = enc.encode_batch([c["completion"] for c in chats])
    dropped = 0
    for c, p, q in zip(chats, p_ids, c_ids):
        if len(p) + len(q) > max_len:
            dropped += 1
            continue
        out.append((np.array(p + q, np.int32), np.concatenate([np.zeros(len(p), np.uint8), np.ones(len(q), np.uint8)]),
                    c["kind"]))
    return out, dropped


def pack_rows(examples, T: int, rng: random.Random):
    """Greedy packing of shuffled examples into rows of T+1 tokens (inputs T, targets shifted by 1);
    the tail of a row is EOS padding with mask 0. Returns ids [N, T+1] int64, mask [N, T+1] uint8."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    rows, masks = [], []
    cur, cur_m = [], []
    for i in order:
        ids, m, _ = examples[i]
        if len(cur) + len(ids) > T + 1:
            rows.append(cur)
            masks.append(cur_m)
            cur, cur_m = [], []
        cur = cur + ids.tolist()
        cur_m = cur_m + m.tolist()
    if cur:
        rows.append(cur)
        masks.append(cur_m)
    ids = np.full((len(rows), T + 1), 1, np.int64)
    mask = np.zeros((len(rows), T + 1), np.uint8)
    for r, (a, m) in enumerate(zip(rows, masks)):
        ids[r, :len(a)] = a
        mask[r, :len(m)] = m
    return ids, mask
