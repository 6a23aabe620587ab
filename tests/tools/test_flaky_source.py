"""Checks of bench/flaky_source.py: its arguments, its table, and the script it measures
Arbiter against (`direct`), run on a real fake provider that fails a share of calls."""

import asyncio
import importlib.util
import os
import sys
from pathlib import Path

import pytest

from arbiter_testing import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # flaky_source imports grpo_step from there
_spec = importlib.util.spec_from_file_location("flaky_source", ROOT / "bench" / "flaky_source.py")
flaky = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(flaky)


def test_the_setup_named_with_a_comma_is_read_whole():
    args = flaky.parse_args(["--setups", "direct,arbiter, no breaker"])
    assert args.setups == ["direct", "arbiter, no breaker"]
    assert flaky.parse_args([]).setups == ["direct", "arbiter", "arbiter, no breaker"]
    assert flaky.parse_args(["--baseline-bin", "/x"]).setups[-1] == "baseline"


@pytest.mark.parametrize("argv", [["--error-rates", "0.3,x"], ["--error-rates", "1.5"],
                                  ["--setups", "arbiter,naive"], ["--setups", "baseline"],
                                  ["--items", "0"]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        flaky.parse_args(argv)
    assert e.value.code == 2
    assert "--" in capsys.readouterr().err


def test_the_table_gives_each_wall_time_over_the_scripts_at_the_same_failure_share():
    rows = [{"error_rate": 0.3, "fault": "500", "setup": "direct", "ok": 590, "failed": 10, "wall_s": 10.0,
             "ejections": None, "provider_calls": 830},
            {"error_rate": 0.3, "fault": "500", "setup": "arbiter", "ok": 588, "failed": 12, "wall_s": 12.5,
             "ejections": 0, "provider_calls": 828}]
    lines = flaky.markdown_table(rows).splitlines()
    assert lines[2] == "| 30% 500 | direct | 590 | 10 | 10.0 | 1.00× |  | 830 |"
    assert lines[3] == "| 30% 500 | arbiter | 588 | 12 | 12.5 | 1.25× | 0 | 828 |"


def test_the_script_retries_a_failed_call_up_to_its_attempts(tmp_path):
    binary = Path(os.environ.get("FAKE_PROVIDER_BIN", ROOT / "build" / "arbiter-fake-provider"))
    if not binary.exists():
        pytest.skip(f"{binary} not built")
    args = flaky.parse_args(["--items", "40", "--concurrency", "8", "--fake-provider-bin",
                             str(binary), "--latency-median-ms", "1", "--latency-p99-ms", "2"])
    for fault, rate, attempts, expect_ok in (("500", 1.0, 3, 0), ("malformed", 1.0, 2, 0),
                                             ("500", 0.0, 3, 40)):
        args.attempts = attempts
        args.fault = fault
        children = flaky.Children()
        try:
            provider = children.add(flaky.Child("provider", flaky.provider_cmd(args, rate),
                                                tmp_path / f"provider-{fault}-{rate}.log"))
            url = provider.wait_listening(30)
            counts = asyncio.run(flaky.run_direct(url, args))
            calls = asyncio.run(flaky.provider_calls(url))
        finally:
            children.stop_all()
        assert counts == {"ok": expect_ok, "failed": 40 - expect_ok}
        assert calls == (40 * attempts if rate == 1.0 else 40), fault
