"""ArbiterClient against a real Arbiter on loopback: order, batching, failure policies,
request errors, the async transports, and a real 429."""
import asyncio
import threading
import time

import pytest
from client_testing import (ASYNC_TRANSPORTS, CPU_CONFIG, FakeArray, FakeScalar, ScriptedServer,
                            failing_item, lexical, ratio, run_async)

from arbiter_client import (ArbiterClient, ArbiterItemError, ArbiterRequestError,
                            ArbiterUnavailable)
from arbiter_client._transport import aiohttp


def test_scores_come_back_in_order_with_their_provenance(arbiter, make_client):
    client = make_client(arbiter.url)
    results = client.score([
        lexical("the cat sat", "the cat sat down"),
        {"reward": "exact_match", "solution_str": "Paris", "ground_truth": ["paris", "Rome"]},
        {"data_source": "gsm8k/main", "solution_str": "72", "ground_truth": "71"},
        {"data_source": "lexical", "solution_str": "ab", "ground_truth": ["ab"],
         "extra_info": None},
    ])
    assert [r.score for r in results] == [ratio("the cat sat", "the cat sat down"), 1.0, 0.0,
                                          1.0]
    for r in results:
        assert r.status == "ok" and not r.failed and not r.fallback
        assert r.source == "cpu" and r.attempts == 1 and r.error_code is None
        assert r.queue_ms >= 0 and r.run_ms >= 0 and r.raw["status"] == "ok"


def test_the_client_reward_applies_to_items_that_name_none(arbiter, make_client):
    client = make_client(arbiter.url, reward="exact_match")
    results = client.score([{"solution_str": "The Answer", "ground_truth": "answer"},
                            lexical("abc", "abd")])
    assert [r.score for r in results] == [1.0, ratio("abc", "abd")]


def test_long_lists_go_in_batch_size_requests_answered_in_order(arbiter, make_client, scripted):
    proxy = scripted()
    client = make_client(proxy.url, batch_size=3)
    items = [lexical(f"text {i}", f"text {i * 7}") for i in range(8)]
    results = client.score(items)
    assert [r.score for r in results] == [ratio(f"text {i}", f"text {i * 7}") for i in range(8)]
    sent = sorted(req[2]["items"][0]["solution_str"] for req in proxy.requests)
    assert sent == ["text 0", "text 3", "text 6"]
    assert sorted(len(req[2]["items"]) for req in proxy.requests) == [2, 3, 3]


@pytest.mark.parametrize("use_aiohttp", ASYNC_TRANSPORTS)
def test_a_long_lists_requests_are_in_flight_together(scripted, make_client, use_aiohttp):
    """Four requests of two items, each answered after 1.5 s, go out at once, not one after
    another."""
    proxy = scripted(*[{"forward": True, "delay_s": 1.5}] * 8)
    client = make_client(proxy.url, batch_size=2, use_aiohttp=use_aiohttp)
    items = [lexical(f"a{k}", f"a{k * 3}") for k in range(8)]
    for results in (client.score(items), run_async(client.ascore, items)):
        assert [r.score for r in results] == [ratio(f"a{k}", f"a{k * 3}") for k in range(8)]
    sent = [t for t, _, _ in proxy.requests]
    assert len(sent) == 8
    assert max(sent[:4]) - min(sent[:4]) < 1.0, sent
    assert max(sent[4:]) - min(sent[4:]) < 1.0, sent


