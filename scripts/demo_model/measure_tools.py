#!/usr/bin/env python3
"""Exact tool-call accuracy of a served model on DATA/tool_eval.jsonl (held-out tools; written for onecard):
each request (OpenAI chat with tools, thinking on or off as generated) goes to URL/v1/chat/completions at
temperature 0; a request passes when the returned tool_calls equal the expected calls exactly (same count,
any order, same name and JSON-equal arguments). Also reports name-only accuracy and, from /metrics, the
MTP draft acceptance when the server speculates, and where the wrong calls fail (`failures`, per set:
no call, a wrong call count, a wrong tool, wrong argument keys, or right keys with a wrong value) and
what those wrong values are (`wrong_values`: another slot's value, a part of it, misspelt, ...; and
`wrong_values_of_several_words`, those whose expected string has two or more words; `wrong_first_word`, the
requests with a string value whose first word is wrong, the left edge a copy starts from).
`completion_tokens` sums the tokens the server generated. `exact_per_request` keeps every request's
outcome in file order, so two checkpoints measured on the same requests compare pairwise: --against
OTHER.json prints the discordant pairs and the exact two-sided sign-test (McNemar) p-value of the
difference. `examples` keeps every request's expected and returned calls; `breakdown` the exact calls by
set and thinking mode and per named tool.

Usage: measure_tools.py --url http://127.0.0.1:8000 --data DATA [--n 200] [--jobs 4] [--out FILE]
                        [--against EARLIER_OUT.json] [--other-mode]
       measure_tools.py --pair A.json B.json [--data DIR]     (two saved runs, paired; per set with --data)
       measure_tools.py --breakdown RUN.json --data DATA [--ask REGEX]  (a saved run's breakdown; with --ask,
                                                  of the requests whose user turn matches REGEX, by tools offered)
       measure_tools.py --pool A1.json B1.json [A2.json B2.json ...]  (A against B over several held-out
                                                                         sets at once: exact counts, paired)
       measure_tools.py --reclassify RUN.json --data DATA     (a saved run's failures and wrong values, by
                                                               this file's classes, from its examples)
"""

import argparse
import concurrent.futures as cf
import json
import math
import re
import urllib.request
from pathlib import Path


def post(url, body, path="/v1/chat/completions"):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def calls_of(resp):
    out = []
    for c in resp["choices"][0]["message"].get("tool_calls") or []:
        try:
            args = json.loads(c["function"]["arguments"])
        except ValueError:
            args = None
        out.append({"name": c["function"]["name"], "arguments": args})
    return out


def equal(got, want):
    if len(got) != len(want):
        return False
    rest = list(want)
    for g in got:
        for i, w in enumerate(rest):
            if g == w:
                rest.pop(i)
                break
        else:
            return False
    return True


def failure(got, want):
    """Why a wrong answer is wrong (the first difference, in the order a call is written)."""
    if not got:
        return "no call"
    if len(got) != len(want):
        return "call count"
    if sorted(c["name"] for c in got) != sorted(c["name"] for c in want):
        return "tool"
    if any(set(g["arguments"] or {}) != set(w["arguments"]) for g, w in
           zip(sorted(got, key=lambda c: c["name"]), sorted(want, key=lambda c: c["name"]))):
        return "argument keys"
    return "argument values"


def _edits(a: str, b: str) -> int:
    """Levenshtein distance."""
    d = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, cb in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (ca != cb))
    return d[-1]


def value_pairs(got, want):
    """For an "argument values" failure (the same tools, the same keys): (the expected call's arguments, key,
    returned value, expected value) for every argument, the calls paired by tool name."""
    for g, w in zip(sorted(got, key=lambda c: c["name"]), sorted(want, key=lambda c: c["name"])):
        for k, v in w["arguments"].items():
            yield w["arguments"], k, g["arguments"][k], v


