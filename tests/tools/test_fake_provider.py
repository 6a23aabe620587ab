"""Tests of build/arbiter-fake-provider over real HTTP (stdlib only)."""

import http.client
import json
import math
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from arbiter_testing import FAKE_PROVIDER_BIN as BIN, RUN_TIMEOUT_S, Provider, Started


@pytest.fixture
def start():
    started = Started()
    yield lambda *args: started.add(Provider(*args))
    started.kill_all()


@pytest.fixture
def fp(start):
    return start()


def judge(candidate, reference, **extra):
    content = f"Score the answer.\nReference: {reference}\nCandidate: {candidate}"
    return {"model": "judge", "messages": [{"role": "system", "content": "be fair"},
                                           {"role": "user", "content": content}], **extra}


def reward_of(body, i=0):
    m = re.fullmatch(r"REWARD: (\d\.\d{3})", body["choices"][i]["message"]["content"])
    assert m, body
    return float(m.group(1))


def go_seconds(text):
    """Seconds in a Go-style duration such as `20ms`, `1.5s` or `6m0s`."""
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?|(\d+)ms", text)
    assert m and text, text
    if m.group(4):
        return int(m.group(4)) / 1000
    h, mi, sec = (float(g) if g else 0.0 for g in m.groups()[:3])
    return h * 3600 + mi * 60 + sec


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def embed(fp, texts):
    status, _, body = fp.post_json("/v1/embeddings", {"model": "e", "input": texts})
    assert status == 200
    return [d["embedding"] for d in body["data"]]


# --- endpoints -------------------------------------------------------------------------

def test_health_and_stats(fp):
    status, _, text = fp.request("GET", "/health")
    assert status == 200 and json.loads(text)["status"] == "ok"
    fp.post("/v1/embeddings", {"input": "x"})
    fp.post("/v1/embeddings", {"input": 3})
    status, _, text = fp.request("GET", "/stats")
    stats = json.loads(text)
    assert status == 200
    assert stats["requests"]["/v1/embeddings"] == {"200": 1, "400": 1}
    assert stats["requests_total"] == 2
    assert stats["rate_limited_total"] == 0
    assert stats["max_concurrent"] == 1 and stats["in_flight"] == 0