def test_a_request_refused_as_too_large_goes_again_in_halves(tmp_path, make_client):
    """batch_size above the server's max_batch_items (3): 8 items go as 8, then 4 and 4, then
    2 four times, and every item is answered in order. One item too large is raised."""
    from arbiter_testing import start_server
    s = start_server(tmp_path, CPU_CONFIG + "\n[server]\nmax_batch_items = 3\n"
                     "max_body_bytes = 4096\n")
    proxy = ScriptedServer(s.url)
    try:
        client = make_client(proxy.url, batch_size=8)
        items = [lexical(f"b{k}", f"b{k * 5}") for k in range(8)]
        results = client.score(items)
        assert [r.score for r in results] == [ratio(f"b{k}", f"b{k * 5}") for k in range(8)]
        assert sorted(len(body["items"]) for _, _, body in proxy.requests) == \
            [2, 2, 2, 2, 4, 4, 8]
        # A half refused for a bad field: the error keeps the other halves' scores (all
        # None before), in both transports.
        bad = {"reward": "lexical", "solution_str": "a", "ground_truth": None}
        for call in (client.score, lambda i: run_async(client.ascore, i)):
            with pytest.raises(ArbiterRequestError) as e:
                call(items[:6] + [bad, items[7]])
            assert e.value.field == "items[6].ground_truth"
            # 8 items: 413, so 4 and 4; the second 4 hold the bad field (a 400 comes before a
            # 413), the first 4 go as 2 and 2 and are answered.
            assert [r.score if r else None for r in e.value.results] == \
                [ratio(f"b{k}", f"b{k * 5}") for k in range(4)] + [None] * 4
        # One item over max_body_bytes cannot be split: it is raised.
        with pytest.raises(ArbiterRequestError) as e:
            client.score([lexical("c" * 5000, "c")])
        assert e.value.status == 413 and e.value.code == "payload_too_large"
    finally:
        proxy.close()
        s.kill()


@pytest.mark.parametrize("use_aiohttp", ASYNC_TRANSPORTS)
def test_an_error_carries_the_results_of_the_requests_that_were_answered(
        arbiter, make_client, use_aiohttp):
    client = make_client(arbiter.url, batch_size=2, use_aiohttp=use_aiohttp)
    bad = {"reward": "lexical", "solution_str": "a", "ground_truth": None}
    items = [lexical("a", "a"), lexical("b", "c"), lexical("d", "d"), bad, lexical("e", "e")]
    for call in (client.score, lambda i: run_async(client.ascore, i)):
        with pytest.raises(ArbiterRequestError) as e:
            call(items)
        assert e.value.field == "items[3].ground_truth"
        assert [r.score if r else r for r in e.value.results] == [1.0, 0.0, None, None, 1.0]
    # Under on_failure=raise, the failed item is raised once every request is answered.
    items = [lexical("a", "a"), lexical("b", "b"), failing_item(), lexical("f", "f")]
    for call in (client.score, lambda i: run_async(client.ascore, i)):
        with pytest.raises(ArbiterItemError) as e:
            call(items)
        assert e.value.index == 2 and e.value.code == "reward_failed"
        assert [r.score for r in e.value.results] == [1.0, 1.0, None, 1.0]
        assert e.value.results[2].failed


def test_a_400_names_the_field_by_its_index_in_the_whole_list_and_is_not_retried(
        arbiter, make_client):
    client = make_client(arbiter.url, batch_size=4, backoff_base_s=5.0)
    items = [lexical("a", "a")] * 5 + [{"reward": "lexical", "solution_str": "a",
                                        "ground_truth": None}]
    start = time.monotonic()
    with pytest.raises(ArbiterRequestError) as e:
        client.score(items)
    assert time.monotonic() - start < 2
    assert e.value.status == 400 and e.value.code == "invalid_request"
    assert e.value.field == "items[5].ground_truth"
    assert e.value.message.startswith("items[5].ground_truth: expected a string, a number")
    with pytest.raises(ArbiterRequestError) as e:
        client.score([lexical("a", "a"), {"solution_str": "a", "ground_truth": "a",
                                          "data_source": "nowhere"}])
    assert e.value.field == "items[1].data_source"


def test_an_unknown_priority_is_a_400_naming_it(arbiter, make_client):
    with pytest.raises(ArbiterRequestError) as e:
        make_client(arbiter.url, priority="urgent").score([lexical("a", "a")])
    assert e.value.field == "priority"
    assert make_client(arbiter.url, priority="high", deadline_ms=5000).score(
        [lexical("a", "a")])[0].score == 1.0


