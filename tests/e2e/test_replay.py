"""The replay log end to end: a real server over real fake-provider processes writes every
reward item and model call to [replay] path; `arbiter replay` recomputes every reward from
what was recorded, with no provider, and must find every score identical — and must name
the items whose recorded answers were tampered with."""

import json
import subprocess
import time
from pathlib import Path

import pytest

from arbiter_testing import ARBITER_BIN, RUN_TIMEOUT_S, source_toml, start_server


def replay(*args):
    """Runs `arbiter replay --json ARGS`; returns (exit code, summary)."""
    done = subprocess.run([ARBITER_BIN, "replay", "--json", *args], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)
    try:
        summary = json.loads(done.stdout)
    except json.JSONDecodeError:
        summary = {"stdout": done.stdout}
    return done.returncode, summary, done.stderr


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_for_items(path, n):
    """The writer is asynchronous: the records land shortly after the answers."""
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            got = [r for r in records(path) if r["type"] == "item" and not r.get("internal")]
        except (FileNotFoundError, json.JSONDecodeError):
            got = []
        if len(got) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"the replay log holds {len(got)} items, expected {n}")


ROLLOUT = ("<|im_start|>user\nAnswer the question. Question: What is the capital of France?"
           "\n<|im_end|>\n<|im_start|>assistant\n<search>capital of France</search>"
           "<information>Paris is the capital of France.</information><answer> Paris </answer>")


def all_kinds_items():
    items = []
    for i in range(6):
        items.append({"reward": "judge", "solution_str": f"answer {i} shared words here",
                      "ground_truth": f"reference {i} shared words",
                      "extra_info": {"problem": "p", "votes": 1 + i % 3}})
    for i in range(5):
        items.append({"reward": "embedding", "solution_str": f"blue whale number {i}",
                      "ground_truth": ["the blue whale", f"whale {i}"]})
    items.append({"reward": "emb_down", "solution_str": "The Cat sat",
                  "ground_truth": ["the cat SAT down"]})
    for i, context in enumerate(["Paris is the capital of France.", "Lyon is a city."]):
        items.append({"reward": "info_gain", "solution_str": context, "ground_truth": ["Paris"],
                      "extra_info": {"question": "What is the capital of France?",
                                     "num_samples": 3 + i, "seed": 11 + i}})
    items.append({"reward": "em_info_gain", "solution_str": ROLLOUT, "ground_truth": ["Paris"],
                  "extra_info": {"num_samples": 3}})
    items.append({"reward": "em_info_gain", "solution_str": "<answer>Lyon</answer>",
                  "ground_truth": ["Paris"]})
    for i in range(4):
        items.append({"reward": "lexical", "solution_str": f"the cat sat {i}",
                      "ground_truth": ["the cat sat", "a dog"]})
        items.append({"reward": "exact_match", "solution_str": f"Paris{'' if i % 2 else '!'}",
                      "ground_truth": "paris"})
    items.append({"data_source": "openai/gsm8k", "solution_str": "so #### 72",
                  "ground_truth": "72"})
    items.append({"data_source": "openai/gsm8k", "solution_str": "so #### 71",
                  "ground_truth": "72"})
    items.append({"data_source": "math_dapo", "solution_str": "Answer: \\frac{1}{2}",
                  "ground_truth": "\\dfrac{1}{2}"})
    items.append({"data_source": "lighteval/MATH", "solution_str": "\\boxed{3}",
                  "ground_truth": "3"})
    return items


def config(p, down, log):
    return ("[routing]\nhedge = false\nmax_attempts = 2\n\n"
            + source_toml("llm", p.url, "openai", ["chat", "generate"])
            + source_toml("tei", p.url, "tei", ["embed", "nli"])
            + source_toml("down", down.url, "tei", ["embed"])
            + '[rewards.emb_down]\nkind = "embedding"\nsources = ["down"]\n\n'
            + f'[replay]\npath = "{log}"\n')


