"""The client's own retry logic: a scripted stand-in answers 429, 503, 5xx, garbage or slowly
first, then forwards to the real Arbiter."""
import asyncio
import email.utils
import time

import pytest
from client_testing import ASYNC_TRANSPORTS, lexical

from arbiter_client import ArbiterItemError, ArbiterRequestError, ArbiterUnavailable
from arbiter_client._retry import OutcomeKind, classify_response

OVERLOADED = {"error": {"code": "overloaded", "message": "class normal is full"}}


def run(client, use_aiohttp, items):
    """client.score, or client.ascore on a fresh loop when use_aiohttp is not "sync"."""
    if use_aiohttp == "sync":
        return client.score(items)

    async def main():
        try:
            return await client.ascore(items)
        finally:
            await client.aclose()

    return asyncio.run(main())


MODES = [pytest.param("sync", id="sync")] + ASYNC_TRANSPORTS


@pytest.mark.parametrize("mode", MODES)
def test_a_429_waits_its_retry_after_then_succeeds(scripted, make_client, mode):
    proxy = scripted({"status": 429, "headers": {"Retry-After": "1"}, "body": OVERLOADED})
    client = make_client(proxy.url, use_aiohttp=None if mode == "sync" else mode,
                         backoff_base_s=0.01)
    results = run(client, mode, [lexical("a", "a")])
    assert results[0].score == 1.0
    (t0, _, _), (t1, _, _) = proxy.requests
    assert 1.0 <= t1 - t0 < 1.5  # Retry-After plus at most 10% jitter


@pytest.mark.parametrize("mode", MODES)
def test_a_503_is_retried_after_its_retry_after(scripted, make_client, mode):
    proxy = scripted({"status": 503, "headers": {"Retry-After": "0"},
                      "body": {"error": {"code": "shutting_down", "message": "draining"}}},
                     {"status": 503, "body": "no retry-after, not json"})
    client = make_client(proxy.url, use_aiohttp=None if mode == "sync" else mode,
                         backoff_base_s=0.01)
    assert run(client, mode, [lexical("a", "a")])[0].score == 1.0
    assert len(proxy.requests) == 3


def test_a_429_waits_until_its_retry_after_date(scripted, make_client):
    when = email.utils.formatdate(time.time() + 2, usegmt=True)  # whole seconds: 1 to 2 s away
    proxy = scripted({"status": 429, "headers": {"Retry-After": when}, "body": OVERLOADED})
    client = make_client(proxy.url, backoff_base_s=0.01)
    assert client.score([lexical("a", "a")])[0].score == 1.0
    (t0, _, _), (t1, _, _) = proxy.requests
    assert 0.9 <= t1 - t0 < 2.5


@pytest.mark.parametrize("value, wait", [
    ("Sun, 06 Nov 1994 08:49:37 GMT", 7.0),      # IMF-fixdate
    ("Sunday, 06-Nov-94 08:49:37 GMT", 7.0),     # RFC 850
    ("Sun Nov  6 08:49:37 1994", 7.0),           # asctime, GMT without saying so
    ("Sun, 06 Nov 1994 08:49:20 GMT", 0.0),      # already past: no wait
    ("2.5", 2.5),
    ("Sun, 31 Nov 1994 08:49:37 GMT", None),     # no such day: the backoff decides
    ("soon", None),
    ("-1", None),
])
def test_retry_after_reads_seconds_and_each_http_date_form(value, wait):
    now = email.utils.parsedate_to_datetime("Sun, 06 Nov 1994 08:49:30 GMT").timestamp()
    outcome = classify_response(429, {"retry-after": value}, b"", now=lambda: now)
    assert outcome.kind is OutcomeKind.rate_limited
    assert outcome.retry_after_s == wait


def test_retry_after_is_capped(scripted, make_client):
    proxy = scripted({"status": 429, "headers": {"Retry-After": "3600"}, "body": OVERLOADED})
    client = make_client(proxy.url, max_retry_after_s=0.2)
    start = time.monotonic()
    assert client.score([lexical("a", "a")])[0].score == 1.0
    assert 0.2 <= time.monotonic() - start < 1.0


