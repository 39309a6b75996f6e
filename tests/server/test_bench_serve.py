#!/usr/bin/env python3
"""`deepinfer bench serve` against a fake OpenAI streaming server (standard library only) whose
timings, statuses and usage chunks the test sets: percentiles, chat prompts, option and
--dataset checks, error examples, n/a figures (and a sweep plot of them), output tokens
without usage.

Usage: test_bench_serve.py BUILD/bin/deepinfer [SOURCE_DIR]"""
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

BINARY = sys.argv[1]
SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..")
TOKENIZER = os.path.join(SOURCE_DIR, "assets", "deepseek-v3-tokenizer")


class Fake:
    """What the server does with the i-th generation request (in arrival order)."""
    lock = threading.Lock()
    ttfts = []        # seconds before the first chunk; cycled
    statuses = []     # HTTP status per request; cycled; empty: 200
    chunks = 2        # content chunks per stream
    usage = True      # send the usage chunk
    bodies = []       # request bodies received
    count = 0

    @classmethod
    def reset(cls, ttfts=(0.0,), statuses=(), chunks=2, usage=True):
        with cls.lock:
            cls.ttfts, cls.statuses, cls.chunks, cls.usage = list(ttfts), list(statuses), chunks, usage
            cls.bodies, cls.count = [], 0


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "fake"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with Fake.lock:
            i = Fake.count
            Fake.count += 1
            Fake.bodies.append(body)
            ttft = Fake.ttfts[i % len(Fake.ttfts)]
            status = Fake.statuses[i % len(Fake.statuses)] if Fake.statuses else 200
            chunks, usage = Fake.chunks, Fake.usage
        if status != 200:
            err = json.dumps({"error": {"message": f"boom {status}", "type": "x"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(err)))
            self.end_headers()
            self.wfile.write(err)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            self.stream(self.path == "/v1/chat/completions", ttft, chunks, usage)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its --timeout)

    def stream(self, chat, ttft, chunks, usage):
        time.sleep(ttft)
        for k in range(chunks):
            if k:
                time.sleep(0.01)
            choice = {"index": 0, "delta": {"content": f"t{k}"}} if chat else {"index": 0, "text": f"t{k}"}
            self.wfile.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
            self.wfile.flush()
        if usage:
            u = {"prompt_tokens": 7, "completion_tokens": chunks, "total_tokens": 7 + chunks}
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': u})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


def start_fake():
    for port in range(25100, 25200):
        try:
            srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        except OSError:
            continue
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv, f"http://127.0.0.1:{port}"
    raise RuntimeError("no free port in 25100-25199")


SERVER, URL = start_fake()
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def bench(*args, json_out=True):
    defaults = [d for d in (["--output-len", "2"], ["--input-len", "4"]) if d[0] not in args]
    cmd = [BINARY, "bench", "serve", "--url", URL, *sum(defaults, []), *args]
    if json_out:
        cmd.append("--json")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@test
def percentiles_interpolate_linearly():
    # numpy.percentile([100, 200, 600, 3000], [50, 99]) = 400, 2928 (the upper nearest rank gave
    # 600 and 3000). Compared with the mean (975) so that the overhead every request shares
    # cancels out: p50 - mean = -575 (was -375), p99 - mean = 1953 (was 2025).
    Fake.reset(ttfts=[0.1, 0.2, 0.6, 3.0])
    p = bench("--num-prompts", "4")
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)["ttft_ms"]
    assert abs(t["p50"] - t["mean"] + 575) < 30 and abs(t["p99"] - t["mean"] - 1953) < 30, t
    Fake.reset(ttfts=[0.1, 1.0])  # of two: p50 is their mean (was the larger)
    t = json.loads(bench("--num-prompts", "2").stdout)["ttft_ms"]
    assert abs(t["p50"] - t["mean"]) < 1 and 500 < t["p50"] < 700, t


