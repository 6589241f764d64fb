#!/usr/bin/env node
// Soak test for `onecard serve` (issue 22): N requests at a fixed concurrency against a loopback base
// URL, a mix of chat / completions, streaming and not, with random client aborts (mid-request and
// mid-stream), a share of malformed requests (which must get 4xx, never 5xx) and slow clients (SSE
// read with pauses). Bounded in count (--n) and time (--max-seconds: no new request after it, and
// every request has its own --timeout-ms). Reports errors by class, latency percentiles per kind, and
// from /metrics the KV blocks in use and running requests before and after (after: once the server has
// drained), plus the server's RSS before/after when given its --pid. Exit status 1 when an unexpected
// error happened (5xx, a refused connection, a malformed request accepted, a stream that did not end
// with [DONE], KV blocks still in use or requests still running after the drain).
//
// tools/soak/soak.py is a port of this tool for machines without node (python3 standard library): same
// flags, same report. The request mix (prompts, malformed bodies, the choices one() draws) lives in
// tools/soak/mix.json, read by both; the order of the draws in one() and the report's layout are
// mirrored in soak.py by hand, so a change to either belongs in both.
//
//   node tools/soak/soak.mjs --base-url http://127.0.0.1:8000 [--n 10000] [--concurrency 64]
//        [--pid PID] [--model NAME] [--max-tokens 16] [--abort-share 0.1] [--malformed-share 0.1]
//        [--slow-share 0.05] [--stream-share 0.5] [--max-seconds 1800] [--timeout-ms 120000]
//        [--seed 1] [--json OUT.json]
import { readFileSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";

const args = parseArgs(process.argv.slice(2));
const BASE = String(args["base-url"] ?? "http://127.0.0.1:8000").replace(/\/$/, "");
const N = int(args.n, 10000);
const CONC = int(args.concurrency, 64);
const MAX_TOKENS = int(args["max-tokens"], 16);
const ABORT = num(args["abort-share"], 0.1);
const MALFORMED = num(args["malformed-share"], 0.1);
const SLOW = num(args["slow-share"], 0.05);
const STREAM = num(args["stream-share"], 0.5);
const MAX_SECONDS = num(args["max-seconds"], 1800);
const TIMEOUT_MS = int(args["timeout-ms"], 120000);
const PID = args.pid ? int(args.pid, 0) : 0;
let MODEL = args.model;

// Loopback only: this tool floods whatever it is pointed at.
{
    const host = new URL(BASE).hostname.replace(/^\[|\]$/g, "");
    const loopback = host === "localhost" || host === "::1" || (isIP(host) === 4 && host.startsWith("127."));
    if (!loopback) die(`--base-url must be a loopback address (127.x, ::1, localhost), got ${host}`);
    if (!(N > 0 && N <= 1_000_000)) die("--n must be in [1, 1000000]");
    if (!(CONC > 0 && CONC <= 1024)) die("--concurrency must be in [1, 1024]");
}

// Deterministic choices (mulberry32).
let seed = int(args.seed, 1) >>> 0;
const rand = () => {
    seed = (seed + 0x6d2b79f5) >>> 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (a) => a[Math.floor(rand() * a.length)];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The request mix, shared with soak.py (see mix.json's "about" for the body forms).
const MIX = JSON.parse(readFileSync(new URL("./mix.json", import.meta.url), "utf8"));
function mixBody(b) {
    if (typeof b === "string") return b;
    if (b.hex !== undefined) return Buffer.from(b.hex, "hex");
    if (b.json !== undefined) return JSON.stringify(b.json);
    return b.text.repeat(b.repeat ?? 1);
}
const PROMPTS = MIX.prompts.map(mixBody);
// Malformed bodies: each must be refused with a 4xx.
const MALFORMED_CASES = MIX.malformed.map((c) => [c.path, mixBody(c.body)]);

const stats = { started: 0, done: 0, ok: 0, aborted: 0, malformed_refused: 0, busy_429_503: 0, errors: {}, samples: [] };
const latencies = {};  // kind -> [ms]
const ttfts = [];
function addLatency(kind, ms) {
    (latencies[kind] ??= []).push(ms);
}
function error(cls, detail) {
    const e = (stats.errors[cls] ??= { count: 0, examples: [] });
    e.count++;
    if (e.examples.length < 3) e.examples.push(String(detail).slice(0, 300));
}

async function metrics() {
    const r = await fetch(`${BASE}/metrics`, { signal: AbortSignal.timeout(10000) });
    const text = await r.text();
    const get = (name) => {
        const m = text.match(new RegExp(`^${name.replace(/[:]/g, "[:]")}\\{[^}]*\\} ([0-9.eE+-]+)$`, "m"));
        return m ? Number(m[1]) : null;
    };
    const either = (name) => get(`vllm:${name}`) ?? get(`onecard:${name}`);  // names moved between builds
    const total = get("onecard:kv_cache_total_blocks"), free = get("onecard:kv_cache_free_blocks");
    return {
        kv_blocks_total: total,
        kv_blocks_in_use: total != null && free != null ? total - free : null,
        kv_free_slots: get("onecard:kv_cache_free_slots"),
        requests_running: either("num_requests_running"),
        requests_waiting: either("num_requests_waiting"),
        http_inflight: get("onecard:num_http_requests_inflight"),
        preemptions: either("num_preemptions_total"),
    };
}

function rssKiB(pid) {
    if (!pid) return null;
    try {
        const m = readFileSync(`/proc/${pid}/status`, "utf8").match(/^VmRSS:\s+(\d+) kB/m);
        return m ? Number(m[1]) : null;
    } catch {
        return null;
    }
}

async function one(i) {
    const r = rand();
    const kindRoll = rand();
    if (kindRoll < MALFORMED) {
        const [path, body] = pick(MALFORMED_CASES);
        const t0 = performance.now();
        try {
            const res = await fetch(BASE + path, { method: "POST", headers: { "content-type": "application/json" },
                body, signal: AbortSignal.timeout(TIMEOUT_MS) });
            await res.arrayBuffer();
            addLatency("malformed", performance.now() - t0);
            if (res.status >= 400 && res.status < 500) stats.malformed_refused++;
            else error(res.status >= 500 ? `malformed_${res.status}` : "malformed_accepted", `${path} ${String(body).slice(0, 80)} -> ${res.status}`);
        } catch (e) {
            error("malformed_transport", `${path}: ${e.cause?.code ?? e.message}`);
        }
        return;
    }
    const chat = rand() < MIX.chat_share;
    const stream = rand() < STREAM;
    const abort = r < ABORT;
    const slow = stream && !abort && rand() < SLOW / Math.max(STREAM, 1e-9);
    const body = chat
        ? { model: MODEL, messages: [{ role: "user", content: pick(PROMPTS) }], max_tokens: 1 + Math.floor(rand() * MAX_TOKENS),
            stream, temperature: pick(MIX.chat_temperatures), seed: i,
            ...(stream && rand() < MIX.include_usage_share ? { stream_options: { include_usage: true } } : {}),
            ...(rand() < MIX.thinking_off_share ? { chat_template_kwargs: { thinking: false } } : {}) }
        : { model: MODEL, prompt: pick(PROMPTS), max_tokens: 1 + Math.floor(rand() * MAX_TOKENS), stream, temperature: MIX.completions_temperature, seed: i };
    const kind = `${chat ? "chat" : "completions"}${stream ? "_stream" : ""}${slow ? "_slow" : ""}`;
    const path = chat ? "/v1/chat/completions" : "/v1/completions";
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(new Error("timeout")), TIMEOUT_MS);
    let abortTimer = null;
    if (abort) abortTimer = setTimeout(() => ctl.abort(new Error("client abort")), Math.floor(rand() * MIX.abort_within_ms));
    const t0 = performance.now();
    try {
        const res = await fetch(BASE + path, { method: "POST", headers: { "content-type": "application/json" },
            body: JSON.stringify(body), signal: ctl.signal });
        if (res.status === 429 || res.status === 503) {
            stats.busy_429_503++;
            await res.arrayBuffer();
            return;
        }
        if (res.status !== 200) {
            error(`http_${res.status}`, `${kind}: ${(await res.text()).slice(0, 200)}`);
            return;
        }
        if (!stream) {
            const j = await res.json();
            if (!j.choices?.[0] || !j.usage) error("bad_response", `${kind}: ${JSON.stringify(j).slice(0, 200)}`);
            else stats.ok++;
        } else {
            const reader = res.body.getReader();
            const dec = new TextDecoder();
            let buf = "", first = true, done = false, sawError = false;
            for (;;) {
                const { value, done: end } = await reader.read();
                if (end) break;
                if (first) {
                    ttfts.push(performance.now() - t0);
                    first = false;
                }
                buf += dec.decode(value, { stream: true });
                if (buf.includes("data: [DONE]")) done = true;
                if (/^data: \{"error"/m.test(buf)) sawError = true;
                if (buf.length > 65536) buf = buf.slice(-64);
                if (slow) await sleep(MIX.slow_pause_ms.min + Math.floor(rand() * MIX.slow_pause_ms.spread));
            }
            if (sawError) error("stream_error_event", `${kind}: ${buf.slice(0, 200)}`);
            else if (!done) error("stream_without_done", kind);
            else stats.ok++;
        }
        addLatency(kind, performance.now() - t0);
    } catch (e) {
        if (abort && ctl.signal.aborted && String(ctl.signal.reason?.message) === "client abort") stats.aborted++;
        else error(ctl.signal.aborted ? "timeout" : "transport", `${kind}: ${e.cause?.code ?? e.message}`);
    } finally {
        clearTimeout(timer);
        if (abortTimer) clearTimeout(abortTimer);
    }
}

function pct(a, p) {
    if (!a.length) return null;
    const s = [...a].sort((x, y) => x - y);
    return Math.round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]);
}
function summary(a) {
    return a.length ? { n: a.length, p50_ms: pct(a, 50), p90_ms: pct(a, 90), p99_ms: pct(a, 99), max_ms: pct(a, 100) } : { n: 0 };
}

async function main() {
    if (!MODEL) {
        const m = await (await fetch(`${BASE}/v1/models`, { signal: AbortSignal.timeout(10000) })).json();
        MODEL = m.data[0].id;
    }
    const before = { metrics: await metrics(), rss_kib: rssKiB(PID) };
    const t0 = performance.now();
    let next = 0;
    const deadline = t0 + MAX_SECONDS * 1000;
    let lastReport = t0;
    async function worker() {
        while (next < N && performance.now() < deadline) {
            const i = next++;
            stats.started++;
            await one(i);
            stats.done++;
            if (performance.now() - lastReport > 10000) {
                lastReport = performance.now();
                console.error(`soak: ${stats.done}/${N} done, ${Object.values(stats.errors).reduce((s, e) => s + e.count, 0)} errors`);
            }
        }
    }
    await Promise.all(Array.from({ length: CONC }, worker));
    const wall = (performance.now() - t0) / 1000;
    // Let the engine finish what aborted clients left (a cancel is answered within a step).
    let after = await metrics();
    for (let k = 0; k < 100 && (after.requests_running || after.requests_waiting || after.http_inflight); k++) {
        await sleep(100);
        after = await metrics();
    }
    const result = {
        base_url: BASE, model: MODEL, n: N, concurrency: CONC, started: stats.started, wall_s: Number(wall.toFixed(1)),
        req_per_s: Number((stats.done / wall).toFixed(1)), ok: stats.ok, client_aborts: stats.aborted,
        malformed_refused_4xx: stats.malformed_refused, busy_429_503: stats.busy_429_503,
        errors: stats.errors, latency: Object.fromEntries(Object.entries(latencies).map(([k, v]) => [k, summary(v)])),
        ttft_stream: summary(ttfts),
        before: before, after: { metrics: after, rss_kib: rssKiB(PID) },
    };
    const problems = [];
    if (Object.keys(stats.errors).length) problems.push("errors");
    if (after.kv_blocks_in_use !== before.metrics.kv_blocks_in_use) problems.push("kv blocks in use differ after the drain");
    if (after.requests_running || after.requests_waiting) problems.push("requests still running after the drain");
    if (after.kv_free_slots !== before.metrics.kv_free_slots) problems.push("free KV slots differ after the drain");
    result.verdict = problems.length ? `FAIL: ${problems.join("; ")}` : "ok";
    const text = JSON.stringify(result, null, 2);
    console.log(text);
    if (args.json) writeFileSync(String(args.json), text + "\n");
    process.exit(problems.length ? 1 : 0);
}

function parseArgs(argv) {
    const out = {};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (!a.startsWith("--")) die(`unexpected argument ${a}`);
        const eq = a.indexOf("=");
        if (eq > 0) out[a.slice(2, eq)] = a.slice(eq + 1);
        else if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) out[a.slice(2)] = argv[++i];
        else out[a.slice(2)] = true;
    }
    if (out.help) {
        console.log(readFileSync(new URL(import.meta.url), "utf8").split("\n").filter((l) => l.startsWith("//")).join("\n"));
        process.exit(0);
    }
    return out;
}
function int(v, d) {
    return v === undefined ? d : Number.parseInt(v, 10);
}
function num(v, d) {
    return v === undefined ? d : Number(v);
}
function die(msg) {
    console.error(`soak: ${msg}`);
    process.exit(2);
}

main().catch((e) => {
    console.error(`soak: ${e.stack ?? e}`);
    process.exit(2);
});
