"""Helpers for the multi-process cluster tests: free ports, cluster files, a `deepinfer
launch` wrapper that waits for the `ready:` line, clients, status queries and node pids.
Python 3 standard library only."""
import json
import os
import signal
import socket
import subprocess
import threading
import time

BINARY = None  # set by the test driver


def free_ports(n):
    """`n` distinct TCP ports that were free a moment ago."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def cluster_toml(name, router_port, node_ports, groups, model="", runner="cpu", extra=""):
    """A cluster file: nodes on 127.0.0.1, `groups` = [(scheduler_node, [executor nodes])]."""
    lines = [
        "[cluster]", f'name = "{name}"', "heartbeat_interval_ms = 200", "connection_timeout_ms = 2000",
        "startup_timeout_s = 120", "shutdown_timeout_s = 5",
        "[model]", f'runner = "{runner}"', f'path = "{model}"',
        "[router]", 'host = "127.0.0.1"', f"port = {router_port}",
        "[logging]", "status_interval_s = 0",
    ]
    for port in node_ports:
        lines += ["[[nodes]]", 'host = "127.0.0.1"', f"port = {port}", 'devices = ["cpu", "cpu"]']
    for sched, execs in groups:
        lines += ["[[groups]]", f"scheduler = {sched}", f"executors = {list(execs)}"]
    return "\n".join(lines) + "\n" + extra + "\n"


def children(parent_pid):
    """(pid, command line as a list) of each live process whose parent is `parent_pid`."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read().split("\0")
        except OSError:
            continue
        if ppid == parent_pid:
            out.append((int(pid), cmd))
    return out


class Cluster:
    """`deepinfer launch FILE [--set ...]` running until stop()."""

    def __init__(self, workdir, name, toml_text, sets=(), ready_timeout=120):
        self.name = name
        self.path = os.path.join(workdir, f"{name}.toml")
        with open(self.path, "w") as f:
            f.write(toml_text)
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "w")
        args = [BINARY, "launch", self.path]
        for s in sets:
            args += ["--set", s]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.lines = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(ready_timeout):
            self.stop()
            raise AssertionError(f"{name}: no ready line; log:\n{self.read_log()}")
        self.address = self.lines[0].split(" ", 1)[1]

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.startswith("ready: "):
                self.ready.set()

    def read_log(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def client(self, *args, timeout=600, stdin=None):
        return subprocess.run([BINARY, "client", "--connect", self.address, "--cluster-name", self.name, *args],
                              capture_output=True, text=True, timeout=timeout, input=stdin)

    def client_json_lines(self, *args, timeout=600):
        p = self.client("--json", *args, timeout=timeout)
        out = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
        return p, out

    def status(self):
        p = self.client("--status", timeout=60)
        if p.returncode != 0:
            raise AssertionError(p.stderr)
        return json.loads(p.stdout)

    def node_pid(self, rank):
        """The pid of the `deepinfer node --rank RANK` child of launch."""
        for pid, cmd in children(self.proc.pid):
            if "node" in cmd and cmd[cmd.index("--rank") + 1] == str(rank):
                return pid
        raise AssertionError(f"no node {rank} under launch {self.proc.pid}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def generate_alone(model, row):
    """`deepinfer generate --json` of one request row ({"prompt_ids", "max_tokens", ...})."""
    args = [BINARY, "generate", "--model", model, "--json", "--no-stats",
            "--prompt-ids", ",".join(map(str, row["prompt_ids"])), "--max-tokens", str(row["max_tokens"])]
    for key, flag in (("temperature", "--temperature"), ("seed", "--seed"), ("top_k", "--top-k"), ("top_p", "--top-p"),
                      ("min_p", "--min-p"), ("presence_penalty", "--presence-penalty"),
                      ("frequency_penalty", "--frequency-penalty"), ("repetition_penalty", "--repetition-penalty"),
                      ("logprobs", "--logprobs"), ("prompt_logprobs", "--prompt-logprobs")):
        if key in row:
            args += [flag, str(row[key])]
    if row.get("ignore_eos"):
        args.append("--ignore-eos")
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError(p.stderr)
    return json.loads(p.stdout)


def wait_until(cond, timeout, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(step)
    return False
