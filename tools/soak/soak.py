#!/usr/bin/env python3
# Soak test for `onecard serve` (issue 22), for machines without node: a port of tools/soak/soak.mjs with
# the same flags, the same request mix and the same report (JSON keys, order and meaning), on the Python
# standard library only (asyncio streams and the small HTTP/1.1 client in soak_http.py; no pip packages).
#
# N requests at a fixed concurrency against a loopback base URL, a mix of chat / completions, streaming
# and not, with random client aborts (the socket closed mid-request or mid-stream), a share of malformed
# requests (which must get 4xx, never 5xx) and slow clients (SSE read with pauses). Bounded in count (--n)
# and time (--max-seconds: no new request after it, and every request has its own --timeout-ms). Reports
# errors by class, latency percentiles per kind, and from /metrics the KV blocks in use and running
# requests before and after (after: once the server has drained), plus the server's RSS before/after when
# given its --pid. Exit status 1 when an unexpected error happened (5xx, a refused connection, a malformed
# request accepted, a stream that did not end with [DONE], KV blocks still in use or requests still
# running after the drain); 2 for a usage error or a crash of the tool.
#
#   python3 tools/soak/soak.py --base-url http://127.0.0.1:8000 [--n 10000] [--concurrency 64]
#        [--pid PID] [--model NAME] [--max-tokens 16] [--abort-share 0.1] [--malformed-share 0.1]
#        [--slow-share 0.05] [--stream-share 0.5] [--max-seconds 1800] [--timeout-ms 120000]
#        [--seed 1] [--json OUT.json]
#
# Keeping the two tools in step: the request mix (prompts, malformed bodies and the choices drawn for each
# request) is tools/soak/mix.json, read by both. What is mirrored by hand: the random generator
# (mulberry32, so a seed draws the same numbers), the order of the draws in one_request() (soak.mjs's
# one()), the error classes and the report's layout. Change both files together.
import asyncio
import codecs
import errno
import ipaddress
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from soak_http import Client, Endpoint  # tools/soak/soak_http.py: the HTTP/1.1 client

MIX_PATH = Path(__file__).with_name("mix.json")
NAN = float("nan")


class UsageError(Exception):
    pass


# --- command line (soak.mjs's parseArgs, int and num: JavaScript's parseInt/Number semantics) -------------

def parse_args(argv):
    out = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("--"):
            raise UsageError(f"unexpected argument {a}")
        eq = a.find("=")
        if eq > 0:
            out[a[2:eq]] = a[eq + 1:]
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[a[2:]] = argv[i + 1]
            i += 1
        else:
            out[a[2:]] = True
        i += 1
    return out


def js_int(v, default):
    if v is None:
        return default
    m = re.match(r"\s*([+-]?\d+)", v if isinstance(v, str) else "")
    return int(m.group(1)) if m else NAN


def js_num(v, default):
    if v is None:
        return default
    if v is True:
        return 1.0
    try:
        return float(v) if v.strip() else 0.0
    except ValueError:
        return NAN


@dataclass
class Config:
    base: str
    n: int
    concurrency: int
    max_tokens: int
    abort_share: float
    malformed_share: float
    slow_share: float
    stream_share: float
    max_seconds: float
    timeout_ms: int
    pid: int
    model: str | None
    seed: int
    json_out: str | None


def make_config(args):
    base = str(args.get("base-url", "http://127.0.0.1:8000"))
    base = base[:-1] if base.endswith("/") else base  # one slash, as soak.mjs's replace(/\/$/, "")
    cfg = Config(
        base=base, n=js_int(args.get("n"), 10000), concurrency=js_int(args.get("concurrency"), 64),
        max_tokens=js_int(args.get("max-tokens"), 16), abort_share=js_num(args.get("abort-share"), 0.1),
        malformed_share=js_num(args.get("malformed-share"), 0.1), slow_share=js_num(args.get("slow-share"), 0.05),
        stream_share=js_num(args.get("stream-share"), 0.5), max_seconds=js_num(args.get("max-seconds"), 1800),
        timeout_ms=js_int(args.get("timeout-ms"), 120000), pid=js_int(args.get("pid"), 0) if args.get("pid") else 0,
        model=args.get("model") if isinstance(args.get("model"), str) else None,
        seed=js_int(args.get("seed"), 1), json_out=str(args["json"]) if args.get("json") else None)
    # Loopback only: this tool floods whatever it is pointed at.
    host = (urllib.parse.urlsplit(cfg.base).hostname or "").strip("[]")
    try:
        is_v4 = ipaddress.ip_address(host).version == 4
    except ValueError:
        is_v4 = False
    if not (host == "localhost" or host == "::1" or (is_v4 and host.startswith("127."))):
        raise UsageError(f"--base-url must be a loopback address (127.x, ::1, localhost), got {host}")
    if not (0 < cfg.n <= 1_000_000):
        raise UsageError("--n must be in [1, 1000000]")
    if not (0 < cfg.concurrency <= 1024):
        raise UsageError("--concurrency must be in [1, 1024]")
    if isinstance(cfg.pid, float):  # NaN: no usable --pid, as in soak.mjs (RSS reads null)
        cfg.pid = 0
    if isinstance(cfg.seed, float):
        cfg.seed = 0
    return cfg


