"""Fixtures for end-to-end tests: the real `arbiter` binary on loopback (port 0), and
fake-provider processes for the remote sources. The helpers live in tests/support."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from arbiter_testing import (ARBITER_BIN, FAKE_PROVIDER_BIN, Provider, Server,  # noqa: E402,F401
                             Started, start_server)


@pytest.fixture
def make_server(tmp_path):
    started = Started()

    def make(config_text=None, env=None, args=(), stderr=None):
        return started.add(start_server(tmp_path, config_text, env, args, stderr))

    yield make
    started.kill_all()


@pytest.fixture
def server(make_server):
    s = make_server()
    yield s
    assert s.stop() == 0


@pytest.fixture
def provider():
    """`provider(*flags)` starts an arbiter-fake-provider; all are killed after the test."""
    started = Started()
    yield lambda *args: started.add(Provider(*args))
    started.kill_all()