@pytest.mark.parametrize("reply", [
    {"status": 500, "body": {"error": {"code": "internal", "message": "bug"}}},
    {"status": 502, "body": b""},
    {"status": 200, "body": "<html>proxy error</html>"},
    {"status": 200, "body": {"unexpected": True}},
], ids=["500", "502", "200-not-json", "200-not-an-answer"])
def test_server_errors_are_retried_with_backoff(scripted, make_client, reply):
    proxy = scripted(reply, reply)
    client = make_client(proxy.url, backoff_base_s=0.1)
    assert client.score([lexical("a", "a")])[0].score == 1.0
    times = [t for t, _, _ in proxy.requests]
    assert len(times) == 3
    # Backoff 0.1 s then 0.2 s, each scaled by a factor in [0.5, 1).
    assert 0.05 <= times[1] - times[0] < 0.5 and 0.1 <= times[2] - times[1] < 0.6


@pytest.mark.parametrize("mode", MODES)
def test_a_slow_answer_times_out_and_is_retried(scripted, make_client, mode):
    proxy = scripted({"status": 200, "body": {"results": []}, "delay_s": 1.0})
    client = make_client(proxy.url, timeout_s=0.2, backoff_base_s=0.01,
                         use_aiohttp=None if mode == "sync" else mode)
    assert run(client, mode, [lexical("a", "a")])[0].score == 1.0
    assert len(proxy.requests) == 2


@pytest.mark.parametrize("mode", MODES)
def test_after_the_last_attempt_unavailable_says_why(scripted, make_client, mode):
    busy = {"status": 503, "headers": {"Retry-After": "0"},
            "body": {"error": {"code": "shutting_down", "message": "draining"}}}
    proxy = scripted(busy, busy, busy, busy)
    client = make_client(proxy.url, retries=2, use_aiohttp=None if mode == "sync" else mode)
    with pytest.raises(ArbiterUnavailable) as e:
        run(client, mode, [lexical("a", "a")])
    assert e.value.attempts == 3 and len(proxy.requests) == 3
    assert e.value.reason == "HTTP 503 shutting_down: draining"


def drained_answer(*scores):
    """A /v1/score answer whose items scored `scores`, None: ended as the server shut down."""
    def result(score):
        if score is not None:
            return {"status": "ok", "score": score, "source": "lexical"}
        return {"status": "failed", "score": None, "error": {
            "code": "shutting_down",
            "message": "the server shut down before this item was scored (drain deadline)"}}
    return {"status": 200, "body": {"results": [result(s) for s in scores]}}


@pytest.mark.parametrize("mode", MODES)
def test_items_a_draining_server_ended_go_again_by_themselves(scripted, make_client, mode):
    """A rolling restart: the old server answered what it scored before its drain deadline
    and ended the rest; those go to the new one, and the step does not fail."""
    proxy = scripted(drained_answer(0.25, None, 0.5, None))
    client = make_client(proxy.url, use_aiohttp=None if mode == "sync" else mode)
    items = [lexical("a", "b"), lexical("x", "x"), lexical("c", "d"), lexical("ab", "ab")]
    results = run(client, mode, items)
    assert [r.score for r in results] == [0.25, 1.0, 0.5, 1.0]
    assert not any(r.failed for r in results)
    (t0, _, first), (t1, _, again) = proxy.requests
    assert first["items"] == items and again["items"] == [items[1], items[3]]
    assert t1 - t0 >= 1.0  # the server is restarting: at least a second


def test_a_group_with_a_member_sent_again_has_no_statistics(scripted, make_client):
    """Neither server saw the whole group: the new one's statistics counted only the member
    sent to it, and flagged zero_std a group whose scores differ (helper-50)."""
    first = drained_answer(0.25, None, 0.5)
    first["body"]["groups"] = {
        "g": {"scored": 1, "failed": 1, "pending": 0, "mean": 0.25, "std": 0.0,
              "zero_std": True},
        "h": {"scored": 1, "failed": 0, "pending": 0, "mean": 0.5, "std": 0.0,
              "zero_std": True}}
    proxy = scripted(first)
    client = make_client(proxy.url)
    items = [dict(lexical("a", "b"), group="g"), dict(lexical("x", "x"), group="g"),
             dict(lexical("c", "d"), group="h")]
    results = client.score(items)
    assert [r.score for r in results] == [0.25, 1.0, 0.5]
    assert results[0].group is None and results[1].group is None
    assert results[2].group["mean"] == 0.5


