"""Per-step accounting (GET /v1/steps) against the providers' own counters: real
fake-provider processes on loopback, one of them with a limit Arbiter was not told (429s)."""

import random
import urllib.parse

import pytest

from arbiter_testing import source_toml


def judge_items(n, prefix):
    return [{"reward": "judge", "solution_str": f"{prefix} {i} shared words here",
             "ground_truth": f"reference {i} shared words", "extra_info": {"problem": "p"}}
            for i in range(n)]


def test_step_accounts_equal_the_providers_counters(make_server, provider):
    # a: a limit Arbiter is not told, so it meets 429s and retries; b: no limit.
    a = provider("--rpm", "600", "--burst-seconds", "1", "--latency-median-ms", "20",
                 "--latency-p99-ms", "40", "--seed", "5")
    b = provider("--latency-median-ms", "30", "--latency-p99-ms", "60", "--seed", "6")
    prices = {"input_cost_per_million": 2.5, "output_cost_per_million": 10.0}
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\ncoalesce = false\n"
                    "max_attempts = 10\nretry_budget_min = 1000\n\n"
                    + source_toml("a", a.url, **prices) + source_toml("b", b.url))
    tag = f"run{random.randrange(1 << 30)}"
    first, second = f"{tag}/step 1", f"{tag}/step 2"
    status, _, body = s.score({"step": first, "items": judge_items(40, "x")})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    status, _, body = s.request("POST", "/v1/score", {"items": judge_items(25, "y")},
                                headers={"X-Arbiter-Step": second})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body

    accounts = {}
    for step in (first, second):
        status, _, account = s.request("GET", "/v1/steps/" + urllib.parse.quote(step, safe=""))
        assert status == 200, account
        assert account["step"] == step
        accounts[step] = account
    assert accounts[first]["items"] == {"total": 40, "ok": 40, "fallback": 0, "failed": 0}
    assert accounts[second]["items"]["ok"] == 25

    for name, p in (("a", a), ("b", b)):
        stats = p.stats()
        mine = [acc["sources"].get(name, {}) for acc in accounts.values()]
        total = lambda key: sum(m.get(key, 0) for m in mine)  # noqa: E731
        assert total("calls") == stats["requests_total"], (name, mine, stats)
        assert total("rate_limited") == stats["rate_limited_total"], (name, mine, stats)
        assert total("prompt_tokens") == stats["prompt_tokens_total"], (name, mine, stats)
        assert total("completion_tokens") == stats["completion_tokens_total"], (name, stats)
    a_stats = a.stats()
    assert a_stats["rate_limited_total"] > 0, "the unconfigured limit was met"
    cost = sum(acc["sources"]["a"]["cost"] for acc in accounts.values() if "a" in acc["sources"])
    assert cost == pytest.approx((a_stats["prompt_tokens_total"] * 2.5
                                  + a_stats["completion_tokens_total"] * 10.0) / 1e6)
    retries = sum(acc["totals"]["retries"] for acc in accounts.values())
    assert retries >= a_stats["rate_limited_total"], "every 429 was followed by a retry"

    status, _, listing = s.request("GET", "/v1/steps")
    assert status == 200
    assert [x["step"] for x in listing["steps"]][-2:] == [first, second]
    status, _, missing = s.request("GET", "/v1/steps/nothing-" + tag)
    assert status == 404 and missing["error"]["code"] == "not_found"
    # The metrics carry the running totals.
    _, _, metrics = s.request("GET", "/metrics")
    line = f'arbiter_source_tokens_total{{kind="prompt",source="a"}} {a_stats["prompt_tokens_total"]}'
    assert line in metrics, [l for l in metrics.splitlines() if "tokens_total" in l]


def test_a_step_header_too_long_gets_400_naming_it(server):
    status, _, body = server.request(
        "POST", "/v1/score",
        {"items": [{"reward": "lexical", "solution_str": "a", "ground_truth": "a"}]},
        headers={"X-Arbiter-Step": "s" * 1025})
    assert status == 400
    assert body["error"]["field"] == "X-Arbiter-Step"


