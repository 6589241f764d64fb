#!/usr/bin/env python3
"""What a make_data.py training set holds, in the figures NEXT_RUN.md quotes (written for onecard): the
share of the chat text that carries the loss (data_tokens.segments: completions, and the earlier turns
of --multi-call rows), the tool calls trained on per million characters, the rows with trained earlier
turns, the share of the generated training tools whose name starts with a retrieval verb (the tools
--loose-asks rephrases; tool_gen.RETRIEVE), the calls to NATURAL_EXTRA tools and to `onecard validate`'s
fixture tools (--natural-extra, --avoid-validate-tools), and how many raw values of the rows' final calls
take a copy-hard form (value_form: --hard-values' kinds), the rows by kind, the tool names offered, and
the user turns in the request forms of the named tools round 9 still failed (REQUEST_FORMS: --shapes send
and todo), and how the final calls' raw values said right after "for" in the last request split into one
word and several (values_after_for: --multiword's aim). Characters, not tokens: no tokenizer needed.
Given a held-out request file (--file tool_eval.jsonl), the expected string values of one word and of
several per set instead (eval_value_words: the prior --multiword-generated weighs against).

Usage (python3 with numpy, for data_tokens): data_stats.py --data DIR [--file chat_train.jsonl] [--rows N]
"""

import argparse
import itertools
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data_tokens  # noqa: E402
import tool_gen  # noqa: E402
import tool_natural  # noqa: E402

SCHEMA_NAME = re.compile(r'\{"name": "([^"]+)", "description"')
CALL_NAME = re.compile(r'invoke name="([^"]*)"')
RAW_VALUE = re.compile(r'string="true">([^<]*)</｜DSML｜parameter>')
USER_TURN = re.compile(r"<｜User｜>(.*?)<｜Assistant｜>", re.S)
# A recipient after a noun and its article ("send an email to anna@...": round 9 began the address with
# "an"), and a phrase said "to P" before a date ("Remind me to P on D": round 9 kept or cut the "to").
REQUEST_FORMS = {"an_noun_to_address": re.compile(r"\ban [a-z]+ to \S+@"),
                 "a_or_an_noun_to_address": re.compile(r"\ban? [a-z]+ to \S+@"),
                 "to_phrase_on_date": re.compile(r" to [A-Za-z][A-Za-z ]* on \d{4}-\d\d-\d\d")}
VALIDATE_FIXTURES = Path(__file__).resolve().parents[2] / "tools/onecard/data/tool_fixtures.json"


def value_form(v: str) -> str:
    """The copy-hard form a raw call value takes (make_data.py --hard-values' kinds), or ''."""
    if re.fullmatch(r"[A-Z0-9]{2,6}", v) and sum(c.isupper() for c in v) >= 2:
        return "capital_codes"
    if "@" in v:
        return "email_addresses"
    if re.search(r"\d [-+*/] \d", v):
        return "arithmetic"
    if len(v.split()) >= 4:
        return "values_of_4_plus_words"
    return ""


def stats(rows):
    total = trained = calls = spanned = raw_values = 0
    names = set()
    forms = dict.fromkeys(("capital_codes", "email_addresses", "arithmetic", "values_of_4_plus_words"), 0)
    called = {"natural_extra": 0, "validate_fixture_tools": 0}
    kinds, request_forms = {}, dict.fromkeys(REQUEST_FORMS, 0)
    after_for = {"one_word": 0, "several_words": 0}
    fixtures = set(json.loads(VALIDATE_FIXTURES.read_text())["tools"])
    for row in rows:
        for name in CALL_NAME.findall(row["prompt"] + row["completion"]):
            called["natural_extra"] += name in tool_natural.NATURAL_EXTRA
            called["validate_fixture_tools"] += name in fixtures
        last_turn = (USER_TURN.findall(row["prompt"]) or [""])[-1]
        for v in RAW_VALUE.findall(row["completion"]):
            raw_values += 1
            if form := value_form(v):
                forms[form] += 1
            if v and any(f"for {v}{end}" in last_turn for end in ".?,"):
                after_for["several_words" if len(v.split()) >= 2 else "one_word"] += 1
        for text, weight in data_tokens.segments(row):
            total += len(text)
            if weight > 0:
                trained += len(text)
            if weight == data_tokens.CALL_WEIGHT and text:
                calls += 1
        spanned += "spans" in row
        kinds[row.get("kind", "")] = kinds.get(row.get("kind", ""), 0) + 1
        for turn in USER_TURN.findall(row["prompt"]):
            for form, pattern in REQUEST_FORMS.items():
                request_forms[form] += len(pattern.findall(turn))
        if row.get("kind") == "tools":
            names.update(SCHEMA_NAME.findall(row["prompt"]))
    generated = [n for n in names if n not in tool_natural.NATURAL and n not in tool_natural.NATURAL_EXTRA]
    retrieve = [n for n in generated if n.split("_")[0] in tool_gen.RETRIEVE and "_" in n]
    return {"rows": len(rows), "rows_by_kind": dict(sorted(kinds.items())), "rows_with_trained_earlier_turns": spanned,
            "offered_tool_names": len(names),
            "trained_char_share": round(trained / max(total, 1), 4),
            "tool_calls_per_million_chars": round(calls / max(total, 1) * 1e6, 1),
            "generated_tool_names": len(generated),
            "retrieval_share_of_generated": round(len(retrieve) / max(len(generated), 1), 4),
            "calls_to": called, "raw_values_in_final_calls": raw_values, "value_forms": forms,
            "values_after_for": after_for, "request_forms": request_forms}


def eval_value_words(rows):
    """{set: {"one_word": n, "several_words": n}} over the expected calls' string values of tool_eval.jsonl
    rows (make_data.py's held-out requests)."""
    out = {}
    for row in rows:
        counts = out.setdefault(row["set"], {"one_word": 0, "several_words": 0})
        for call in row["expected"]:
            for v in call["arguments"].values():
                if isinstance(v, str):
                    counts["several_words" if len(v.split()) >= 2 else "one_word"] += 1
    return dict(sorted(out.items()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--file", default="chat_train.jsonl")
    ap.add_argument("--rows", type=int, default=0, help="only the first N rows (default: all)")
    a = ap.parse_args()
    with open(Path(a.data) / a.file, encoding="utf-8") as f:
        rows = [json.loads(line) for line in itertools.islice(f, a.rows or None)]
    held_out = bool(rows) and "expected" in rows[0]
    print(json.dumps({"eval_value_words": eval_value_words(rows)} if held_out else stats(rows), indent=1))


if __name__ == "__main__":
    main()
