#!/usr/bin/env python3
"""A demo tokenizer whose words tokenise the same with and without their leading space, and the
demo model carried over to it (a warm start for the next training round).

Why: DSML writes a string argument straight after `">` (`<｜DSML｜parameter name="city" string="true">Boston`),
where the DeepSeek pre-tokenizer gives the value without the space it has in the request (" Boston").
A BPE trained the usual way spells the two differently: " Boston" is one token, "Boston" is "B" + "oston".
Copying a value is then spelling it out, which the 13.6M-parameter model does badly: on round 4's 200
held-out tool requests through `serve --strict-tools-all`, the 48 whose values tokenise differently in
the call were exact in 17 (35%), the other 152 in 80 (53%) (`copy_align.py`).

`tokenizer`: from a trained tokenizer.json, every merge that extends a space-led token (" a" + "b")
becomes the same merge without the space ("a" + "b", a new token "ab" where there was none: the
"twin" of " ab"), ranked where the original was; then one merge " " + Z for every space-led token " Z",
ranked after every merge without a space. BPE applies the lowest-ranked merge first, so a word is
merged as it would be alone before the space can join its first token: " w" tokenises as " " + w's
first token (one token where " t1" is in the vocabulary) followed by w's other tokens, exactly.
Existing ids are kept; twins are appended. On the shipped demo tokenizer: 7,868 merges -> 10,368, 2,403
twins; none of the 23,129 words of the held-out text breaks the rule (34% did, through onecard's BPE; `check`).
--prune-with DATA then drops the tokens DATA's training text never makes (renumbering ids; 440 with
round 7's data), so the checkpoint stays under 20 MB (19.7 MB with 10,155 ids).
`model`: the demo checkpoint over the new vocabulary, token by token: old tokens keep their rows, a twin
reads as its space-led token (embedding and hash routes copied) and starts with the mean output row
(train.py's model.pt, train_meta.json and the new tokenizer.json, for export.py or train.py --resume).

--merges N first cuts OLD to its first N merges (`truncate`: the BPE that training would have made with a
smaller vocabulary); `model` then starts a token the old model never had from its pieces' rows.

Usage: respace.py tokenizer OLD.json NEW.json [--prune-with DATA] [--merges N]
       respace.py model --ckpt models/demo --tokenizer NEW.json --out RUN
       respace.py check OLD.json NEW.json --data DATA [--train-rows N]
           (the rule and token counts on DATA's held-out text)
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SPACE = "Ġ"  # the byte-level alphabet's space


def _pairs(merges):
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def respace(tok: dict):
    """(new tokenizer.json dict, [twin token strings in id order])."""
    vocab = dict(tok["model"]["vocab"])
    plain, space, spaces_only, twins = [], [], [], []
    have = set(_pairs(tok["model"]["merges"]))
    next_id = max(vocab.values()) + 1
    for rank, (a, b) in enumerate(_pairs(tok["model"]["merges"])):
        if not a.startswith(SPACE):
            plain.append((rank, a, b))
        elif set(a + b) == {SPACE}:  # runs of spaces: their own pre-tokens, merged as before
            spaces_only.append((rank, a, b))
        elif a == SPACE:
            space.append((rank, b))
        else:
            a_bare, z = a[1:], a[1:] + b
            # " a" was made by an earlier merge, whose twin (or bare token) "a" exists by now.
            assert a_bare in vocab, f"{a!r} + {b!r}: no token {a_bare!r}"
            if (a_bare, b) not in have:
                plain.append((rank, a_bare, b))
                have.add((a_bare, b))
            if z not in vocab:
                vocab[z] = next_id
                next_id += 1
                twins.append(z)
            space.append((rank, z))
    merges = ([f"{a} {b}" for _, a, b in sorted(plain)] + [f"{SPACE} {z}" for _, z in sorted(space)] +
              [f"{a} {b}" for _, a, b in spaces_only])
    out = json.loads(json.dumps(tok))
    out["model"]["vocab"] = vocab
    out["model"]["merges"] = merges
    return out, twins


def truncate(tok: dict, n_merges: int) -> dict:
    """The BPE a training run that stopped after its first `n_merges` merges would have made: the merges
    are learned in order, most frequent pair first, so a smaller vocabulary of the same data is a prefix
    of the list. Keeps the added tokens, the byte alphabet and what the kept merges make; ids renumbered
    in their old order."""
    from tokenizer_build import byte_alphabet
    merges = _pairs(tok["model"]["merges"])
    if not 0 <= n_merges <= len(merges):
        raise SystemExit(f"truncate: {n_merges} merges asked, the tokenizer has {len(merges)}")
    keep = {a + b for a, b in merges[:n_merges]} | {a["content"] for a in tok["added_tokens"]} | set(byte_alphabet())
    return _subset(tok, keep, [f"{a} {b}" for a, b in merges[:n_merges]])


def merge_ranks(merges) -> dict:
    """{(left, right): rank} of a tokenizer.json's merge list, for bpe_pieces."""
    return {p: r for r, p in enumerate(_pairs(merges))}


