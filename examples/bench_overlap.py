#!/usr/bin/env python3
"""Overlapped scheduling and control-message cost of the actor runtime, measured on real
processes: a 2-node cluster (node 0 router + scheduler, node 1 executor) on localhost.

1. Batch 32 decode on the CPU model runner (tiny-v41 unless --model), scheduler.overlap on and
   off: the executor's idle time between consecutive steps as a share of its step time.
   The toy runner with 20 ms sleeping steps (a device that leaves the CPU free, as a GPU does),
   overlap on and off, shows the mechanism without the CPU runner's OpenMP threads competing
   with the message threads for the cores.
2. The per-step control-message cost between two nodes: the toy runner with zero step time and
   overlap off, so every step is a plan sent to an idle executor and its result coming back;
   cost = scheduler-side round trip minus the executor's run time, with 2 nodes and with the
   executor in the scheduler's own process (1 node) for comparison; plus the message sizes.

Prints a table and writes JSON (--out). Usage:
  bench_overlap.py PATH/TO/deepinfer [--model DIR] [--batch 32] [--tokens 64] [--out FILE]"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cluster_file(work, name, nodes, runner, model):
    ports = free_ports(nodes + 1)
    text = (f'[cluster]\nname = "{name}"\n[model]\nrunner = "{runner}"\npath = "{model}"\n'
            f'[router]\nport = {ports[0]}\n[logging]\nstatus_interval_s = 0\nlevel = "warn"\n')
    for p in ports[1:]:
        text += f'[[nodes]]\nhost = "127.0.0.1"\nport = {p}\n'
    text += f"[[groups]]\nscheduler = 0\nexecutors = [{nodes - 1}]\n"
    path = os.path.join(work, f"{name}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def run_cluster(binary, work, name, nodes, runner, model, sets, batch, tokens):
    path = cluster_file(work, name, nodes, runner, model)
    args = [binary, "launch", path] + [a for s in sets for a in ("--set", s)]
    launch = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        address = launch.stdout.readline().strip().split(" ", 1)[1]
        client = [binary, "client", "--connect", address, "--cluster-name", name]
        rows = [{"prompt_ids": [0] + [1000 + 37 * i + j for j in range(15)], "max_tokens": tokens,
                 "ignore_eos": True, "temperature": 0} for i in range(batch)]
        jsonl = os.path.join(work, f"{name}.jsonl")
        with open(jsonl, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        subprocess.run(client + ["--file", jsonl, "--concurrency", "1", "--max-tokens", "2"],
                       capture_output=True, check=True)  # warm-up
        before = json.loads(subprocess.run(client + ["--status"], capture_output=True, check=True).stdout)
        t0 = time.time()
        subprocess.run(client + ["--file", jsonl, "--concurrency", str(batch)], capture_output=True, check=True)
        wall = time.time() - t0
        after = json.loads(subprocess.run(client + ["--status"], capture_output=True, check=True).stdout)
        return summarize(before["groups"][0]["executor"], after["groups"][0]["executor"], wall, batch * tokens)
    finally:
        launch.send_signal(signal.SIGINT)
        launch.wait(60)


def summarize(b, a, wall, num_tokens):
    d = {k: a[k] - b[k] for k in ("steps", "run_ms", "gaps", "gap_ms", "plans_waiting", "direct_steps")}
    direct_us = (a["control_overhead_us_per_step"] * a["direct_steps"]
                 - b["control_overhead_us_per_step"] * b["direct_steps"]) / max(1, d["direct_steps"])
    return {"steps": d["steps"], "mean_step_ms": d["run_ms"] / max(1, d["steps"]),
            "idle_share": d["gap_ms"] / max(1e-9, d["run_ms"]), "mean_gap_us": 1e3 * d["gap_ms"] / max(1, d["gaps"]),
            "plans_waiting_share": d["plans_waiting"] / max(1, d["gaps"]), "direct_steps": d["direct_steps"],
            "control_us_per_direct_step": direct_us, "plan_bytes": a["plan_bytes_per_step"],
            "result_bytes": a["result_bytes_per_step"], "tokens_per_s": num_tokens / wall}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--model", default="")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out", default="bench_overlap.json")
    o = ap.parse_args()
    binary = os.path.abspath(o.binary)
    work = tempfile.mkdtemp(prefix="deepinfer-bench-")
    try:
        model = o.model or os.path.join(work, "tiny-v41")
        if not o.model:
            subprocess.run([binary, "make-model", "--preset", "tiny-v41", "--out", model, "--quiet"], check=True)
        results = {}
        for overlap in ("true", "false"):
            results[f"cpu runner, batch {o.batch}, overlap {overlap}"] = run_cluster(
                binary, work, f"bench-cpu-{overlap}", 2, "cpu", model,
                [f"scheduler.overlap={overlap}", "kv.pool_tokens=16384"], o.batch, o.tokens)
        for overlap in ("true", "false"):
            results[f"toy runner (20 ms sleeping steps), batch {o.batch}, overlap {overlap}"] = run_cluster(
                binary, work, f"bench-toy20-{overlap}", 2, "toy", "",
                [f"scheduler.overlap={overlap}", "model.toy.step_ms=20"], o.batch, o.tokens)
        for nodes in (2, 1):
            results[f"toy runner (0 ms steps), batch {o.batch}, overlap off, {nodes} node(s)"] = run_cluster(
                binary, work, f"bench-toy-{nodes}", nodes, "toy", "", ["scheduler.overlap=false"], o.batch, o.tokens)
        print(f"{'configuration':62} {'steps':>6} {'step ms':>8} {'idle %':>7} {'gap us':>7} "
              f"{'waiting':>8} {'ctl us/step':>11} {'plan B':>7} {'result B':>8} {'tok/s':>8}")
        for name, r in results.items():
            print(f"{name:62} {r['steps']:6d} {r['mean_step_ms']:8.2f} {100 * r['idle_share']:7.2f} "
                  f"{r['mean_gap_us']:7.0f} {100 * r['plans_waiting_share']:7.0f}% "
                  f"{r['control_us_per_direct_step']:11.0f} {r['plan_bytes']:7d} {r['result_bytes']:8d} "
                  f"{r['tokens_per_s']:8.0f}")
        cpu_on = results[f"cpu runner, batch {o.batch}, overlap true"]
        two = results[f"toy runner (0 ms steps), batch {o.batch}, overlap off, 2 node(s)"]
        one = results[f"toy runner (0 ms steps), batch {o.batch}, overlap off, 1 node(s)"]
        idle = 100 * cpu_on["idle_share"]
        print(f"\nexecutor idle share between consecutive steps, CPU runner, batch {o.batch}, overlap on: "
              f"{idle:.2f}% of step time (goal < 5%: {idle / 5:.2f}x the limit)")
        print(f"per-step control-message cost between two nodes: {two['control_us_per_direct_step']:.0f} us "
              f"(executor in the scheduler's process: {one['control_us_per_direct_step']:.0f} us); "
              f"run_step {two['plan_bytes']} B, step_done {two['result_bytes']} B at batch {o.batch}")
        with open(o.out, "w") as f:
            json.dump(results, f, indent=2)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