def test_judge_identical_is_one(fp):
    status, _, body = fp.post_json("/v1/chat/completions", judge("the cat sat", "The cat sat."))
    assert status == 200
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert reward_of(body) == 1.0
    assert set(body["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}


def test_judge_partial_and_disjoint(fp):
    _, _, body = fp.post_json("/v1/chat/completions", judge("the cat sat down", "the cat sat"))
    assert reward_of(body) == 0.75
    _, _, body = fp.post_json("/v1/chat/completions", judge("dogs bark", "the cat sat"))
    assert reward_of(body) == 0.0


def test_judge_n_and_logprobs_deterministic(fp):
    req = judge("a b c", "a b d", n=3, logprobs=True)
    _, _, first = fp.post_json("/v1/chat/completions", req)
    _, _, second = fp.post_json("/v1/chat/completions", req)
    assert [c["index"] for c in first["choices"]] == [0, 1, 2]
    for i in range(3):
        assert 0.0 <= reward_of(first, i) <= 1.0
        lp = first["choices"][i]["logprobs"]["content"]
        assert "".join(t["token"] for t in lp) == first["choices"][i]["message"]["content"]
        assert all(-0.5 <= t["logprob"] <= 0 for t in lp)
    assert first["choices"] == second["choices"]


def test_max_n_caps_the_choices_per_prompt(start):
    fp = start("--max-n", "1")
    _, _, chat = fp.post_json("/v1/chat/completions", judge("a b", "a b", n=3))
    assert len(chat["choices"]) == 1
    _, _, comp = fp.post_json("/v1/completions", {"prompt": ["x", "y"], "n": 2, "max_tokens": 2})
    assert [c["index"] for c in comp["choices"]] == [0, 1], "one per prompt"


def test_api_key_is_required_when_set(start):
    fp = start("--api-key", "sk-test")
    status, _, text = fp.post("/v1/chat/completions", judge("a", "a"))
    assert status == 401
    assert json.loads(text)["error"]["code"] == "invalid_api_key"
    c = fp.conn()
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(judge("a", "a")),
                  headers={"Content-Type": "application/json",
                           "Authorization": "Bearer sk-test"})
        assert c.getresponse().status == 200
    finally:
        c.close()
    # /health and /stats stay open; refused calls are counted by status.
    assert fp.stats()["requests"]["/v1/chat/completions"] == {"401": 1, "200": 1}


def test_chat_content_parts_and_plain_prompt(fp):
    req = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Reference: x y"}, {"type": "text", "text": "Candidate: x y"}]}]}
    _, _, body = fp.post_json("/v1/chat/completions", req)
    assert reward_of(body) == 1.0
    _, _, body = fp.post_json("/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 5})
    assert len(body["choices"][0]["message"]["content"].split()) == 5


def test_models_lists_the_model_and_costs_nothing(start):
    fp = start("--rpm", "1")
    status, _, text = fp.request("GET", "/v1/models")
    assert status == 200
    assert json.loads(text) == {"object": "list", "data": [
        {"id": "fake-model", "object": "model", "owned_by": "arbiter-fake-provider"}]}
    assert fp.post("/embed", {"inputs": "a"})[0] == 200
    assert fp.post("/embed", {"inputs": "a"})[0] == 429
    # Not rate limited, not counted, GET only.
    assert fp.request("GET", "/v1/models")[0] == 200
    assert fp.request("POST", "/v1/models", raw="{}")[0] == 405
    stats = json.loads(fp.request("GET", "/stats")[2])
    assert stats["requests_total"] == 2 and "/v1/models" not in stats["requests"]
    named = start("--model", "judge-x")
    assert json.loads(named.request("GET", "/v1/models")[2])["data"][0]["id"] == "judge-x"
    _, _, body = named.post_json("/v1/chat/completions",
                                 {"messages": [{"role": "user", "content": "hi"}]})
    assert body["model"] == "judge-x"
    _, _, body = named.post_json("/v1/chat/completions",
                                 {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert body["model"] == "m"


def chat_text(fp, **extra):
    req = {"messages": [{"role": "user", "content": "tell me more"}], "max_tokens": 12, **extra}
    status, _, body = fp.post_json("/v1/chat/completions", req)
    assert status == 200, body
    return body


def test_chat_stop_cuts_before_the_first_stop_string(fp):
    full = chat_text(fp)
    text = full["choices"][0]["message"]["content"]
    assert full["choices"][0]["finish_reason"] == "length"
    words = text.split()
    assert len(words) == 12
    # A word that first occurs in the middle: cut just before its first occurrence.
    stop_word = next(w for w in words[3:] if text.find(" " + w) > 0)
    cut = text[: text.find(" " + stop_word)]
    body = chat_text(fp, stop=" " + stop_word, logprobs=True, n=2)
    for c in body["choices"]:
        assert c["message"]["content"] == cut and c["finish_reason"] == "stop"
        assert "".join(t["token"] for t in c["logprobs"]["content"]) == cut
    assert body["usage"]["completion_tokens"] == 2 * len(cut.split())
    # A list: the earliest occurrence of any of them wins; a stop string never found and
    # null change nothing; empty strings are ignored.
    first_two = " ".join(words[:2])
    body = chat_text(fp, stop=["never-generated", " " + words[2], " " + stop_word])
    assert body["choices"][0]["message"]["content"] == first_two
    for stop in (None, "never-generated", [], [""]):
        body = chat_text(fp, stop=stop)
        assert body["choices"][0]["message"]["content"] == text
        assert body["choices"][0]["finish_reason"] == "length"


def test_judge_honours_stop(fp):
    _, _, body = fp.post_json("/v1/chat/completions", judge("the cat sat down", "the cat sat",
                                                            stop="\n"))
    assert reward_of(body) == 0.75 and body["choices"][0]["finish_reason"] == "stop"
    _, _, body = fp.post_json("/v1/chat/completions", judge("the cat sat down", "the cat sat",
                                                            stop=["5", "."]))
    assert body["choices"][0]["message"]["content"] == "REWARD: 0"
    assert body["choices"][0]["finish_reason"] == "stop"


def test_completions_stop(fp):
    req = {"prompt": ["one", "two"], "max_tokens": 6}
    _, _, full = fp.post_json("/v1/completions", req)
    text = full["choices"][0]["text"]
    stop_word = text.split()[2]
    cut = text[: text.find(" " + stop_word)]
    _, _, body = fp.post_json("/v1/completions", {**req, "stop": [" " + stop_word], "logprobs": 0})
    first = body["choices"][0]
    assert first["text"] == cut and first["finish_reason"] == "stop"
    assert "".join(first["logprobs"]["tokens"]) == cut
    # Each prompt's text is cut on its own.
    other = full["choices"][1]["text"]
    if " " + stop_word in other:
        want = (other[: other.find(" " + stop_word)], "stop")
    else:
        want = (other, "length")
    assert (body["choices"][1]["text"], body["choices"][1]["finish_reason"]) == want
    # The whole text goes when it starts with the stop string.
    _, _, body = fp.post_json("/v1/completions", {**req, "stop": " "})
    assert [c["text"] for c in body["choices"]] == ["", ""]
    assert body["usage"]["completion_tokens"] == 0


@pytest.mark.parametrize("stop", [3, [1], {"a": 1}, True])
def test_bad_stop_is_400(fp, stop):
    for path, req in [("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
                      ("/v1/completions", {"prompt": "x"})]:
        status, _, text = fp.post(path, {**req, "stop": stop})
        assert status == 400, (path, text)
        assert json.loads(text)["error"]["param"].startswith("stop")


def test_completions_with_logprobs(fp):
    req = {"model": "m", "prompt": ["one", "two"], "max_tokens": 4, "logprobs": 1, "n": 2}
    status, _, body = fp.post_json("/v1/completions", req)
    assert status == 200 and body["object"] == "text_completion"
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    c = body["choices"][0]
    assert len(c["text"].split()) == 4
    assert "".join(c["logprobs"]["tokens"]) == c["text"]
    assert len(c["logprobs"]["token_logprobs"]) == 4 and len(c["logprobs"]["text_offset"]) == 4
    _, _, again = fp.post_json("/v1/completions", req)
    assert again["choices"] == body["choices"]
    assert body["usage"]["completion_tokens"] == 16


def test_completions_choices_differ_and_seed_changes_them(fp):
    req = {"prompt": "Question: who?\nAnswer:", "max_tokens": 1, "n": 32, "logprobs": 1}
    _, _, body = fp.post_json("/v1/completions", req)
    texts = [c["text"] for c in body["choices"]]
    assert len(set(texts)) == 32  # even one-word samples of a prompt all differ
    # The first choice of an unseeded request is the n = 1 completion.
    _, _, one = fp.post_json("/v1/completions", {**req, "n": 1})
    assert one["choices"][0]["text"] == texts[0]
    seeded = {**req, "max_tokens": 5, "n": 3}
    _, _, a = fp.post_json("/v1/completions", {**seeded, "seed": 7})
    _, _, a2 = fp.post_json("/v1/completions", {**seeded, "seed": 7})
    _, _, b = fp.post_json("/v1/completions", {**seeded, "seed": 8})
    _, _, unseeded = fp.post_json("/v1/completions", seeded)
    assert a["choices"] == a2["choices"]
    for other in (b, unseeded):
        assert all(x["text"] != y["text"] for x, y in zip(a["choices"], other["choices"]))
    assert fp.post_json("/v1/completions", {**seeded, "seed": None})[2]["choices"] == unseeded["choices"]
    # A signed 64-bit integer, as OpenAI's and vLLM's: -1 is a seed, 2^63 is not.
    status, _, negative = fp.post_json("/v1/completions", {**seeded, "seed": -1})
    assert status == 200 and negative["choices"] != a["choices"]
    for bad in (2 ** 63, 1.5, "7"):
        status, _, text = fp.post("/v1/completions", {**seeded, "seed": bad})
        assert status == 400 and json.loads(text)["error"]["param"] == "seed", bad


def test_embeddings_shape_and_geometry(fp):
    status, _, body = fp.post_json("/v1/embeddings", {"model": "e", "input": "hello world"})
    assert status == 200 and body["object"] == "list"
    assert body["data"][0]["object"] == "embedding" and body["data"][0]["index"] == 0
    v = body["data"][0]["embedding"]
    assert len(v) == 64
    assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5
    a, a2, sim, far = embed(fp, ["the cat sat on the mat", "the cat sat on the mat",
                                 "the cat sat on a mat", "quantum chromodynamics lattice"])
    assert a == a2 and embed(fp, ["the cat sat on the mat"])[0] == a
    assert abs(cosine(a, a2) - 1) < 1e-6
    assert cosine(a, sim) > cosine(a, far) + 0.3
    _, _, body = fp.post_json("/v1/embeddings", {"input": "x", "dimensions": 8})
    assert len(body["data"][0]["embedding"]) == 8


def test_tei_embed(fp):
    status, _, body = fp.post_json("/embed", {"inputs": "hello world"})
    assert status == 200 and len(body) == 1 and len(body[0]) == 64
    _, _, both = fp.post_json("/embed", {"inputs": ["hello world", "other"]})
    assert len(both) == 2 and both[0] == body[0]
    assert body[0] == embed(fp, ["hello world"])[0]


def test_tei_predict_nli(fp):
    req = {"inputs": [["a cat sat on the mat", "a cat sat"],
                      ["the cat sat", "the cat did not sit"],
                      ["the cat sat", "stocks fell sharply"]]}
    status, _, body = fp.post_json("/predict", req)
    assert status == 200 and len(body) == 3
    for labels in body:
        assert {x["label"] for x in labels} == {"entailment", "neutral", "contradiction"}
        assert abs(sum(x["score"] for x in labels) - 1) < 1e-9
        assert labels == sorted(labels, key=lambda x: -x["score"])
    assert [labels[0]["label"] for labels in body] == ["entailment", "contradiction", "neutral"]
    _, _, single = fp.post_json("/predict", {"inputs": ["a cat sat on the mat", "a cat sat"]})
    assert single == body[0]


def test_compute_info_gain(fp):
    req = {"items": [
        {"question": "who wrote it", "context": "Alice wrote the book", "answers": ["Alice"]},
        {"question": "who is Alice", "context": "nothing", "answers": "Alice"},
        {"question": "missing answers", "context": "c"},
    ]}
    status, _, body = fp.post_json("/compute_info_gain", req)
    assert status == 200
    assert body["scores"][:2] == [1.0, 0.0] and body["scores"][2] is None
    assert body["errors"][:2] == [None, None] and "answers" in body["errors"][2]
    assert body["details"][0] == {"with_context": 1.0, "without_context": 0.0}


def test_bad_requests_and_unknown_path(fp):
    for path, raw in [("/v1/chat/completions", "{not json"),
                      ("/v1/chat/completions", '{"model": "m"}'),
                      ("/v1/chat/completions", '{"messages": [{"content": "x"}]}'),
                      ("/v1/completions", '{"prompt": 5}'),
                      ("/v1/embeddings", '{"input": []}'),
                      ("/predict", '{"inputs": [["only one"]]}'),
                      ("/compute_info_gain", '[]'),
                      ("/embed", '{"inputs": "x"} trailing')]:
        status, _, text = fp.request("POST", path, raw=raw)
        assert status == 400, (path, raw, text)
        err = json.loads(text)["error"]
        assert err["type"] == "invalid_request_error" and err["message"]
    status, _, text = fp.request("POST", "/v2/nothing", raw="{}")
    assert status == 404 and json.loads(text)["error"]["code"] == "not_found"


# --- limits ----------------------------------------------------------------------------

def test_rpm_limit(start):
    fp = start("--rpm", "3")
    remaining = []
    for _ in range(3):
        status, headers, _ = fp.post("/v1/embeddings", {"input": "x"})
        assert status == 200
        assert headers["x-ratelimit-limit-requests"] == "3"
        assert re.fullmatch(r"(\d+h)?(\d+m)?\d+(\.\d+)?s|\d+ms", headers["x-ratelimit-reset-requests"])
        remaining.append(int(headers["x-ratelimit-remaining-requests"]))
    assert remaining == [2, 1, 0]
    status, headers, text = fp.post("/v1/embeddings", {"input": "x"})
    assert status == 429
    assert int(headers["retry-after"]) >= 1
    assert 0 < int(headers["retry-after-ms"]) <= 20000
    assert headers["x-ratelimit-remaining-requests"] == "0"
    err = json.loads(text)["error"]
    assert err["type"] == "requests" and err["code"] == "rate_limit_exceeded"
    stats = json.loads(fp.request("GET", "/stats")[2])
    assert stats["rate_limited_total"] == 1
    assert stats["requests"]["/v1/embeddings"] == {"200": 3, "429": 1}


def test_tpm_limit(start):
    fp = start("--tpm", "10")
    status, headers, _ = fp.post("/v1/embeddings", {"input": "one two three four five six"})
    assert status == 200 and headers["x-ratelimit-remaining-tokens"] == "4"
    status, headers, text = fp.post("/v1/embeddings", {"input": "one two three four five"})
    assert status == 429 and json.loads(text)["error"]["type"] == "tokens"
    assert int(headers["retry-after"]) >= 1 and "x-ratelimit-reset-tokens" in headers


def test_burst_seconds_caps_the_request_bucket(start):
    # 60 rpm = 1 request/s; a 5 s burst holds 5 requests.
    fp = start("--rpm", "60", "--burst-seconds", "5")
    remaining = []
    for _ in range(5):
        status, headers, _ = fp.post("/v1/embeddings", {"input": "x"})
        assert status == 200
        assert headers["x-ratelimit-limit-requests"] == "60"
        remaining.append(int(headers["x-ratelimit-remaining-requests"]))
    assert remaining == [4, 3, 2, 1, 0]
    status, headers, _ = fp.post("/v1/embeddings", {"input": "x"})
    assert status == 429
    wait_ms = int(headers["retry-after-ms"])
    assert 0 < wait_ms <= 1000 and headers["retry-after"] == "1"
    # Time until full: about 5 s (1 request per second, the bucket nearly empty).
    assert 4.0 <= go_seconds(headers["x-ratelimit-reset-requests"]) <= 5.0
    # Refill stays limit/60 per second: one more request after the advertised wait.
    time.sleep(wait_ms / 1000 + 0.05)
    status, headers, _ = fp.post("/v1/embeddings", {"input": "x"})
    assert status == 200 and headers["x-ratelimit-remaining-requests"] == "0"
    assert fp.post("/v1/embeddings", {"input": "x"})[0] == 429


def test_burst_seconds_caps_the_token_bucket(start):
    # 600 tpm over a 1 s burst: the bucket holds 10 tokens.
    fp = start("--tpm", "600", "--burst-seconds", "1")
    status, headers, _ = fp.post("/v1/embeddings", {"input": "one two three four five six"})
    assert status == 200
    assert headers["x-ratelimit-limit-tokens"] == "600"
    assert headers["x-ratelimit-remaining-tokens"] == "4"
    assert go_seconds(headers["x-ratelimit-reset-tokens"]) <= 0.6
    status, headers, text = fp.post("/v1/embeddings", {"input": "one two three four five"})
    assert status == 429 and json.loads(text)["error"]["type"] == "tokens"
    assert int(headers["retry-after-ms"]) <= 100
    # More than the bucket can ever hold: told to wait a full minute.
    status, headers, _ = fp.post("/v1/embeddings", {"input": " ".join(["w"] * 11)})
    assert status == 429 and headers["retry-after"] == "60"


def test_burst_smaller_than_one_request_still_admits_one(start):
    fp = start("--rpm", "30", "--burst-seconds", "1")  # 0.5 requests: the bucket holds 1
    assert fp.post("/embed", {"inputs": "a"})[0] == 200
    status, headers, _ = fp.post("/embed", {"inputs": "a"})
    assert status == 429 and 1000 < int(headers["retry-after-ms"]) <= 2000


def test_burst_sixty_is_the_default(start):
    fp = start("--rpm", "120")
    status, headers, _ = fp.post("/embed", {"inputs": "a"})
    assert status == 200 and headers["x-ratelimit-remaining-requests"] == "119"
    fp = start("--rpm", "120", "--burst-seconds", "60")
    assert fp.post("/embed", {"inputs": "a"})[1]["x-ratelimit-remaining-requests"] == "119"
    fp = start("--rpm", "120", "--burst-seconds", "90")
    assert fp.post("/embed", {"inputs": "a"})[1]["x-ratelimit-remaining-requests"] == "179"


@pytest.mark.parametrize("args", [["--burst-seconds", "0"], ["--burst-seconds", "-1"],
                                  ["--burst-seconds", "abc"], ["--burst-seconds", "nan"],
                                  ["--burst-seconds", "inf"], ["--burst-seconds", "2s"],
                                  ["--burst-seconds"], ["--rpm", "-5"], ["--no-such-flag"]])
def test_bad_flags_exit_2(args):
    proc = subprocess.run([BIN, "--port", "0", *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert proc.stdout == "" and proc.stderr.strip()
    if args[0] == "--burst-seconds" and len(args) == 2:
        assert "--burst-seconds" in proc.stderr and repr(args[1]) in proc.stderr


def test_max_concurrency(start):
    fp = start("--max-concurrency", "1", "--latency-median-ms", "400", "--latency-p99-ms", "400")
    results = []
    t = threading.Thread(target=lambda: results.append(fp.post("/embed", {"inputs": "a"})[0]))
    t.start()
    time.sleep(0.15)
    status, headers, text = fp.post("/embed", {"inputs": "b"})
    t.join()
    assert results == [200]
    assert status == 429 and headers["retry-after"] == "1"
    assert json.loads(text)["error"]["type"] == "concurrency"
    assert json.loads(fp.request("GET", "/stats")[2])["max_concurrent"] == 1


def test_latency(start):
    fp = start("--latency-median-ms", "150", "--latency-p99-ms", "150")
    t0 = time.monotonic()
    assert fp.post("/embed", {"inputs": "a"})[0] == 200
    assert 0.14 <= time.monotonic() - t0 < 1.0


# --- faults ----------------------------------------------------------------------------

def test_error_500(start):
    fp = start("--error-rate-500", "1.0")
    status, _, text = fp.post("/v1/chat/completions", judge("a", "a"))
    assert status == 500 and json.loads(text)["error"]["type"] == "server_error"


def test_error_503(start):
    fp = start("--error-rate-503", "1.0")
    status, _, text = fp.post("/embed", {"inputs": "a"})
    assert status == 503 and json.loads(text)["error"]["code"] == "service_unavailable"


def test_outage_window(start):
    fp = start("--outage", "0:60")
    status, _, text = fp.post("/embed", {"inputs": "a"})
    assert status == 503 and "outage" in json.loads(text)["error"]["message"]
    assert fp.request("GET", "/health")[0] == 200
    later = start("--outage", "100:200")
    assert later.post("/embed", {"inputs": "a"})[0] == 200


def test_malformed_body(start):
    fp = start("--error-rate-malformed", "1.0")
    status, _, text = fp.post("/v1/chat/completions", judge("a", "a"))
    assert status == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_connection_reset(start):
    fp = start("--error-rate-reset", "1.0")
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        fp.post("/embed", {"inputs": "a"})


def test_timeout_never_answers(start):
    fp = start("--error-rate-timeout", "1.0")
    with pytest.raises((socket.timeout, TimeoutError)):
        fp.post("/embed", {"inputs": "a"}, timeout=0.3)
    time.sleep(0.05)
    stats = json.loads(fp.request("GET", "/stats")[2])
    assert stats["faults"]["timeout"] == 1


def test_faults_deterministic_for_seed(start):
    def sequence(seed):
        fp = start("--seed", seed, "--error-rate-500", "0.5")
        return [fp.post("/embed", {"inputs": "a"})[0] for _ in range(20)]

    first = sequence("7")
    assert first == sequence("7")
    assert set(first) == {200, 500}


# --- lifecycle -------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_zero(start, sig):
    fp = start()
    assert fp.request("GET", "/health")[0] == 200
    assert fp.stop(sig) == 0


def test_keep_alive_and_hang_does_not_block_others(start):
    fp = start("--error-rate-timeout", "0.0")
    c = fp.conn()
    for _ in range(3):
        c.request("POST", "/embed", body=json.dumps({"inputs": "a"}))
        r = c.getresponse()
        assert r.status == 200 and json.loads(r.read())
    c.close()
    hanging = start("--error-rate-timeout", "1.0")
    h = hanging.conn(timeout=2)
    h.request("POST", "/embed", body=json.dumps({"inputs": "a"}))
    assert hanging.request("GET", "/health")[0] == 200
    assert json.loads(hanging.request("GET", "/stats")[2])["in_flight"] == 1
    h.close()