def bpe_pieces(token: str, rank: dict) -> list:
    """`token` (one pre-token in the byte-level alphabet) split by the BPE of `rank` (merge_ranks; the
    lowest-ranked pair merges first)."""
    parts = list(token)
    while len(parts) > 1:
        r, i = min((rank.get((parts[i], parts[i + 1]), len(rank)), i) for i in range(len(parts) - 1))
        if r == len(rank):
            break
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def twin_pairs(tok: dict):
    """[(twin id, space-led id)] of the respaced tokenizer.json dict `tok`: each twin `respace` appended
    ("Boston", made where a word starts without its space: a DSML value, a line) with its space-led token
    (" Boston"); the pairs train.py --tie-twins ties. Twins are the bare tokens after every space-led id
    (`respace` appends them, `prune` keeps the order). A bare piece the trained BPE had already ("see",
    "er") also continues words, so it keeps rows of its own. Runs of spaces are not words."""
    vocab = tok["model"]["vocab"]
    spaced = {t: i for t, i in vocab.items() if t.startswith(SPACE) and len(t) > 1 and t[1] != SPACE}
    last = max(spaced.values(), default=-1)
    return sorted((vocab[t[1:]], i) for t, i in spaced.items() if vocab.get(t[1:], -1) > last)


def prune(tok: dict, used_ids) -> dict:
    """The tokenizer without the BPE tokens that neither appear in `used_ids` (a data set's ids) nor are
    made on the way to one (every merge that makes a needed token needs its two parts); the added tokens
    and the byte alphabet always stay. Ids are renumbered in their old order; merges keep their order."""
    from tokenizer_build import byte_alphabet
    vocab = tok["model"]["vocab"]
    name = {i: t for t, i in vocab.items()}
    makers = {}
    for m in tok["model"]["merges"]:
        a, b = m.split(" ")
        makers.setdefault(a + b, []).append((a, b))
    needed, stack = set(), [name[i] for i in set(used_ids)]
    while stack:
        t = stack.pop()
        if t not in needed:
            needed.add(t)
            stack.extend(p for ab in makers.get(t, []) for p in ab)
    keep = needed | {a["content"] for a in tok["added_tokens"]} | set(byte_alphabet())
    return _subset(tok, keep, [m for m in tok["model"]["merges"] if m.replace(" ", "", 1) in keep
                               and all(p in keep for p in m.split(" "))])


def _subset(tok: dict, keep: set, merges: list) -> dict:
    """`tok` with only the tokens in `keep` (ids renumbered in their old order, the added tokens' ids with
    them) and `merges`."""
    out = json.loads(json.dumps(tok))
    kept = sorted((i, t) for t, i in tok["model"]["vocab"].items() if t in keep)
    out["model"]["vocab"] = {t: n for n, (_, t) in enumerate(kept)}
    out["model"]["merges"] = merges
    for a in out["added_tokens"]:
        a["id"] = out["model"]["vocab"][a["content"]]
    return out


