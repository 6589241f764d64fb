#!/usr/bin/env python3
# The soak tools (tools/soak/soak.py, and soak.mjs where node is installed) against a small mock of
# `onecard serve` in this process: SSE over chunked transfer coding, keep-alive, /metrics with labels.
# Checks that the report counts every request exactly once, that aborts really close the socket
# mid-response, that slow and malformed clients happen, that a misbehaving server (streams without [DONE],
# 500s, malformed bodies accepted, leaked KV blocks) fails the verdict by name, and that the two tools
# write the same report layout. Seconds, no onecard binary: the real server's soak is a separate run
# (docs/results.md).
import http.server
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOAK_DIR = ROOT / "tools" / "soak"
sys.path.insert(0, str(SOAK_DIR))
import soak  # noqa: E402  (tools/soak/soak.py)
import soak_http  # noqa: E402

KV_TOTAL, SLOTS = 100, 16
# The report's keys in soak.mjs's order (written out here, so a change to either tool's layout is seen).
TOP_KEYS = ["base_url", "model", "n", "concurrency", "started", "wall_s", "req_per_s", "ok", "client_aborts",
            "malformed_refused_4xx", "busy_429_503", "errors", "latency", "ttft_stream", "before", "after", "verdict"]
METRIC_KEYS = ["kv_blocks_total", "kv_blocks_in_use", "kv_free_slots", "requests_running", "requests_waiting",
               "http_inflight", "preemptions"]


class MockState:
    def __init__(self, broken):
        self.broken = broken
        self.lock = threading.Lock()
        self.running = 0
        self.leaked = 0
        self.connections = 0
        self.generations = 0
        self.non_streamed = 0
        self.client_gone_mid_response = 0
        self.malformed = {body for _, body in soak.load_mix().malformed}

    def metrics_text(self):
        with self.lock:
            free = KV_TOTAL - self.running - self.leaked
            return (f'onecard:kv_cache_total_blocks{{model_name="mock"}} {KV_TOTAL}\n'
                    f'onecard:kv_cache_free_blocks{{model_name="mock"}} {free}\n'
                    f'onecard:kv_cache_free_slots{{model_name="mock"}} {SLOTS - self.running}\n'
                    f'vllm:num_requests_running{{model_name="mock"}} {self.running}\n'
                    f'vllm:num_requests_waiting{{model_name="mock"}} 0\n'
                    f'onecard:num_http_requests_inflight{{model_name="mock"}} {self.running}\n'
                    f'vllm:num_preemptions_total{{model_name="mock"}} 0\n')


