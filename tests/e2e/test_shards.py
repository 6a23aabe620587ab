"""Scheduler shards (scheduler.shards): CPU rewards spread over several scheduler actors, each
with its share of the CPU workers, while GRPO groups, step accounts, /info and the metrics stay
whole (the drain with two shards: test_lifecycle.py). The real binary on loopback, with two
shards on this machine's CPU workers."""

import concurrent.futures
import random

from arbiter_testing import source_toml

SHARDED = "[scheduler]\nshards = 2\n\n[cpu]\nworkers = 2\n"


def gsm8k(answer, group=None):
    item = {"data_source": "openai/gsm8k", "solution_str": f"so the answer is #### {answer}",
            "ground_truth": "72"}
    if group is not None:
        item["group"] = group
    return item


def test_groups_split_over_requests_meet_in_one_shard_and_report_whole(make_server):
    s = make_server(SHARDED)
    rng = random.Random(7)
    tag = f"g{rng.randrange(1 << 30)}"
    groups = [f"{tag}-{k}" for k in range(24)]
    # Each group's four members: two in each of two requests, in shuffled order; member i is
    # right (72) when i < k % 5, so each group's expected mean is known.
    right = {g: k % 5 for k, g in enumerate(groups)}
    halves = [[], []]
    for g in groups:
        for i in range(4):
            halves[i % 2].append((g, i))
    for half in halves:
        rng.shuffle(half)
    bodies = [[gsm8k(72 if i < min(right[g], 4) else 71, group=g) for g, i in half]
              for half in halves]
    status, _, first = s.score({"items": bodies[0]})
    assert status == 200, first
    status, _, second = s.score({"items": bodies[1]})
    assert status == 200, second
    for half, body, answer in ((halves[0], bodies[0], first), (halves[1], bodies[1], second)):
        assert answer["scores"] == [1.0 if it["solution_str"].endswith("72") else 0.0
                                    for it in body]
    # The second request's groups carry all four members, the first request's included: each
    # group was routed to one shard both times.
    assert set(second["groups"]) == set(groups)
    for g in groups:
        summary = second["groups"][g]
        n_right = min(right[g], 4)
        assert summary["scored"] == 4 and summary["pending"] == 0, (g, summary)
        assert summary["mean"] == n_right / 4, (g, summary)
        assert summary["zero_std"] == (n_right in (0, 4)), (g, summary)
    # Both shards took part: their CPU workers both dispatched batches.
    status, _, info = s.request("GET", "/info")
    assert status == 200
    cpu = [src for src in info["sources"] if src["name"] == "cpu"]
    assert sorted(src["shard"] for src in cpu) == [0, 1], cpu
    assert all(src["dispatched_batches"] > 0 for src in cpu), cpu
    assert info["pending_requests"] == 0
    assert all(q["depth"] == 0 for q in info["queues"]), info["queues"]
    assert s.stop() == 0


def test_single_item_requests_spread_and_every_one_is_answered_and_accounted(make_server):
    s = make_server(SHARDED)
    step = f"step-{random.randrange(1 << 30)}"
    items = [gsm8k(72 if k % 3 else 5) for k in range(300)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda item: s.score({"step": step, "items": [item]}), items))
    for item, (status, _, body) in zip(items, answers):
        assert status == 200, body
        assert body["scores"] == [1.0 if item["solution_str"].endswith("72") else 0.0]
    # One step, accounted by both shards, reported as one.
    status, _, account = s.request("GET", f"/v1/steps/{step}")
    assert status == 200, account
    assert account["items"] == {"total": 300, "ok": 300, "fallback": 0, "failed": 0}
    assert account["sources"]["cpu"]["calls"] > 0
    assert account["totals"]["calls"] == 0  # CPU workers' batches are no model calls
    status, _, listing = s.request("GET", "/v1/steps")
    assert [x["step"] for x in listing["steps"]].count(step) == 1
    status, _, info = s.request("GET", "/info")
    assert all(src["dispatched_batches"] > 0 for src in info["sources"] if src["name"] == "cpu")
    # The queue-depth gauges, moved by both shards, are back at zero.
    _, _, metrics = s.request("GET", "/metrics")
    depths = [line for line in metrics.splitlines() if line.startswith("arbiter_queue_depth{")]
    assert depths and all(line.endswith(" 0") for line in depths), depths
    assert s.stop() == 0


def test_model_rewards_and_requests_mixing_them_stay_on_the_first_shard(make_server, provider):
    p = provider("--latency-median-ms", "5", "--latency-p99-ms", "10", "--seed", "3")
    s = make_server(SHARDED + "\n" + source_toml("a", p.url))
    judge = {"reward": "judge", "solution_str": "x shared words", "group": "m",
             "ground_truth": "reference shared words", "extra_info": {"problem": "p"}}
    status, _, body = s.score({"items": [gsm8k(72, group="m"), judge]})
    assert status == 200, body
    assert [r["status"] for r in body["results"]] == ["ok", "ok"], body
    assert body["scores"][0] == 1.0 and body["groups"]["m"]["scored"] == 2
    status, _, info = s.request("GET", "/info")
    assert [src["shard"] for src in info["sources"] if src["name"] == "a"] == [0]
    assert p.stats()["requests_total"] >= 1
    assert s.stop() == 0
