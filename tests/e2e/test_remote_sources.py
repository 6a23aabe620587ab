"""Arbiter routing to remote sources: real fake-provider processes on loopback, real faults."""

import os
import re
import subprocess
import threading
import time

import pytest

from arbiter_testing import ARBITER_BIN, source_toml as _source_toml


def source_toml(name, p, **extra):
    return _source_toml(name, p.url, **extra)


def config(*sources, routing=""):
    return "[routing]\nhedge = false\ncache_capacity = 0\ncoalesce = false\n" + routing + \
        "\n" + "".join(sources)


def words(text):
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def jaccard(a, b):
    wa, wb = words(a), words(b)
    if not wa and not wb:
        return 1.0
    return round(len(wa & wb) / len(wa | wb), 3)


def judge_items(n, prefix="cand"):
    return [{"reward": "judge", "solution_str": f"{prefix} {i} shared words here",
             "ground_truth": f"reference {i} shared words", "extra_info": {"problem": "p"}}
            for i in range(n)]


def test_judge_embedding_and_ig_scores_come_from_the_provider(make_server, provider):
    p = provider()
    s = make_server(env={"LLM_JUDGE_SERVER_URL": p.url, "EMBEDDING_SERVER_URL": p.url,
                         "IG_SERVICE_URL": p.url})
    items = judge_items(3) + [
        {"reward": "embedding", "solution_str": "hello world", "ground_truth": ["hello world"]},
        {"reward": "embedding", "solution_str": "abc", "ground_truth": ["xyz qqq"]},
        {"reward": "info_gain", "solution_str": "paris is big", "ground_truth": ["paris"],
         "extra_info": {"question": "capital?"}},
        {"reward": "judge", "data_source": "x", "solution_str": "only", "ground_truth": "only"},
    ]
    status, _, body = s.score({"items": items})
    assert status == 200, body
    r = body["results"]
    for i in range(3):
        assert r[i]["status"] == "ok" and r[i]["source"] == "llm_judge_server"
        assert r[i]["score"] == pytest.approx(
            jaccard(items[i]["solution_str"], items[i]["ground_truth"]))
    assert r[3]["score"] == pytest.approx(1.0) and r[3]["source"] == "embedding_server"
    # Cosine mapped to [0, 1] as the seeds do: unrelated texts (cosine near 0) score 0.5.
    assert r[4]["status"] == "ok" and r[4]["score"] == pytest.approx(0.5, abs=0.1)
    assert r[5]["status"] == "ok" and r[5]["source"] == "ig_service"
    assert r[6]["score"] == pytest.approx(1.0)


def test_a_base_url_copied_with_its_v1_still_reaches_the_api(make_server, provider):
    # OpenAI's SDKs take the base URL with /v1; it used to call /v1/v1/chat/completions.
    p = provider()
    s = make_server(env={"LLM_JUDGE_SERVER_URL": p.url + "/v1",
                         "EMBEDDING_SERVER_URL": p.url + "/v1/"})
    items = judge_items(1) + [
        {"reward": "embedding", "solution_str": "hello world", "ground_truth": ["hello world"]}]
    status, _, body = s.score({"items": items})
    assert status == 200, body
    r = body["results"]
    assert r[0]["status"] == "ok" and r[0]["source"] == "llm_judge_server", r[0]
    assert r[1]["status"] == "ok" and r[1]["source"] == "embedding_server", r[1]


def test_a_provider_dying_mid_batch_loses_no_item(make_server, provider):
    a = provider("--latency-median-ms", "300", "--latency-p99-ms", "400", "--seed", "1")
    b = provider("--latency-median-ms", "300", "--latency-p99-ms", "400", "--seed", "2")
    s = make_server(config(source_toml("a", a, max_concurrency=8),
                           source_toml("b", b, max_concurrency=8)))
    result = {}
    t = threading.Thread(target=lambda: result.update(r=s.score({"items": judge_items(40)})))
    t.start()
    time.sleep(0.4)
    a.kill()
    t.join(60)
    status, _, body = result["r"]
    assert status == 200
    assert all(r["status"] == "ok" for r in body["results"]), body["results"]
    # Some items were on the dead provider and finished elsewhere.
    assert any(r["source"] == "b" and r["attempts"] >= 2 for r in body["results"])