def test_a_step_header_not_in_utf8_gets_400_and_the_steps_stay_listable(server):
    # Python's http.client, like many HTTP libraries, sends a header's text as Latin-1: "ü"
    # arrives as the byte 0xFC. Kept as the step's name, it made every GET /v1/steps throw
    # while writing the JSON and close the connection unanswered.
    item = {"items": [{"reward": "lexical", "solution_str": "a", "ground_truth": "a"}]}
    status, _, body = server.request("POST", "/v1/score", item,
                                     headers={"X-Arbiter-Step": "epoch-ü"})
    assert status == 400, body
    assert body["error"]["field"] == "X-Arbiter-Step"
    assert "UTF-8" in body["error"]["message"]
    # The same name in the body's `step` field is fine, and so is the listing.
    status, _, body = server.request("POST", "/v1/score", dict(item, step="epoch-ü"))
    assert status == 200, body
    status, _, body = server.request("GET", "/v1/steps")
    assert status == 200, body
    assert "epoch-ü" in [s["step"] for s in body["steps"]]
    status, _, body = server.request("GET", "/v1/steps/" + urllib.parse.quote("epoch-ü"))
    assert status == 200 and body["items"]["total"] == 1, body


def test_generation_calls_tokens_are_accounted_like_chat_calls(make_server, provider):
    # ΔIG's generate calls (/v1/completions) report usage too; NLI (/predict) reports none.
    p = provider("--seed", "9")
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\ncoalesce = false\n\n"
                    + source_toml("llm", p.url, "openai", ["chat", "generate"],
                                  input_cost_per_million=1.0, output_cost_per_million=4.0)
                    + source_toml("tei", p.url, "tei", ["nli"]))
    step = f"ig-{random.randrange(1 << 30)}"
    items = [{"reward": "info_gain", "solution_str": f"Paris is the capital of France {i}.",
              "ground_truth": ["Paris"],
              "extra_info": {"question": "What is the capital of France?", "num_samples": 3,
                             "seed": i}} for i in range(4)]
    status, _, body = s.score({"step": step, "items": items})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    status, _, account = s.request("GET", "/v1/steps/" + urllib.parse.quote(step, safe=""))
    assert status == 200, account
    llm = account["sources"]["llm"]
    stats = p.stats()
    assert stats["prompt_tokens_total"] > 0 and stats["completion_tokens_total"] > 0, stats
    assert llm["calls"] == 8  # two generate calls per item
    assert llm["prompt_tokens"] == stats["prompt_tokens_total"], (llm, stats)
    assert llm["completion_tokens"] == stats["completion_tokens_total"], (llm, stats)
    assert llm["cost"] == pytest.approx((stats["prompt_tokens_total"] * 1.0
                                         + stats["completion_tokens_total"] * 4.0) / 1e6)


def test_embedding_calls_tokens_are_accounted_and_add_up_to_the_providers(make_server,
                                                                           provider):
    # /v1/embeddings reports one prompt_tokens per call for several items: shared out over
    # them, the items' counts add up to the bill (they were 0 before), in the step accounts,
    # the metrics and the cost. The group's shared reference is sent, and billed, once.
    p = provider("--seed", "4")
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\ncoalesce = false\n\n"
                    + source_toml("emb", p.url, "openai", ["embed"],
                                  input_cost_per_million=0.02))
    step = f"emb-{random.randrange(1 << 30)}"
    items = [{"reward": "embedding", "solution_str": f"rollout {i} " + "word " * i,
              "ground_truth": [f"the reference answer of prompt {i // 4}"]} for i in range(24)]
    status, _, body = s.score({"step": step, "items": items})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    status, _, reply = s.request("POST", "/v1/embeddings", {"model": "emb",
                                                             "input": ["one text", "another"]},
                                 headers={"X-Arbiter-Step": step})
    assert status == 200 and reply["usage"]["prompt_tokens"] > 0, reply
    status, _, account = s.request("GET", "/v1/steps/" + urllib.parse.quote(step, safe=""))
    assert status == 200, account
    emb = account["sources"]["emb"]
    stats = p.stats()
    assert stats["prompt_tokens_total"] > 0, stats
    assert emb["calls"] == stats["requests_total"], (emb, stats)
    assert emb["prompt_tokens"] == stats["prompt_tokens_total"], (emb, stats)
    assert emb["cost"] == pytest.approx(stats["prompt_tokens_total"] * 0.02 / 1e6)
    _, _, metrics = s.request("GET", "/metrics")
    line = f'arbiter_source_tokens_total{{kind="prompt",source="emb"}} {stats["prompt_tokens_total"]}'
    assert line in metrics, [x for x in metrics.splitlines() if "tokens_total" in x]
    # Token pacing learns from those parts how far its embedding estimate (which holds a
    # reward template the call does not send) is from the bill.
    _, _, info = s.request("GET", "/info")
    emb = next(x for x in info["sources"] if x["name"] == "emb")
    assert emb["embedding_token_ratio"] < 0.5, emb