def test_policy_raise_raises_for_a_failed_item_with_its_index_and_code(arbiter, make_client):
    client = make_client(arbiter.url)
    with pytest.raises(ArbiterItemError) as e:
        client.score([lexical("a", "a"), failing_item()])
    assert e.value.index == 1 and e.value.code == "reward_failed"
    assert "max_lexical_chars" in e.value.message
    assert e.value.result["status"] == "failed"


def test_policy_none_gives_none_for_failed_items_only(arbiter, make_client):
    results = make_client(arbiter.url, on_failure="none").score(
        [failing_item(), lexical("a", "a"), failing_item(2)])
    assert [r.score for r in results] == [None, 1.0, None]
    assert [r.failed for r in results] == [True, False, True]
    assert results[0].status == "failed" and results[0].error_code == "reward_failed"


def test_policy_value_gives_the_failure_score_flagged(arbiter, make_client):
    results = make_client(arbiter.url, on_failure="value", failure_score=-1.5).score(
        [lexical("a", "a"), failing_item()])
    assert [r.score for r in results] == [1.0, -1.5]
    assert [r.failed for r in results] == [False, True]


def test_upstream_failures_and_fallbacks_from_a_provider_in_outage(down_arbiter, make_client):
    client = make_client(down_arbiter.url, on_failure="none")
    broken, soft = client.score([
        {"reward": "broken", "solution_str": "four", "ground_truth": "four"},
        {"reward": "soft", "solution_str": "The Cat", "ground_truth": "the cat sat"}])
    assert broken.failed and broken.score is None and broken.error_code == "upstream_failed"
    assert "503" in broken.error_message
    assert soft.fallback and not soft.failed and soft.source == "lexical"
    assert soft.score == pytest.approx(ratio("the cat", "the cat sat"))
    with pytest.raises(ArbiterItemError) as e:
        make_client(down_arbiter.url).score(
            [{"reward": "broken", "solution_str": "five", "ground_truth": "five"}])
    assert e.value.code == "upstream_failed"


def test_numpy_like_values_are_sent_as_json(arbiter, make_client, scripted):
    proxy = scripted()
    client = make_client(proxy.url)
    results = client.score([{
        "reward": "exact_match", "solution_str": "b",
        "ground_truth": FakeArray(["a", "b"]),
        "extra_info": {"index": FakeScalar(3), "scores": FakeArray([0.5, 1]),
                       "nested": {"flag": FakeScalar(True)}, "pair": ("x", 1)}}])
    assert results[0].score == 1.0
    sent = proxy.items()[0]
    assert sent["ground_truth"] == ["a", "b"]
    assert sent["extra_info"] == {"index": 3, "scores": [0.5, 1], "nested": {"flag": True},
                                  "pair": ["x", 1]}


