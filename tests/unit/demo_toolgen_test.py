#!/usr/bin/env python3
"""The demo model's synthetic tool requests (scripts/demo_model/tool_gen.py): the hand-written tools
(NATURAL, NATURAL_EXTRA), the tool named by its verb (--name-verbs), loose requests (--loose-asks), hard
values (--hard-values, --bare-first), several-word values (--multiword, --multiword-generated) and the
shaped tools (--shaped-tools)."""

import json
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "demo_model"))
import tool_gen  # noqa: E402
import tool_natural  # noqa: E402


def call(name, **args):
    return {"name": name, "arguments": args}


VOCAB = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
MEETING = [["the", "meeting", "is", "moved", "to", "Friday"]]


def gen(seed, runs=MEETING):
    """The generators' stream (tool_gen.Gen) over a small vocabulary and the given word runs."""
    return tool_gen.Gen(seed, words=VOCAB, runs=runs)


class NaturalTools(unittest.TestCase):
    """make_data.py --natural-share's tools: unseen by the held-out set, and their requests hold every
    argument value verbatim (what make_call promises, so the call is copyable from the request)."""


    def test_no_natural_tool_shares_a_name_or_a_domain_word_with_a_held_out_one(self):
        self.assertFalse(set(tool_natural.NATURAL) & set(tool_gen.HELD_OUT))
        self.assertFalse(set(tool_natural.NATURAL_EXTRA) & (set(tool_gen.HELD_OUT) | set(tool_natural.NATURAL)))
        fixtures = Path(__file__).resolve().parents[2] / "tools" / "onecard" / "data" / "tool_fixtures.json"
        validate_tools = set(json.loads(fixtures.read_text())["tools"])
        self.assertIn("get_weather", validate_tools)  # the file is what this reads it as
        self.assertFalse(set(tool_natural.NATURAL_EXTRA) & validate_tools)
        for name in list(tool_natural.NATURAL) + list(tool_natural.NATURAL_EXTRA):
            for word in ("weather", "time", "timer", "stock", "currency", "calculate", "web", "email", "translate",
                         "reminder"):
                self.assertNotIn(word, name.split("_"), name)

    def test_requests_hold_every_value_and_the_schema_its_parameters(self):
        r = gen(11, runs=[["the", "report", "is", "ready", "for", "Monday"]])  # NATURAL_EXTRA's sentences
        for name in sorted(tool_natural.NATURAL) + sorted(tool_natural.NATURAL_EXTRA):
            tool = tool_natural.natural_tool(name)
            schema = tool_gen.tool_schema(tool)["function"]
            self.assertEqual(set(schema["parameters"]["properties"]), {p["name"] for p in tool["params"]})
            for p in tool["params"]:
                if p["type"] == "enum":  # a table's enum holds its values, which the schema lists
                    self.assertEqual(schema["parameters"]["properties"][p["name"]]["enum"], p["enum"])
            for _ in range(20):
                text, call = tool_gen.make_call(r, tool)
                self.assertEqual(call["name"], name)
                self.assertNotIn("{", text, text)
                for p in tool["params"]:
                    if p["required"]:
                        self.assertIn(p["name"], call["arguments"], text)
                for v in call["arguments"].values():
                    self.assertIn(tool_gen._show(v), text, name)


class NameVerbs(unittest.TestCase):
    """random_tool(verbs=...): training names may begin with the held-out names' verbs (make_data.py
    --name-verbs), never spelling a held-out name; the default draws exactly what it did before."""

    def test_held_out_verbs_begin_names_but_no_held_out_name_is_made(self):
        r = gen(5)
        verbs = tool_gen.VERBS + tool_gen.HELD_OUT_VERBS
        tools = [tool_gen.random_tool(r, verbs=verbs) for _ in range(3000)]
        first = {t["name"].split("_")[0] for t in tools}
        for v in tool_gen.HELD_OUT_VERBS:
            self.assertIn(v, first)
        self.assertFalse({t["name"] for t in tools} & set(tool_gen.HELD_OUT))
        send = next(t for t in tools if t["name"].startswith("send_"))
        self.assertTrue(send["desc"].startswith("Send the "), send["desc"])

    def test_default_names_are_unchanged(self):
        r1, r2 = gen(7), gen(7)
        plain = [tool_gen.random_tool(r1) for _ in range(500)]
        given = [tool_gen.random_tool(r2, verbs=tool_gen.VERBS) for _ in range(500)]
        self.assertEqual([(t["name"], t["desc"]) for t in plain], [(t["name"], t["desc"]) for t in given])
        self.assertFalse({t["name"].split("_")[0] for t in plain} & set(tool_gen.HELD_OUT_VERBS))