def test_every_provider_down_fails_every_item_explicitly_by_its_deadline(make_server, provider):
    a = provider()
    s = make_server(config(source_toml("a", a)))
    a.kill()
    start = time.monotonic()
    status, _, body = s.score({"items": judge_items(10), "deadline_ms": 3000})
    elapsed = time.monotonic() - start
    assert status == 200
    assert elapsed < 5
    for r in body["results"]:
        assert r["status"] == "failed"
        assert r["error"], r
    # Health and other rewards are unharmed.
    status, _, body = s.score({"items": [{"reward": "lexical", "solution_str": "a",
                                          "ground_truth": "a"}]})
    assert status == 200 and body["results"][0]["score"] == 1.0


def test_once_every_source_is_ejected_requests_fall_back_at_once(make_server, provider):
    """A dead embedder does not stall each trainer request for its whole deadline: once its
    breaker is open past a request's deadline, the reward's fallback answers right away."""
    down = provider("--outage", "0:100000")
    s = make_server(config(source_toml("down", down, caps=("embed",)),
                           routing="max_attempts = 1\nretry_budget_min = 0\n"))

    def one(i):
        start = time.monotonic()
        status, _, body = s.score({"items": [{"reward": "embedding", "solution_str": f"a {i}",
                                              "ground_truth": f"a {i} b"}],
                                   "deadline_ms": 4000})
        assert status == 200
        return time.monotonic() - start, body["results"][0]

    for i in range(5):  # five failed calls in a row open the breaker for 5 s
        _, r = one(i)
        assert r["status"] == "fallback", r
    elapsed, r = one(99)
    assert r["status"] == "fallback" and r["source"] == "lexical"
    assert "ejected" in r["fallback_reason"], r
    assert elapsed < 2, f"{elapsed:.1f} s: waited for the deadline instead of falling back"


@pytest.mark.parametrize("down", ["refused", "503"])
def test_a_provider_back_after_a_long_outage_is_used_again_within_the_first_ejection(
        make_server, provider, down, tmp_path):
    """A provider back after an outage waited out ejections that had doubled while it was
    down (0.2, 0.4, 0.8, 1.6, 3.2 s here; 5 s doubling to 300 s by default). Now a probe
    refused at connect (`refused`: nothing listens) re-ejects for the first ejection's length,
    and so does any failed probe of the last source of a capability (`503`: a provider that
    answers 503 to every call): the provider is used again about that long after it is
    back."""
    from arbiter_testing import Provider
    first = provider()
    port = first.port
    log = open(tmp_path / "stderr.log", "w+")
    s = make_server(config(source_toml("a", first, caps=("embed",)),
                           routing="max_attempts = 1\nretry_budget_min = 0\n"
                                   "breaker_ejection_ms = 200\nbreaker_max_ejection_ms = 60000\n"),
                    stderr=log)

    def one(i):
        status, _, body = s.score({"items": [{"reward": "embedding", "solution_str": f"a {i}",
                                              "ground_truth": f"a {i} b"}],
                                   "deadline_ms": 2000})
        assert status == 200, body
        return body["results"][0]

    assert one(0)["status"] == "ok"
    first.kill()
    failing = None
    if down == "503":
        failing = provider_at(Provider, port, "--outage", "0:100000")
    try:
        down_until = time.monotonic() + 3.5
        i = 1
        while time.monotonic() < down_until:  # every probe in the outage fails
            r = one(i)
            assert r["status"] == "fallback", r
            i += 1
            time.sleep(0.05)
    finally:
        if failing is not None:
            failing.kill()
    back = provider_at(Provider, port)
    try:
        back_at = time.monotonic()
        while True:
            r = one(i)
            i += 1
            if r["status"] == "ok":
                break
            assert r["status"] == "fallback", r
            assert time.monotonic() - back_at < 10, "never used again"
            time.sleep(0.05)
        lag = time.monotonic() - back_at
        assert r["source"] == "a", r
        # Doubling ejections would next probe at 6.2 s from the outage's start: 2.7 s late.
        assert lag < 1.5, f"used again {lag:.2f} s after it was back"
    finally:
        back.kill()
    # A probe each 0.2 s for 3.5 s, about 16 failed: the ejections they began are logged at
    # the 1st, 2nd, 4th, 8th... of them, not each, after the one the first failures began.
    log.seek(0)
    lines = log.readlines()
    back_lines = [line for line in lines if "source 'a' is back: a probe succeeded after " in line]
    assert len(back_lines) == 1, back_lines
    failed = int(re.search(r"after (\d+) failed", back_lines[0]).group(1))
    assert failed >= 2, back_lines
    ejected = [line for line in lines if "source 'a' ejected for" in line]
    logged = [1] + [n for n in (2 ** k for k in range(1, 20)) if n <= failed]
    assert len(ejected) == 1 + len(logged), (failed, ejected)
    assert "a probe failed" not in ejected[0] and "probes in a row" not in ejected[1], ejected
    for n, line in zip(logged[1:], ejected[2:]):
        assert f"({n} probes in a row failed; logged at powers of two)" in line, (n, line)