def test_number_ground_truths_are_sent_as_the_text_str_gives(arbiter, make_client, scripted):
    proxy = scripted()
    client = make_client(proxy.url)
    truths = [72, 0.5, 1e16, 1e-05, 100.0, -0.0, 10 ** 30, float("inf"), FakeScalar(3),
              FakeArray([1, 2.5]), ["a", 7], (FakeScalar(0.25),)]
    results = client.score([{"reward": "exact_match", "solution_str": "x", "ground_truth": t}
                            for t in truths])
    assert [r.score for r in results] == [0.0] * len(truths)
    assert [i["ground_truth"] for i in proxy.items()] == [
        "72", "0.5", "1e+16", "1e-05", "100.0", "-0.0", "1" + "0" * 30, "inf", "3",
        ["1", "2.5"], ["a", "7"], ["0.25"]]
    # numpy's narrow floats go as str() writes them, not widened to a double first
    # (np.float32(0.1).tolist() is 0.10000000149011612).
    np = pytest.importorskip("numpy")
    narrow = [np.float32(0.1), np.float16(0.3), np.array([0.1, 2.5], dtype=np.float32),
              [np.float32(0.7), 3]]
    client.score([{"reward": "exact_match", "solution_str": "x", "ground_truth": t}
                  for t in narrow])
    assert [i["ground_truth"] for i in proxy.items()] == [
        "0.1", "0.3", ["0.1", "2.5"], ["0.7", "3"]]
    # torch's too (helper-69: a float32 tensor went as "0.10000000149011612").
    torch = pytest.importorskip("torch")
    tensors = [torch.tensor(0.1), torch.tensor([0.1, 2.5]), torch.tensor(0.3, dtype=torch.float16),
               torch.tensor(0.5, dtype=torch.bfloat16), torch.tensor(0.1, dtype=torch.float64),
               torch.tensor(7)]
    client.score([{"reward": "exact_match", "solution_str": "x", "ground_truth": t}
                  for t in tensors])
    assert [i["ground_truth"] for i in proxy.items()] == [
        "0.1", ["0.1", "2.5"], "0.3", "0.5", "0.1", "7"]
    # What the client sends scores as the same value does when Arbiter reads a JSON number.
    for truth in [72, 0.5, 1e16, 1e-05, 12345678901234567890123]:
        assert client.score([{"reward": "lexical", "solution_str": str(truth),
                              "ground_truth": truth}])[0].score == 1.0


def test_boolean_and_none_ground_truths_are_refused_by_arbiter_naming_them(arbiter,
                                                                           make_client):
    client = make_client(arbiter.url, backoff_base_s=5.0)
    for truth, field in [(True, "items[1].ground_truth"), (["a", None], "items[1].ground_truth[1]"),
                         (FakeScalar(False), "items[1].ground_truth")]:
        start = time.monotonic()
        with pytest.raises(ArbiterRequestError) as e:
            client.score([lexical("a", "a"), {**lexical("a", "a"), "ground_truth": truth}])
        assert time.monotonic() - start < 2  # not retried
        assert (e.value.status, e.value.code, e.value.field) == (400, "invalid_request", field)


def test_values_json_cannot_carry_are_refused_naming_them(arbiter, make_client):
    client = make_client(arbiter.url)
    with pytest.raises(TypeError, match=r"items\[1\]\['extra_info'\]\['tok'\]: a object"):
        client.score([lexical("a", "a"), {**lexical("a", "a"), "extra_info": {"tok": object()}}])
    with pytest.raises(ValueError, match="nan"):
        client.score([{**lexical("a", "a"), "extra_info": {"x": float("nan")}}])


@pytest.mark.parametrize("use_aiohttp", ASYNC_TRANSPORTS)
def test_ascore_on_each_transport(arbiter, make_client, use_aiohttp):
    client = make_client(arbiter.url, use_aiohttp=use_aiohttp, on_failure="none",
                         batch_size=2)
    assert client.async_transport == ("stdlib" if use_aiohttp is False else "aiohttp")

    async def main():
        try:
            return await asyncio.gather(
                client.ascore([lexical("abc", "abd"), failing_item(), lexical("x", "x")]),
                client.ascore([lexical("q", "q")]))
        finally:
            await client.aclose()

    first, second = asyncio.run(main())
    assert [r.score for r in first] == [ratio("abc", "abd"), None, 1.0]
    assert second[0].score == 1.0


@pytest.mark.skipif(aiohttp is None, reason="aiohttp not installed")
def test_one_aiohttp_session_per_event_loop(arbiter, make_client):
    client = make_client(arbiter.url)

    async def once(close=True):
        score = (await client.ascore([lexical("a", "a")]))[0].score
        session = await client._async._session()
        if close:
            await client.aclose()
        return score, session

    # Two loops one after the other (the first ends without aclose(): its session is closed
    # as the loop shuts down), then two at once.
    score1, s1 = asyncio.run(once(close=False))
    assert s1.closed
    score2, s2 = asyncio.run(once())
    assert score1 == score2 == 1.0 and s1 is not s2
    sessions = []
    threads = [threading.Thread(target=lambda: sessions.append(asyncio.run(once())[1]))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(s) for s in sessions}) == 2


