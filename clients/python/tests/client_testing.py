"""Helpers of the client tests (a module of its own: `conftest` is not importable by name
when several test folders run together)."""
import asyncio
import difflib
import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from arbiter_client._transport import aiohttp

MAX_LEXICAL_CHARS = 40
# A real failure: Arbiter refuses lexical texts over cpu.max_lexical_chars (reward_failed).
TOO_LONG = "x" * (MAX_LEXICAL_CHARS + 1)

CPU_CONFIG = f"""
[cpu]
max_lexical_chars = {MAX_LEXICAL_CHARS}

[data_sources]
"lexical*" = "lexical"
"gsm8k*" = "exact_match"
"""


# The async transports: aiohttp (when installed) and the standard library's.
ASYNC_TRANSPORTS = [
    pytest.param(None, id="aiohttp", marks=pytest.mark.skipif(aiohttp is None,
                                                              reason="aiohttp not installed")),
    pytest.param(False, id="stdlib"),
]


def ratio(a, b):
    return difflib.SequenceMatcher(None, a, b).ratio()


def lexical(solution, truth):
    return {"reward": "lexical", "solution_str": solution, "ground_truth": truth}


def failing_item(i=0):
    return {"reward": "lexical", "solution_str": TOO_LONG + str(i), "ground_truth": "x"}


class ScriptedServer:
    """A stand-in in front of a real Arbiter, to test the client's own retry logic: it answers
    POST requests with the scripted replies first, in order, then forwards them to `upstream`.
    A reply is a dict: `status`, `headers`, `body` (bytes, str or JSON-able) and `delay_s`
    (wait before answering); or `forward: True` with `delay_s`: Arbiter's answer, late. Every request is recorded in `requests` as (monotonic time,
    headers, parsed JSON body)."""

    def __init__(self, upstream, script=()):
        self.upstream = upstream
        self.script = list(script)
        self.requests = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with owner._lock:
                    owner.requests.append((time.monotonic(), dict(self.headers),
                                           json.loads(data)))
                    reply = owner.script.pop(0) if owner.script else None
                if reply is None or reply.get("forward"):
                    time.sleep((reply or {}).get("delay_s", 0))
                    status, headers, body = owner._forward(self.path, data)
                else:
                    time.sleep(reply.get("delay_s", 0))
                    status, headers = reply["status"], reply.get("headers", {})
                    body = reply.get("body", b"")
                    if not isinstance(body, (bytes, str)):
                        body = json.dumps(body)
                        headers = {"Content-Type": "application/json", **headers}
                    body = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            request_queue_size = 512  # a burst of connections, not the default backlog of 5

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()

    def _forward(self, path, data):
        req = urllib.request.Request(self.upstream + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, {"Content-Type": "application/json"}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {"Content-Type": "application/json"}, e.read()

    def items(self, i=-1):
        """The items of the i-th request received."""
        return self.requests[i][2]["items"]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def run_async(coro_fn, *args):
    """Runs `coro_fn(*args)` on a new event loop, then closes that loop's sessions of the
    adapters' shared clients (verl, trl, slime)."""
    from arbiter_client._adapters import aclose_shared

    async def main():
        try:
            return await coro_fn(*args)
        finally:
            await aclose_shared()

    return asyncio.run(main())


class FakeArray:
    """numpy-like: only `tolist()`."""

    def __init__(self, values):
        self._values = list(values)

    def tolist(self):
        return list(self._values)


class FakeScalar:
    """numpy-scalar-like: only `item()`."""

    def __init__(self, value):
        self._value = value

    def item(self):
        return self._value
