#!/usr/bin/env python3
"""The demo model's tokenizer: a small byte-level BPE in the DeepSeek tokenizer.json format.

`train`  (needs the `tokenizers` library, present on the GPU machine as a transformers dependency):
         trains BPE merges on DATA/tokenizer_corpus.txt with DeepSeek's pre-tokenizer, then writes
         tokenizer.json whose pre_tokenizer / decoder / normalizer / post_processor are copied
         verbatim from the template (the real DeepSeek V3 tokenizer.json), and whose added tokens
         are every DeepSeek-V4 added token except the placeholders, with the template's flags, at
         ids 0..K-1 (BOS 0, EOS 1 as config.json says). onecard finds chat tokens by their text,
         so their ids only have to be consistent within this file.
`bytes`  (no dependency): the same file with an empty merge list (every byte one token), for the
         CPU dry run of the training script.
`corpus DATA`: rebuilds DATA/tokenizer_corpus.txt from the train splits (make_data.py writes it too).
`specials TEMPLATE_V4_TOKENIZER_JSON OUT`: extracts the template (pre-tokenizer etc. and the added
         tokens) from a V4 tokenizer.json, e.g. the one `onecard synth --preset small` writes.
"""

import json
import sys
from pathlib import Path


def byte_alphabet():
    """GPT-2 byte -> printable unicode char map, in byte order (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, (chr(c) for c in cs)))
    return [table[b] for b in range(256)]


def token_bytes(tok: dict) -> dict:
    """id -> the bytes it stands for, for a byte-level tokenizer.json dict (added tokens: their UTF-8 text)."""
    byte_of = {c: b for b, c in enumerate(byte_alphabet())}
    out = {i: bytes(byte_of[c] for c in t) for t, i in tok["model"]["vocab"].items() if all(c in byte_of for c in t)}
    for a in tok["added_tokens"]:
        out[a["id"]] = a["content"].encode()
    return out


def extract_template(v4_json: Path, out: Path):
    j = json.loads(v4_json.read_text())
    # Reserved placeholders (V3 <｜place▁holder▁no▁N｜>, V4 <|place_holder_mm_span_N|>) are left out.
    added = [a for a in j["added_tokens"]
             if not a["content"].startswith(("<｜place▁holder▁no▁", "<|place_holder_mm_span_"))]
    added.sort(key=lambda a: a["id"])
    assert added[0]["content"] == "<｜begin▁of▁sentence｜>" and added[1]["content"] == "<｜end▁of▁sentence｜>"
    tmpl = {k: j[k] for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")}
    tmpl["added_tokens"] = [{k: v for k, v in a.items() if k != "id"} for a in added]
    out.write_text(json.dumps(tmpl, ensure_ascii=False, indent=1))
    print(f"{len(added)} added tokens")


def assemble(tmpl: dict, vocab_tokens: list, merges: list) -> dict:
    """tokenizer.json: added tokens at ids 0..K-1, then the BPE vocabulary (byte alphabet first)."""
    added = tmpl["added_tokens"]
    vocab = {}
    for i, a in enumerate(added):
        vocab[a["content"]] = i
    for t in vocab_tokens:
        if t not in vocab:
            vocab[t] = len(vocab)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, **a} for i, a in enumerate(added)],
        "normalizer": tmpl["normalizer"],
        "pre_tokenizer": tmpl["pre_tokenizer"],
        "post_processor": tmpl["post_processor"],
        "decoder": tmpl["decoder"],
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def train(data: Path, tmpl: dict, vocab_size: int, out: Path):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    specials = [a["content"] for a in tmpl["added_tokens"]]
    tok = Tokenizer(models.BPE())
    pts = []
    for p in tmpl["pre_tokenizer"]["pretokenizers"]:
        if p["type"] == "Split":
            pts.append(pre_tokenizers.Split(Regex(p["pattern"]["Regex"]), behavior="isolated", invert=False))
        else:
            pts.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(pts)
    n_bpe = vocab_size - len(specials)
    trainer = trainers.BpeTrainer(vocab_size=n_bpe, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])

    def lines():
        for line in open(data / "tokenizer_corpus.txt", encoding="utf-8"):
            for s in specials:  # control tokens are never split into merges
                line = line.replace(s, "\n")
            yield line
    tok.train_from_iterator(lines(), trainer)
    j = json.loads(tok.to_str())
    bpe_vocab = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    alphabet = byte_alphabet()
    rest = [t for t, _ in bpe_vocab if t not in set(alphabet)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    out.write_text(json.dumps(assemble(tmpl, alphabet + rest, merges), ensure_ascii=False))


def main():
    cmd = sys.argv[1]
    if cmd == "corpus":
        data = Path(sys.argv[2])
        with open(data / "tokenizer_corpus.txt", "w", encoding="utf-8") as f:
            for line in open(data / "brown_train.jsonl", encoding="utf-8"):
                f.write(json.loads(line)["text"] + "\n")
            for line in open(data / "chat_train.jsonl", encoding="utf-8"):
                d = json.loads(line)
                f.write(d["prompt"] + d["completion"] + "\n")
        return
    if cmd == "specials":
        extract_template(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    data, tmpl_path, out = Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    tmpl = json.loads(tmpl_path.read_text())
    if cmd == "train":
        train(data, tmpl, int(sys.argv[5]) if len(sys.argv) > 5 else 8192, out)
    elif cmd == "bytes":
        out.write_text(json.dumps(assemble(tmpl, byte_alphabet(), []), ensure_ascii=False))
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