TRAINER_LOOP = """
import asyncio, atexit, sys, threading
from arbiter_client import ArbiterClient
# As TRL runs async reward functions: a daemon thread's loop, stopped (not closed) at exit.
loop = asyncio.new_event_loop()
thread = threading.Thread(target=loop.run_forever, daemon=True)
thread.start()
atexit.register(lambda: (loop.call_soon_threadsafe(loop.stop), thread.join(5)))
client = ArbiterClient(sys.argv[1], env={})
item = {"reward": "lexical", "solution_str": "a", "ground_truth": "a"}
print(asyncio.run_coroutine_threadsafe(client.ascore([item]), loop).result()[0].score)
"""


@pytest.mark.skipif(aiohttp is None, reason="aiohttp not installed")
def test_a_session_on_a_loop_the_trainer_stops_at_exit_closes_quietly(arbiter, tmp_path):
    """helper-70: TRL's loop is stopped at exit, never closed, so the session stayed open and
    Python printed three tracebacks from its finalizers as it shut down."""
    import os
    import subprocess
    import sys

    import arbiter_client
    script = tmp_path / "trainer_loop.py"
    script.write_text(TRAINER_LOOP)
    tested = os.path.dirname(os.path.dirname(arbiter_client.__file__))  # not an installed copy
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [tested] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    done = subprocess.run([sys.executable, str(script), arbiter.url], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "1.0", done
    assert "Traceback" not in done.stderr and "Unclosed" not in done.stderr, done.stderr


def test_a_real_429_from_a_full_queue_waits_its_retry_after_then_gives_up(
        tmp_path, make_client):
    from arbiter_testing import Provider, start_server
    # A judge that holds its one call for 20 s keeps two of three judge items' calls queued
    # in the class (capacity 3): room for one more item.
    p = Provider("--latency-median-ms", "20000", "--latency-p99-ms", "20000")
    s = start_server(tmp_path, '[[scheduler.priorities]]\nname = "normal"\ncapacity = 3\n',
                     env={"LLM_JUDGE_SERVER_URL": p.url,
                          "ARBITER_SOURCES_LLM_JUDGE_SERVER_MAX_CONCURRENCY": "1",
                          "ARBITER_SOURCES_LLM_JUDGE_SERVER_MAX_BATCH_ITEMS": "1"})
    try:
        holder = make_client(s.url, retries=0, deadline_ms=60000, timeout_s=60)
        judges = [{"reward": "judge", "solution_str": f"s{k}", "ground_truth": "g"}
                  for k in range(3)]

        def hold():
            try:
                holder.score(judges)
            except Exception:
                pass  # the server is killed under it at the end

        threading.Thread(target=hold, daemon=True).start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and p.stats()["in_flight"] < 1:
            time.sleep(0.01)
        client = make_client(s.url, retries=1)
        start = time.monotonic()
        with pytest.raises(ArbiterUnavailable) as e:
            client.score([lexical("a", "a")] * 2)
        assert time.monotonic() - start >= 1.0  # Arbiter says Retry-After: 1 (or more)
        assert e.value.attempts == 2
        assert "429 overloaded" in e.value.reason
        # More than the class ever holds (413) goes again in halves, which meet the full
        # class like any other request; the error says no item was answered.
        with pytest.raises(ArbiterUnavailable) as too_many:
            client.score([lexical("a", "a")] * 4)
        assert "429 overloaded" in too_many.value.reason
        assert too_many.value.results == [None] * 4
    finally:
        s.kill()
        p.kill()


@pytest.mark.parametrize("use_aiohttp", ASYNC_TRANSPORTS)
def test_connection_refused_is_retried_then_unavailable(make_client, use_aiohttp):
    from arbiter_testing import unused_port
    client = make_client(f"http://127.0.0.1:{unused_port()}", retries=2, backoff_base_s=0.05,
                         use_aiohttp=use_aiohttp)
    start = time.monotonic()
    with pytest.raises(ArbiterUnavailable) as e:
        client.score([lexical("a", "a")])
    assert e.value.attempts == 3
    assert "Connection" in e.value.reason or "refused" in e.value.reason.lower()
    # Backoff 0.05 s then 0.1 s, each scaled by a factor in [0.5, 1).
    assert 0.07 <= time.monotonic() - start < 2

    async def main():
        try:
            await client.ascore([lexical("a", "a")])
        finally:
            await client.aclose()

    with pytest.raises(ArbiterUnavailable) as e:
        asyncio.run(main())
    assert e.value.attempts == 3
    # step_account() retries as score() does (it made one attempt).
    with pytest.raises(ArbiterUnavailable) as e:
        client.step_account(3)
    assert e.value.attempts == 3


def test_empty_lists_send_nothing(make_client):
    from arbiter_testing import unused_port
    client = make_client(f"http://127.0.0.1:{unused_port()}")
    assert client.score([]) == []
    assert asyncio.run(client.ascore([])) == []


def test_items_must_be_dicts(make_client):
    with pytest.raises(TypeError, match=r"items\[0\]: expected a dict"):
        make_client("http://127.0.0.1:1").score(["text"])


def test_clients_read_their_settings_from_the_environment():
    env = {"ARBITER_URL": "https://h.example:9/base/", "ARBITER_TIMEOUT": "2.5",
           "ARBITER_RETRIES": "0", "ARBITER_REWARD": "judge", "ARBITER_ON_FAILURE": "Value",
           "ARBITER_FAILURE_SCORE": "-1", "ARBITER_API_KEY": "k", "ARBITER_BATCH_SIZE": "7",
           "ARBITER_PRIORITY": "low", "ARBITER_DEADLINE_MS": "9000"}
    s = ArbiterClient(env=env).settings
    assert (s.url, s.timeout_s, s.retries, s.reward, s.on_failure, s.failure_score, s.api_key,
            s.batch_size, s.priority, s.deadline_ms) == (
        "https://h.example:9/base", 2.5, 0, "judge", "value", -1.0, "k", 7, "low", 9000)
    # Arguments beat the environment; empty variables count as unset.
    s = ArbiterClient("http://a:1", retries=3, env={**env, "ARBITER_REWARD": ""}).settings
    assert (s.url, s.retries, s.reward) == ("http://a:1", 3, None)
    d = ArbiterClient(env={}).settings
    assert (d.url, d.timeout_s, d.retries, d.reward, d.on_failure, d.failure_score, d.api_key,
            d.batch_size) == ("http://127.0.0.1:8080", 300.0, 5, None, "raise", 0.0, None, 256)


@pytest.mark.parametrize("variable,value", [
    ("ARBITER_URL", "localhost:8080"), ("ARBITER_URL", "http://127.0.0.1:notaport"),
    ("ARBITER_URL", "http://:18510"), ("ARBITER_TIMEOUT", "0"), ("ARBITER_TIMEOUT", "5s"),
    ("ARBITER_RETRIES", "-1"), ("ARBITER_RETRIES", "2.5"), ("ARBITER_ON_FAILURE", "zero"),
    ("ARBITER_FAILURE_SCORE", "nan"), ("ARBITER_BATCH_SIZE", "0"),
    ("ARBITER_DEADLINE_MS", "soon")])
def test_a_bad_variable_is_a_value_error_naming_it(variable, value):
    with pytest.raises(ValueError, match=f"^{variable}: .*{value!r}"):
        ArbiterClient(env={variable: value})


def test_an_api_key_a_header_cannot_carry_is_refused_without_printing_it():
    for key in ("k\r\nX-Evil: 1", "clé", "two words"):
        with pytest.raises(ValueError, match="^ARBITER_API_KEY: a key is visible ASCII") as e:
            ArbiterClient(env={"ARBITER_API_KEY": key})
        assert key not in str(e.value)


def test_a_bad_argument_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="^on_failure: "):
        ArbiterClient(on_failure="skip", env={})
    with pytest.raises(TypeError, match="timeout"):
        ArbiterClient(timeout=3, env={})