def token_count(text):
    p = subprocess.run([BINARY, "tokenize", "--tokenizer", TOKENIZER], input=json.dumps({"text": text}),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return len(json.loads(p.stdout)["ids"])


@test
def chat_prompts_are_text_of_input_len_tokens():
    for n in (10, 50):
        Fake.reset()
        p = bench("--endpoint", "/v1/chat/completions", "--num-prompts", "3", "--input-len", str(n))
        assert p.returncode == 0, p.stderr
        contents = [b["messages"][0]["content"] for b in Fake.bodies]
        assert len(set(contents)) == 3, contents
        for c in contents:
            assert isinstance(c, str) and not c.startswith("["), c
            assert token_count(c) == n, (n, c)
    # completions still send the ids themselves
    Fake.reset()
    assert bench("--num-prompts", "2", "--input-len", "10").returncode == 0
    assert all(len(b["prompt"]) == 10 and isinstance(b["prompt"][0], int) for b in Fake.bodies), Fake.bodies
    # a tokenizer folder that is not one: an error before any request
    Fake.reset()
    p = bench("--endpoint", "/v1/chat/completions", "--num-prompts", "1", "--tokenizer", "/nonexistent")
    assert p.returncode == 1 and p.stderr.startswith("error:") and Fake.count == 0, p.stderr


@test
def bad_option_values_are_refused():
    Fake.reset()
    # Integer ranges are the option parser's checks, usage errors (exit 2) as for every command;
    # the other values are checked after the parse (exit 1).
    for args, name, code in [(["--timeout", "0"], "--timeout", 1), (["--timeout", "-1"], "--timeout", 1),
                             (["--concurrency", "-1"], "--concurrency", 2),
                             (["--endpoint", "/v1/foo"], "--endpoint", 1),
                             (["--num-prompts", "0"], "--num-prompts", 2)]:
        p = bench(*(["--num-prompts", "1"] if args[0] != "--num-prompts" else []), *args)
        lines = p.stderr.splitlines()
        assert p.returncode == code and len(lines) == 1 and lines[0].startswith("error: " + name), (args, p.stderr)
    assert Fake.count == 0, Fake.count
    p = bench("--num-prompts", "2", "--concurrency", "1", "--timeout", "30")
    assert p.returncode == 0 and json.loads(p.stdout)["concurrency"] == 1, p.stderr


@test
def dataset_lines_are_checked():
    d = tempfile.mkdtemp()

    def run(lines):
        path = os.path.join(d, "ds.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return bench("--num-prompts", "3", "--dataset", path), path

    good = json.dumps({"prompt": "hello", "output_len": 3})
    for bad, words in [({"prompt": "x", "output_len": 0}, ["line 3", "output_len"]),
                       ({"prompt": "x", "output_len": -2}, ["line 3", "output_len"]),
                       ({"prompt": "x", "output_len": 2.5}, ["line 3", "output_len", "2.5"]),
                       ({"prompt": "x", "output_len": "4"}, ["line 3", "output_len"]),
                       ({"text": "x"}, ["line 3", "prompt"])]:
        Fake.reset()
        p, _ = run([good, "", json.dumps(bad)])
        assert p.returncode == 1 and p.stderr.startswith("error:") and Fake.count == 0, (bad, p.stderr)
        assert all(w in p.stderr for w in words), (bad, p.stderr)
    p, _ = run([good, "{not json", good])
    assert p.returncode == 1 and "line 2" in p.stderr and "not valid JSON" in p.stderr, p.stderr
    Fake.reset()
    p, path = run([good, json.dumps({"prompt": "x"}), json.dumps({"prompt": [5, 6], "output_len": 5})])
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["dataset"] == path and "input_len" not in r and "output_len" not in r, r
    assert sorted(b["max_tokens"] for b in Fake.bodies) == [2, 3, 5], Fake.bodies  # 2: --output-len


@test
def an_unreachable_url_or_a_folder_is_named():
    # a folder as --dataset read as no lines ("no prompts"); a server that is not there gave
    # Asio's bare "connect: Connection refused", naming no URL (session 55)
    d = tempfile.mkdtemp()
    Fake.reset()
    p = bench("--num-prompts", "1", "--dataset", d)
    assert p.returncode == 1 and p.stderr.strip() == f"error: --dataset {d}: is a directory, not a file", p.stderr
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    base = [BINARY, "bench", "serve", "--url", dead, "--num-prompts", "2", "--input-len", "4", "--output-len", "2"]
    p = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and f"--url {dead}: GET /v1/models failed" in p.stderr, p.stderr
    p = subprocess.run(base + ["--model", "m", "--json"], capture_output=True, text=True, timeout=60)
    r = json.loads(p.stdout)
    assert p.returncode == 1 and r["failed"] == 2, (p.returncode, r)
    assert any(e.startswith(f"connect to {dead}: ") for e in r["errors"]), r["errors"]
    assert Fake.count == 0, Fake.count


@test
def every_failing_status_has_an_example():
    statuses = [400, 401, 403, 404, 409, 413, 422, 500]
    Fake.reset(statuses=statuses)
    p = bench("--num-prompts", "8", "--concurrency", "1")
    assert p.returncode == 1, p.stderr
    r = json.loads(p.stdout)
    assert r["completed"] == 0 and r["failed"] == 8, r
    for s in statuses:
        assert any(f"boom {s}" in e for e in r["errors"]), (s, r["errors"])
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert r[k] == {"mean": None, "p50": None, "p99": None}, r[k]
    assert r["failed_e2e_ms"]["p50"] is not None, r
    Fake.reset(statuses=statuses)
    p = bench("--num-prompts", "8", "--concurrency", "1", json_out=False)
    # first word -> the rest; bottom up so that "E2E" is its own row, not "E2E of failures"
    rows = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines()[::-1] if line.split()}
    for k in ("TTFT", "TPOT", "E2E"):
        assert rows[k] == ["n/a"] * 3, (k, p.stdout)


@test
def sweep_plot_without_samples():
    # no request succeeds / one-token outputs have no TPOT: NaN in the data, the panel still
    # drawn (figures of 0.00 were plotted; with NaN alone gnuplot refused to autoscale)
    d = tempfile.mkdtemp()
    for statuses, extra in [([500], []), ([], ["--output-len", "1"])]:
        Fake.reset(statuses=statuses, chunks=1)
        png = os.path.join(d, f"sweep{len(extra)}.png")
        p = bench("--num-prompts", "2", "--request-rate", "5,inf", "--plot", png, *extra, json_out=False)
        assert p.returncode == (1 if statuses else 0) and "wrote " + png in p.stderr, p.stderr[-1000:]
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
        with open(png + ".tsv") as f:
            rows = [line.rstrip("\n").split("\t") for line in f if not line.startswith("#")]
        assert len(rows) == 2 and all(row[5:7] == ["NaN", "NaN"] for row in rows), rows
        assert all(row[3] == "NaN" for row in rows) == bool(statuses), rows


@test
def output_tokens_without_usage_are_the_streamed_chunks():
    Fake.reset(chunks=5, usage=False)
    p = bench("--num-prompts", "3")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["output_tokens"] == 15 and r["requests_without_usage"] == 3, r
    assert 9 <= r["tpot_ms"]["p50"] < 60, r["tpot_ms"]
    Fake.reset(chunks=5, usage=False)
    p = bench("--num-prompts", "3", json_out=False)
    assert "3 request(s) sent no usage" in p.stdout, p.stdout
    Fake.reset(chunks=5, usage=True)  # with usage its count is used
    r = json.loads(bench("--num-prompts", "3").stdout)
    assert r["output_tokens"] == 15 and r["requests_without_usage"] == 0, r


if __name__ == "__main__":
    failed = 0
    for fn in TESTS:
        try:
            fn()
            print(f"ok   {fn.__name__}")
        except Exception as e:  # noqa: BLE001 -- report every test
            failed += 1
            print(f"FAIL {fn.__name__}: {e!r}")
    SERVER.shutdown()
    print(f"{len(TESTS) - failed}/{len(TESTS)} passed")
    sys.exit(1 if failed else 0)
