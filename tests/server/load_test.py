"""Load test of `deepinfer serve` (not in ctest: minutes on a 2-core machine; ctest runs the
100-stream variant in test_server.py). Phase 1: `--streams` concurrent streaming requests
(default 1000, all admitted) through `deepinfer bench serve`; it must finish with zero errors.
Phase 2: `--overload` more requests than server.max_concurrent_requests at once: the excess
must get fast 429s. Prints requests/s, TTFT p50/p99 and the server's peak memory (VmHWM).
Usage: load_test.py DEEPINFER_BINARY [--streams 1000] [--output-len 4] [--input-len 16]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import Server, make_model  # noqa: E402


def vm(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0  # MiB
    return float("nan")


def bench(binary, url, n, concurrency, args):
    p = subprocess.run([binary, "bench", "serve", "--url", url, "--num-prompts", str(n), "--concurrency",
                        str(concurrency), "--input-len", str(args.input_len), "--output-len", str(args.output_len),
                        "--timeout", "1800", "--json"], capture_output=True, text=True)
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--input-len", type=int, default=16)
    ap.add_argument("--output-len", type=int, default=4)
    ap.add_argument("--overload", type=int, default=300, help="requests beyond the admission limit")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="di-load-") as workdir:
        model = make_model(args.binary, workdir)
        srv = Server(args.binary, ["--model", model, "--set", f"server.max_concurrent_requests={args.streams}",
                                   "--set", "scheduler.max_num_running=256"])
        try:
            rss0 = vm(srv.proc.pid, "VmRSS")
            r = bench(args.binary, srv.url, args.streams, args.streams, args)
            peak = vm(srv.proc.pid, "VmHWM")
            print(f"phase 1: {args.streams} concurrent streams: completed {r['completed']}, failed {r['failed']}, "
                  f"max in flight {r['max_in_flight']}, {r['duration_s']:.1f} s, "
                  f"{r['request_throughput']:.2f} req/s, {r['output_throughput']:.1f} output tok/s, "
                  f"TTFT p50 {r['ttft_ms']['p50']:.0f} ms p99 {r['ttft_ms']['p99']:.0f} ms, "
                  f"server RSS idle {rss0:.0f} MiB peak {peak:.0f} MiB")
            o = bench(args.binary, srv.url, args.streams + args.overload, args.streams + args.overload, args)
            n429 = o.get("status_counts", {}).get("429", 0)
            print(f"phase 2: {args.streams + args.overload} at once against a limit of {args.streams}: "
                  f"completed {o['completed']}, HTTP 429 {n429}, other failures {o['failed'] - n429}, "
                  f"failed requests answered in mean {o['failed_e2e_ms']['mean']:.0f} ms "
                  f"(p99 {o['failed_e2e_ms']['p99']:.0f} ms)")
            ok = r["failed"] == 0 and r["completed"] == args.streams and n429 >= 1 and o["failed"] == n429
            print(json.dumps({"phase1": r, "phase2": o}), file=sys.stderr)
        finally:
            srv.stop()
    print("load test:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