def make_handler(state):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            with state.lock:
                state.connections += 1

        def log_message(self, *args):
            pass

        def send_body(self, status, body, ctype="application/json"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/v1/models":
                self.send_body(200, b'{"object":"list","data":[{"id":"mock","object":"model"}]}')
            elif self.path == "/metrics":
                self.send_body(200, state.metrics_text().encode(), "text/plain")
            else:
                self.send_body(404, b'{"error":{"message":"not found"}}')

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if body in state.malformed:  # the broken mock accepts them all
                if state.broken:
                    self.send_body(200, b'{"id":"x","choices":[],"usage":{}}')
                else:
                    self.send_body(400, b'{"error":{"message":"bad request","type":"invalid_request_error"}}')
                return
            req = json.loads(body)
            with state.lock:
                state.running += 1
                state.generations += 1
                state.leaked += 1 if state.broken else 0
            try:
                self.generate(req if isinstance(req, dict) else {})
            except (BrokenPipeError, ConnectionResetError):
                with state.lock:
                    state.client_gone_mid_response += 1
                self.close_connection = True
            finally:
                with state.lock:
                    state.running -= 1

        def client_gone(self):
            """Whether the client closed its end (onecard's disconnect check does the same)."""
            if not select.select([self.connection], [], [], 0)[0]:
                return False
            try:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
            except ConnectionError:
                return True

        def generate(self, req):
            # Every generation lasts ~0.3 s, so most aborts (drawn within 0.4 s) land mid-request.
            n_tokens = 10
            chat = self.path == "/v1/chat/completions"
            if not req.get("stream"):
                time.sleep(0.03 * n_tokens)
                if self.client_gone():
                    raise ConnectionResetError("client gone")
                with state.lock:
                    state.non_streamed += 1
                    fail = state.broken and state.non_streamed % 2 == 1
                if fail:  # the broken mock alternates a 500 and a reply without choices
                    self.send_body(500, b'{"error":{"message":"engine failed"}}')
                    return
                choice = {"index": 0, "finish_reason": "length"}
                choice.update({"message": {"role": "assistant", "content": "hi"}} if chat else {"text": "hi"})
                reply = {"id": "x", "choices": [] if state.broken else [choice],
                         "usage": {"prompt_tokens": 1, "completion_tokens": n_tokens, "total_tokens": 1 + n_tokens}}
                self.send_body(200, json.dumps(reply).encode())
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            events = [json.dumps({"id": "x", "choices": [{"index": 0, "delta": {"content": "tok"}}]})] * n_tokens
            if not state.broken:
                events.append("[DONE]")
            for e in events:
                data = f"data: {e}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                time.sleep(0.03)
            self.wfile.write(b"0\r\n\r\n")

    return Handler


class QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that aborts may reset a keep-alive connection while the handler waits for its next
        # request: expected here, not worth a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class MockServer:
    def __init__(self, broken=False):
        self.state = MockState(broken)
        self.httpd = QuietServer(("127.0.0.1", 0), make_handler(self.state))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


SOAK_ARGS = ["--n", "64", "--concurrency", "8", "--max-tokens", "4", "--abort-share", "0.3",
             "--malformed-share", "0.25", "--slow-share", "0.3", "--timeout-ms", "20000", "--seed", "3"]


def run_tool(cmd, base_url, out_json):
    p = subprocess.run(cmd + ["--base-url", base_url, "--pid", str(os.getpid()), "--json", str(out_json)]
                       + SOAK_ARGS, capture_output=True, text=True, timeout=60)
    return p, json.loads(out_json.read_text()) if out_json.exists() else None


def layout(v):
    """The shape of a report: keys (in order) and value types, with the per-kind latency and error
    classes reduced to one entry each (which kinds occur depends on timing)."""
    if isinstance(v, dict):
        return [(k, layout(x)) for k, x in v.items()]
    if isinstance(v, list):
        return ["list"]
    if isinstance(v, bool) or v is None:
        return repr(v)
    return type(v).__name__ if not isinstance(v, (int, float)) else "number"


class SoakToolsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="soak-test-"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check_healthy_report(self, r, state):
        self.assertEqual(list(r.keys()), TOP_KEYS)
        self.assertEqual(r["verdict"], "ok", r["errors"])
        self.assertEqual(r["errors"], {})
        self.assertEqual(r["started"], 64)
        # Every request lands in exactly one bucket.
        self.assertEqual(r["ok"] + r["client_aborts"] + r["malformed_refused_4xx"] + r["busy_429_503"], 64)
        self.assertGreater(r["client_aborts"], 0)
        self.assertGreater(r["malformed_refused_4xx"], 0)
        self.assertEqual(r["model"], "mock")
        self.assertIn("malformed", r["latency"])
        self.assertTrue(any(k.endswith("_slow") for k in r["latency"]), r["latency"].keys())
        self.assertGreater(r["ttft_stream"]["n"], 0)
        for part in (r["before"]["metrics"], r["after"]["metrics"]):
            self.assertEqual(list(part.keys()), METRIC_KEYS)
        self.assertEqual(r["before"]["metrics"], {"kv_blocks_total": KV_TOTAL, "kv_blocks_in_use": 0,
                                                  "kv_free_slots": SLOTS, "requests_running": 0,
                                                  "requests_waiting": 0, "http_inflight": 0, "preemptions": 0})
        self.assertEqual(r["after"]["metrics"], r["before"]["metrics"])  # drained: the tool waited for it
        self.assertIsInstance(r["before"]["rss_kib"], int)
        self.assertIsInstance(r["after"]["rss_kib"], int)
        # The aborts closed sockets while the server was still answering, and connections were reused.
        self.assertGreater(state.client_gone_mid_response, 0)
        self.assertLess(state.connections, state.generations)

    def test_python_tool_against_a_healthy_server(self):
        with MockServer() as server:
            p, r = run_tool([sys.executable, str(SOAK_DIR / "soak.py")], server.base_url, self.tmp / "py.json")
            self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
            self.assertEqual(json.loads(p.stdout), r)  # stdout is the JSON written to --json
            self.check_healthy_report(r, server.state)

    def test_python_tool_fails_a_misbehaving_server_by_name(self):
        with MockServer(broken=True) as server:
            p, r = run_tool([sys.executable, str(SOAK_DIR / "soak.py")], server.base_url, self.tmp / "bad.json")
        self.assertEqual(p.returncode, 1, p.stderr)
        for cls in ("stream_without_done", "http_500", "bad_response", "malformed_accepted"):
            self.assertIn(cls, r["errors"])
            self.assertGreater(r["errors"][cls]["count"], 0)
            self.assertLessEqual(len(r["errors"][cls]["examples"]), 3)
        self.assertTrue(r["verdict"].startswith("FAIL: errors; kv blocks in use differ after the drain"), r["verdict"])
        self.assertGreater(r["after"]["metrics"]["kv_blocks_in_use"], 0)

    def test_unreachable_server_exits_2(self):
        with MockServer() as server:
            base = server.base_url
            model_args = ["--model", "mock"]
        # The mock is gone: /metrics cannot be read, which the tool reports as a crash (exit 2), as soak.mjs.
        p = subprocess.run([sys.executable, str(SOAK_DIR / "soak.py"), "--base-url", base, "--n", "2"] + model_args,
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn("soak:", p.stderr)

    def test_chunked_decoding_in_any_split(self):
        pieces = [b"data: a\n\n", b"x" * 300, "你好".encode(), b"\r\n"]
        body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\nTrailer: y\r\n\r\n"
        for step in range(1, len(body) + 1, 7):
            dec = soak_http.ChunkedDecoder()
            out = b"".join(dec.feed(body[i:i + step]) for i in range(0, len(body), step))
            self.assertTrue(dec.finished, step)
            self.assertFalse(dec.surplus)
            self.assertEqual(out, b"".join(pieces), step)
        dec = soak_http.ChunkedDecoder()
        dec.feed(body + b"HTTP/1.1 200")
        self.assertTrue(dec.surplus)
        with self.assertRaises(soak_http.ProtocolError):
            soak_http.ChunkedDecoder().feed(b"zz\r\n")

    def test_usage_errors(self):
        for args, msg in ((["--base-url", "http://10.0.0.1:80"], "loopback"), (["--n", "0"], "--n must be"),
                          (["--concurrency", "2000"], "--concurrency must be"), (["stray"], "unexpected argument")):
            p = subprocess.run([sys.executable, str(SOAK_DIR / "soak.py")] + args, capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(msg, p.stderr)

    def test_node_and_python_reports_have_one_layout(self):
        node = shutil.which("node")
        if not node:
            self.skipTest("node is not installed: soak.mjs not run (soak.py's layout is checked above)")
        with MockServer() as server:
            p, js = run_tool([node, str(SOAK_DIR / "soak.mjs")], server.base_url, self.tmp / "js.json")
            self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
            self.check_healthy_report(js, server.state)
        with MockServer() as server:
            p, py = run_tool([sys.executable, str(SOAK_DIR / "soak.py")], server.base_url, self.tmp / "py.json")
            self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        for r in (js, py):
            r["latency"] = {"kind": next(iter(r["latency"].values()))}
        self.assertEqual(layout(py), layout(js))


if __name__ == "__main__":
    unittest.main(verbosity=2)