def carry_model(state: dict, old_tok: dict, new_tok: dict) -> dict:
    """The state dict over the new vocabulary, token by token: a token the old vocabulary has keeps its
    rows; a twin Z reads as " Z" (embedding and hash routes copied); any other new token (one a smaller,
    truncated BPE keeps where the old one had merged further and pruned it) reads as the mean of its
    pieces under the old BPE, with the first piece's hash routes."""
    import torch
    old_v, new_v = old_tok["model"]["vocab"], new_tok["model"]["vocab"]
    n_new = max(new_v.values()) + 1
    src = torch.zeros(n_new, dtype=torch.long)
    fresh = torch.zeros(n_new, dtype=torch.bool)  # no row of its own in the old model
    pieces = {}  # new id -> old ids whose mean embedding it starts with
    rank = merge_ranks(old_tok["model"]["merges"])
    for t, i in new_v.items():
        if t in old_v:
            src[i] = old_v[t]
        elif SPACE + t in old_v:
            src[i], fresh[i] = old_v[SPACE + t], True
        else:
            pieces[i] = [old_v[p] for p in bpe_pieces(t, rank)]
            src[i], fresh[i] = pieces[i][0], True
    out = {}
    for k, v in state.items():
        # dsv4_torch's names: embed, head, layers.N.ffn.gate.tid2eid (the hash routes).
        out[k] = v[src].clone() if k in ("embed", "head") or k.endswith("tid2eid") else v
    for i, ids in pieces.items():
        out["embed"][i] = state["embed"][ids].mean(0)
    # Reading a twin is reading its space-led token, but writing one is new: with " Z"'s output row it
    # would take half the probability wherever " Z" is likely. The mean output row gives it the mean
    # logit, next to nothing wherever the model is sure, until training teaches it where twins go. A token
    # made of old pieces gets the mean row too: the model goes on writing the pieces until training moves it.
    out["head"][fresh] = state["head"].mean(0)
    return out


def breaking_the_rule(enc, words):
    """The words whose tokens after a space are neither " " + their own tokens nor their own tokens with
    the first one space-led (`enc`: a data_tokens.Encoder)."""
    bare, spaced = enc.encode_batch(words), enc.encode_batch([" " + w for w in words])
    space = enc.encode(" ")
    return [w for w, b, s in zip(words, bare, spaced) if s != space + b and (len(s) != len(b) or s[1:] != b[1:])]


