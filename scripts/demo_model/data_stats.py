#!/usr/bin/env python3
"""What a make_data.py training set holds, in the figures NEXT_RUN.md quotes (written for onecard): the
share of the chat text that carries the loss (data_tokens.segments: completions, and the earlier turns
of --multi-call rows), the tool calls trained on per million characters, the rows with trained earlier
turns, and the share of the generated training tools whose name starts with a retrieval verb (the tools
--loose-asks rephrases; tool_gen.RETRIEVE). Characters, not tokens: no tokenizer needed.

Usage (python3 with numpy, for data_tokens): data_stats.py --data DIR [--file chat_train.jsonl]
"""

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data_tokens  # noqa: E402
import tool_gen  # noqa: E402

SCHEMA_NAME = re.compile(r'\{"name": "([^"]+)", "description"')


def stats(rows):
    total = trained = calls = spanned = 0
    names = set()
    for row in rows:
        for text, weight in data_tokens.segments(row):
            total += len(text)
            if weight > 0:
                trained += len(text)
            if weight == data_tokens.CALL_WEIGHT and text:
                calls += 1
        spanned += "spans" in row
        if row.get("kind") == "tools":
            names.update(SCHEMA_NAME.findall(row["prompt"]))
    generated = [n for n in names if n not in tool_gen.NATURAL and n not in tool_gen.NATURAL_EXTRA]
    retrieve = [n for n in generated if n.split("_")[0] in tool_gen.RETRIEVE and "_" in n]
    return {"rows": len(rows), "rows_with_trained_earlier_turns": spanned,
            "trained_char_share": round(trained / max(total, 1), 4),
            "tool_calls_per_million_chars": round(calls / max(total, 1) * 1e6, 1),
            "generated_tool_names": len(generated),
            "retrieval_share_of_generated": round(len(retrieve) / max(len(generated), 1), 4)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--file", default="chat_train.jsonl")
    a = ap.parse_args()
    with open(Path(a.data) / a.file, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    print(json.dumps(stats(rows), indent=1))


if __name__ == "__main__":
    main()
