"""Checks of bench/provider_outage.py: its arguments, what it reads from the records, its
table, and the provider command that takes the provider down (run on a real fake provider)."""

import asyncio
import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

from arbiter_testing import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # provider_outage imports grpo_step from there
_spec = importlib.util.spec_from_file_location("provider_outage",
                                               ROOT / "bench" / "provider_outage.py")
outage = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(outage)


def test_a_baseline_binary_adds_the_baseline_setup():
    assert outage.parse_args([]).setups == ["direct", "arbiter"]
    assert outage.parse_args(["--baseline-bin", "/x"]).setups == ["direct", "arbiter",
                                                                  "baseline"]


@pytest.mark.parametrize("argv", [["--setups", "arbiter,naive"], ["--setups", "baseline"],
                                  ["--outage-s", "0"], ["--after-s", "-1"],
                                  ["--concurrency", "0"], ["--pause-s", "-0.1"]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        outage.parse_args(argv)
    assert e.value.code == 2
    assert "--" in capsys.readouterr().err


def test_the_summary_times_the_first_item_scored_after_the_return():
    args = outage.parse_args(["--before-s", "10", "--outage-s", "60", "--after-s", "30"])
    records = [(1.0, 1.2, True), (40.0, 69.0, False), (50.0, 71.5, True), (69.0, 70.5, True),
               (72.0, 72.1, False), (90.0, 100.5, True)]
    assert outage.summarize(records, args) == {
        "ok": 4, "failed": 2, "back_after_s": pytest.approx(0.5), "ok_after_return": 2,
        "failed_sent_after_return": 1}
    assert outage.summarize(records[:2], args)["back_after_s"] is None


def test_the_table_says_never_for_a_setup_that_never_scored_again():
    rows = [{"setup": "direct", "outage_s": 60.0, "ok": 10, "failed": 2, "back_after_s": 0.14,
             "ok_after_return": 8, "failed_sent_after_return": 0, "ejections": None},
            {"setup": "arbiter", "outage_s": 60.0, "ok": 3, "failed": 9, "back_after_s": None,
             "ok_after_return": 0, "failed_sent_after_return": 4, "ejections": 12}]
    lines = outage.markdown_table(rows, 30.0).splitlines()
    assert lines[0].startswith("| provider down (s) | setup | ok | failed | back after (s) | "
                               "ok in 30 s after |")
    assert lines[2] == "| 60 | direct | 10 | 2 | 0.1 | 8 | 0 |  |"
    assert lines[3] == "| 60 | arbiter | 3 | 9 | never | 0 | 4 | 12 |"


def test_the_provider_is_down_in_its_window_only(tmp_path):
    binary = Path(os.environ.get("FAKE_PROVIDER_BIN", ROOT / "build" / "arbiter-fake-provider"))
    if not binary.exists():
        pytest.skip(f"{binary} not built")
    args = outage.parse_args(["--before-s", "0.5", "--outage-s", "1", "--after-s", "0.5",
                              "--concurrency", "2", "--pause-s", "0.05",
                              "--fake-provider-bin", str(binary), "--latency-median-ms", "1",
                              "--latency-p99-ms", "2", "--attempts", "1"])
    children = outage.Children()
    try:
        provider = children.add(outage.Child("provider", outage.provider_cmd(args),
                                             tmp_path / "provider.log"))
        url = provider.wait_listening(30)
        start = outage.provider_start(url)
        assert 0.0 <= time.monotonic() - start < 30.0
        records = asyncio.run(outage.send(url, True, start, args))
    finally:
        children.stop_all()
    # On the provider's own clock: 0.2 s at each edge for a call's latency and the senders.
    assert all(ok for sent, done, ok in records if done < 0.3 or sent > 1.7)
    assert not any(ok for sent, done, ok in records if 0.7 < sent and done < 1.3)
    assert any(not ok for _, _, ok in records)
    assert outage.summarize(records, args)["back_after_s"] is not None


def test_a_missing_binary_stops_the_run_before_anything_starts(tmp_path, capsys):
    assert outage.main(["--arbiter-bin", str(tmp_path / "no-arbiter"), "--out",
                        str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'no-arbiter'} not found; build it first" in capsys.readouterr().out


def test_the_results_hold_the_arguments_rows_and_table(tmp_path):
    import json
    args = outage.parse_args(["--out", str(tmp_path)])
    outage.write_results(args, "provider_outage", [{"setup": "direct"}], "| t |")
    saved = json.loads((tmp_path / "provider_outage.json").read_text())
    assert saved["rows"] == [{"setup": "direct"}] and saved["table"] == "| t |"
    assert saved["args"]["out"] == str(tmp_path) and saved["args"]["outage_s"] == 60.0