def test_the_api_key_is_sent_as_a_bearer_header_and_a_wrong_one_is_a_401(tmp_path,
                                                                          make_client):
    """A keyed Arbiter (server.api_keys): the key from `api_key` or ARBITER_API_KEY is sent as
    Authorization: Bearer; without it, or with a wrong one, the 401 is raised at once, not
    retried."""
    from arbiter_testing import start_server
    from client_testing import CPU_CONFIG
    s = start_server(tmp_path, CPU_CONFIG + '\n[server]\napi_keys = ["sk-client-test-1"]\n')
    try:
        client = make_client(s.url, api_key="sk-client-test-1")
        assert [r.score for r in client.score([lexical("a b", "a b")])] == [1.0]
        client = make_client(s.url, env={"ARBITER_API_KEY": "sk-client-test-1"})
        assert [r.score for r in client.score([lexical("a b", "a b")])] == [1.0]
        for options in ({}, {"api_key": "sk-wrong"}):
            client = make_client(s.url, backoff_base_s=5.0, **options)
            start = time.monotonic()
            with pytest.raises(ArbiterRequestError) as e:
                client.score([lexical("a", "a")])
            assert time.monotonic() - start < 2
            assert e.value.status == 401 and e.value.code == "invalid_api_key"
    finally:
        s.kill()