def wrong_values(got, want, message, several_words=False):
    """For an "argument values" failure: what each wrong value is, against the expected call and the user's
    message: "other slot" (another parameter's expected value), "more before" (the value after words of
    the message, often the parameter's name), "part" (another part of the value or the value with more),
    "misspelt" (edit distance at most a quarter of its length), "other span" (other text of the message),
    or "other". several_words: only the expected strings of two or more words (the values
    make_data.py --multiword trains)."""
    out = []
    for args, k, x, v in value_pairs(got, want):
        got_v, want_v = str(x), str(v)
        if x == v or (several_words and not (isinstance(v, str) and len(v.split()) >= 2)):
            continue
        if got_v in [str(y) for kk, y in args.items() if kk != k]:
            out.append("other slot")
        elif got_v.endswith(" " + want_v):  # words before the value taken in ("striking gennar")
            out.append("more before")
        elif got_v and (got_v in want_v or want_v in got_v):
            out.append("part")
        elif _edits(want_v, got_v) <= max(1, len(want_v) // 4):
            out.append("misspelt")
        elif got_v and got_v in message:
            out.append("other span")
        else:
            out.append("other")
    return out


def first_word_wrong(got, want) -> bool:
    """For an "argument values" failure: whether a string value starts with another word than the expected
    one ("Paris" for "Parma" and "striking gennar" for "gennar" do; "see see you soon" for "see you soon"
    does not). Rounds 13-15 counted these with a throwaway script: 19-24 of the 600."""
    return any(isinstance(v, str) and x != v and str(x).split()[:1] != v.split()[:1]
               for _, _, x, v in value_pairs(got, want))


def classify(outcomes, rows) -> dict:
    """`failures`, `wrong_values`, `wrong_values_of_several_words` and `wrong_first_word`, per set, of (ok, got
    calls) outcomes on their tool_eval.jsonl rows (the message a value is looked for in is the row's last user
    turn)."""
    out = {"failures": {}, "wrong_values": {}, "wrong_values_of_several_words": {}, "wrong_first_word": {}}
    for (ok, got), row in zip(outcomes, rows):
        if ok:
            continue
        per_set = out["failures"].setdefault(row.get("set", "all"), {})
        why = failure(got, row["expected"])
        per_set[why] = per_set.get(why, 0) + 1
        if why == "argument values":
            message = [m["content"] for m in row["request"]["messages"] if m["role"] == "user"][-1]
            for key, several in (("wrong_values", False), ("wrong_values_of_several_words", True)):
                values = out[key].setdefault(row.get("set", "all"), {})
                for kind in wrong_values(got, row["expected"], message, several):
                    values[kind] = values.get(kind, 0) + 1
            per_first = out["wrong_first_word"]
            set_ = row.get("set", "all")
            per_first[set_] = per_first.get(set_, 0) + first_word_wrong(got, row["expected"])
    return out


def reclassify(run: dict, rows) -> dict:
    """classify() over a saved --out's examples, which must be the rows' requests in order (an earlier
    run's classes are then recounted by this file's, e.g. wrong_values' "more before")."""
    examples = run["examples"]
    if len(examples) > len(rows) or any(e["expected"] != r["expected"] for e, r in zip(examples, rows)):
        raise SystemExit("--reclassify: the run's examples are not these requests (another --data?)")
    return classify([(e["ok"], e["got"]) for e in examples], rows)


def metrics(url):
    text = urllib.request.urlopen(url + "/metrics", timeout=60).read().decode()
    vals = {}
    for name in ("spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total",
                 "spec_decode_num_drafts_total"):
        m = re.search(r"vllm:" + name + r"\{[^}]*\} ([0-9.e+]+)", text)
        vals[name] = float(m.group(1)) if m else 0.0
    return vals


def acceptance(before, after):
    """Draft tokens, accepted tokens and their ratio between two metrics() readings."""
    drafted = after["spec_decode_num_draft_tokens_total"] - before["spec_decode_num_draft_tokens_total"]
    accepted = after["spec_decode_num_accepted_tokens_total"] - before["spec_decode_num_accepted_tokens_total"]
    return {"draft_tokens": drafted, "accepted_tokens": accepted,
            "acceptance": round(accepted / drafted, 4) if drafted else None}


def paired(mine: str, other: str) -> dict:
    """Discordant pairs of two per-request outcome strings ('1' exact, '0' not) and the exact two-sided
    sign-test p-value over them (McNemar's test, exact form)."""
    if len(mine) != len(other):
        raise SystemExit(f"--against: {len(other)} requests there, {len(mine)} here")
    only_mine = sum(1 for x, y in zip(mine, other) if x == "1" and y == "0")
    only_other = sum(1 for x, y in zip(mine, other) if x == "0" and y == "1")
    n, k = only_mine + only_other, min(only_mine, only_other)
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0
    return {"both": sum(1 for x, y in zip(mine, other) if x == y == "1"), "only_this": only_mine,
            "only_other": only_other, "sign_test_p": p}


def paired_by_set(mine: str, other: str, rows) -> dict:
    """paired() within each set of the tool_eval.jsonl rows ('named', 'generated') the runs were measured on."""
    if not len(mine) == len(other) == len(rows):
        raise SystemExit(f"--pair: {len(mine)} and {len(other)} outcomes, {len(rows)} requests")
    sets = {}
    for i, row in enumerate(rows):
        sets.setdefault(row.get("set", "all"), []).append(i)
    return {name: paired("".join(mine[i] for i in idx), "".join(other[i] for i in idx))
            for name, idx in sorted(sets.items())}


def pooled(pairs) -> dict:
    """A against B over several held-out sets at once: pairs is [(A's, B's per-request outcome string), ...],
    one pair per set (each pair measured on the same requests). The sets' requests join into one paired
    sample, so a gain too small to show on one set of 200 can show on 600 (NEXT_RUN.md, round 11)."""
    if not pairs:
        raise SystemExit("--pool: no runs")
    for k, (mine, other) in enumerate(pairs):
        if len(mine) != len(other):
            raise SystemExit(f"--pool: set {k}: {len(mine)} and {len(other)} outcomes")
    mine, other = "".join(m for m, _ in pairs), "".join(o for _, o in pairs)
    return {"n": len(mine), "exact_this": mine.count("1"), "exact_other": other.count("1"),
            "sets": [len(m) for m, _ in pairs], **paired(mine, other)}


def other_mode(row) -> dict:
    """The request asked with thinking switched (--other-mode); its row says so, for breakdown(). make_data
    ties each named tool to one mode (row i thinks when i is even and asks held-out tool i % 10), so this is
    how a named tool's failures are told apart from its mode's."""
    thinking = not row["thinking"]
    kwargs = dict(row["request"].get("chat_template_kwargs", {}), thinking=thinking)
    return dict(row, thinking=thinking, request=dict(row["request"], chat_template_kwargs=kwargs))


def breakdown(per_request: str, rows) -> dict:
    """Exact calls ('1' of a per-request outcome string) by set and thinking mode, and per named tool
    (the expected first call's name), over the tool_eval.jsonl rows they were measured on."""
    if len(per_request) != len(rows):
        raise SystemExit(f"--breakdown: {len(per_request)} outcomes, {len(rows)} requests")
    modes, tools = {}, {}
    for ok, row in zip(per_request, rows):
        key = f"{row.get('set', 'all')}/{'thinking' if row['thinking'] else 'plain'}"
        cells = [modes.setdefault(key, {"exact": 0, "n": 0})]
        if row.get("set") == "named":
            cells.append(tools.setdefault(row["expected"][0]["name"], {"exact": 0, "n": 0}))
        for cell in cells:
            cell["exact"] += ok == "1"
            cell["n"] += 1
    return {"by_mode": dict(sorted(modes.items())), "named_by_tool": dict(sorted(tools.items()))}


def asked(per_request: str, rows, pattern: str) -> dict:
    """Exact calls ('1' of a per-request outcome string) of the requests whose last user turn matches the
    regular expression `pattern` (re.search), in all and by the number of tools the request offers: a
    request form's tool choice (docs/results.md, round 21: "Remind me to P on D" with a second tool)."""
    if len(per_request) != len(rows):
        raise SystemExit(f"--ask: {len(per_request)} outcomes, {len(rows)} requests")
    out = {"ask": pattern, "exact": 0, "n": 0, "by_tools_offered": {}}
    for ok, row in zip(per_request, rows):
        user = [m["content"] for m in row["request"]["messages"] if m["role"] == "user"][-1]
        if not re.search(pattern, user):
            continue
        offered = str(len(row["request"].get("tools", [])))
        for cell in (out, out["by_tools_offered"].setdefault(offered, {"exact": 0, "n": 0})):
            cell["exact"] += ok == "1"
            cell["n"] += 1
    out["by_tools_offered"] = dict(sorted(out["by_tools_offered"].items()))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--data")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--out", default="")
    ap.add_argument("--against", default="", help="an earlier --out of another checkpoint on the same requests")
    ap.add_argument("--other-mode", action="store_true",
                    help="ask every request with thinking switched (on where the set has it off, and off where on)")
    ap.add_argument("--pair", nargs=2, metavar=("A", "B"),
                    help="no requests: compare two earlier --out files on the same requests (A's 'only_this'); "
                         "with --data, per set too")
    ap.add_argument("--pool", nargs="+", metavar="RUN",
                    help="no requests: A1 B1 [A2 B2 ...], earlier --out files in pairs (A and B on one set each), "
                         "A against B over all the sets")
    ap.add_argument("--breakdown", metavar="RUN",
                    help="no requests: an earlier --out's exact calls by set and mode and per named tool (with --data)")
    ap.add_argument("--ask", metavar="REGEX",
                    help="with --breakdown: only the requests whose last user turn matches REGEX, by tools offered")
    ap.add_argument("--reclassify", metavar="RUN",
                    help="no requests: an earlier --out's failures and wrong values recounted (with --data)")
    a = ap.parse_args()
    if a.reclassify:
        if not a.data:
            ap.error("--reclassify needs --data (the requests RUN was measured on)")
        rows = [json.loads(l) for l in open(Path(a.data) / "tool_eval.jsonl")]
        print(json.dumps(reclassify(json.loads(Path(a.reclassify).read_text()), rows), indent=1))
        return
    if a.breakdown:
        if not a.data:
            ap.error("--breakdown needs --data (the requests RUN was measured on)")
        rows = [json.loads(l) for l in open(Path(a.data) / "tool_eval.jsonl")]
        per_request = json.loads(Path(a.breakdown).read_text())["exact_per_request"]
        rows = rows[:len(per_request)]
        print(json.dumps(asked(per_request, rows, a.ask) if a.ask else breakdown(per_request, rows), indent=1))
        return
    if a.ask:
        ap.error("--ask goes with --breakdown")
    if a.pool:
        if len(a.pool) % 2:
            ap.error("--pool takes the runs in pairs: A1 B1 [A2 B2 ...]")
        runs = [json.loads(Path(f).read_text())["exact_per_request"] for f in a.pool]
        print(json.dumps(pooled(list(zip(runs[0::2], runs[1::2]))), indent=1))
        return
    if a.pair:
        runs = [json.loads(Path(f).read_text())["exact_per_request"] for f in a.pair]
        out = paired(*runs)
        if a.data:  # and per set
            rows = [json.loads(l) for l in open(Path(a.data) / "tool_eval.jsonl")][:len(runs[0])]
            out["by_set"] = paired_by_set(*runs, rows)
        print(json.dumps(out, indent=1))
        return
    if not a.url or not a.data:
        ap.error("--url and --data are required (or --pair A B)")
    rows = [json.loads(l) for l in open(Path(a.data) / "tool_eval.jsonl")][:a.n]
    if a.other_mode:
        rows = [other_mode(row) for row in rows]
    before = metrics(a.url)

    def one(row):
        body = dict(row["request"], temperature=0, max_tokens=300)
        resp = post(a.url, body)
        got = calls_of(resp)
        ok = equal(got, row["expected"])
        named_right = bool(got) and got[0]["name"] == row["expected"][0]["name"]
        return ok, named_right, row, got, resp.get("usage", {}).get("completion_tokens", 0)

    res = list(cf.ThreadPoolExecutor(a.jobs).map(one, rows))
    after = metrics(a.url)
    held = [r for r in res if r[2].get("set") == "named"]
    spec = acceptance(before, after)
    out = {"n": len(res), "exact": sum(r[0] for r in res) / len(res), "name": sum(r[1] for r in res) / len(res),
           "named_held_out_tools": {"n": len(held), "exact": sum(r[0] for r in held) / max(len(held), 1)},
           "generated_unseen_tools": {"n": len(res) - len(held),
                                   "exact": sum(r[0] for r in res if r not in held) / max(len(res) - len(held), 1)},
           "completion_tokens": sum(r[4] for r in res), "mtp_draft_tokens": spec["draft_tokens"],
           "mtp_accepted_tokens": spec["accepted_tokens"], "mtp_acceptance": spec["acceptance"],
           **classify([(r[0], r[3]) for r in res], [r[2] for r in res]),
           "exact_per_request": "".join("1" if r[0] else "0" for r in res),
           "examples": [{"ok": r[0], "expected": r[2]["expected"], "got": r[3]} for r in res]}
    out["breakdown"] = breakdown(out["exact_per_request"], rows)
    if a.against:
        out["paired"] = paired(out["exact_per_request"], json.loads(Path(a.against).read_text())["exact_per_request"])
    print(json.dumps({k: v for k, v in out.items() if k not in ("examples", "exact_per_request")}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