def provider_at(provider_class, port, *args):
    """A fake provider on `port` with `args`, which a killed one just left: tries for a few
    seconds while the port is released."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return provider_class(*args, port=port)
        except Exception:  # the port still taken
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_an_ejection_is_logged_once_with_its_cause_and_info_keeps_it(tmp_path, provider):
    """A provider answering 500 to everything logged nothing at all, and /info said only
    "5 consecutive failures"."""
    from arbiter_testing import start_server
    failing = provider("--error-rate-500", "1")
    log = open(tmp_path / "stderr.log", "w+")
    s = start_server(tmp_path, config(source_toml("flaky", failing, caps=("embed",)),
                                      routing="max_attempts = 1\nretry_budget_min = 0\n"),
                     stderr=log)
    try:
        for i in range(8):
            status, _, _ = s.score({"items": [{"reward": "embedding", "solution_str": f"a {i}",
                                               "ground_truth": "b"}], "deadline_ms": 3000})
            assert status == 200
        _, _, info = s.request("GET", "/info")
        source = next(x for x in info["sources"] if x["name"] == "flaky")
        assert source["breaker"] == "open", source
        assert source["breaker_reason"].startswith("5 consecutive failures, the last: HTTP 500"), \
            source
        assert s.stop() == 0
    finally:
        s.kill()
    log.seek(0)
    ejected = [line for line in log if "source 'flaky' ejected for" in line]
    assert len(ejected) == 1, ejected
    assert "5 consecutive failures, the last: HTTP 500" in ejected[0], ejected


def test_pacing_keeps_a_provider_under_its_limit(make_server, provider):
    # 600 RPM enforced per second: 10 calls per second.
    p = provider("--rpm", "600", "--burst-seconds", "1", "--latency-median-ms", "20",
                 "--latency-p99-ms", "40")
    s = make_server(config(source_toml("a", p, requests_per_minute=600, burst_ms=1000)))
    start = time.monotonic()
    status, _, body = s.score({"items": judge_items(30), "deadline_ms": 30000})
    elapsed = time.monotonic() - start
    assert status == 200
    assert all(r["status"] == "ok" for r in body["results"])
    assert p.stats()["rate_limited_total"] == 0
    assert elapsed >= 1.5, "30 calls at 10/s after a burst of 10 take about 2 s"


def test_a_429_storm_is_met_with_one_shared_backoff_not_a_retry_storm(make_server, provider):
    # Arbiter does not know the limit: the provider's 429s and Retry-After teach it.
    p = provider("--rpm", "600", "--burst-seconds", "1", "--latency-median-ms", "20",
                 "--latency-p99-ms", "40")
    s = make_server(config(source_toml("a", p), routing="max_attempts = 10\nretry_budget_min = 1000\n"))
    status, _, body = s.score({"items": judge_items(40), "deadline_ms": 30000})
    assert status == 200
    assert all(r["status"] == "ok" for r in body["results"]), body["results"]
    stats = p.stats()
    # 40 items need 40 good calls; every 429 blocks the endpoint for everyone, so the 429s
    # stay a fraction of the work instead of multiplying it.
    assert stats["rate_limited_total"] < 40, stats


def test_traffic_shifts_to_the_faster_provider(make_server, provider):
    slow = provider("--latency-median-ms", "400", "--latency-p99-ms", "500", "--seed", "3")
    fast = provider("--latency-median-ms", "10", "--latency-p99-ms", "20", "--seed", "4")
    s = make_server(config(source_toml("slow", slow, max_concurrency=4),
                           source_toml("fast", fast, max_concurrency=4)))
    status, _, body = s.score({"items": judge_items(120)})
    assert status == 200
    by = {"slow": 0, "fast": 0}
    for r in body["results"]:
        assert r["status"] == "ok"
        by[r["source"]] += 1
    assert by["fast"] > 3 * by["slow"], by


def test_malformed_bodies_fail_explicitly_or_go_elsewhere(make_server, provider):
    bad = provider("--error-rate-malformed", "1.0")
    s = make_server(config(source_toml("bad", bad)))
    status, _, body = s.score({"items": judge_items(3), "deadline_ms": 4000})
    assert status == 200
    for r in body["results"]:
        assert r["status"] == "failed"
        # Either out of attempts, or out of time while the ejected source waited: both say
        # what the source did.
        assert "bad_response" in r["error"]["message"], r["error"]
    good = provider()
    s2 = make_server(config(source_toml("bad", bad), source_toml("good", good)))
    status, _, body = s2.score({"items": judge_items(10), "deadline_ms": 10000})
    assert status == 200
    assert all(r["status"] == "ok" and r["source"] == "good" for r in body["results"])
    status, _, _ = s2.request("GET", "/health")
    assert status == 200


def test_a_provider_dropping_the_connection_after_the_request_spends_the_items_attempts(
        make_server, provider):
    """A provider that reads a request and then resets the connection (one that crashes on
    the input does so every time) gave an unusable answer, as a 500 would: the item stops
    at max_attempts. Taken for a refused connection it was sent until its deadline, 220
    times in 30 s (helper-59). The breaker is off, so only the attempts can stop it."""
    p = provider("--error-rate-reset", "1.0", "--latency-median-ms", "5")
    s = make_server(config(source_toml("a", p),
                           routing="max_attempts = 3\nbreaker_consecutive_failures = 0\n"
                                   "breaker_failure_ratio = 0\n"))
    started = time.monotonic()
    status, _, body = s.score({"step": "resets", "items": judge_items(1), "deadline_ms": 10000})
    took = time.monotonic() - started
    assert status == 200, body
    r = body["results"][0]
    assert r["status"] == "failed" and r["attempts"] == 3, r
    assert "connection_reset" in r["error"]["message"], r["error"]
    assert took < 5.0, took  # not held to its deadline
    assert p.stats()["requests_total"] == 3
    _, _, account = s.request("GET", "/v1/steps/resets")
    assert account["sources"]["a"]["calls"] == 3, account


def test_identical_items_are_sent_once_and_then_cached(make_server, provider):
    p = provider("--latency-median-ms", "100", "--latency-p99-ms", "150")
    cfg = "[routing]\nhedge = false\n\n" + source_toml("a", p)
    s = make_server(cfg)
    items = [{"reward": "judge", "solution_str": "same answer", "ground_truth": "same"}] * 8
    status, _, body = s.score({"items": items})
    assert status == 200
    assert len({r["score"] for r in body["results"]}) == 1
    assert p.stats()["requests_total"] == 1
    status, _, body = s.score({"items": items[:1]})
    assert body["results"][0]["cached"] is True
    assert p.stats()["requests_total"] == 1


def test_the_cache_keeps_long_items_within_its_byte_bound(make_server, provider):
    # Four judge items of 40 KB rollouts against a 150 KB bound: the first is evicted (asked
    # again, the provider sees it), the last three stay (answered from the cache).
    p = provider()
    cfg = ("[routing]\nhedge = false\ncache_max_bytes = 150000\n\n" + source_toml("a", p))
    s = make_server(cfg)
    items = [{"reward": "judge", "solution_str": f"{i} " + "word " * 8000, "ground_truth": "x"}
             for i in range(4)]
    for item in items:
        status, _, body = s.score({"items": [item]})
        assert status == 200 and body["results"][0]["status"] == "ok", body
    sent = p.stats()["requests_total"]
    for item in items[1:]:
        status, _, body = s.score({"items": [item]})
        assert body["results"][0]["cached"] is True
    assert p.stats()["requests_total"] == sent
    status, _, body = s.score({"items": items[:1]})
    assert body["results"][0]["status"] == "ok" and body["results"][0]["cached"] is False
    assert p.stats()["requests_total"] > sent


def test_a_text_past_teis_input_length_is_embedded_by_its_beginning_not_refused(make_server,
                                                                                provider):
    # TEI (without --auto-truncate) refuses an input past the model's length with a 413; the
    # item then fell back to lexical. Arbiter asks TEI to truncate, as sentence-transformers
    # and its own local embedder do.
    p = provider("--max-input-tokens", "64")
    long_text = "paris is the capital of france " * 30  # 180 words
    status, _, text = p.post("/embed", {"inputs": [long_text]})
    assert status == 413 and "must have less than 64 tokens" in text, text
    status, _, text = p.post("/predict", {"inputs": [long_text, "paris"]})
    assert status == 413, text
    refused = p.stats()["faults"]["input_too_long"]
    s = make_server(config(source_toml("tei", p, kind="tei", caps=["embed"])))
    items = [{"reward": "embedding", "solution_str": long_text,
              "ground_truth": ["paris is the capital of france"]},
             {"reward": "embedding", "solution_str": "short answer", "ground_truth": [long_text]}]
    status, _, body = s.score({"items": items})
    assert status == 200, body
    for r in body["results"]:
        assert r["status"] == "ok" and r["source"] == "tei", r
    # The same words, repeated (cut after 64, mid-sentence): nearly the reference's vector.
    assert body["results"][0]["score"] > 0.95
    assert p.stats()["faults"]["input_too_long"] == refused


def test_an_item_with_more_texts_than_tei_takes_at_once_is_sent_in_parts(make_server, provider):
    # TEI refuses a call over its --max-client-batch-size inputs (32) with a 413. An item whose
    # candidate and references pass it (TriviaQA's alias lists do) went alone and was refused.
    capped = provider("--max-batch-size", "32")
    whole = provider()
    aliases = [f"alias number {i}" for i in range(39)] + ["the eiffel tower"]
    status, _, text = capped.post("/embed", {"inputs": ["the eiffel tower"] + aliases})
    assert status == 413 and "batch size 41 > maximum allowed batch size 32" in text, text
    item = {"reward": "embedding", "solution_str": "the eiffel tower", "ground_truth": aliases}
    s = make_server(config(source_toml("tei", capped, kind="tei", caps=["embed"])))
    status, _, body = s.score({"step": "parts", "items": [item]})
    assert status == 200 and body["results"][0]["status"] == "ok", body
    assert body["results"][0]["source"] == "tei"
    stats = capped.stats()
    assert stats["requests"]["/embed"]["200"] == 2, stats  # 32 distinct texts, then 8
    status, _, step = s.request("GET", "/v1/steps/parts")
    assert step["sources"]["tei"]["calls"] == 2, step
    # The score is the one a provider taking all 41 texts at once gives.
    s2 = make_server(config(source_toml("tei", whole, kind="tei", caps=["embed"],
                                        max_batch_items=64)))
    status, _, one = s2.score({"items": [item]})
    assert status == 200 and one["scores"] == body["scores"], (one, body)
    assert whole.stats()["requests"]["/embed"]["200"] == 1


def test_bad_source_config_names_the_field(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[[sources]]\nname = "x"\nkind = "grpc"\nurl = "ftp://h"\n'
                   'capabilities = ["chat", "telepathy"]\n')
    out = subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 1
    assert "sources[0].kind" in out.stdout
    assert "sources[0].url" in out.stdout
    assert "sources[0].capabilities[1]" in out.stdout


def test_check_config_refuses_what_serve_would_and_names_the_variable(tmp_path):
    # helper-33: check-config said ok for a model folder serve could not read (serve exited
    # 2); a shorthand variable's URL without a scheme was named as sources[0].url.
    cfg = tmp_path / "m.toml"
    cfg.write_text('[[models]]\nname = "m"\npath = "/nonexistent"\n')
    out = subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout.startswith(
        "models[0].path: cannot read /nonexistent/config.json"), out.stdout
    cfg.write_text("")
    out = subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True, text=True,
                         env={**os.environ, "LLM_JUDGE_SERVER_URL": "vllm:8000"})
    assert out.returncode == 1, out
    assert out.stdout == 'LLM_JUDGE_SERVER_URL: must start with http:// or https:// (got ' \
        '"vllm:8000")\n', out.stdout
    # A value a variable set over the file is named by the variable, the field after it.
    cfg.write_text('[[sources]]\nname = "a-1"\nkind = "openai"\nurl = "http://127.0.0.1:1"\n')
    out = subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True, text=True,
                         env={**os.environ, "ARBITER_SOURCES_A_1_URL": "ftp://x",
                              "ARBITER_SCHEDULER_DEFAULT_PRIORITY": "vip"})
    assert out.returncode == 1, out
    lines = out.stdout.splitlines()
    assert 'ARBITER_SOURCES_A_1_URL: must start with http:// or https:// (got "ftp://x") ' \
        '(sources[0].url)' in lines, lines
    assert any(line.startswith("ARBITER_SCHEDULER_DEFAULT_PRIORITY: ") and
               line.endswith("(scheduler.default_priority)") for line in lines), lines
    # helper-47: so are a URL its client cannot read and a model folder that is not there,
    # which were named as sources[0].url and models[0].path, in no file the operator has.
    cfg.write_text('[[models]]\nname = "m"\npath = "/also-nonexistent"\n')
    out = subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True, text=True,
                         env={**os.environ, "LLM_JUDGE_SERVER_URL": "http://judge:99999",
                              "ARBITER_MODELS_M_PATH": "/nonexistent"})
    assert out.returncode == 1, out
    lines = out.stdout.splitlines()
    assert "LLM_JUDGE_SERVER_URL: invalid endpoint URL: port '99999' is not a number in " \
        "1..65535 (sources[0].url)" in lines, lines
    assert any(line.startswith("ARBITER_MODELS_M_PATH: cannot read /nonexistent/config.json")
               for line in lines), lines
    # A config.json that is not JSON: check-config said ok, then serve exited 2 on it.
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("not json\n")
    cfg.write_text(f'[[models]]\nname = "m"\npath = "{folder}"\n')
    out = subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout == \
        f"models[0].path: {folder}/config.json is not a JSON object\n", out.stdout


def test_check_config_reports_every_problem_in_one_run(tmp_path):
    # helper-47: a reward's misspelt option or sources that serve none of its calls were
    # reported only once every other problem was fixed.
    cfg = tmp_path / "c.toml"
    cfg.write_text('[server]\nport = 70000\n'
                   '[[sources]]\nname = "t"\nkind = "tei"\nurl = "http://127.0.0.1:9"\n'
                   '[[sources]]\nname = "bad"\nkind = "opanai"\nurl = "http://127.0.0.1:9"\n'
                   '[rewards.z]\nkind = "embedding"\n[rewards.z.options]\n'
                   'lenght_penalty = "sqrt"\n'
                   '[rewards.j]\nkind = "judge"\nsources = ["t"]\n'
                   '[rewards.k]\nkind = "judge"\nsources = ["bad"]\n')
    out = subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 1, out
    fields = [line.split(":")[0] for line in out.stdout.splitlines()]
    # Not rewards.k.sources: its source's misspelt kind is the problem, reported as such.
    assert fields == ["server.port", "sources[1].kind", "rewards.z.options.lenght_penalty",
                      "rewards.j.sources"], out.stdout
    # One mistake, one line: a reward with no kind is not also one of an unknown kind "".
    cfg.write_text('[rewards.j]\nsources = []\n')
    out = subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True, text=True)
    assert out.stdout == "rewards.j.kind: missing required field\n", out.stdout


def test_a_source_or_reward_that_cannot_serve_what_it_is_given_is_refused(tmp_path):
    # helper-33: these passed check-config; then a tei source declaring chat failed 18 of 20
    # judge items for good (422) while an openai source sat idle, and a judge reward naming
    # an embed-only source failed every item no_eligible_source.
    sources = ('[[sources]]\nname = "good"\nkind = "openai"\nurl = "http://127.0.0.1:1"\n'
               'capabilities = ["chat", "generate"]\n'
               '[[sources]]\nname = "tei"\nkind = "tei"\nurl = "http://127.0.0.1:1"\n'
               'capabilities = ["CAPS"]\n')

    def check(text):
        cfg = tmp_path / "c.toml"
        cfg.write_text(text)
        return subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True,
                              text=True)

    out = check(sources.replace("CAPS", 'chat", "embed'))
    assert out.returncode == 1
    assert out.stdout == ('sources[1].capabilities[0]: a source of kind tei cannot serve '
                          '"chat"; it serves embed, nli\n'), out.stdout
    rewards = ('[rewards.j]\nkind = "judge"\nsources = ["tei"]\n'
               '[rewards.ig]\nkind = "info_gain"\nsources = ["good"]\n'
               '[rewards.e]\nkind = "embedding"\nsources = ["good"]\n')
    out = check(sources.replace("CAPS", 'embed", "nli') + rewards)
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        "rewards.e.sources: none of its sources serves embed, which its embedding calls need; "
        "name one that does, or none (any source)",
        "rewards.ig.sources: none of its sources serves nli, which its info_gain calls need; "
        "name one that does, or none (any source)",
        "rewards.j.sources: none of its sources serves chat, which its judge calls need; "
        "name one that does, or none (any source)"], out.stdout
    # Named to serve what each call needs, between them: fine.
    fixed = ('[rewards.j]\nkind = "judge"\nsources = ["good"]\n'
             '[rewards.ig]\nkind = "info_gain"\nsources = ["good", "tei"]\n'
             '[rewards.e]\nkind = "embedding"\nsources = ["tei"]\n')
    out = check(sources.replace("CAPS", 'embed", "nli') + fixed)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_judge_item_is_answered_when_its_own_calls_are_not_with_a_batch(make_server,
                                                                         provider):
    """The reward-graph runner takes one item per batch: it answers a batch when its last
    graph ends, so items sharing a batch would wait for the slowest one's model calls."""
    p = provider("--latency-median-ms", "5", "--latency-p99-ms", "20")
    s = make_server(config(source_toml("a", p)))
    status, _, body = s.score({"items": judge_items(40)})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"])
    _, _, info = s.request("GET", "/info")
    graph = next(x for x in info["sources"] if x["name"] == "reward-graph")
    assert graph["dispatched_batches"] == 40


