#!/usr/bin/env python3
"""Writes agent_trace_20turns.json: one 20-turn coding-agent conversation for
`onecard bench-serve --dataset-name agent-trace --dataset-path ...` (the format of
tools/onecard/data/agent_trace.json). Each turn re-sends everything before it plus a new user
message that carries a tool result (a file listing, a test log, a diff), as agent harnesses do, so
the share of prompt tokens a prefix cache serves is what issue 15 measures (target >= 90%).
Deterministic: the same script writes the same bytes. Usage: python3 make_agent_trace_20turns.py"""
import json
import os
import random

rng = random.Random(20)
WORDS = ("index buffer kernel stream vector layout offset tensor shard block cache token scale bias "
         "router expert window ratio entry matrix thread warp lane queue event commit branch merge "
         "parser schema grammar header socket request reply status budget chunk prefix suffix").split()


def line(n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def tool_result(kind, i):
    if kind == 0:
        body = "\n".join(f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}_{j}.cpp  {rng.randint(40, 900)} lines"
                         for j in range(40))
        return f"Tool result (ls -l src, call {i}):\n{body}"
    if kind == 1:
        body = "\n".join(f"[ RUN      ] {rng.choice(WORDS).title()}Test.{rng.choice(WORDS)}_{j}\n"
                         f"[       OK ] ({rng.randint(1, 90)} ms) {line(6)}" for j in range(24))
        return f"Tool result (ctest -R unit, call {i}):\n{body}"
    body = "\n".join(f"{'+' if j % 3 else '-'}    {line(9)};" for j in range(36))
    return f"Tool result (git diff, call {i}):\n{body}"


system = ("You are a coding agent working in a large C++20 repository with CUDA kernels. You read files, run "
          "commands and edit code through tools. Rules: keep changes minimal; explain each step in one "
          "sentence first; never delete files you did not create; run the tests after every edit. "
          "Repository notes:\n" + "\n".join(line(14) for _ in range(90)))
turns = []
for i in range(20):
    ask = rng.choice(["Look at this and tell me what to change next.", "Fix the failing part and show the diff.",
                      "Summarise what this output says about the cache.", "Which file should we edit now, and why?"])
    turns.append(f"{tool_result(i % 3, i)}\n\n{ask}")
trace = {
    "about": "One 20-turn coding-agent conversation (written by make_agent_trace_20turns.py): each turn re-sends "
             "the system prompt, the earlier turns and the model's replies plus a new tool result, for measuring "
             "the prefix cache's share of prompt tokens.",
    "conversations": [{"max_tokens": 48, "system": system, "turns": turns}],
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent_trace_20turns.json")
with open(out, "w") as f:
    json.dump(trace, f, indent=1)
    f.write("\n")
print(out)
