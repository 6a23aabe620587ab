"""Trainer drop-ins through the real server: OpenRLHF /get_reward, slime /remote_rm, the
OpenAI-compatible /v1/chat/completions, /v1/embeddings, /v1/models (driven by the official
`openai` SDK) and TEI's /embed, backed by fake-provider processes on loopback."""
import base64
import difflib
import json
import math
import re
import struct
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import arbiter_testing
import openai
import pytest

PROMPT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"


def lexical(a, b):
    return difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio()


def source_toml(name, p, caps=("chat",), **extra):
    return arbiter_testing.source_toml(name, p.url, caps=caps, **extra)


def post(server, path, body):
    return server.request("POST", path, body)


class StandInProvider:
    """A provider stand-in on loopback that answers every POST with what `answer(body)` gives,
    a status and a JSON object (the body read as JSON, or None when it is not)."""

    def __init__(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    got = json.loads(raw)
                except ValueError:
                    got = None
                status, reply = outer.answer(got)
                body = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def answer(self, body):
        raise NotImplementedError

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class RejectingProvider(StandInProvider):
    """An OpenAI/TEI stand-in that refuses every call as malformed (400), as a provider does
    with a body it cannot take: Arbiter's item fails with upstream_rejected. `status` and
    `error` make it answer another refusal; `calls` counts the calls."""

    def __init__(self, status=400, error=None):
        self.status = status
        self.error = error or {"message": "max_tokens is too large",
                               "type": "invalid_request_error", "param": None,
                               "code": "invalid_request"}
        self.calls = 0
        super().__init__()

    def answer(self, body):
        self.calls += 1
        return self.status, {"error": self.error}


class RecordingProvider(StandInProvider):
    """An OpenAI stand-in that answers every chat call "ok" and keeps the bodies it got."""

    def __init__(self):
        self.bodies = []
        super().__init__()

    def answer(self, body):
        self.bodies.append(body)
        return 200, {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "ok"}}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


@pytest.fixture
def rejecting():
    p = RejectingProvider()
    yield p
    p.close()


@pytest.mark.parametrize("error,code,reason", [
    # OpenAI's billing ran out: a 429 no wait helps. The source is ejected, saying why.
    ({"message": "You exceeded your current quota, please check your plan and billing details.",
      "type": "insufficient_quota", "param": None, "code": "insufficient_quota"},
     "upstream_rejected", "exceeded your current quota"),
    # One request past the whole tokens-per-minute limit: it never fits.
    ({"message": "Request too large for gpt-4o in organization org-x on tokens per min (TPM): "
                 "Limit 30000, Requested 54000.", "type": "tokens", "param": None,
      "code": "rate_limit_exceeded"}, "upstream_rejected", "Request too large")],
    ids=["insufficient_quota", "request_too_large"])
def test_a_429_that_no_wait_helps_fails_at_once_with_the_providers_reason(make_server, error,
                                                                          code, reason):
    p = RejectingProvider(429, error)
    try:
        server = make_server(source_toml("paid", p))
        item = {"reward": "judge", "solution_str": "4", "ground_truth": "4",
                "extra_info": {"problem": "2 + 2?"}}
        started = time.monotonic()
        status, _, body = server.score({"items": [item], "deadline_ms": 30000})
        assert time.monotonic() - started < 10, "it waited as for a rate limit"
        assert status == 200, body
        result = body["results"][0]
        assert result["status"] == "failed" and result["error"]["code"] == code, result
        assert reason in result["error"]["message"], result
        assert p.calls <= 3, p.calls
    finally:
        p.close()