def test_a_request_too_slow_for_its_deadline_keeps_the_whole_groups_that_fit(make_server,
                                                                             provider):
    """256 grouped embedding items against a source that answers two calls at once, each in
    0.3 s: all of them take about 4.6 s, past the 3 s deadline. The groups that fit are
    embedded, in the order they first appear, the others take the lexical fallback at once,
    and no group is split (helper-58: every item fell back, though many could be embedded)."""
    p = provider("--latency-median-ms", "300", "--latency-p99-ms", "330", "--seed", "3")
    s = make_server(config(_source_toml("emb", p.url, "tei", ["embed"], max_batch_items=16,
                                        max_concurrency=2)))

    def items(n, prefix):
        return [{"reward": "embedding", "solution_str": f"{prefix} rollout {i}",
                 "ground_truth": [f"reference of prompt {i // 8}"], "group": f"{prefix}{i // 8}"}
                for i in range(n)]

    # The source's pace is learned from full calls first.
    status, _, body = s.score({"items": items(64, "warm"), "deadline_ms": 30000})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    sent = items(256, "g")
    status, _, body = s.score({"items": sent, "deadline_ms": 3000})
    assert status == 200, body
    by_group = {}
    for item, result in zip(sent, body["results"]):
        by_group.setdefault(item["group"], set()).add(result["status"])
    assert all(len(statuses) == 1 for statuses in by_group.values()), by_group
    kept = [g for g, statuses in by_group.items() if statuses == {"ok"}]
    assert 0 < len(kept) < len(by_group), by_group
    assert kept == list(by_group)[:len(kept)], "the groups that come first are kept"
    for result in body["results"]:
        if result["status"] != "ok":
            assert result["status"] == "fallback", result
            assert "groups that fit in time were kept" in result["fallback_reason"], result