def test_a_request_resent_after_a_connection_reset_is_counted_as_a_call(make_server, provider):
    """A reused connection that fails before any answer byte is sent once more on a fresh one
    (the server most likely closed it while idle). The provider may have read the first, as
    this one does before it resets: both are calls, in the step and in the attempts."""
    p = provider("--error-rate-reset", "0.3", "--latency-median-ms", "5", "--seed", "12")
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\ncoalesce = false\n"
                    "max_attempts = 10\nretry_budget_min = 1000\n\n"
                    + source_toml("a", p.url, timeout_ms=800))
    for i in range(20):
        status, _, body = s.score({"step": "resets", "items": judge_items(1, f"r{i}")})
        assert status == 200 and body["results"][0]["status"] == "ok", body
    stats = p.stats()
    assert stats["requests_total"] > 20, stats  # some resets happened
    _, _, account = s.request("GET", "/v1/steps/resets")
    assert account["sources"]["a"]["calls"] == stats["requests_total"], (account, stats)
    # The totals count model calls: the judge graphs' own batches are listed, not added.
    assert account["sources"]["reward-graph"]["calls"] == 20
    assert account["totals"]["calls"] == stats["requests_total"], account
    _, _, metrics = s.request("GET", "/metrics")
    attempts = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith('arbiter_source_attempts_total{') and 'source="a"' in line)
    assert attempts == stats["requests_total"], [l for l in metrics.splitlines()
                                                 if "attempts_total" in l]


def test_calls_given_up_at_hang_ups_count_only_if_sent(make_server, provider):
    """Ten trainers' single-item requests hang up while their calls wait on a slow provider:
    each call is given up, and one whose request was never written (it waited for a
    connection, or went out through a slot a cancel freed and was cancelled in turn) did not
    reach the provider. The step counts what the provider received (helper-31: 10 against
    2 to 8)."""
    import json
    import socket
    import time
    p = provider("--latency-median-ms", "400", "--latency-p99-ms", "500", "--seed", "3")
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\ncoalesce = false\n\n"
                    + source_toml("a", p.url))
    socks = []
    for i in range(10):
        data = json.dumps({"step": "hang", "items": judge_items(1, f"h{i}")}).encode()
        so = socket.create_connection((s.host, s.port))
        so.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(data) + data)
        socks.append(so)
    time.sleep(0.15)
    for so in socks:
        so.close()
    deadline = time.time() + 10
    account = {}
    while time.time() < deadline:
        _, _, account = s.request("GET", "/v1/steps/hang")
        if account.get("items", {}).get("total") == 10:
            break
        time.sleep(0.05)
    assert account["items"]["failed"] == 10, account
    # Until the provider has answered the calls it got and the cancels are settled.
    while time.time() < deadline:
        stats = p.stats()
        _, _, account = s.request("GET", "/v1/steps/hang")
        if stats["in_flight"] == 0 and account["sources"]["a"]["calls"] == stats["requests_total"]:
            break
        time.sleep(0.05)
    assert 0 < stats["requests_total"] < 10, stats  # some waited, unsent
    assert account["sources"]["a"]["calls"] == stats["requests_total"], (account, stats)