@pytest.mark.parametrize("use_aiohttp", ASYNC_TRANSPORTS)
def test_a_burst_of_concurrent_calls_is_in_flight_together(scripted, make_client, use_aiohttp):
    """A verl worker awaits a chunk of single-sample calls at once: 150 of them, each answered
    after 2 s, all go out together and none times out waiting for a connection (aiohttp's
    default pool holds 100, whose wait counted against the timeout, and asyncio's default
    threads are cores + 4)."""
    proxy = scripted(*[{"forward": True, "delay_s": 2.0}] * 150)
    client = make_client(proxy.url, timeout_s=3.0, retries=0, use_aiohttp=use_aiohttp)

    async def burst():
        start = time.monotonic()
        results = await asyncio.gather(*[client.ascore([lexical(f"a{k}", f"a{k}")])
                                         for k in range(150)])
        took = time.monotonic() - start
        await client.aclose()
        return results, took

    results, took = asyncio.run(burst())
    assert [r[0].score for r in results] == [1.0] * 150
    assert took < 10, took


def test_an_attempt_waits_at_least_the_deadline(scripted, make_client):
    """Arbiter answers by the request's deadline; a shorter per-attempt timeout would hang up
    on work it was still allowed to finish (and the server drops a hung-up request)."""
    proxy = scripted({"forward": True, "delay_s": 2.0})
    client = make_client(proxy.url, timeout_s=1.0, retries=0, deadline_ms=3000)
    assert client.attempt_timeout_s == 13.0
    assert [r.score for r in client.score([lexical("a", "a")])] == [1.0]
    assert make_client(proxy.url, timeout_s=1.0).attempt_timeout_s == 1.0


def test_a_numpy_step_is_sent_as_its_integer(scripted, make_client):
    np = pytest.importorskip("numpy")
    proxy = scripted()
    client = make_client(proxy.url)
    client.score([lexical("a", "a")], step=np.int64(12))
    assert proxy.requests[-1][2]["step"] == 12
    with pytest.raises(TypeError, match="^step: "):
        client.score([lexical("a", "a")], step=1.5)


def _in_child(work, timeout_s=30.0):
    """Runs `work()` in a forked child; returns what it returned (a JSON-able value), or
    raises AssertionError when it raised or did not end within `timeout_s`."""
    import json
    import os
    import signal
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        try:
            out = {"value": work()}
        except BaseException as e:  # noqa: B902 (reported to the parent)
            out = {"error": f"{type(e).__name__}: {e}"}
        with os.fdopen(write_end, "w") as f:
            json.dump(out, f)
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)
        raise AssertionError(f"the forked child hung for {timeout_s} s")
    with os.fdopen(read_end) as f:
        out = json.load(f)
    assert "error" not in out, out["error"]
    return out["value"]