class LooseAsks(unittest.TestCase):
    """make_call(loose=1): a generated retrieval tool (get_/find_/show_...) is asked for by its object alone
    with every value verbatim; other tools keep the usual requests."""

    def tools(self, want_retrieve):
        r = gen(3)
        found = []
        while len(found) < 20:
            t = tool_gen.random_tool(r)
            words = t["name"].split("_")
            if (words[0] in tool_gen.RETRIEVE and len(words) > 1) == want_retrieve:
                found.append(t)
        return found

    def test_retrieval_tools_are_asked_by_their_object(self):
        r = gen(4)
        starts = tuple(a.split("{o}")[0] for a in tool_gen.LOOSE_ASKS)
        for tool in self.tools(True):
            text, call = tool_gen.make_call(r, tool, loose=1.0)
            self.assertEqual(call["name"], tool["name"])
            obj = " ".join(tool["name"].split("_")[1:])  # the name without its verb
            self.assertTrue(any(text.startswith(start + obj + " ") for start in starts), text)
            for v in call["arguments"].values():
                if not isinstance(v, bool):
                    self.assertIn(tool_gen._show(v), text)

    def test_other_tools_keep_their_requests(self):
        for tool in self.tools(False):
            a, b = gen(5), gen(5)
            self.assertEqual(tool_gen.make_call(a, tool, loose=1.0), tool_gen.make_call(b, tool))
            self.assertEqual(a.getstate(), b.getstate())
        for tool in self.tools(True):  # loose 0 draws nothing more
            a, b = gen(6), gen(6)
            text, _ = tool_gen.make_call(a, tool, loose=0.0)
            self.assertEqual((text, a.getstate()), (tool_gen.make_call(b, tool)[0], b.getstate()))


class HardValues(unittest.TestCase):
    """random_tool(hard=...) and make_call(bare=...) (make_data.py --hard-values, --bare-first): the hard
    values take their forms, every value stays verbatim in the request, a bare first value is said without
    its parameter's name, and 0 draws exactly what was drawn before."""


    def test_forms(self):
        import re
        r = gen(1, runs=MEETING + [["too", "short"]])
        self.assertEqual(r.runs, MEETING)  # runs under 3 words are dropped
        doubled = 0
        for _ in range(300):
            a = tool_gen.acronym(r)
            self.assertRegex(a, r"^[A-Z]{2,5}$")
            doubled += bool(re.search(r"(.)\1", a))
            self.assertRegex(tool_gen.caps_code(r), r"^[A-Z0-9]{3,6}$")
            self.assertRegex(tool_gen._email_varied(r), r"^[a-z0-9._]+@[a-z]+\.[a-z.]+$")
            self.assertRegex(tool_gen._expr_varied(r), r"^\(?[0-9.]+ [-+*/] [0-9.]+\)?( [-+*/] [0-9.]+)?$")
            words = tool_gen.brown_sentence(r).split()
            self.assertTrue(3 <= len(words) <= 6, words)
            self.assertIn(" ".join(words), "the meeting is moved to Friday")
        self.assertGreater(doubled, 60)  # a third are drawn with a doubled letter, some random ones repeat too
        with self.assertRaises(RuntimeError):  # no runs: an error, not some other kind of value
            tool_gen.brown_sentence(gen(1, runs=[["too", "short"]]))

    def test_hard_string_parameters_draw_hard_values_and_requests_hold_them(self):
        r = gen(2)
        tools = [tool_gen.random_tool(r, hard=1.0) for _ in range(400)]
        generated = [p for t in tools for p in t["params"] if p["name"] not in tool_gen.REAL
                     and p["type"] == "string"]
        self.assertGreater(len(generated), 50)
        for p in generated:
            self.assertIn(p["gen"], tool_gen.HARD_VALUES, p["name"])
        for t in tools:
            for bare in (0.0, 1.0):
                text, call = tool_gen.make_call(r, t, bare=bare)
                for v in call["arguments"].values():
                    if not isinstance(v, bool):
                        self.assertIn(tool_gen._show(v), text)

    def test_a_bare_first_value_is_said_without_its_name(self):
        tool = {"name": "send_golf", "desc": "Send the golf", "asks": None, "params": [
            {"name": "note", "type": "string", "desc": "x", "gen": lambda r: "Hello there", "say": "saying {v}",
             "required": True},
            {"name": "days", "type": "integer", "desc": "y", "gen": lambda r: 3, "say": "for {v} days",
             "required": True}]}
        for seed in range(20):
            text, call = tool_gen.make_call(gen(seed), tool, bare=1.0)
            self.assertNotIn("saying", text)
            self.assertIn("Hello there", text)
            self.assertIn("for 3 days", text)
            self.assertEqual(call["arguments"], {"note": "Hello there", "days": 3})
        tool["params"].reverse()  # a number first is never bare
        text, _ = tool_gen.make_call(gen(0), tool, bare=1.0)
        self.assertIn("for 3 days", text)

    def test_zero_draws_nothing_more(self):
        a, b = gen(9), gen(9)
        plain = [tool_gen.random_tool(a) for _ in range(300)]
        given = [tool_gen.random_tool(b, hard=0.0) for _ in range(300)]
        self.assertEqual([(t["name"], [p["name"] for p in t["params"]]) for t in plain],
                         [(t["name"], [p["name"] for p in t["params"]]) for t in given])
        self.assertEqual(a.getstate(), b.getstate())
        for t in plain[:50]:
            a, b = gen(3), gen(3)
            self.assertEqual(tool_gen.make_call(a, t), tool_gen.make_call(b, t, bare=0.0))
            self.assertEqual(a.getstate(), b.getstate())