def test_replay_reproduces_every_score_and_names_tampered_items(make_server, provider,
                                                                 tmp_path):
    p = provider("--seed", "3")
    down = provider("--outage", "0:3600")
    log = tmp_path / "replay.jsonl"
    cfg_path = tmp_path / "served.toml"
    cfg_path.write_text(config(p, down, log))
    s = make_server(cfg_path.read_text())
    items = all_kinds_items()
    status, _, body = s.score({"step": "7", "items": items, "deadline_ms": 20000})
    assert status == 200, body
    by_status = {r["status"] for r in body["results"]}
    assert by_status <= {"ok", "fallback"}, [r for r in body["results"] if r["status"] == "failed"]
    assert body["results"][6 + 5]["status"] == "fallback"  # emb_down
    # The same request again: remote calls now come from the cache, and are still replayable.
    status, _, again = s.score({"step": "8", "items": items[:11], "deadline_ms": 20000})
    assert status == 200 and again["scores"] == body["scores"][:11], again
    wait_for_items(log, len(items) + 11)

    lines = records(log)
    assert lines[0]["type"] == "start"
    mine = [r for r in lines if r["type"] == "item" and not r.get("internal")]
    assert [r["result"]["score"] for r in mine[:len(items)]] == body["scores"]
    assert {r["step"] for r in mine} == {"7", "8"}
    calls = [r for r in lines if r["type"] == "call"]
    assert {c["kind"] for c in calls} == {"chat", "generate", "nli"}
    for c in calls:
        assert len(c["call"]["prompt_hash"]) == 64 and c["result"]["status"] == "ok", c
        assert "output" in c["result"] and c["result"]["source"] in ("llm", "tei"), c
    # The model each provider said answered (the fake echoes the one asked for, or its own).
    assert all(c["result"]["output"].get("model") for c in calls if c["kind"] != "nli"), calls
    chat = [c for c in calls if c["kind"] == "chat"]
    assert len(chat) == 6 * 2 and all(c["result"]["output"]["texts"] for c in chat)
    assert any(c["result"].get("cached") for c in chat), "the second request hit the cache"
    embedded = [r for r in mine if r["kind"] == "embedding" and r["result"]["status"] == "ok"]
    assert len(embedded) == 10
    for r in embedded:
        if r["result"].get("cached"):
            # The cache keeps no vectors: replay takes the computing record's evidence.
            assert "evidence" not in r, r
        else:
            assert len(r["evidence"]["vectors"]) == 3, r
    assert sum(1 for r in embedded if r["result"].get("cached")) == 5

    code, summary, err = replay("--config", str(cfg_path), str(log))
    assert code == 0, (summary, err)
    assert summary["differs"] == 0 and summary["not_replayable"] == 0, summary
    kinds = summary["by_kind"]
    for kind in ("judge", "embedding", "info_gain", "em_info_gain", "lexical", "exact_match",
                 "gsm8k", "math_dapo", "math"):
        assert kinds[kind]["items"] > 0 and kinds[kind]["identical"] == kinds[kind]["items"], kind
    # em_info_gain's nested info_gain item is recorded and replayed too.
    assert kinds["info_gain"]["items"] == 2 + 1
    assert summary["identical"] == summary["items"] == len(lines) - len(calls) - 1
    code, step_only, _ = replay("--config", str(cfg_path), "--step", "8", str(log))
    assert code == 0 and step_only["items"] == 11, step_only
    assert step_only["calls"] == sum(1 for c in calls if c.get("step") == "8"), step_only
    # A file given twice would count its items twice: refused.
    code, _, err = replay("--config", str(cfg_path), str(log), str(log))
    assert code == 2 and "is given twice" in err, err
    # So would a copy of it, whole or taken while the server went on writing (it was counted
    # twice); a rotated file begins with a start record of its own and is taken.
    whole = log.read_bytes()
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(whole)
    head = tmp_path / "head.jsonl"
    head.write_bytes(whole[:whole.index(b"\n", len(whole) // 2) + 1])
    for a, b in ((log, copy), (head, log)):
        code, _, err = replay("--config", str(cfg_path), str(a), str(b))
        assert code == 2 and "a copy of the log" in err, err
    # A file that is not a log reports its first ten unreadable lines, and counts the rest
    # (each line was printed).
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\xff\x7f not json\n" * 500)
    code, summary, err = replay("--config", str(cfg_path), str(junk))
    assert code == 1 and summary["unreadable_lines"] == 500, summary
    assert err.count("junk.bin:") == 11 and "490 more lines could not be read" in err, err
    # The served machine's own rules (keys for a public address, a key file there) do not
    # stop replaying elsewhere with the same file: only its rewards are used.
    served = tmp_path / "production.toml"
    served.write_text(cfg_path.read_text() + '\n[server]\nhost = "0.0.0.0"\n'
                      'api_key_file = "/run/secrets/not-on-this-machine"\n')
    code, summary, err = replay("--config", str(served), "--step", "8", str(log))
    assert code == 0 and summary["identical"] == 11, (summary, err)

    # Step 8 alone: its cached embedding items lack the records that computed them.
    alone = tmp_path / "step8.jsonl"
    alone.write_text("".join(json.dumps(r) + "\n" for r in lines if r.get("step") == "8"))
    code, summary, _ = replay("--config", str(cfg_path), str(alone))
    assert code == 0 and summary["by_kind"]["embedding"]["not_replayable"] == 5, summary
    assert any("cache" in reason for reason in summary["not_replayable_reasons"]), summary

    # Tamper: a judge's recorded reply, an embedding vector and a CPU item's returned score.
    judge = next(i for i, r in enumerate(lines) if r["type"] == "item" and r["kind"] == "judge")
    answer = lines[judge]["evidence"]["steps"][0]["answers"][0]["output"]["texts"][0]
    answer["text"] = "REWARD: 0.123"
    emb = next(i for i, r in enumerate(lines) if r["type"] == "item" and r["kind"] == "embedding"
               and r["result"]["status"] == "ok")
    lines[emb]["evidence"]["vectors"][0][0] += 0.25
    lex = next(i for i, r in enumerate(lines) if r["type"] == "item" and r["kind"] == "lexical")
    lines[lex]["result"]["score"] += 1e-15
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(json.dumps(r) + "\n" for r in lines))
    code, summary, err = replay("--config", str(cfg_path), str(tampered))
    assert code == 1, (summary, err)
    # The embedding item's cached twin (step 8) is replayed from the same, tampered, vectors.
    twins = [i for i, r in enumerate(lines) if r["type"] == "item" and r["result"].get("cached")
             and r["solution_str"] == lines[emb]["solution_str"]]
    assert len(twins) == 1
    assert sorted(d["line"] for d in summary["differences"]) == sorted(
        [judge + 1, emb + 1, lex + 1, twins[0] + 1]), summary["differences"]
    assert summary["differs"] == 4


def test_the_log_rotates_and_replays_across_its_files(make_server, tmp_path):
    log = tmp_path / "r.jsonl"
    s = make_server(f'[replay]\npath = "{log}"\nmax_file_mb = 1\nkeep_files = 1\n')
    pad = "x" * 700
    for batch in range(8):
        items = [{"reward": "lexical", "solution_str": f"{pad} {batch} {i}",
                  "ground_truth": [f"{pad} {i}"]} for i in range(300)]
        status, _, body = s.score({"items": items})
        assert status == 200, body
    _, _, info = s.request("GET", "/info")
    assert info["replay"]["max_file_mb"] == 1 and info["replay"]["keep_files"] == 1, info
    assert s.stop() == 0  # a clean stop writes everything before it exits
    # 8 × 300 records of ~1.5 KiB: rotated twice, the oldest file dropped (keep_files = 1).
    files = sorted(tmp_path.glob("r.jsonl*"))
    assert [f.name for f in files] == ["r.jsonl", "r.jsonl.1"], files
    assert all(f.stat().st_size < 2 << 20 for f in files)
    code, summary, err = replay(*map(str, files))
    assert code == 0, (summary, err)
    assert 0 < summary["items"] < 2400 and summary["identical"] == summary["items"], summary
    # Nothing checked is no success: a mistyped step, or the wrong (empty) file.
    code, summary, err = replay("--step", "no-such-step", *map(str, files))
    assert code == 1 and "no item or call records of step 'no-such-step'" in err, (summary, err)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, summary, err = replay(str(empty))
    assert code == 1 and "no item or call records in these files" in err, (summary, err)
    # A log logrotate compressed, or one given through a pipe, is refused saying what to do
    # (helper-52: 137 JSON errors; a pipe's second pass found nothing, items unreplayable).
    import gzip
    packed = tmp_path / "r.jsonl.1.gz"
    packed.write_bytes(gzip.compress(files[1].read_bytes()))
    code, summary, err = replay(str(packed))
    assert code == 2 and f"'{packed}' is compressed with gzip (zcat '{packed}' > LOG" in err, err
    piped = subprocess.run(f"cat {files[0]} | {ARBITER_BIN} replay /dev/stdin", shell=True,
                           capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert piped.returncode == 2, piped
    assert "is not a regular file (a pipe, a device, a folder?)" in piped.stderr, piped.stderr


def test_an_unwritable_log_path_stops_the_server_with_the_reason(tmp_path):
    bad = tmp_path / "no" / "such" / "dir" / "r.jsonl"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[replay]\npath = "{bad}"\n')
    done = subprocess.run([ARBITER_BIN, "serve", "--port", "0", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 2
    assert "replay.path" in done.stderr and str(bad) in done.stderr, done.stderr


def test_a_full_disk_at_start_is_served_through_as_one_that_fills_later(tmp_path):
    """A pod restarted with its log volume full serves as it would have had the disk filled
    under it (records counted as failed), rather than not at all (exit 2)."""
    full = Path("/dev/full")  # every write: ENOSPC
    if not full.exists():
        pytest.skip("no /dev/full here")
    log = tmp_path / "server.log"
    with open(log, "w") as err:
        s = start_server(tmp_path, f'[replay]\npath = "{full}"\n', stderr=err)
        try:
            status, _, body = s.score({"items": [{"reward": "lexical", "solution_str": "a b",
                                                  "ground_truth": ["a b"]}]})
            assert status == 200 and body["results"][0]["status"] == "ok", body
            # The writer is off the hot path: its count may come a moment after the answer.
            deadline = time.time() + 30
            while True:
                _, _, metrics = s.request("GET", "/metrics")
                failed = [x for x in metrics.splitlines()
                          if x.startswith('arbiter_replay_records_total{result="failed"}')]
                if (failed and float(failed[0].split()[-1]) >= 1) or time.time() > deadline:
                    break
                time.sleep(0.05)
            assert failed and float(failed[0].split()[-1]) >= 1, failed
            # /info says where the log goes and how its records fare.
            _, _, info = s.request("GET", "/info")
            replay_info = info["replay"]
            assert replay_info["enabled"] and replay_info["path"] == str(full), replay_info
            assert replay_info["records"]["failed"] >= 1, replay_info
            assert replay_info["records"]["written"] == 0, replay_info
        finally:
            assert s.stop() == 0
    text = log.read_text()
    assert "serving anyway" in text and text.count("cannot write") == 1, text


def test_failures_replay_too_and_items_that_never_ran_say_why(make_server, provider, tmp_path):
    # The judge's provider is down: each judge item fails with its call's error (evidence:
    # the failed answers), and replays to the same failure. A reward no source serves, with no
    # fallback, fails before it runs: not replayable, with the reason.
    down = provider("--outage", "0:3600")
    log = tmp_path / "faults.jsonl"
    s = make_server("[routing]\nhedge = false\nmax_attempts = 1\n\n"
                    + source_toml("llm", down.url, "openai", ["chat"])
                    + '[rewards.strict]\nkind = "info_gain"\nfallback = "none"\n\n'
                    + f'[replay]\npath = "{log}"\n')
    items = [{"reward": "judge", "solution_str": f"a {i}", "ground_truth": "b",
              "extra_info": {"problem": "p"}} for i in range(3)]
    # No source here samples or compares (generate, nli, ig): it fails before it runs.
    items.append({"reward": "strict", "solution_str": "x", "ground_truth": ["y"],
                  "extra_info": {"question": "q"}})
    status, _, body = s.score({"items": items, "deadline_ms": 10000})
    assert status == 200, body
    assert [r["status"] for r in body["results"]] == ["failed"] * 4, body
    assert body["results"][0]["error"]["code"] == "upstream_failed", body
    assert body["results"][3]["error"]["code"] == "no_eligible_source", body
    assert s.stop() == 0
    # A failure is logged as the trainer got it: no score, never a 0.
    failed = [r for r in records(log)
              if r["type"] != "start" and r["result"]["status"] == "failed"]
    assert len(failed) >= 4 and all(r["result"]["score"] is None for r in failed), failed
    code, summary, err = replay(str(log))
    assert code == 0, (summary, err)
    assert summary["by_kind"]["judge"] == {"items": 3, "identical": 3, "differs": 0,
                                           "not_replayable": 0}, summary
    assert summary["by_kind"]["info_gain"]["not_replayable"] == 1, summary
    assert any("no_eligible_source" in reason
               for reason in summary["not_replayable_reasons"]), summary
    # Reasons are grouped whole: a hang-up's lost its end at 120 characters (helper-64).
    hung = next(r for r in records(log) if r["type"] == "item" and r["kind"] == "info_gain")
    hung["result"]["code"] = "client_closed"
    hung["result"]["error"] = ("the client closed its connection before the answer; this "
                               "item's remaining work was dropped")
    alone = tmp_path / "hung.jsonl"
    alone.write_text(json.dumps(hung) + "\n")
    code, summary, err = replay(str(alone))
    assert code == 0, (summary, err)
    assert list(summary["not_replayable_reasons"]) == [
        "info_gain: failed before its reward was computed (client_closed: the client closed "
        "its connection before the answer; this item's remaining work was dropped)"], summary
    # Records the server could not log (the writer behind, the disk full) leave a gap record:
    # replay says the log is incomplete rather than 100 % identical.
    with open(log, "a") as f:
        f.write(json.dumps({"type": "gap", "time": "2026-01-01T00:00:00.000Z",
                            "dropped": 7}) + "\n")
    code, summary, err = replay(str(log))
    assert code == 1 and summary["dropped_records"] == 7, (summary, err)
    assert "the log is incomplete: at least 7 records never reached it" in err


def test_a_cached_item_replays_from_the_latest_record_that_computed_it(make_server, provider,
                                                                       tmp_path):
    """A cache entry that expired is computed again, here from another source's vectors (the
    first source is down by then): the item cached after that is checked against the second
    computation, not the first."""
    began = time.monotonic()
    first = provider("--outage", "5:3600")
    second = provider("--embedding-dim", "8")
    log = tmp_path / "r.jsonl"
    s = make_server("[routing]\nhedge = false\nmax_attempts = 3\ncache_ttl_ms = 1000\n\n"
                    + source_toml("first", first.url, "tei", ["embed"])
                    + source_toml("second", second.url, "tei", ["embed"])
                    + '[rewards.emb]\nkind = "embedding"\nsources = ["first", "second"]\n\n'
                    + f'[replay]\npath = "{log}"\n')
    item = {"reward": "emb", "solution_str": "a blue whale swims in the deep ocean",
            "ground_truth": ["the whale lives in a cold sea"]}
    answers = []
    for step in ("1", "2", "3", "4"):
        if step == "3":
            time.sleep(max(0.0, began + 5.8 - time.monotonic()))
        status, _, body = s.score({"step": step, "items": [item]})
        assert status == 200, body
        answers.append(body["results"][0])
    assert [a["source"] for a in answers] == ["first", "first", "second", "second"], answers
    assert [bool(a.get("cached")) for a in answers] == [False, True, False, True], answers
    assert answers[0]["score"] != answers[2]["score"]
    assert s.stop() == 0
    code, summary, err = replay(str(log))
    assert code == 0, (summary, err)
    assert summary["items"] == 4 and summary["identical"] == 4, summary


def test_a_cached_twin_answered_before_its_computing_request_ended_replays(make_server,
                                                                           provider, tmp_path):
    """Request A holds an embedding item and a judge item on a slow provider; B sends the same
    embedding item while A still waits and gets it from the cache. A is written after B, but
    the embedding item's record carries the time it got its answer, so replay finds it for
    B's cached twin (helper-52: 'the record of the item that computed it is not in these
    files', though it was)."""
    import threading
    fast = provider()
    slow = provider("--latency-median-ms", "2500", "--latency-p99-ms", "2600")
    log = tmp_path / "r.jsonl"
    s = make_server("[routing]\nhedge = false\n\n"
                    + source_toml("emb", fast.url, "openai", ["embed"])
                    + source_toml("llm", slow.url, "openai", ["chat"])
                    + f'[replay]\npath = "{log}"\n')
    twin = {"reward": "embedding", "solution_str": "the blue whale swims",
            "ground_truth": ["a blue whale"]}
    judged = {"reward": "judge", "solution_str": "x", "ground_truth": "y",
              "extra_info": {"problem": "p"}}
    replies = {}

    def first():
        replies["A"] = s.score({"step": "A", "items": [twin, judged], "deadline_ms": 20000})

    t = threading.Thread(target=first)
    t.start()
    deadline = time.time() + 10
    while time.time() < deadline:  # until the embedding item is in the cache
        status, _, body = s.score({"step": "B", "items": [twin]})
        assert status == 200, body
        if body["results"][0].get("cached"):
            break
        time.sleep(0.1)
    assert body["results"][0].get("cached"), body
    assert t.is_alive(), "A ended before B's twin was cached: the judge was not slow enough"
    t.join(30)
    assert replies["A"][0] == 200, replies["A"]
    assert s.stop() == 0
    lines = [r for r in records(log) if r["type"] == "item"]
    a_twin = next(r for r in lines if r["step"] == "A" and r["kind"] == "embedding")
    a_judge = next(r for r in lines if r["step"] == "A" and r["kind"] == "judge")
    b_cached = next(r for r in lines if r["step"] == "B" and r["result"].get("cached"))
    assert a_twin["time"] <= b_cached["time"] < a_judge["time"], (a_twin, b_cached, a_judge)
    code, summary, err = replay(str(log))
    assert code == 0, (summary, err)
    assert summary["not_replayable"] == 0 and summary["identical"] == summary["items"], summary