# --- the request mix ------------------------------------------------------------------------------------

def mix_body(b):
    """One body or prompt of mix.json as bytes (see its "about")."""
    if isinstance(b, str):
        return b.encode()
    if "hex" in b:
        return bytes.fromhex(b["hex"])
    if "json" in b:
        return json.dumps(b["json"], separators=(",", ":"), ensure_ascii=False).encode()
    return (b["text"] * b.get("repeat", 1)).encode()


@dataclass
class Mix:
    raw: dict
    prompts: list  # [str]
    malformed: list  # [(path, bytes)]


def load_mix(path=MIX_PATH):
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    return Mix(raw=raw, prompts=[mix_body(p).decode() for p in raw["prompts"]],
               malformed=[(c["path"], mix_body(c["body"])) for c in raw["malformed"]])


class Mulberry32:
    """soak.mjs's generator, bit for bit, so a --seed draws the same numbers in both tools."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFF

    def __call__(self):
        self.state = (self.state + 0x6D2B79F5) & 0xFFFFFFFF
        t = self.state
        t = ((t ^ (t >> 15)) * (t | 1)) & 0xFFFFFFFF
        t ^= (t + (((t ^ (t >> 7)) * (t | 61)) & 0xFFFFFFFF)) & 0xFFFFFFFF
        return ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296

    def pick(self, a):
        return a[math.floor(self() * len(a))]


# --- statistics and the report --------------------------------------------------------------------------

@dataclass
class Stats:
    started: int = 0
    done: int = 0
    ok: int = 0
    aborted: int = 0
    malformed_refused: int = 0
    busy_429_503: int = 0
    errors: dict = field(default_factory=dict)  # class -> {"count", "examples"}
    latencies: dict = field(default_factory=dict)  # kind -> [ms], in the order kinds first finished
    ttfts: list = field(default_factory=list)

    def error(self, cls, detail):
        e = self.errors.setdefault(cls, {"count": 0, "examples": []})
        e["count"] += 1
        if len(e["examples"]) < 3:
            e["examples"].append(str(detail)[:300])

    def add_latency(self, kind, ms):
        self.latencies.setdefault(kind, []).append(ms)

    def n_errors(self):
        return sum(e["count"] for e in self.errors.values())


def js_round(x):
    return math.floor(x + 0.5)  # Math.round: halves go up


def pct(a, p):
    if not a:
        return None
    s = sorted(a)
    return js_round(s[min(len(s) - 1, math.floor((p / 100) * len(s)))])


def summary(a):
    if not a:
        return {"n": 0}
    return {"n": len(a), "p50_ms": pct(a, 50), "p90_ms": pct(a, 90), "p99_ms": pct(a, 99), "max_ms": pct(a, 100)}


def js_number(x):
    """A float as JSON.stringify writes it: integral values without a fraction, NaN/Inf as null."""
    if isinstance(x, float):
        if not math.isfinite(x):
            return None
        if x.is_integer() and abs(x) < 1e21:
            return int(x)
    return x


def to_fixed1(x):
    return js_number(float(f"{x:.1f}"))


def error_code(e):
    """What soak.mjs reports for a failed fetch (`e.cause?.code ?? e.message`): the errno name if any."""
    code = getattr(e, "errno", None)
    if isinstance(code, int) and code in errno.errorcode:
        return errno.errorcode[code]
    return str(e) or type(e).__name__


# --- /metrics and RSS -----------------------------------------------------------------------------------

def http_get(url, timeout_s=10):
    with urllib.request.urlopen(urllib.request.Request(url), timeout=timeout_s) as r:
        return r.read().decode("utf-8", "replace")


def parse_metrics(text):
    def get(name):
        m = re.search("^" + re.escape(name) + r"\{[^}]*\} ([0-9.eE+-]+)$", text, re.M)
        if not m:
            return None
        try:
            return js_number(float(m.group(1)))
        except ValueError:
            return None

    def either(name):  # names moved between builds
        v = get(f"vllm:{name}")
        return v if v is not None else get(f"onecard:{name}")

    total, free = get("onecard:kv_cache_total_blocks"), get("onecard:kv_cache_free_blocks")
    return {
        "kv_blocks_total": total,
        "kv_blocks_in_use": js_number(total - free) if total is not None and free is not None else None,
        "kv_free_slots": get("onecard:kv_cache_free_slots"),
        "requests_running": either("num_requests_running"),
        "requests_waiting": either("num_requests_waiting"),
        "http_inflight": get("onecard:num_http_requests_inflight"),
        "preemptions": either("num_preemptions_total"),
    }


def metrics(base):
    return parse_metrics(http_get(f"{base}/metrics"))


def rss_kib(pid):
    if not pid:
        return None
    try:
        m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


# --- one request ----------------------------------------------------------------------------------------

class Soak:
    def __init__(self, cfg, mix):
        self.cfg, self.mix = cfg, mix
        self.rand = Mulberry32(cfg.seed)
        self.stats = Stats()
        self.endpoint = Endpoint.from_base(cfg.base)
        self.model = cfg.model

    async def _guarded(self, client, coro_fn, abort_ms):
        """Runs coro_fn(client) under the request's timeout and, for an aborting client, its abort time.
        Returns None when it finished, else "client abort" or "timeout" (the connection is then closed,
        mid-request or mid-response, as a client that gives up would)."""
        task = asyncio.ensure_future(coro_fn(client))
        timeout_s = self.cfg.timeout_ms / 1000
        first = min(abort_ms / 1000, timeout_s) if abort_ms is not None else timeout_s
        done, _ = await asyncio.wait({task}, timeout=first)
        reason = None
        if not done:
            if abort_ms is not None and abort_ms / 1000 < timeout_s:
                reason = "client abort"
            else:
                reason = "timeout"
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                pass
            client.close()
            return reason, None
        exc = task.exception()
        return None, exc

    async def one_request(self, client, i):
        cfg, mix, rand, st = self.cfg, self.mix, self.rand, self.stats
        raw = mix.raw
        # The draws below are soak.mjs's one(), in its order.
        r = rand()
        kind_roll = rand()
        if kind_roll < cfg.malformed_share:
            path, body = rand.pick(mix.malformed)
            t0 = time.perf_counter()

            async def malformed(c):
                res = await c.post(path, body)
                try:
                    await res.read()
                finally:
                    c.release(res)
                st.add_latency("malformed", (time.perf_counter() - t0) * 1000)
                if 400 <= res.status < 500:
                    st.malformed_refused += 1
                else:
                    cls = f"malformed_{res.status}" if res.status >= 500 else "malformed_accepted"
                    st.error(cls, f"{path} {body.decode('utf-8', 'replace')[:80]} -> {res.status}")

            reason, exc = await self._guarded(client, malformed, None)
            if reason or exc:
                st.error("malformed_transport", f"{path}: {'timeout' if reason else error_code(exc)}")
                client.close()
            return
        chat = rand() < raw["chat_share"]
        stream = rand() < cfg.stream_share
        abort = r < cfg.abort_share
        slow = stream and not abort and rand() < cfg.slow_share / max(cfg.stream_share, 1e-9)
        if chat:
            body = {"model": self.model, "messages": [{"role": "user", "content": rand.pick(mix.prompts)}],
                    "max_tokens": 1 + math.floor(rand() * cfg.max_tokens), "stream": stream,
                    "temperature": rand.pick(raw["chat_temperatures"]), "seed": i}
            if stream and rand() < raw["include_usage_share"]:
                body["stream_options"] = {"include_usage": True}
            if rand() < raw["thinking_off_share"]:
                body["chat_template_kwargs"] = {"thinking": False}
        else:
            body = {"model": self.model, "prompt": rand.pick(mix.prompts),
                    "max_tokens": 1 + math.floor(rand() * cfg.max_tokens), "stream": stream,
                    "temperature": raw["completions_temperature"], "seed": i}
        if body["model"] is None:
            del body["model"]  # JSON.stringify leaves out an undefined model
        kind = f"{'chat' if chat else 'completions'}{'_stream' if stream else ''}{'_slow' if slow else ''}"
        path = "/v1/chat/completions" if chat else "/v1/completions"
        abort_ms = math.floor(rand() * raw["abort_within_ms"]) if abort else None
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        pause = raw["slow_pause_ms"]
        t0 = time.perf_counter()

        async def exchange(c):
            res = await c.post(path, payload)
            try:
                if res.status in (429, 503):
                    st.busy_429_503 += 1
                    await res.read()
                    return
                if res.status != 200:
                    text = (await res.read()).decode("utf-8", "replace")
                    st.error(f"http_{res.status}", f"{kind}: {text[:200]}")
                    return
                if not stream:
                    j = json.loads(await res.read())
                    choices = j.get("choices") if isinstance(j, dict) else None
                    if not (isinstance(choices, list) and choices and choices[0]) or not j.get("usage"):
                        st.error("bad_response", f"{kind}: {json.dumps(j, ensure_ascii=False)[:200]}")
                    else:
                        st.ok += 1
                else:
                    dec = codecs.getincrementaldecoder("utf-8")("replace")
                    buf, first, done, saw_error = "", True, False, False
                    async for chunk in res.chunks():
                        if first:
                            st.ttfts.append((time.perf_counter() - t0) * 1000)
                            first = False
                        buf += dec.decode(chunk)
                        if "data: [DONE]" in buf:
                            done = True
                        if re.search(r'^data: \{"error"', buf, re.M):
                            saw_error = True
                        if len(buf) > 65536:
                            buf = buf[-64:]
                        if slow:
                            await asyncio.sleep((pause["min"] + math.floor(rand() * pause["spread"])) / 1000)
                    if saw_error:
                        st.error("stream_error_event", f"{kind}: {buf[:200]}")
                    elif not done:
                        st.error("stream_without_done", kind)
                    else:
                        st.ok += 1
                st.add_latency(kind, (time.perf_counter() - t0) * 1000)
            finally:
                c.release(res)

        reason, exc = await self._guarded(client, exchange, abort_ms)
        if reason == "client abort":
            st.aborted += 1
        elif reason == "timeout":
            st.error("timeout", f"{kind}: timeout")
        elif exc is not None:
            st.error("transport", f"{kind}: {error_code(exc)}")
            client.close()

    # --- the run ----------------------------------------------------------------------------------------

    async def run(self):
        cfg, st = self.cfg, self.stats
        if not self.model:
            models = json.loads(await asyncio.to_thread(http_get, f"{cfg.base}/v1/models"))
            self.model = models["data"][0]["id"]
        before = {"metrics": await asyncio.to_thread(metrics, cfg.base), "rss_kib": rss_kib(cfg.pid)}
        t0 = time.perf_counter()
        deadline = t0 + cfg.max_seconds
        counter = {"next": 0, "last_report": t0}

        async def worker():
            client = Client(self.endpoint)
            try:
                while counter["next"] < cfg.n and time.perf_counter() < deadline:
                    i = counter["next"]
                    counter["next"] += 1
                    st.started += 1
                    await self.one_request(client, i)
                    st.done += 1
                    if time.perf_counter() - counter["last_report"] > 10:
                        counter["last_report"] = time.perf_counter()
                        print(f"soak: {st.done}/{cfg.n} done, {st.n_errors()} errors", file=sys.stderr, flush=True)
            finally:
                client.close()

        await asyncio.gather(*(worker() for _ in range(cfg.concurrency)))
        wall = time.perf_counter() - t0
        # Let the engine finish what aborted clients left (a cancel is answered within a step).
        after = await asyncio.to_thread(metrics, cfg.base)
        k = 0
        while k < 100 and (after["requests_running"] or after["requests_waiting"] or after["http_inflight"]):
            await asyncio.sleep(0.1)
            after = await asyncio.to_thread(metrics, cfg.base)
            k += 1
        result = {
            "base_url": cfg.base, "model": self.model, "n": cfg.n, "concurrency": cfg.concurrency,
            "started": st.started, "wall_s": to_fixed1(wall), "req_per_s": to_fixed1(st.done / wall),
            "ok": st.ok, "client_aborts": st.aborted, "malformed_refused_4xx": st.malformed_refused,
            "busy_429_503": st.busy_429_503, "errors": st.errors,
            "latency": {k: summary(v) for k, v in st.latencies.items()}, "ttft_stream": summary(st.ttfts),
            "before": before, "after": {"metrics": after, "rss_kib": rss_kib(cfg.pid)},
        }
        problems = []
        if st.errors:
            problems.append("errors")
        if after["kv_blocks_in_use"] != before["metrics"]["kv_blocks_in_use"]:
            problems.append("kv blocks in use differ after the drain")
        if after["requests_running"] or after["requests_waiting"]:
            problems.append("requests still running after the drain")
        if after["kv_free_slots"] != before["metrics"]["kv_free_slots"]:
            problems.append("free KV slots differ after the drain")
        result["verdict"] = f"FAIL: {'; '.join(problems)}" if problems else "ok"
        return result, problems


def main(argv):
    try:
        args = parse_args(argv)
        if args.get("help"):
            lines = Path(__file__).read_text().splitlines()
            print("\n".join(l for l in lines if l.startswith("#") and not l.startswith("#!")))
            return 0
        cfg = make_config(args)
    except UsageError as e:
        print(f"soak: {e}", file=sys.stderr)
        return 2
    try:
        result, problems = asyncio.run(Soak(cfg, load_mix()).run())
    except Exception:
        import traceback
        print(f"soak: {traceback.format_exc()}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text, flush=True)
    if cfg.json_out:
        Path(cfg.json_out).write_text(text + "\n", encoding="utf-8")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
