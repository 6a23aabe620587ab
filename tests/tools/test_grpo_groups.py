"""Checks of bench/grpo_groups.py that need no Arbiter: the ideal service's group p99
(`ideal_p99`), the shape's ceiling printed beside each measurement, and the model of the
providers with their latencies (`latency_model_p99`)."""

import importlib.util
import sys

import pytest

from arbiter_testing import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # grpo_groups imports grpo_step from there
_spec = importlib.util.spec_from_file_location("grpo_groups", ROOT / "bench" / "grpo_groups.py")
groups = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(groups)


def items_of(*group_ids):
    return [{"group": g} for g in group_ids]


def test_one_server_answers_at_its_rate_in_arrival_order_when_idle():
    # Two groups of one member each, far apart: each is answered 1/rate after it is sent.
    assert groups.ideal_p99(items_of(0, 1), [0.0, 10.0], 2.0, True) == pytest.approx(0.5)
    assert groups.ideal_p99(items_of(0, 1), [0.0, 10.0], 2.0, False) == pytest.approx(0.5)


def test_group_order_serves_an_older_groups_late_member_first():
    # 1 item/s. Group 0's first member at 0 and its second at 0.5; group 1's two members at
    # 0.1 and 0.2. FIFO: 0 (ends 1), 1a (2), 1b (3), 0's second (4): group 0 takes 4 s,
    # group 1 takes 2.9 s. Group-aware: 0 (1), 0's second (2), 1a (3), 1b (4): group 0 takes
    # 2 s, group 1 3.9 s.
    items = items_of(0, 1, 1, 0)
    sends = [0.0, 0.1, 0.2, 0.5]
    fifo = groups.ideal_p99(items, sends, 1.0, False)
    aware = groups.ideal_p99(items, sends, 1.0, True)
    # p99 of two values interpolates 99 % of the way from the smaller to the larger.
    assert fifo == pytest.approx(2.9 + 0.99 * (4.0 - 2.9))
    assert aware == pytest.approx(2.0 + 0.99 * (3.9 - 2.0))


def test_the_ideal_ratio_of_the_benchmarks_stream_shape():
    # The default shape at W = 16 (96 x 8 items, 30 items/s): the figure bench/README.md
    # quotes as the ceiling, so a change to the arrivals or the model shows here.
    args = groups.parse_args([])
    items = groups.grpo_step.make_items(args.prompts, args.samples, args.seed, False, 0.0)
    sends = groups.arrivals("stream:16", items, args)
    aware = groups.ideal_p99(items, sends, 30.0, True)
    fifo = groups.ideal_p99(items, sends, 30.0, False)
    assert aware == pytest.approx(9.99, abs=0.01)
    assert fifo / aware == pytest.approx(1.62, abs=0.01)


def provider(rpm, burst_s, median_s=0.0, p99_s=0.0):
    return {"rpm": rpm, "tpm": 0.0, "burst_seconds": burst_s, "latency_median_s": median_s,
            "latency_p99_s": p99_s, "error_rate": 0.0}


def test_the_latency_model_without_latency_is_the_ideal_service():
    # One provider at 1 call/s holding one call: the model dispatches as the ideal server
    # serves (to its 1 ms step), with the answer at the dispatch rather than a service time
    # later, so each group ends 1 s sooner than on the ideal server, whose serving takes 1 s.
    items = items_of(0, 1, 1, 0)
    sends = [0.0, 0.1, 0.2, 0.5]
    for aware in (True, False):
        model = groups.latency_model_p99(items, sends, [provider(60, 1)], aware, 1)
        ideal = groups.ideal_p99(items, sends, 1.0, aware)
        assert model == pytest.approx(ideal - 1.0, abs=0.01), aware


def test_a_latency_spread_costs_group_order_more_than_fifo():
    # The benchmark's providers at W = 16: latencies take more from group-aware ordering (the
    # slowest of 8 calls) than from FIFO (one call), so the ratio falls below the ideal 1.62.
    args = groups.parse_args([])
    items = groups.grpo_step.make_items(args.prompts, args.samples, args.seed, False, 0.0)
    sends = groups.arrivals("stream:16", items, args)
    settings = [groups.grpo_step.provider_settings(spec.split())
                for spec in groups.DEFAULT_PROVIDERS.values()]
    aware = [groups.latency_model_p99(items, sends, settings, True, d) for d in range(4)]
    fifo = [groups.latency_model_p99(items, sends, settings, False, d) for d in range(4)]
    ratio = sum(fifo) / sum(aware)
    assert 1.3 < ratio < 1.5, (aware, fifo)
    # The same draws with no latency at all: the ideal's ratio, to the model's step.
    flat = [dict(s, latency_median_s=0.0, latency_p99_s=0.0) for s in settings]
    assert groups.latency_model_p99(items, sends, flat, False, 0) / groups.latency_model_p99(
        items, sends, flat, True, 0) > 1.55