def test_a_source_no_connection_reached_counts_no_call(make_server, provider):
    """Source b's address has nothing listening: its calls never left Arbiter, so they are no
    calls, failed calls or retries of the step (helper-62: 6/6/6 at a source that received
    nothing). The step's totals equal what the providers received."""
    from arbiter_testing import unused_port
    a = provider("--latency-median-ms", "50", "--seed", "7")
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\ncoalesce = false\n\n"
                    + source_toml("a", a.url)
                    + source_toml("b", f"http://127.0.0.1:{unused_port()}"))
    status, _, body = s.score({"step": "refused", "items": judge_items(20, "x")})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    _, _, metrics = s.request("GET", "/metrics")
    tried_b = [line for line in metrics.splitlines()
               if line.startswith("arbiter_source_attempts_total{") and 'source="b"' in line]
    assert tried_b, "b was tried (and could not be reached)"
    assert all('outcome="connect_failure"' in line for line in tried_b), tried_b
    _, _, account = s.request("GET", "/v1/steps/refused")
    b = account["sources"].get("b", {})
    assert (b.get("calls", 0), b.get("failed_calls", 0), b.get("retries", 0)) == (0, 0, 0), b
    assert account["sources"]["a"]["calls"] == a.stats()["requests_total"], account
    assert account["totals"]["calls"] == a.stats()["requests_total"], account
    assert all(r["attempts"] == 1 for r in body["results"]), body["results"]


def test_tokens_of_a_reply_the_call_could_not_use_are_billed_to_its_step(make_server,
                                                                         provider):
    """A generate source answers fewer completions than ΔIG asked for (`n`): the call fails
    and is retried on the other source, but the provider billed its `usage`, and the step
    counts those tokens and their cost (they were 0)."""
    gen = provider("--max-n", "1", "--seed", "1")
    ok = provider("--seed", "2")
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\ncoalesce = false\n\n"
                    + source_toml("gen", gen.url, "openai", ["generate"],
                                  input_cost_per_million=1.0, output_cost_per_million=1.0)
                    + source_toml("ok", ok.url, "openai", ["generate"])
                    + source_toml("nli", ok.url, "tei", ["nli"]))
    items = [{"reward": "info_gain", "solution_str": f"Paris is the capital of France {i}.",
              "ground_truth": ["Paris"],
              "extra_info": {"question": "What is the capital of France?", "num_samples": 3,
                             "seed": i}} for i in range(4)]
    status, _, body = s.score({"step": "short-n", "items": items})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    stats = gen.stats()
    assert stats["requests_total"] > 0 and stats["completion_tokens_total"] > 0, stats
    _, _, account = s.request("GET", "/v1/steps/short-n")
    mine = account["sources"]["gen"]
    assert mine["calls"] == stats["requests_total"], (mine, stats)
    assert mine["failed_calls"] > 0, mine  # some of its replies were short
    assert mine["prompt_tokens"] == stats["prompt_tokens_total"], (mine, stats)
    assert mine["completion_tokens"] == stats["completion_tokens_total"], (mine, stats)
    assert mine["cost"] == pytest.approx((stats["prompt_tokens_total"]
                                          + stats["completion_tokens_total"]) / 1e6)


def test_a_step_after_a_provider_restart_counts_the_calls_the_provider_received(make_server):
    """A provider restarted on the same port leaves the pool its old process's keep-alive
    connections, closed by that process: none is written to (helper-64: each took a request
    that failed and went once more on a fresh connection, 97 calls in the step against the
    provider's 64)."""
    import time
    from arbiter_testing import Provider
    flags = ("--latency-median-ms", "100", "--latency-p99-ms", "150", "--seed", "3")
    old = Provider(*flags)
    s = make_server("[routing]\nhedge = false\ncache_capacity = 0\ncoalesce = false\n\n"
                    + source_toml("judge", old.url))
    try:
        status, _, body = s.score({"step": "before", "items": judge_items(64, "b")})
        assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    finally:
        old.stop()
    new = Provider(*flags, port=old.port)
    try:
        time.sleep(0.5)
        status, _, body = s.score({"step": "after", "items": judge_items(64, "a")})
        _, _, account = s.request("GET", "/v1/steps/after")
        stats = new.stats()
    finally:
        new.kill()
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    assert stats["requests_total"] == 64, stats
    assert account["sources"]["judge"]["calls"] == 64, account
    assert account["sources"]["judge"]["failed_calls"] == 0, account