class MultiwordValues(unittest.TestCase):
    """random_tool(multi=...) (make_data.py --multiword): the string parameters hard values did not take and
    the realistic query and topic get 2-3 word values, every value stays verbatim in the request, and 0
    draws exactly what was drawn before."""


    def test_string_parameters_not_hard_take_word_runs(self):
        r = gen(4)
        for hard in (0.0, 0.5):
            tools = [tool_gen.random_tool(r, hard=hard, multi=1.0) for _ in range(400)]
            generated = [p for t in tools for p in t["params"] if p["name"] not in tool_gen.REAL
                         and p["type"] == "string"]
            phrases = [p for t in tools for p in t["params"] if p["name"] in ("query", "topic")]
            self.assertGreater(len(phrases), 5)
            for p in phrases:  # the realistic 1-3 word phrases take word runs too
                self.assertIs(p["gen"], tool_gen._word_run, p["name"])
            runs = [p for p in generated if p["gen"] is tool_gen._word_run]
            self.assertEqual(len(runs) + sum(p["gen"] in tool_gen.HARD_VALUES for p in generated), len(generated))
            if hard == 0.0:
                self.assertEqual(len(runs), len(generated))
            else:  # about half are hard, and those stay hard
                self.assertTrue(0.3 * len(generated) < len(runs) < 0.7 * len(generated), (len(runs), len(generated)))
            for t in tools:
                says = [p["say"] for p in t["params"]]
                for p in t["params"]:  # a word run said without its name is the only one said that way
                    if p["gen"] is tool_gen._word_run:
                        self.assertEqual(says.count(p["say"]), 1, says)
                self.assertEqual(len(set(says)), len(says), says)  # nor any other value
                text, call = tool_gen.make_call(r, t)
                for p in t["params"]:
                    if p["gen"] is tool_gen._word_run and p["name"] in call["arguments"]:
                        v = call["arguments"][p["name"]]
                        self.assertTrue(2 <= len(v.split()) <= 3, v)
                        self.assertIn(v, text)

    def test_most_word_runs_are_said_after_their_name(self):
        # Round 12 said two of three without the name and the model took the name into the value.
        r = gen(6)
        runs = [p for _ in range(3000) for p in [tool_gen._gen_param(r, True, 0.0, 1.0)]
                if p["gen"] is tool_gen._word_run]
        self.assertGreater(len(runs), 500)
        bare = sum(p["say"] in ("for {v}", "about {v}") for p in runs)
        named = [p for p in runs if p["say"] not in ("for {v}", "about {v}")]
        for p in named:
            self.assertIn(p["name"].replace("_", " "), p["say"])
        share = len(named) / len(runs)  # 4 of 6 expected
        self.assertTrue(0.6 < share < 0.73, (len(named), bare))

    def test_generated_share_apart_from_the_realistic_one(self):
        # make_data.py --multiword-generated: the query and topic keep --multiword's runs, the generated
        # parameters take their own share; not given, the draws are exactly --multiword's alone.
        r = gen(8)
        tools = [tool_gen.random_tool(r, multi=1.0, multi_gen=0.0) for _ in range(400)]
        params = [p for t in tools for p in t["params"]]
        phrases = [p for p in params if p["name"] in ("query", "topic")]
        generated = [p for p in params if p["name"] not in tool_gen.REAL and p["type"] == "string"]
        self.assertGreater(len(phrases), 5)
        self.assertGreater(len(generated), 50)
        self.assertTrue(all(p["gen"] is tool_gen._word_run for p in phrases))
        self.assertFalse(any(p["gen"] is tool_gen._word_run for p in generated))
        a, b = gen(3), gen(3)
        same = [tool_gen.random_tool(a, hard=0.5, multi=0.7) for _ in range(200)]
        given = [tool_gen.random_tool(b, hard=0.5, multi=0.7, multi_gen=None) for _ in range(200)]
        self.assertEqual([[(p["name"], p["gen"].__name__, p["say"]) for p in t["params"]] for t in same],
                         [[(p["name"], p["gen"].__name__, p["say"]) for p in t["params"]] for t in given])
        self.assertEqual(a.getstate(), b.getstate())

    def test_zero_draws_nothing_more(self):
        a, b = gen(9), gen(9)
        plain = [tool_gen.random_tool(a, hard=0.5) for _ in range(300)]
        given = [tool_gen.random_tool(b, hard=0.5, multi=0.0) for _ in range(300)]
        def drawn(tools):  # lambdas made per parameter differ in identity, not in name
            return [(t["name"], [(p["name"], p["gen"].__name__) for p in t["params"]]) for t in tools]
        self.assertEqual(drawn(plain), drawn(given))
        self.assertEqual(a.getstate(), b.getstate())