def test_items_still_ended_when_the_server_stays_down_keep_their_failure(scripted,
                                                                           make_client):
    proxy = scripted(drained_answer(0.25, None), drained_answer(None), drained_answer(None))
    client = make_client(proxy.url, retries=2, on_failure="none")
    results = client.score([lexical("a", "b"), lexical("x", "x")])
    assert results[0].score == 0.25
    assert results[1].failed and results[1].error_code == "shutting_down"
    assert len(proxy.requests) == 3
    # Under `raise`, the step fails naming the item, once the retries are spent.
    proxy = scripted(drained_answer(None, 0.5), drained_answer(None))
    client = make_client(proxy.url, retries=1)
    with pytest.raises(ArbiterItemError) as e:
        client.score([lexical("x", "x"), lexical("a", "b")])
    assert e.value.index == 0 and e.value.code == "shutting_down"
    assert e.value.results[1].score == 0.5


def test_a_5xx_with_retry_after_waits_it_rather_than_the_backoff(scripted, make_client):
    late = {"status": 504, "headers": {"Retry-After": "0"},
            "body": {"error": {"code": "deadline_exceeded", "message": "late"}}}
    proxy = scripted(late)
    client = make_client(proxy.url, backoff_base_s=5.0)  # a backoff would wait >= 2.5 s
    start = time.monotonic()
    assert client.score([lexical("a", "a")])[0].score == 1.0
    assert time.monotonic() - start < 2 and len(proxy.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 404, 413, 422])
def test_other_4xx_are_not_retried(scripted, make_client, status):
    proxy = scripted({"status": status, "body": {"error": {"code": "nope", "message": "no"}}})
    with pytest.raises(ArbiterRequestError) as e:
        make_client(proxy.url).score([lexical("a", "a")])
    assert (e.value.status, e.value.code, e.value.message, e.value.field) == (
        status, "nope", "no", None)
    assert len(proxy.requests) == 1


def test_a_4xx_without_a_json_body_keeps_its_text(scripted, make_client):
    proxy = scripted({"status": 403, "body": "forbidden by the gateway"})
    with pytest.raises(ArbiterRequestError) as e:
        make_client(proxy.url).score([lexical("a", "a")])
    assert e.value.code is None and e.value.message == "forbidden by the gateway"


@pytest.mark.parametrize("mode", MODES)
def test_the_api_key_is_sent_as_a_bearer_token(scripted, make_client, mode):
    proxy = scripted()
    client = make_client(proxy.url, api_key="s3cret",
                         use_aiohttp=None if mode == "sync" else mode)
    run(client, mode, [lexical("a", "a")])
    headers = {k.lower(): v for k, v in proxy.requests[0][1].items()}
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["content-type"] == "application/json"
    no_key = make_client(proxy.url)
    no_key.score([lexical("a", "a")])
    assert "authorization" not in {k.lower() for k in proxy.requests[1][1]}


def test_priority_and_deadline_go_in_the_body(scripted, make_client):
    proxy = scripted()
    make_client(proxy.url, priority="high", deadline_ms=1234).score([lexical("a", "a")])
    body = proxy.requests[0][2]
    assert body["priority"] == "high" and body["deadline_ms"] == 1234


@pytest.mark.parametrize("mode", MODES)
def test_tls_and_unknown_host_failures_are_not_retried(arbiter, make_client, mode):
    """https to a plain-HTTP port, or a host name that does not exist, fails the same way
    every time: ArbiterUnavailable after one attempt, not after the backoffs."""
    port = arbiter.url.rsplit(":", 1)[1]
    for url in (f"https://127.0.0.1:{port}", "http://arbiter.invalid:8080"):
        client = make_client(url, retries=3, backoff_base_s=1.0,
                             use_aiohttp=None if mode == "sync" else mode)
        start = time.monotonic()
        with pytest.raises(ArbiterUnavailable) as e:
            run(client, mode, [lexical("a", "a")])
        assert e.value.attempts == 1, (url, e.value.reason)
        assert time.monotonic() - start < 1.0