def provider_vector(p, text):
    req = urllib.request.Request(p.url + "/v1/embeddings", json.dumps({"input": [text]}).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        v = json.loads(r.read())["data"][0]["embedding"]
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


# ---- OpenRLHF ------------------------------------------------------------------------------

def test_get_reward_scores_the_response_part_of_each_query_in_order(make_server):
    server = make_server('[protocols]\nreward = "lexical"\n')
    responses = ["The answer is \\boxed{4}.", "It is five.", "四"]
    labels = ["The answer is 4", "4", "四"]
    body = {"query": [PROMPT + r + "<|im_end|>" for r in responses],
            "prompts": [PROMPT] * 3, "labels": labels}
    status, _, reply = post(server, "/get_reward", body)
    assert status == 200, reply
    want = [lexical(r, l) for r, l in zip(responses, labels)]
    assert reply["rewards"] == pytest.approx(want, abs=1e-12)
    assert reply["scores"] == reply["rewards"]
    logs = reply["extra_logs"]
    group = {k: logs.pop(k) for k in ("arbiter_group_scored", "arbiter_group_mean",
                                       "arbiter_group_std", "arbiter_group_zero_std")}
    assert logs == {"arbiter_failed": [0.0] * 3, "arbiter_fallback": [0.0] * 3,
                    "arbiter_cached": [0.0] * 3}
    # One prompt: one GRPO group, reported for each of its samples.
    mean = sum(want) / 3
    std = (sum((x - mean) ** 2 for x in want) / 2) ** 0.5
    assert group["arbiter_group_mean"] == pytest.approx([mean] * 3, abs=1e-12)
    assert group["arbiter_group_std"] == pytest.approx([std] * 3, abs=1e-12)
    assert group["arbiter_group_zero_std"] == [0.0] * 3
    assert group["arbiter_group_scored"] == [3.0] * 3
    # OpenRLHF sends one sample per request: a later sample of the same prompt is reported
    # with the whole group so far.
    status, _, reply = post(server, "/get_reward", {"query": [PROMPT + "4<|im_end|>"],
                                                     "prompts": [PROMPT], "labels": ["4"]})
    assert reply["extra_logs"]["arbiter_group_scored"] == [4.0]
    assert reply["extra_logs"]["arbiter_group_mean"] == pytest.approx([(sum(want) + 1) / 4])


def test_get_reward_answers_empty_lists_with_empty_lists(make_server):
    server = make_server('[protocols]\nreward = "lexical"\n')
    status, _, reply = post(server, "/get_reward", {"query": [], "prompts": [], "labels": []})
    assert status == 200
    assert reply["rewards"] == [] and reply["scores"] == []
    assert all(v == [] for v in reply["extra_logs"].values())


def test_get_reward_takes_the_reward_from_the_url(make_server):
    server = make_server()  # no [protocols] reward
    body = {"query": [PROMPT + "4"], "prompts": [PROMPT], "labels": ["4"]}
    status, _, reply = post(server, "/get_reward", body)
    assert status == 400 and reply["error"]["field"] == "reward"
    status, _, reply = post(server, "/get_reward?reward=nope", body)
    assert status == 400 and "unknown reward 'nope'" in reply["error"]["message"]
    status, _, reply = post(server, "/get_reward?reward=exact_match", body)
    assert status == 200 and reply["rewards"] == [1.0]


@pytest.mark.parametrize("body,field", [
    ({"prompts": [], "labels": []}, "query"),
    ({"query": "x"}, "query"),
    ({"query": ["a", 3]}, "query[1]"),
    ({"query": ["a", "b"], "prompts": ["a"]}, "prompts"),
    ({"query": ["a"], "labels": ["x", "y"]}, "labels"),
    ([1, 2], "body"),
])
def test_get_reward_refuses_bad_bodies_naming_the_field(make_server, body, field):
    server = make_server('[protocols]\nreward = "lexical"\n')
    status, _, reply = post(server, "/get_reward", body)
    assert status == 400, reply
    assert reply["error"]["field"] == field
    assert reply["error"]["message"].startswith(field)


def test_get_reward_failure_policies(make_server, provider):
    down = provider("--outage", "0:100000")
    judge = ('[rewards.strict]\nkind = "judge"\nfallback = "none"\n'
             + source_toml("down", down) + "[routing]\nmax_attempts = 1\n")
    body = {"query": [PROMPT + "4"], "prompts": [PROMPT], "labels": ["4"]}
    # Default: the request fails with the reason and a status that says "retry later", so
    # OpenRLHF retries and never sees a 0.
    server = make_server(judge + '[protocols]\nreward = "strict"\n')
    status, headers, reply = post(server, "/get_reward", body)
    assert status == 503, reply
    assert int(headers["retry-after"]) >= 1
    assert reply["error"]["code"] in ("upstream_failed", "no_eligible_source")
    # on_failure = "score": the configured value, flagged in extra_logs.
    server = make_server(judge + '[protocols]\nreward = "strict"\non_failure = "score"\n'
                         'failure_score = -1.0\n')
    body2 = {"query": [PROMPT + "4", PROMPT + "4"], "prompts": [PROMPT] * 2, "labels": ["4"] * 2}
    status, _, reply = post(server, "/get_reward", body2)
    assert status == 200, reply
    assert reply["rewards"] == [-1.0, -1.0]
    assert reply["extra_logs"]["arbiter_failed"] == [1.0, 1.0]


def test_the_trainer_routes_take_a_priority_and_a_deadline_from_the_url(make_server, provider):
    # A job on a shared server can only be given its class and deadline in the URL its
    # trainer is configured with; such parameters used to be ignored without a word.
    slow = provider("--latency-median-ms", "1500", "--latency-p99-ms", "1600")
    server = make_server('[rewards.strict]\nkind = "judge"\nfallback = "none"\n'
                         + source_toml("slow", slow))
    body = {"query": [PROMPT + "4"], "prompts": [PROMPT], "labels": ["4"]}
    status, _, reply = post(server, "/get_reward?reward=strict&priority=high", body)
    assert status == 200, reply
    # 300 ms against a judge that takes 1.5 s: refused at admission, or failed at the deadline.
    status, _, reply = post(server, "/get_reward?reward=strict&priority=high&deadline_ms=300",
                            body)
    assert status != 200 and "deadline" in reply["error"]["message"], reply
    slime = {"response": "4", "label": "4"}
    status, _, reply = post(server, "/remote_rm?reward=strict&deadline_ms=300", slime)
    assert status != 200 and "deadline" in reply["error"]["message"], reply
    for query, field in [("priority=urgent", "priority"), ("deadline_ms=soon", "deadline_ms"),
                         ("deadline_ms=0", "deadline_ms"), ("prio=high", "prio")]:
        for path, payload in [("/get_reward", body), ("/remote_rm", slime)]:
            status, _, reply = post(server, f"{path}?reward=strict&{query}", payload)
            assert status == 400 and reply["error"]["field"] == field, (path, query, reply)
    assert "one of: high, normal, low" in post(
        server, "/remote_rm?reward=strict&priority=urgent", slime)[2]["error"]["message"]


# ---- slime ---------------------------------------------------------------------------------

def test_remote_rm_answers_a_bare_number(make_server):
    server = make_server('[protocols]\nreward = "lexical"\n')
    status, _, reply = post(server, "/remote_rm",
                            {"prompt": PROMPT, "response": "The answer is 4", "label": "4"})
    assert status == 200
    assert reply == pytest.approx(lexical("The answer is 4", "4"), abs=1e-12)
    # A list of messages and a numeric label.
    status, _, reply = post(server, "/remote_rm?reward=exact_match",
                            {"prompt": [{"role": "user", "content": "2+2?"}],
                             "response": "4", "label": 4})
    assert status == 200 and reply == 1.0


def test_number_labels_are_read_as_pythons_str_of_them(make_server):
    # lexical is difflib's ratio: 1.0 exactly when the response equals the text Arbiter made
    # of the label, and for the raw token the ratio of the token to that text.
    server = make_server('[protocols]\nreward = "lexical"\n')
    tokens = ["72", "-0", "1.0", "2.50", "1e16", "1e-05", "1E400", "-1e-400",
              "123456789012345678901234567890", "0.1000000000000000055511151231257827"]
    texts = [str(json.loads(t)) for t in tokens]
    for responses, want in [(texts, [1.0] * len(tokens)),
                            (tokens, [difflib.SequenceMatcher(None, t, x).ratio()
                                      for t, x in zip(tokens, texts)])]:
        status, _, reply = post(server, "/get_reward", '{"query": %s, "labels": [%s]}'
                                % (json.dumps(responses), ", ".join(tokens)))
        assert status == 200, reply
        assert reply["rewards"] == want
    for token, text in zip(tokens, texts):
        for label in (token, f'["x", {token}]'):
            status, _, reply = post(server, "/remote_rm", '{"response": %s, "label": %s}'
                                    % (json.dumps(text), label))
            assert (status, reply) == (200, 1.0), (label, reply)


def test_remote_rm_object_form_has_the_same_keys_for_every_answer(make_server):
    server = make_server('[protocols]\nreward = "exact_match"\nslime_reward_key = "score"\n'
                         'on_failure = "score"\nfailure_score = 0.0\n')
    _, _, ok = post(server, "/remote_rm", {"prompt": "q", "response": "4", "label": "4"})
    _, _, failed = post(server, "/remote_rm", {"prompt": "q", "response": "4", "label": None})
    assert ok == {"score": 1.0, "status": "ok", "source": "cpu", "error": ""}
    assert set(failed) == set(ok)
    assert failed["status"] == "failed" and failed["score"] == 0.0
    assert "ground_truth is empty" in failed["error"]


# ---- permanent failures are 4xx, transient ones 429/503/504 with Retry-After ---------------

def test_trainer_routes_answer_a_sample_that_can_never_score_with_422(make_server):
    server = make_server('[protocols]\nreward = "exact_match"\n[cpu]\nmax_lexical_chars = 10\n')
    # slime: a null label for a reward that needs a reference (retried 10 times before).
    status, headers, reply = post(server, "/remote_rm",
                                  {"prompt": "q", "response": "4", "label": None})
    assert status == 422, reply
    assert "retry-after" not in headers
    assert reply["error"]["code"] == "reward_failed"
    assert "ground_truth is empty" in reply["error"]["message"]
    # OpenRLHF: a text over the reward's limit; with several samples, the one that failed.
    long = "far too long for the limit"
    status, headers, reply = post(server, "/get_reward?reward=lexical",
                                  {"query": [PROMPT + "ok", PROMPT + long],
                                   "prompts": [PROMPT] * 2, "labels": ["ok", "x"]})
    assert status == 422, reply
    assert "retry-after" not in headers
    assert reply["error"]["code"] == "reward_failed"
    assert reply["error"]["message"].startswith("item 1 failed: ")
    assert "max_lexical_chars" in reply["error"]["message"]
    # Bad bodies stay 400 naming the field: a boolean label.
    status, _, reply = post(server, "/remote_rm", {"response": "4", "label": True})
    assert status == 400 and reply["error"]["field"] == "label"
    status, _, reply = post(server, "/get_reward", {"query": ["4"], "labels": [False]})
    assert status == 400 and reply["error"]["field"] == "labels[0]"


def test_on_failure_score_still_scores_permanent_failures(tmp_path):
    log = open(tmp_path / "stderr.log", "w+")
    server = arbiter_testing.start_server(
        tmp_path, '[protocols]\nreward = "exact_match"\non_failure = "score"\n'
        'failure_score = -1.0\n', stderr=log)
    try:
        status, headers, reply = post(server, "/remote_rm",
                                      {"prompt": "q", "response": "4", "label": None})
        # A bare number cannot say it is a failure score: its header does, and the log warned.
        assert (status, reply) == (200, -1.0)
        assert headers["x-arbiter-failed"] == "reward_failed"
        status, headers, reply = post(server, "/remote_rm",
                                      {"prompt": "q", "response": "4", "label": "5"})
        assert (status, reply) == (200, 0.0) and "x-arbiter-failed" not in headers
        log.seek(0)
        assert "no protocols.slime_reward_key: a failed /remote_rm item" in log.read()
        status, _, reply = post(server, "/get_reward",
                                {"query": ["4", "4"], "labels": ["4", "5"]})
        assert status == 200 and reply["rewards"] == [1.0, 0.0]
    finally:
        server.kill()


def test_a_provider_refusing_the_call_is_refused_on_every_pass_through_route(make_server,
                                                                              rejecting):
    """As the provider's own 400 in OpenAI's routes (the SDK's BadRequestError, which a client
    catches for a prompt past the context), as TEI's 422 in TEI's, and 422 in the trainers'."""
    server = make_server(source_toml("picky", rejecting, caps=("chat", "embed"))
                         + arbiter_testing.source_toml("picky_nli", rejecting.url, kind="tei",
                                                       caps=("nli",))
                         + '[protocols]\nreward = "strict"\n'
                         + '[rewards.strict]\nkind = "judge"\nfallback = "none"\n')
    with pytest.raises(openai.BadRequestError) as e:
        sdk(server).chat.completions.create(model="", messages=[{"role": "user",
                                                                 "content": "x"}])
    assert e.value.body["code"] == "upstream_rejected"
    assert e.value.body["type"] == "invalid_request_error"
    assert "400" in e.value.body["message"]
    assert "retry-after" not in e.value.response.headers
    with pytest.raises(openai.BadRequestError) as e:
        sdk(server).embeddings.create(model="", input=["a", "b"])
    assert e.value.body["code"] == "upstream_rejected"
    for path, body in [("/embed", {"inputs": "a"}), ("/predict", {"inputs": ["a", "b"]})]:
        status, headers, reply = post(server, path, body)
        assert status == 422, (path, reply)
        assert reply["error_type"] == "validation" and "400" in reply["error"]
        assert "retry-after" not in headers
    # The trainer routes, through a judge whose call the provider refuses.
    status, _, reply = post(server, "/remote_rm", {"prompt": "q", "response": "4", "label": "4"})
    assert status == 422 and reply["error"]["code"] == "upstream_rejected", reply
    status, _, reply = post(server, "/get_reward", {"query": ["4"], "labels": ["4"]})
    assert status == 422 and reply["error"]["code"] == "upstream_rejected", reply


def test_chat_fields_arbiter_does_not_read_go_upstream_and_into_the_cache_key(make_server):
    """A penalty, logit_bias or vLLM's top_k change the answer: they reach the provider as
    sent, and a call without them is not answered from the cache of one with them."""
    p = RecordingProvider()
    try:
        server = make_server(source_toml("rec", p))
        client = sdk(server)

        def ask(user="u1", **extra):
            return client.chat.completions.create(
                model="", messages=[{"role": "user", "content": "same question"}],
                temperature=0, presence_penalty=0.5, logit_bias={"50256": -100}, user=user,
                extra_body={"chat_template_kwargs": {"enable_thinking": False, "custom": 1},
                            **extra})

        first = ask(top_k=5, min_p=0.1)
        assert first.choices[0].message.content == "ok"
        assert len(p.bodies) == 1
        sent = p.bodies[0]
        assert sent["presence_penalty"] == 0.5 and sent["logit_bias"] == {"50256": -100}
        assert sent["top_k"] == 5 and sent["min_p"] == 0.1
        assert sent["chat_template_kwargs"] == {"enable_thinking": False, "custom": 1}
        assert "user" not in sent and "priority" not in sent
        # The same fields again (another end user): the cache answers.
        again = ask(user="u2", top_k=5, min_p=0.1)
        assert again.arbiter["cached"] is True and len(p.bodies) == 1
        # Without top_k and min_p it is another call.
        other = ask()
        assert other.arbiter["cached"] is False and len(p.bodies) == 2
        assert "top_k" not in p.bodies[1]
    finally:
        p.close()


def test_a_deadline_that_passes_is_a_504_with_retry_after(make_server, provider):
    slow = provider("--latency-median-ms", "3000")
    server = make_server(source_toml("slow", slow) + "[routing]\nhedge = false\n")
    with pytest.raises(openai.APIStatusError) as e:
        sdk(server).chat.completions.create(
            model="", messages=[{"role": "user", "content": "x"}],
            extra_body={"deadline_ms": 200})
    assert e.value.status_code == 504, e.value.body
    assert e.value.body["code"] == "deadline_exceeded"
    assert int(e.value.response.headers["retry-after"]) >= 1
    # The call ran on upstream: its answer serves the retry, which pays for nothing again.
    time.sleep(3.5)
    reply = sdk(server).chat.completions.create(
        model="", messages=[{"role": "user", "content": "x"}],
        extra_body={"deadline_ms": 200})
    assert reply.arbiter["cached"] is True and reply.choices[0].message.content
    assert slow.stats()["requests"]["/v1/chat/completions"]["200"] == 1


def test_a_pass_through_call_gets_as_long_as_its_sdk_waits(make_server, provider):
    """The OpenAI SDK says how long it waits (X-Stainless-Read-Timeout): a call without
    `deadline_ms` gets that long, not the server's default deadline, which a long generation
    would overrun (504 at 1 s here, to an SDK still waiting)."""
    slow = provider("--latency-median-ms", "2500", "--latency-p99-ms", "2500")
    server = make_server(source_toml("slow", slow)
                         + "[routing]\nhedge = false\n[scheduler]\ndefault_deadline_ms = 1000\n")
    reply = sdk(server).chat.completions.create(
        model="", messages=[{"role": "user", "content": "a long answer"}])
    assert reply.choices[0].message.content and reply.arbiter["source"] == "slow"
    # A client that says nothing gets the default deadline, and one that names a deadline
    # gets it: both are refused now that the source's pace (2.5 s a call) is known.
    status, _, body = post(server, "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "x"}]})
    # (Milliseconds pass between arrival and the check: on a busy machine 1000 reads 997.)
    assert status == 413 and re.search(r"\((9\d\d|1000) ms left\)", body["error"]["message"]), body
    with pytest.raises(openai.APIStatusError) as e:
        sdk(server).chat.completions.create(
            model="", messages=[{"role": "user", "content": "y"}],
            extra_body={"deadline_ms": 500})
    assert e.value.status_code == 413
    assert re.search(r"\((4\d\d|500) ms left\)", e.value.body["message"]), e.value.body


def test_a_call_the_rate_limit_holds_past_its_deadline_is_a_503_saying_when(make_server,
                                                                            provider):
    """A provider that allows one call a minute, which nobody configured: its headers teach
    Arbiter the limit. A pass-through call that cannot go before its deadline was held to it
    (504 after 5 s, Retry-After 1); it now fails at once with 503, and its Retry-After is when
    the provider takes a call again, not 1 s (the OpenAI SDK retries a 503 after it). The
    same holds for a block after a 429 (RemoteRouting tests)."""
    limited = provider("--rpm", "1", "--burst-seconds", "60")
    server = make_server(source_toml("limited", limited) + "[routing]\nhedge = false\n")
    client = sdk(server)
    first = client.chat.completions.create(model="", messages=[{"role": "user", "content": "a"}])
    assert first.choices[0].message.content
    start = time.monotonic()
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model="", messages=[{"role": "user", "content": "b"}],
                                       extra_body={"deadline_ms": 5000})
    assert time.monotonic() - start < 2
    # Refused at admission now that it counts the empty bucket (429, "expected to be answered
    # in 60000 ms"); a call admitted before the limit was known fails as 503 "rate-limited".
    assert e.value.status_code in (429, 503), e.value.body
    assert e.value.body["code"] in ("overloaded", "upstream_failed"), e.value.body
    assert 30 <= int(e.value.response.headers["retry-after"]) <= 61, e.value.response.headers


def test_a_judge_item_the_rate_limit_holds_past_its_deadline_says_when_on_trainer_routes(
        make_server, provider):
    """The same for a reward whose model calls go through a reward graph: /get_reward with a
    judge said Retry-After 1 while the message said "for another 29998 ms" (the graph's outcome
    dropped its call's retry_after_ms; helper-38). Two items on a server that does not know the
    limit yet: both calls go, the provider takes one and answers the other 429."""
    limited = provider("--rpm", "1", "--burst-seconds", "60")
    server = make_server(source_toml("limited", limited) + "[routing]\nhedge = false\n"
                         + '[rewards.strict]\nkind = "judge"\nfallback = "none"\n'
                         + '[protocols]\nreward = "strict"\n')
    start = time.monotonic()
    status, headers, reply = post(server, "/get_reward?deadline_ms=5000",
                                  {"query": ["5", "6"], "labels": ["5", "6"]})
    assert time.monotonic() - start < 2
    assert status == 503 and "rate limited until after the deadline" in json.dumps(reply), reply
    assert 30 <= int(headers["retry-after"]) <= 61, headers


def test_a_lone_surrogate_in_a_raw_trainers_body_is_read_as_the_replacement_character(
        make_server):
    """Python's json.dumps writes a rollout holding a lone surrogate as "\\ud800", and Python's
    json.loads takes it back; Arbiter refused the whole batch with 400. It now reads it as
    U+FFFD, which is what the Python client sends: the same score either way."""
    server = make_server('[protocols]\nreward = "lexical"\n')
    odd, replaced = "abc \ud800 def", "abc \ufffd def"
    body = json.dumps({"query": [odd, "abc def"], "labels": ["abc def", "abc def"]})
    assert "\\ud800" in body
    status, _, reply = server.request("POST", "/get_reward", body,
                                      {"Content-Type": "application/json"})
    assert status == 200, reply
    expected = server.request("POST", "/get_reward",
                              {"query": [replaced, "abc def"], "labels": ["abc def"] * 2})[2]
    assert reply["rewards"] == expected["rewards"] and reply["rewards"][1] == 1.0, reply
    status, _, reply = server.request("POST", "/v1/score", json.dumps(
        {"items": [{"reward": "lexical", "solution_str": odd, "ground_truth": "abc def"}]}),
        {"Content-Type": "application/json"})
    assert status == 200 and reply["scores"] == expected["rewards"][:1], reply


def test_remote_rm_refuses_bad_bodies_naming_the_field(make_server):
    server = make_server('[protocols]\nreward = "lexical"\n')
    for body, field in [({"prompt": "q"}, "response"),
                        ({"response": 4}, "response"),
                        ({"response": "a", "label": {"x": 1}}, "label.target"),
                        ({"response": "a", "prompt": [{"content": "no role"}]}, "prompt[0]")]:
        status, _, reply = post(server, "/remote_rm", body)
        assert status == 400, (body, reply)
        assert reply["error"]["field"] == field


def test_a_burst_of_single_sample_requests_is_batched_and_all_answered(make_server, provider):
    p = provider("--latency-median-ms", "50")
    server = make_server('[protocols]\nreward = "embedding"\n'
                         + source_toml("emb", p, caps=("embed",)))
    n = 64

    def one(i):
        return post(server, "/remote_rm",
                    {"prompt": "q", "response": f"answer number {i}", "label": f"answer {i}"})

    with ThreadPoolExecutor(max_workers=n) as pool:
        answers = list(pool.map(one, range(n)))
    assert all(status == 200 and isinstance(v, float) and 0.0 <= v <= 1.0
               for status, _, v in answers), answers[:3]
    calls = p.stats()["requests"]["/v1/embeddings"]["200"]
    assert calls < n / 2, f"{calls} provider calls for {n} single-sample requests"


def test_overload_is_queued_within_the_deadline_or_refused_with_retry_after(make_server,
                                                                           provider):
    p = provider("--latency-median-ms", "300")
    judge = source_toml("slow", p, max_concurrency=1)
    # Queued: more requests than the source takes at once all get their score.
    server = make_server('[protocols]\nreward = "judge"\n' + judge)
    body = {"prompt": "q", "response": "a b", "label": "a b"}
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(
            lambda i: post(server, "/remote_rm", {**body, "response": f"a b {i}"}), range(6)))
    assert [s for s, _, _ in answers] == [200] * 6
    # Refused: a class that holds one queued item sends 429 with Retry-After once the deadline
    # has come (until then the route holds a refused request and sends it again). Each call
    # takes 2 s, so the 12 requests find the queue full even when a busy machine spreads them
    # over a second or two (at a median of 300 ms, with some calls much faster, all 12 once
    # got in).
    slower = provider("--latency-median-ms", "2000", "--latency-p99-ms", "2000")
    server = make_server('[protocols]\nreward = "judge"\n'
                         + '[scheduler]\ndefault_deadline_ms = 3000\n'
                         + source_toml("slow", slower, max_concurrency=1)
                         + '[[scheduler.priorities]]\nname = "normal"\ncapacity = 1\n'
                         + '[routing]\ncache_capacity = 0\ncoalesce = false\n')
    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(
            lambda i: post(server, "/remote_rm", {**body, "response": f"a b {i}"}), range(12)))
    refused = [(h, r) for s, h, r in answers if s == 429]
    assert refused, [s for s, _, _ in answers]
    assert all(int(h["retry-after"]) >= 1 and r["error"]["code"] == "overloaded"
               for h, r in refused)
    # A request sent again close to its deadline may be admitted and not come back in time.
    assert all(s in (200, 429) or (s == 504 and r["error"]["code"] == "deadline_exceeded")
               for s, _, r in answers), [(s, r) for s, _, r in answers]


