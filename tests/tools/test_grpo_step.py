"""Checks of bench/grpo_step.py that need no Arbiter: the lower bound, the generated items,
the expected judge scores (against the real fake provider) and the Arbiter config it writes."""

import argparse
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from arbiter_testing import ARBITER_BIN, ROOT, RUN_TIMEOUT_S, Provider

_spec = importlib.util.spec_from_file_location("grpo_step", ROOT / "bench" / "grpo_step.py")
grpo = importlib.util.module_from_spec(_spec)
sys.modules["grpo_step"] = grpo
_spec.loader.exec_module(grpo)


def provider(rpm, burst=60.0, latency_s=0.0, error_rate=0.0):
    return {"rpm": rpm, "tpm": 0.0, "burst_seconds": burst, "latency_median_s": latency_s,
            "latency_p99_s": latency_s, "error_rate": error_rate}


def brute_force(settings, n, step=1e-3):
    t = 0.0
    while grpo.capacity_curve(settings, t) < n:
        t += step
    return t


def test_lower_bound_closed_forms():
    # One provider, 60 rpm (1/s), burst 1 s (1 request), no latency: n - 1 seconds.
    assert grpo.lower_bound([provider(60, 1)], 10) == pytest.approx(9.0)
    # Latency shifts the refill, not the burst: 1 + (n - 1) after L.
    assert grpo.lower_bound([provider(60, 1, latency_s=2.0)], 10) == pytest.approx(11.0)
    # Errors scale the whole curve: 0.5 · (1 + t) >= 10 -> t = 19.
    assert grpo.lower_bound([provider(60, 1, error_rate=0.5)], 10) == pytest.approx(19.0)
    # The burst alone suffices.
    assert grpo.lower_bound([provider(600, 60)], 100) == 0.0
    # Nothing ever succeeds.
    assert grpo.lower_bound([provider(60, 1, error_rate=1.0)], 10) == math.inf
    # An unlimited provider (rpm 0) has infinite capacity.
    assert grpo.lower_bound([provider(0)], 10) == 0.0
    # A burst below one request still admits one (the fake provider's floor).
    assert grpo.lower_bound([provider(30, 1)], 3) == pytest.approx(4.0)


def test_lower_bound_matches_brute_force_for_the_defaults():
    args = grpo.parse_args([])
    settings = [grpo.provider_settings(f) for f in args.specs.values()]
    assert [s["rpm"] for s in settings] == [600, 1200, 1800]
    assert [s["burst_seconds"] for s in settings] == [1, 1, 1]
    assert [s["error_rate"] for s in settings] == [0.0, 0.02, 0.05]
    t_lb = grpo.lower_bound(settings, 1024)
    assert t_lb == pytest.approx(brute_force(settings, 1024), abs=2e-3)
    # 58.1 successes/s after the latencies: about 17 s, as the README says.
    assert 16.5 < t_lb < 17.5
    for n in (1, 50, 59, 60, 70, 100, 2000):
        assert grpo.lower_bound(settings, n) == pytest.approx(brute_force(settings, n), abs=2e-3)


def test_items_are_distinct_unless_duplicates_are_asked_for():
    items = grpo.make_items(128, 8, 1, duplicates=False, duplicate_rate=0.25)
    grpo.check_items(items)
    assert len(items) == 1024
    assert len({(it["candidate"], it["reference"]) for it in items}) == 1024
    assert [it["group"] for it in items[:16]] == [0] * 8 + [1] * 8
    assert items == grpo.make_items(128, 8, 1, duplicates=False, duplicate_rate=0.25)
    scores = [it["expected"] for it in items]
    assert min(scores) < 0.2 and max(scores) > 0.9 and len(set(scores)) > 100
    dup = grpo.make_items(128, 8, 1, duplicates=True, duplicate_rate=0.25)
    assert 600 < len({(it["candidate"], it["reference"]) for it in dup}) < 1024


def test_expected_scores_match_the_fake_judge():
    items = grpo.make_items(32, 8, 7, duplicates=False, duplicate_rate=0.0)
    items.append({"problem": "p", "reference": "Ünïcode café 3.5 x", "candidate": "cafe 3 5 X"})
    items[-1]["expected"] = grpo.expected_score(items[-1]["candidate"], items[-1]["reference"])
    p = Provider()
    try:
        conn = p.conn(timeout=10)
        for it in items:
            body = {"model": "m", "messages": [{"role": "user", "content": grpo.judge_prompt(it)}]}
            conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            reply = json.loads(conn.getresponse().read())
            content = reply["choices"][0]["message"]["content"]
            assert float(grpo.REWARD_RE.findall(content)[-1]) == it["expected"], (it, content)
        conn.close()
    finally:
        p.stop()


class _FakeChild:
    def __init__(self, url):
        self.url = url


def test_arbiter_config_is_the_toml_arbiter_reads():
    tomllib = pytest.importorskip("tomllib")
    args = grpo.parse_args(["--provider-b=--rpm 1200 --burst-seconds 0.5 --tpm 9000",
                            "--provider-c=--rpm 60 --burst-seconds 90"])
    settings = {name: grpo.provider_settings(f) for name, f in args.specs.items()}
    providers = {name: _FakeChild(f"http://127.0.0.1:{9000 + i}")
                 for i, name in enumerate(settings)}
    cfg = tomllib.loads(grpo.arbiter_config_toml(providers, settings, args))
    assert cfg["server"] == {"port": 0}
    assert cfg["scheduler"] == {"default_deadline_ms": 600000, "max_deadline_ms": 600000}
    assert cfg["rewards"] == {"judge": {"kind": "judge"}}
    assert [s["name"] for s in cfg["sources"]] == ["provider-a", "provider-b", "provider-c"]
    a, b, c = cfg["sources"]
    assert a == {"name": "provider-a", "kind": "openai", "url": "http://127.0.0.1:9000",
                 "capabilities": ["chat"], "model": "fake-judge", "requests_per_minute": 600,
                 "burst_ms": 1000, "max_concurrency": 64, "timeout_ms": 30000}
    assert b["burst_ms"] == 500 and b["tokens_per_minute"] == 9000
    assert c["burst_ms"] == 60000  # Arbiter's maximum


def test_arbiter_accepts_the_config(tmp_path):
    # ARBITER_BIN: the arbiter of the same build as the fake provider.
    arbiter = Path(ARBITER_BIN)
    if not arbiter.exists():
        pytest.skip(f"{arbiter} not built")
    args = grpo.parse_args([])
    settings = {name: grpo.provider_settings(f) for name, f in args.specs.items()}
    providers = {name: _FakeChild(f"http://127.0.0.1:{9000 + i}")
                 for i, name in enumerate(settings)}
    path = tmp_path / "arbiter.toml"
    path.write_text(grpo.arbiter_config_toml(providers, settings, args))
    proc = subprocess.run([str(arbiter), "check-config", str(path)], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bad_arguments_exit_2():
    with pytest.raises(SystemExit) as e:
        grpo.parse_args(["--provider-a=--rpm 5 --port 1"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        grpo.parse_args(["--naive-concurrency", "0"])
    assert isinstance(grpo.parse_args(["--only", "naive"]), argparse.Namespace)