class ShapedTools(unittest.TestCase):
    """tool_gen.shaped_tool (make_data.py --shaped-tools): the three argument layouts round 8's named
    failures share, asked with every value verbatim and side by side, random codes never a held-out one."""

    # The sentence-like values' runs this class's tools draw from.
    RUNS = MEETING + [["we", "will", "be", "late", "now"]]

    def test_each_shape_says_its_values_side_by_side(self):
        r = gen(5, runs=self.RUNS)
        verbs = tool_gen.VERBS + tool_gen.HELD_OUT_VERBS
        seen, same_code = set(), 0
        for _ in range(600):
            t = tool_gen.shaped_tool(r, exclude={"convert_alpha"}, verbs=verbs)
            self.assertNotIn(t["name"], tool_gen.HELD_OUT)
            self.assertNotEqual(t["name"], "convert_alpha")
            seen.add(t["shape"])
            text, call = tool_gen.make_call(r, t, loose=1.0, bare=1.0)  # asks: neither applies
            args = call["arguments"]
            self.assertEqual(set(args), {p["name"] for p in t["params"]})
            for v in args.values():
                self.assertIn(tool_gen._show(v), text)
            self.assertEqual(tool_gen.tool_schema(t)["function"]["parameters"]["required"], list(args))
            if t["shape"] == "pair":
                src, dst = (args[k] for k in args if k.startswith(("from_", "to_")))
                for c in (src, dst):
                    self.assertRegex(c, r"^[A-Z]{3}$")
                    self.assertNotIn(c, tool_gen.CURRENCIES + tool_gen.TICKERS)
                self.assertIn(f"from {src} to {dst}", text)
                same_code += src == dst
            elif t["shape"] == "to":
                self.assertIn(f" to {args['to']} with ", text)
            else:
                phrase, into = list(args.values())
                self.assertIn(f" {phrase} into {into}", text)
                self.assertIn(into, tool_gen.INTO)
        self.assertEqual(seen, {"pair", "to", "into"})
        self.assertGreater(same_code, 5)  # "from MXN to MXN" happens in the held-out set too

    def test_calc_asks_as_the_arithmetic_chats_do(self):
        r = gen(8, runs=self.RUNS)
        asked = set()
        for _ in range(300):
            t = tool_gen.shaped_tool(r, exclude={"compute_sum"}, verbs=tool_gen.VERBS + tool_gen.HELD_OUT_VERBS,
                                     shapes=("calc",))
            self.assertEqual(t["shape"], "calc")
            self.assertNotIn(t["name"], tool_gen.HELD_OUT)
            self.assertNotEqual(t["name"], "compute_sum")
            self.assertNotIn("calculate", t["name"])
            self.assertIn(t["desc"], tool_gen.CALC_DESCS)
            text, call = tool_gen.make_call(r, t)
            (expr,) = call["arguments"].values()
            self.assertRegex(expr, r"^[\d.( ]+[-+*/][\d.() +*/-]+$")
            asked.add(text.replace(expr, "{m}"))
        # Every request form, and conv_math's "What is a op b?" among them: the form the held-out calculate
        # is asked in, which the arithmetic chats answer without a tool.
        self.assertEqual(asked, set(tool_gen.CALC_ASKS))
        self.assertIn("What is {m}?", asked)

    def test_send_and_todo_say_the_noun_with_its_article(self):
        r = gen(6, runs=self.RUNS)
        seen, an = set(), 0
        for _ in range(400):
            t = tool_gen.shaped_tool(r, verbs=tool_gen.VERBS, shapes=("send", "todo"))
            seen.add(t["shape"])
            verb, noun = t["name"].split("_", 1)
            self.assertIn(noun, tool_gen.SEND_NOUNS + tool_gen.TODO_NOUNS)
            self.assertNotIn(verb, tool_gen.HELD_OUT_VERBS)  # send and set need --name-verbs
            text, call = tool_gen.make_call(r, t)
            args = call["arguments"]
            self.assertEqual(set(args), {p["name"] for p in t["params"]})
            article = "an" if noun[0] in "aeiou" else "a"
            self.assertTrue(f"{article} {noun} " in text or text.startswith(noun.capitalize() + " "), text)
            an += article == "an"
            first, second = list(args.values())
            if t["shape"] == "send":
                self.assertEqual(list(args)[0], "to")
                self.assertIn(f" to {first} with ", text)
            else:
                self.assertRegex(second, r"^\d{4}-\d\d-\d\d$")
                self.assertIn(f" to {first} on {second}", text)
        self.assertEqual(seen, {"send", "todo"})
        self.assertGreater(an, 20)
        r = gen(7, runs=self.RUNS)
        names = {tool_gen.shaped_tool(r, verbs=tool_gen.VERBS + tool_gen.HELD_OUT_VERBS, shapes=("send",))["name"]
                 for _ in range(200)}
        self.assertTrue(any(n.startswith("send_") for n in names))
        self.assertNotIn("send_email", names)
        with self.assertRaises(ValueError):
            tool_gen.shaped_tool(r, shapes=("pair", "nope"))

    def test_me_asks_by_the_verb_whose_noun_names_the_tool(self):
        r = gen(9, runs=self.RUNS)
        me_asks = 0
        for _ in range(300):
            t = tool_gen.shaped_tool(r, exclude={"add_alert"}, verbs=tool_gen.VERBS, shapes=("me",))
            self.assertEqual(t["shape"], "me")
            verb, noun = t["name"].split("_", 1)
            self.assertNotEqual(t["name"], "add_alert")
            self.assertNotIn(verb, tool_gen.HELD_OUT_VERBS)  # set needs --name-verbs
            me_verb = [v for v, n in tool_gen.ME_NOUNS.items() if n == noun]
            self.assertEqual(len(me_verb), 1, noun)
            self.assertTrue(t["desc"].startswith(f"{verb.capitalize()} {tool_gen._article(noun)} "), t["desc"])
            for banned in ("remind", "timer", "mail"):  # the held-out domains stay out
                self.assertNotIn(banned, t["name"] + " " + " ".join(t["asks"]).lower())
            text, call = tool_gen.make_call(r, t)
            what, date = call["arguments"].values()
            self.assertRegex(date, r"^\d{4}-\d\d-\d\d$")
            self.assertIn(f" to {what} on {date}", text)
            if f"{me_verb[0]} me to " in text.lower():
                me_asks += 1
            else:
                self.assertIn(f"{verb} {tool_gen._article(noun)} to ", text.lower())
        self.assertGreater(me_asks, 150)  # four asks in six say "VERB me"

    def test_common_phrases_are_everyday_words_never_a_held_out_phrase(self):
        runs = [["I", "will", "see", "you", "soon", "at", "the", "station"], ["Thank", "you", "very", "much"],
                ["The", "meeting", "is", "moved", "to", "Friday"]]
        r = gen(10, runs=runs)
        # Stretches of 2+: "station", "thank", "meeting" and "moved" are not COMMON words.
        self.assertEqual(r.common, [["I", "will", "see", "you", "soon", "at", "the"], ["you", "very", "much"]])
        drawn = set()
        for _ in range(400):
            t = tool_gen.shaped_tool(r, verbs=tool_gen.VERBS, shapes=("common",))
            text, call = tool_gen.make_call(r, t)
            phrase, into = call["arguments"].values()
            self.assertNotIn(phrase, tool_gen.PHRASES)  # "see you soon", "thank you"
            self.assertTrue(2 <= len(phrase.split()) <= 5, phrase)
            self.assertTrue(all(w == "I" or w in tool_gen.COMMON for w in phrase.split()), phrase)
            self.assertIn(f" {phrase} into {into}", text)
            drawn.add(phrase)
        self.assertIn("you very much", drawn)
        self.assertNotIn("see you soon", drawn)
        with self.assertRaises(RuntimeError):
            tool_gen.common_phrase(gen(1, runs=[["station", "meeting", "Friday"]]))


if __name__ == "__main__":
    unittest.main()