# ---- OpenAI-compatible routes, through the official SDK ------------------------------------

def sdk(server):
    return openai.OpenAI(base_url=f"http://{server.host}:{server.port}/v1", api_key="unused",
                         max_retries=0, timeout=30)


def test_openai_sdk_chat_completions_models_and_embeddings(make_server, provider):
    a = provider("--model", "judge-8b")
    b = provider("--model", "embedder")
    server = make_server(source_toml("a", a, model="judge-8b")
                         + source_toml("b", b, caps=("embed",), model="embedder"))
    client = sdk(server)
    ids = sorted(m.id for m in client.models.list())
    assert ids == ["embedder", "judge-8b"]

    reply = client.chat.completions.create(
        model="judge-8b", n=2, temperature=0.0,
        messages=[{"role": "system", "content": "Grade it."},
                  {"role": "user", "content": "Reference: a b c\nCandidate: a b"}])
    assert reply.object == "chat.completion" and reply.model == "judge-8b"
    assert [c.index for c in reply.choices] == [0, 1]
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content.startswith("REWARD:")
    assert float(reply.choices[0].message.content.split(":")[1]) == pytest.approx(2 / 3, abs=1e-3)
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert a.stats()["requests"]["/v1/chat/completions"]["200"] == 1

    # The SDK asks for base64 by default; the vectors are the provider's, normalized.
    emb = client.embeddings.create(model="embedder", input=["hello world", "goodbye"])
    assert [d.index for d in emb.data] == [0, 1] and emb.model == "embedder"
    for d, text in zip(emb.data, ["hello world", "goodbye"]):
        assert d.embedding == pytest.approx(provider_vector(b, text), abs=1e-6)
    floats = client.embeddings.create(model="embedder", input="hello world",
                                      encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(emb.data[0].embedding, abs=1e-7)


def test_openai_sdk_sees_errors_it_understands(make_server, provider):
    a = provider("--model", "judge-8b")
    server = make_server(source_toml("a", a, model="judge-8b"))
    client = sdk(server)
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "x"}])
    assert e.value.body["param"] == "model" and e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="judge-8b", stream=True,
                                       messages=[{"role": "user", "content": "x"}])
    assert e.value.body["param"] == "stream"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="judge-8b", messages=[{"content": "x"}])
    assert e.value.body["param"] == "messages[0].role"
    # No embedding source at all: 404 for a named model, 503 for any.
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="judge-8b", input="x")
    with pytest.raises(openai.APIStatusError) as e:
        client.embeddings.create(model="", input="x")
    assert e.value.status_code == 503 and e.value.body["code"] == "no_eligible_source"