def test_a_batch_beside_single_items_is_served_when_its_calls_fit(make_server, provider):
    """A TEI endpoint of 0.5 s a call, two at once, has answered single items only: admission
    counted 0.5 s an item, so a 16-item request due in 2.5 s took its lexical fallback (with
    none, a 429 saying Retry-After: 1) for as long as single items kept coming, though two
    calls take it at once. Now, with both slots taken by single items, it goes as a probe of
    the full-call pace; with a slot free, a slot takes a call's worth of its items."""
    p = provider("--latency-median-ms", "500", "--latency-p99-ms", "550", "--seed", "8")
    s = make_server(config(_source_toml("tei", p.url, "tei", ["embed"], max_batch_items=16,
                                        max_concurrency=2)))

    def items(n, prefix):
        return [{"reward": "embedding", "solution_str": f"{prefix} rollout {i}",
                 "ground_truth": [f"reference {prefix} {i}"]} for i in range(n)]

    def single(name):
        status, _, body = s.score({"items": items(1, name), "deadline_ms": 10000})
        assert status == 200 and body["results"][0]["status"] == "ok", body

    for i in range(3):
        single(f"single{i}")

    def out():
        _, _, info = s.request("GET", "/info")
        return next(x for x in info["sources"] if x["name"] == "tei")["inflight_batches"]

    # One after the other, so that each takes a slot (sent together, they may share a call).
    busy = [threading.Thread(target=single, args=(f"busy{i}",)) for i in range(2)]
    for k, t in enumerate(busy, 1):
        t.start()
        deadline = time.time() + 5
        while out() < k:
            assert time.time() < deadline, f"{k} single items never went out at once"
            time.sleep(0.01)
    status, _, body = s.score({"items": items(16, "probe"), "deadline_ms": 2500})
    for t in busy:
        t.join()
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    status, _, body = s.score({"items": items(16, "after"), "deadline_ms": 2500})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
