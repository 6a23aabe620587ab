"""Fixtures for end-to-end tests: the real `arbiter` binary on loopback (port 0)."""
import http.client
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARBITER_BIN = os.environ.get("ARBITER_BIN", str(ROOT / "build" / "arbiter"))


class Server:
    """A running `arbiter serve` process."""

    def __init__(self, proc, host, port):
        self.proc = proc
        self.host = host
        self.port = port

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
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)


def start_server(tmp_path, config_text=None, env=None, args=()):
    cmd = [ARBITER_BIN, "serve", "--port", "0"]
    if config_text is not None:
        cfg = tmp_path / "arbiter.toml"
        cfg.write_text(config_text)
        cmd += ["--config", str(cfg)]
    cmd += list(args)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    full_env.update(env or {})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=sys.stderr, env=full_env,
                            text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on http://"):
        proc.kill()
        raise RuntimeError(f"unexpected first line {line!r} (exit {proc.wait()})")
    hostport = line.strip().removeprefix("listening on http://")
    host, port = hostport.rsplit(":", 1)
    return Server(proc, host, int(port))


@pytest.fixture
def make_server(tmp_path):
    servers = []

    def make(config_text=None, env=None, args=()):
        s = start_server(tmp_path, config_text, env, args)
        servers.append(s)
        return s

    yield make
    for s in servers:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


@pytest.fixture
def server(make_server):
    s = make_server()
    yield s
    assert s.stop() == 0
