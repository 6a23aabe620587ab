"""Fixtures for the client tests: a real Arbiter on loopback (port 0) backed by
fake-provider processes, started with the helpers in tests/support."""
import os
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# The package under test is this tree's, even when an older copy is installed.
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from arbiter_testing import Provider, source_toml, start_server  # noqa: E402

from arbiter_client import ArbiterClient  # noqa: E402
from client_testing import CPU_CONFIG, ScriptedServer  # noqa: E402


@pytest.fixture(scope="session")
def judge_provider():
    p = Provider()
    yield p
    p.kill()


@pytest.fixture(scope="session")
def arbiter(tmp_path_factory, judge_provider):
    """CPU rewards (lexical texts over 40 code points fail), `good_judge` on a healthy fake
    provider, data_source prefixes lexical and gsm8k (exact_match)."""
    config = (CPU_CONFIG + "\n[routing]\nhedge = false\n\n" + source_toml("p", judge_provider.url)
              + '\n[rewards.good_judge]\nkind = "judge"\nsources = ["p"]\n')
    s = start_server(tmp_path_factory.mktemp("arbiter"), config)
    yield s
    s.kill()


@pytest.fixture
def down_arbiter(tmp_path):
    """A fresh Arbiter whose only chat source is in an outage (503s): `broken` (judge, no
    fallback) fails, `soft` (judge, lexical fallback) falls back. Two attempts, short backoff
    and no circuit breaker, so every failure comes within a second."""
    p = Provider("--outage", "0:3600")
    config = ("[routing]\nhedge = false\nmax_attempts = 2\nretry_backoff_base_ms = 20\n"
              "breaker_consecutive_failures = 0\nbreaker_failure_ratio = 0\n"
              "retry_backoff_cap_ms = 50\n\n" + source_toml("down", p.url)
              + '\n[rewards.broken]\nkind = "judge"\nsources = ["down"]\nfallback = "none"\n'
              + '\n[rewards.soft]\nkind = "judge"\nsources = ["down"]\nfallback = "lexical"\n')
    s = start_server(tmp_path, config)
    yield s
    s.kill()
    p.kill()


@pytest.fixture
def make_client():
    """`make_client(url, **options)`: an ArbiterClient that ignores the caller's ARBITER_*
    variables, with seeded jitter; closed after the test."""
    clients = []

    def make(url, **options):
        options.setdefault("env", {})
        options.setdefault("rng", random.Random(7))
        c = ArbiterClient(url, **options)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.fixture(autouse=True)
def _forget_shared_clients():
    """The adapters' shared clients do not outlive a test (nor its environment)."""
    yield
    from arbiter_client._adapters import close_shared
    close_shared()


@pytest.fixture
def arbiter_env(monkeypatch):
    """`arbiter_env(url, **VARIABLES)`: sets ARBITER_URL and the given ARBITER_* variables for
    the adapters (verl, trl, slime), after clearing the caller's."""
    for name in list(os.environ):
        if name.startswith("ARBITER_") and name not in ("ARBITER_BIN",):
            monkeypatch.delenv(name)

    def set_env(url, **variables):
        monkeypatch.setenv("ARBITER_URL", url)
        for name, value in variables.items():
            monkeypatch.setenv(name, str(value))

    return set_env


@pytest.fixture
def scripted(arbiter):
    """`scripted(*replies)`: a ScriptedServer in front of the session's Arbiter."""
    servers = []

    def make(*replies):
        s = ScriptedServer(arbiter.url, replies)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()