def check(old: Path, new: Path, data: Path, train_rows: int = 0):
    """Prints, for each tokenizer, how many distinct words of DATA's held-out text break the rule (" w" is
    not " " + w's tokens nor w's tokens with a space-led first one), and the held-out text's token counts;
    with train_rows, the same for the distinct words of the first train_rows training chats (a tokenizer
    pruned with older data, met with new data)."""
    import itertools
    import re
    import data_tokens
    brown = [json.loads(line)["text"] for line in (data / "brown_test.jsonl").read_text().splitlines()]
    chats = [json.loads(line) for line in (data / "chat_test.jsonl").read_text().splitlines()]
    chats = [c["prompt"] + c["completion"] for c in chats]
    words = sorted({w for t in brown + chats for w in re.findall(r"[A-Za-z]+", t)})
    train_words = []
    if train_rows:
        with open(data / "chat_train.jsonl") as f:
            rows = (json.loads(line) for line in itertools.islice(f, train_rows))
            train_words = sorted({w for c in rows for w in re.findall(r"[A-Za-z]+", c["prompt"] + c["completion"])})
    out = {"words": len(words)} | ({"train_words": len(train_words)} if train_rows else {})
    for name, path in (("old", old), ("new", new)):
        enc = data_tokens.Encoder(path)
        out[name] = {"words_breaking_the_rule": len(breaking_the_rule(enc, words)),
                     "chat_tokens": sum(map(len, enc.encode_batch(chats))),
                     "brown_tokens": sum(map(len, enc.encode_batch(brown)))}
        if train_rows:
            out[name]["train_words_breaking_the_rule"] = len(breaking_the_rule(enc, train_words))
    print(json.dumps(out, indent=1))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenizer")
    t.add_argument("old")
    t.add_argument("new")
    t.add_argument("--prune-with", default="",
                   help="a make_data.py directory: drop the tokens its training text never uses (data_tokens.Encoder: "
                        "the tokenizers library, or onecard through ONECARD_BIN)")
    t.add_argument("--merges", type=int, default=None,
                   help="respace the BPE of OLD's first N merges (a smaller vocabulary of the same training data)")
    m = sub.add_parser("model")
    m.add_argument("--ckpt", required=True, help="an official-format demo checkpoint directory (models/demo)")
    m.add_argument("--tokenizer", required=True, help="respace.py tokenizer's output for that checkpoint's tokenizer")
    m.add_argument("--out", required=True)
    c = sub.add_parser("check", help="the rule and the token counts of two tokenizers on DATA's held-out text")
    c.add_argument("old")
    c.add_argument("new")
    c.add_argument("--data", required=True, help="a make_data.py directory (brown_test.jsonl, chat_test.jsonl)")
    c.add_argument("--train-rows", type=int, default=0,
                   help="also the words of DATA's first N training chats (chat_train.jsonl)")
    a = ap.parse_args()
    if a.cmd == "check":
        check(Path(a.old), Path(a.new), Path(a.data), a.train_rows)
        return
    if a.cmd == "tokenizer":
        old = json.loads(Path(a.old).read_text())
        if a.merges is not None:
            old = truncate(old, a.merges)
        new, twins = respace(old)
        if a.prune_with:
            import data_tokens
            with tempfile.TemporaryDirectory() as d:
                Path(d, "tokenizer.json").write_text(json.dumps(new, ensure_ascii=False))
                enc = data_tokens.Encoder(Path(d, "tokenizer.json"))
                examples, _ = data_tokens.load_examples(Path(a.prune_with), enc, "train", 1 << 30)
            before = len(new["model"]["vocab"])
            new = prune(new, {int(t) for ids, _, _ in examples for t in set(ids.tolist())})
            print(f"pruned {before - len(new['model']['vocab'])} tokens {a.prune_with}'s training text never uses")
        Path(a.new).write_text(json.dumps(new, ensure_ascii=False))
        print(f"{len(old['model']['merges'])} merges -> {len(new['model']['merges'])}; {len(twins)} twins, "
              f"vocabulary {max(new['model']['vocab'].values()) + 1}")
        return
    import torch
    import checkpoint_io
    import dataclasses
    ckpt, out = Path(a.ckpt), Path(a.out)
    old_tok = json.loads((ckpt / "tokenizer.json").read_text())
    new_tok = json.loads(Path(a.tokenizer).read_text())
    state = carry_model(checkpoint_io.load_weights(ckpt), old_tok, new_tok)
    # The source's own shape (a deepened or widened checkpoint keeps its layers), only the vocabulary new.
    cfg = dataclasses.replace(checkpoint_io.config_of(ckpt), vocab_size=max(new_tok["model"]["vocab"].values()) + 1)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(state, out / "model.pt")
    (out / "train_meta.json").write_text(json.dumps(
        {"config": dataclasses.asdict(cfg), "respaced_from": str(ckpt)}, indent=1))
    (out / "tokenizer.json").write_text(json.dumps(new_tok, ensure_ascii=False))
    print(f"wrote {out}: vocabulary {cfg.vocab_size}")


if __name__ == "__main__":
    main()
