"""Helpers of the HTTP server tests: a generated tiny-v41 model, a `deepinfer serve` process
(port chosen by the server, read from its `ready: http://HOST:PORT` line), raw HTTP requests
and /metrics parsing. Standard library only."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time


def make_model(binary, workdir):
    out = os.path.join(workdir, "tiny")
    subprocess.run([binary, "make-model", "--preset", "tiny-v41", "--out", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


class Server:
    """`deepinfer serve ARGS --port 0` running until stop()."""

    def __init__(self, binary, args, ready_timeout=180, env=None):
        self.proc = subprocess.Popen([binary, "serve", *args, "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.stderr_lines = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        line = self._read_ready(ready_timeout)
        m = re.match(r"ready: http://([^:]+):(\d+)", line)
        assert m, f"unexpected ready line {line!r}"
        self.host, self.port = m.group(1), int(m.group(2))
        self.url = f"http://{self.host}:{self.port}"

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def _read_ready(self, timeout):
        result = []
        t = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if not result or not result[0]:
            self.stop()
            raise RuntimeError("server did not start:\n" + "".join(self.stderr_lines[-30:]))
        return result[0].strip()

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers dict, body bytes) of one request on a fresh connection."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def raw(self, data, timeout=10):
        """Sends raw bytes; returns the status code of the answer (None: closed without one)."""
        with socket.create_connection((self.host, self.port), timeout=timeout) as s:
            try:
                s.sendall(data)
            except OSError:
                pass
            buf = b""
            try:
                while b"\r\n" not in buf:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
            except OSError:
                pass
        m = re.match(rb"HTTP/1\.1 (\d{3})", buf)
        return int(m.group(1)) if m else None

    def metrics(self, headers=None):
        """{name or name{labels}: value} of /metrics."""
        status, _, body = self.request("GET", "/metrics", headers=headers)
        assert status == 200, status
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out
