"""Helpers for the multi-process cluster tests: free ports (held until the test process
exits), cluster files, a `deepinfer launch` wrapper that waits for the `ready:` line (and starts
again on other ports when one was taken), clients, status queries and node pids.
Python 3 standard library only."""
import atexit
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

BINARY = None  # set by the test driver


_RESERVED = {}  # port -> the socket that holds it (see free_ports)
atexit.register(lambda: [s.close() for s in _RESERVED.values()])


def free_ports(n):
    """`n` distinct TCP ports on 127.0.0.1, each held for this test process until it exits.

    Picking a port by binding port 0 and closing the socket left a window: before the node
    bound the port, another process (an outgoing connection's ephemeral port, another test's
    server) could take it and the cluster failed to start. The holder here is bound with
    SO_REUSEADDR and never listens: the engine, which binds with SO_REUSEADDR too (CAF's
    publish), binds and listens beside it, while the kernel hands the port to no other
    bind(port 0) nor to an outgoing connection, and a plain bind of it fails. A process that
    binds it explicitly with SO_REUSEADDR and listens first still takes it: Cluster then
    starts again on other ports."""
    ports = []
    while len(ports) < n:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        if port in _RESERVED:  # cannot happen while the holder is open; never hand one out twice
            s.close()
            continue
        _RESERVED[port] = s
        ports.append(port)
    return ports


# The engine's own words for a port it could not listen on because another socket has it
# (a node: "node 1: cannot listen on 127.0.0.1:PORT (nodes.1.port / bind): tcp socket creation
# failed (Address already in use)"; the router: "cannot listen for clients on HOST:PORT ...").
_PORT_TAKEN = re.compile(r"cannot listen (?:for clients )?on \S*:(\d+) .*\(Address already in use\)")


def taken_ports(log):
    """The ports that a launch's log says were taken by another process."""
    return {int(m.group(1)) for m in _PORT_TAKEN.finditer(log)}


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
    """`deepinfer launch FILE [--set ...]` running until stop().

    When the launch fails because a port of the file was taken by another process (the
    engine's "cannot listen ... (Address already in use)"), that port is replaced by a fresh
    one from free_ports() and the cluster is launched again, up to `attempts` times in all;
    port(p) is the port now in use for a port `p` of the original file, and `moved` lists
    (old port, new port) for each one replaced."""

    def __init__(self, workdir, name, toml_text, sets=(), ready_timeout=120, attempts=3, env=None):
        self.name = name
        self.env = env
        self.path = os.path.join(workdir, f"{name}.toml")
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.sets = list(sets)
        self.moved = []
        self._port_map = {}
        for attempt in range(1, attempts + 1):
            self._start(toml_text)
            if self._wait_ready(ready_timeout):
                break
            self.stop()
            log = self.read_log()
            taken = sorted(p for p in taken_ports(log) if p in _RESERVED)
            if not taken or attempt == attempts:
                raise AssertionError(f"{name}: no ready line (attempt {attempt} of {attempts}); log:\n{log}")
            os.replace(self.log_path, f"{self.log_path}.attempt{attempt}")
            for old, new in zip(taken, free_ports(len(taken))):
                toml_text = re.sub(rf"(?m)^(port\s*=\s*){old}\s*$", rf"\g<1>{new}", toml_text)
                self.moved.append((old, new))
                first = next((k for k, v in self._port_map.items() if v == old), old)
                self._port_map[first] = new
        self.address = self.lines[0].split(" ", 1)[1]

    def port(self, p):
        """The port in use for port `p` of the file given to the constructor."""
        return self._port_map.get(p, p)

    def _start(self, toml_text):
        with open(self.path, "w") as f:
            f.write(toml_text)
        self.log = open(self.log_path, "w")
        args = [BINARY, "launch", self.path]
        for s in self.sets:
            args += ["--set", s]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True, env=self.env)
        self.lines = []
        self.ready = threading.Event()
        self._settled = threading.Event()  # the ready line came, or launch's stdout ended
        threading.Thread(target=self._read, args=(self.proc, self.lines, self.ready, self._settled),
                         daemon=True).start()

    def _wait_ready(self, timeout):
        self._settled.wait(timeout)
        return self.ready.is_set()

    @staticmethod
    def _read(proc, lines, ready, settled):
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("ready: "):
                ready.set()
                settled.set()
        proc.stdout.close()
        settled.set()

    def read_log(self):
        if not self.log.closed:  # (after stop() it is; it failed then)
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