def test_a_forked_child_gets_its_own_connections_and_threads(arbiter, make_client):
    # A child forked after a call (verl.md's check, then datasets' map(num_proc=4)) sent on the
    # parent's keep-alive socket, so each process could read the other's answers: another
    # sample's score. A child of a client that had made ascore()'s threads hung for ever.
    client = make_client(arbiter.url, use_aiohttp=False, batch_size=2)
    assert client.score([lexical("a", "a")])[0].score == 1.0
    assert run_async(client.ascore, [lexical("a", "a")])[0].score == 1.0
    parent_port = client._sync._local.conn.sock.getsockname()[1]

    def child():
        ports = []
        scores = []
        for _ in range(50):
            scores.append(client.score([lexical("ab", "b")])[0].score)
            ports.append(client._sync._local.conn.sock.getsockname()[1])
        # More than batch_size items (the thread pool), and ascore() on the stdlib transport.
        scores += [r.score for r in client.score([lexical("ab", "b")] * 5)]
        scores += [r.score for r in asyncio.run(client.ascore([lexical("ab", "b")] * 3))]
        return {"ports": sorted(set(ports)), "scores": scores}

    stop = threading.Event()
    parent_scores = []

    def parent_load():
        while not stop.is_set():
            parent_scores.append(client.score([lexical("a", "a")])[0].score)

    load = threading.Thread(target=parent_load)
    load.start()
    try:
        got = _in_child(child)
    finally:
        stop.set()
        load.join()
    assert parent_port not in got["ports"], "the child sent on the parent's socket"
    assert got["scores"] == [ratio("ab", "b")] * (50 + 5 + 3)
    assert parent_scores and set(parent_scores) == {1.0}


def test_errors_cross_process_boundaries_whole(arbiter, make_client):
    # Ray (verl's reward workers), ProcessPoolExecutor and multiprocessing pickle an exception
    # to hand it to the caller: the subclasses' __init__ took the message alone, so Ray gave
    # "Failed to deserialize exception", a ProcessPoolExecutor broke, a Pool hung.
    import concurrent.futures
    import multiprocessing
    import pickle

    client = make_client(arbiter.url)
    with pytest.raises(ArbiterItemError) as raised:
        client.score([lexical("a", "a"), failing_item()])
    errors = [raised.value, ArbiterRequestError(400, "invalid_request", "bad", "items[0].x"),
              ArbiterUnavailable("HTTP 503 shutting_down", 6)]
    for e in errors:
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)
        assert {k: v for k, v in vars(back).items() if k != "results"} == \
            {k: v for k, v in vars(e).items() if k != "results"}
    back = pickle.loads(pickle.dumps(raised.value))
    assert back.index == 1 and back.code == "reward_failed"
    assert [r.score if r else None for r in back.results] == [1.0, None]
    with concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with pytest.raises(ArbiterUnavailable) as far:
            pool.submit(_raise_unavailable).result(timeout=60)
    assert far.value.attempts == 3 and far.value.reason == "connection refused"


def _raise_unavailable():
    raise ArbiterUnavailable("connection refused", 3)


def test_a_client_pickles_as_its_settings(arbiter, make_client):
    # Ray and cloudpickle'd reward functions (TRL's, under some launchers) pickle the client:
    # it failed on its locks ("cannot pickle '_thread.lock'").
    import pickle
    client = make_client(arbiter.url, retries=2, job="run-a", reward="lexical")
    assert client.score([lexical("a", "a")])[0].score == 1.0
    copy = pickle.loads(pickle.dumps(client))
    assert copy.settings == client.settings
    assert copy.score([{"solution_str": "ab", "ground_truth": "b"}])[0].score == ratio("ab", "b")
    copy.close()