def test_chat_spreads_over_sources_serving_the_same_model_and_survives_one_dying(make_server,
                                                                                 provider):
    a = provider("--model", "judge-8b", "--latency-median-ms", "20")
    b = provider("--model", "judge-8b", "--latency-median-ms", "20")
    server = make_server(source_toml("a", a, model="judge-8b")
                         + source_toml("b", b, model="judge-8b"))
    client = sdk(server)

    def ask(i):
        return client.chat.completions.create(
            model="judge-8b", messages=[{"role": "user", "content": f"Reference: x\nCandidate: {i}"}])

    with ThreadPoolExecutor(max_workers=16) as pool:
        replies = list(pool.map(ask, range(40)))
    assert all(r.choices[0].message.content.startswith("REWARD:") for r in replies)
    served = {p: p.stats()["requests"].get("/v1/chat/completions", {}).get("200", 0)
              for p in (a, b)}
    assert all(v > 0 for v in served.values()), served
    a.kill()
    with ThreadPoolExecutor(max_workers=16) as pool:
        replies = list(pool.map(ask, range(40, 60)))
    assert len(replies) == 20


def test_chat_with_every_source_down_is_an_explicit_error(make_server, provider):
    down = provider("--model", "judge-8b", "--outage", "0:100000")
    server = make_server(source_toml("down", down, model="judge-8b")
                         + "[routing]\nmax_attempts = 2\n")
    with pytest.raises(openai.APIStatusError) as e:
        sdk(server).chat.completions.create(model="judge-8b",
                                            messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 503
    assert e.value.body["code"] in ("upstream_failed", "no_eligible_source")
    assert int(e.value.response.headers["retry-after"]) >= 1


# ---- TEI -----------------------------------------------------------------------------------

def test_tei_embed_shapes(make_server, provider):
    b = provider()
    server = make_server(source_toml("b", b, caps=("embed",)))
    status, _, reply = post(server, "/embed", {"inputs": "hello world"})
    assert status == 200 and len(reply) == 1
    assert reply[0] == pytest.approx(provider_vector(b, "hello world"), abs=1e-6)
    status, _, reply = post(server, "/embed", {"inputs": ["a b", "c d"], "dimensions": 40})
    assert status == 200 and [len(v) for v in reply] == [40, 40]
    for v in reply:
        assert sum(x * x for x in v) == pytest.approx(1.0, abs=1e-5) or not any(v)
    status, _, reply = post(server, "/embed", {"inputs": [[1, 2]]})
    assert status == 400 and reply["error_type"] == "validation"
    assert reply["error"].startswith("inputs[0]")
    # More dimensions than the model's 64 are refused, not answered with 64.
    status, _, reply = post(server, "/embed", {"inputs": ["a b"], "dimensions": 65})
    assert status == 400 and "dimensions: 65" in reply["error"], reply
    status, _, reply = post(server, "/v1/embeddings", {"input": ["a b"], "dimensions": 1000})
    assert status == 400 and reply["error"]["param"] == "dimensions", reply


def test_base64_vectors_are_little_endian_float32(make_server, provider):
    b = provider()
    server = make_server(source_toml("b", b, caps=("embed",)))
    status, _, reply = post(server, "/v1/embeddings",
                            {"input": "hello", "encoding_format": "base64"})
    assert status == 200
    raw = base64.b64decode(reply["data"][0]["embedding"])
    values = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert list(values) == pytest.approx(provider_vector(b, "hello"), abs=1e-6)

