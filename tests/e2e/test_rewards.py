"""The rewards with the seeds' semantics, end to end: real fake-provider processes on loopback
serve chat, completions with log-probabilities, embeddings and NLI; Arbiter computes the
embedding, judge, info_gain (graph) and em_info_gain rewards and /compute_info_gain."""

import difflib
import math

import pytest

from arbiter_testing import source_toml
from test_remote_sources import jaccard


def graph_config(p, extra=""):
    """Generation and NLI on one fake provider, judge and embeddings too."""
    return ("[routing]\nhedge = false\n\n"
            + source_toml("llm", p.url, "openai", ["chat", "generate"])
            + source_toml("tei", p.url, "tei", ["embed", "nli"])
            + extra)


def seed_penalty(reference, candidate, kind, threshold=1.5):
    """verl embedding_remote's _compute_length_penalty, written out for the test."""
    r, c = len(reference.split()), len(candidate.split())
    short, long_ = c / r, r / c
    if 1 / threshold <= short <= threshold:
        return 1.0
    ratio = min(short, long_)
    return {"none": 1.0, "ratio": min(1.0, ratio), "sqrt": min(1.0, ratio ** 0.5),
            "log": min(1.0, math.log(1 + min(r, c)) / math.log(1 + max(r, c))),
            "quadratic": min(1.0, ratio ** 2),
            "exponential": min(1.0, math.exp(-(1 - ratio)))}[kind]


def test_embedding_length_penalties_scale_the_unit_cosine(make_server, provider):
    p = provider()
    s = make_server(graph_config(p))
    cand = "the cat sat on the mat today"
    ref = "a cat sat on a mat"
    long_cand = cand + " and then it went out to play in the garden for a long while"
    items = [{"reward": "embedding", "solution_str": c, "ground_truth": [ref],
              "extra_info": {"length_penalty": kind}}
             for c in (cand, long_cand)
             for kind in ("none", "ratio", "sqrt", "log", "quadratic", "exponential")]
    status, _, body = s.score({"items": items})
    assert status == 200, body
    r = body["results"]
    assert all(x["status"] == "ok" and x["source"] == "tei" for x in r), r
    for block in (r[:6], r[6:]):
        base = block[0]["score"]
        assert 0.5 < base <= 1.0
        c = items[r.index(block[0])]["solution_str"]
        for kind, x in zip(("none", "ratio", "sqrt", "log", "quadratic", "exponential"), block):
            assert x["score"] == pytest.approx(base * seed_penalty(ref, c, kind), rel=1e-9), kind


def test_embedding_target_gt_scores_against_that_reference_only(make_server, provider):
    p = provider()
    s = make_server(graph_config(p))
    item = {"reward": "embedding", "solution_str": "blue whale",
            "ground_truth": ["blue whale", "red fox"]}
    targeted = dict(item, extra_info={"target_gt": "red fox"})
    status, _, body = s.score({"items": [item, targeted]})
    assert status == 200, body
    best, target = body["scores"]
    assert best == pytest.approx(1.0)
    assert target < 0.8, "only 'red fox' is compared"


def test_embedding_falls_back_to_lexical_when_its_source_is_down(make_server, provider):
    p = provider("--outage", "0:3600")
    s = make_server("[routing]\nhedge = false\nmax_attempts = 2\n\n"
                    + source_toml("tei", p.url, "tei", ["embed"]))
    cand, ref = "The Cat sat", "the cat SAT down"
    status, _, body = s.score({"items": [{"reward": "embedding", "solution_str": cand,
                                          "ground_truth": [ref]}], "deadline_ms": 5000})
    assert status == 200, body
    r = body["results"][0]
    assert r["status"] == "fallback" and r["source"] == "lexical", r
    assert "tei" in r["fallback_reason"] and "503" in r["fallback_reason"], r
    # The seeds' fallback: difflib on lower-cased texts.
    expected = difflib.SequenceMatcher(None, cand.lower(), ref.lower()).ratio()
    assert r["score"] == pytest.approx(expected, rel=1e-12)
    _, _, metrics = s.request("GET", "/metrics")
    assert 'arbiter_items_total{reward="embedding",status="fallback"} 1' in metrics


def test_a_judge_items_wait_for_its_call_is_its_queue_time(make_server, provider):
    """A judge item went to the reward graph at once: its queue_ms was near 0 and its call's
    wait behind the others showed as run_ms; the queue-wait histogram counted every item twice,
    half of them near 0 (helper-36)."""
    p = provider("--latency-median-ms", "300")
    s = make_server("[routing]\nhedge = false\n\n"
                    + source_toml("llm", p.url, "openai", ["chat"], max_concurrency=1))
    items = [{"reward": "judge", "solution_str": f"answer {i}", "ground_truth": [f"ref {i}"]}
             for i in range(4)]
    status, _, body = s.score({"items": items, "deadline_ms": 20000})
    assert status == 200, body
    results = body["results"]
    assert all(r["status"] == "ok" and r["attempts"] == 1 for r in results), results
    assert max(r["queue_ms"] for r in results) >= 500, "the last call waited behind two or three"
    assert all(r["run_ms"] < 900 for r in results), [r["run_ms"] for r in results]
    _, _, metrics = s.request("GET", "/metrics")
    assert 'arbiter_queue_wait_seconds_count{priority="normal"} 4' in metrics


def test_an_embedding_item_without_a_reference_fails_as_such_with_no_call(make_server,
                                                                          provider):
    """It was sent to the provider and failed after its vector came back: under an outage it
    failed upstream_failed after three calls, which /remote_rm answered 503, a status a
    trainer retries, though no retry can score it (helper-38)."""
    p = provider("--outage", "0:3600")
    s = make_server("[routing]\nhedge = false\n\n" + source_toml("tei", p.url, "tei", ["embed"]))
    good = {"reward": "embedding", "solution_str": "a cat", "ground_truth": ["a cat"]}
    status, _, body = s.score({"items": [{"reward": "embedding", "solution_str": "a cat",
                                          "ground_truth": gt} for gt in ([], {"target": []})]
                               + [good], "deadline_ms": 3000})
    assert status == 200, body
    for r in body["results"][:2]:
        assert r["status"] == "failed" and r["error"]["code"] == "reward_failed", r
        assert "at least one reference" in r["error"]["message"], r
        assert r["attempts"] == 0, r
    assert body["results"][2]["status"] == "fallback", "the healthy item still takes its course"
    calls = p.stats()["requests_total"]
    status, _, body = s.request("POST", "/remote_rm?reward=embedding",
                                {"response": "a cat", "label": None})
    assert status == 422, body
    assert p.stats()["requests_total"] == calls, "no call for it"


def test_a_reward_without_fallback_fails_explicitly(make_server, provider):
    p = provider("--outage", "0:3600")
    s = make_server("[routing]\nhedge = false\nmax_attempts = 2\n\n"
                    + source_toml("tei", p.url, "tei", ["embed"])
                    + '[rewards.strict]\nkind = "embedding"\nfallback = "none"\n')
    status, _, body = s.score({"items": [{"reward": "strict", "solution_str": "a",
                                          "ground_truth": ["a"]}], "deadline_ms": 5000})
    assert status == 200, body
    r = body["results"][0]
    assert r["status"] == "failed" and r["error"]["code"] == "upstream_failed", r


def test_judge_templates_votes_and_max_over_references(make_server, provider):
    p = provider()
    s = make_server(graph_config(p))
    cand = "four is the answer"
    refs = ["the answer is four", "completely unrelated words"]
    items = [{"reward": "judge", "solution_str": cand, "ground_truth": refs,
              "extra_info": {"problem": "What is 2+2?", "prompt_template": t, "n": n}}
             for t, n in (("default", 1), ("detailed", 3))]
    custom = "Grade it.\nReference: {REFERENCE_SOLUTION}\nCandidate: {CANDIDATE_SOLUTION}"
    items.append({"reward": "judge", "solution_str": " {PROBLEM} ünïcode ", "ground_truth": ["ünïcode {x}"],
                  "extra_info": {"prompt_template": custom}})
    status, _, body = s.score({"items": items})
    assert status == 200, body
    r = body["results"]
    best = max(jaccard(cand, ref) for ref in refs)
    assert r[0]["status"] == "ok" and r[0]["score"] == pytest.approx(best), r[0]
    assert r[1]["score"] == pytest.approx(best), "votes averaged, max over references"
    assert r[0]["source"] == "llm" and r[0]["attempts"] == 2, "one call per reference"
    assert r[2]["score"] == pytest.approx(jaccard("{PROBLEM} ünïcode", "ünïcode {x}")), r[2]


def test_a_judge_reply_without_a_score_fails_the_item_quoting_it(make_server, provider):
    p = provider()
    s = make_server(graph_config(p))
    # Without "Reference:" and "Candidate:" the fake provider answers with filler words.
    item = {"reward": "judge", "solution_str": "x", "ground_truth": ["y"],
            "extra_info": {"prompt_template": "Say something about {CANDIDATE_SOLUTION}"}}
    status, _, body = s.score({"items": [item]})
    assert status == 200, body
    r = body["results"][0]
    assert r["status"] == "failed" and r["error"]["code"] == "reward_failed", r
    assert "no REWARD score" in r["error"]["message"] and '"' in r["error"]["message"], r


def test_bad_options_are_a_400_naming_the_field(make_server, provider):
    p = provider()
    s = make_server(graph_config(p))
    item = {"reward": "embedding", "solution_str": "a", "ground_truth": ["a"],
            "extra_info": {"length_penalty": "cubic"}}
    status, _, body = s.score({"items": [{"reward": "lexical", "solution_str": "a",
                                          "ground_truth": ["a"]}, item]})
    assert status == 400, body
    assert body["error"]["field"] == "items[1].extra_info.length_penalty", body
    assert "cubic" in body["error"]["message"]


def recompute_soft_ig(side, answers):
    """ΔIG's side from the service-shaped details, straight from the formula."""
    samples = side["samples"]
    m = [x["mean_loglik"] for x in samples]
    top = max(m)
    w = [math.exp(v - top) for v in m]
    w = [v / sum(w) for v in w]
    ent = side["entailment"]
    n_r, n_a = ent["n_responses"], ent["n_answers"]
    assert (n_r, n_a) == (len(samples), len(answers))
    e1, e2 = ent["resp_entails_ans"], ent["ans_entails_resp"]
    return max(sum(w[r] * max(e1[r * n_a + a], e2[r * n_a + a]) for r in range(n_r))
               for a in range(n_a))


def test_compute_info_gain_round_trip_through_the_graph(make_server, provider):
    p = provider()
    s = make_server(graph_config(p))
    items = [{"question": "What is the capital of France",
              "context": "Paris is the capital of France.", "answers": ["Paris"]},
             {"question": "Who wrote Hamlet?", "context": "", "answers": "Shakespeare"},
             {"question": "missing context", "answers": ["x"]}]
    status, _, body = s.request("POST", "/compute_info_gain",
                                {"items": items, "options": {"num_samples": 4, "seed": 7}})
    assert status == 200, body
    assert len(body["scores"]) == 3 and len(body["details"]) == 3
    assert body["scores"][2] is None and "context" in body["errors"][2]
    for i in range(2):
        assert body["errors"][i] is None, body["errors"][i]
        d = body["details"][i]
        assert len(d["with_context"]) == 4 and len(d["no_context"]) == 4
        answers = items[i]["answers"] if isinstance(items[i]["answers"], list) else [items[i]["answers"]]
        side = {"samples": d["with_context"], "entailment": d["entailment_with_context"]}
        base = {"samples": d["no_context"], "entailment": d["entailment_no_context"]}
        expected = recompute_soft_ig(side, answers) - recompute_soft_ig(base, answers)
        assert body["scores"][i] == pytest.approx(expected, abs=1e-9)
        assert set(body["results"][i]["sources"]) == {"llm", "tei"}
    # The same item through /v1/score gives the same ΔIG (calls are cached and coalesced).
    status, _, scored = s.score({"items": [{
        "reward": "info_gain", "solution_str": items[0]["context"], "ground_truth": ["Paris"],
        "extra_info": {"question": items[0]["question"], "num_samples": 4, "seed": 7}}]})
    assert status == 200, scored
    assert scored["scores"][0] == pytest.approx(body["scores"][0], abs=1e-12)


def test_semantic_entropy_variants_answer_per_request(make_server, provider):
    p = provider()
    s = make_server(graph_config(p))
    items = [{"question": "What is the capital of France",
              "context": "Paris is the capital of France.", "answers": ["Paris"]}]
    for variant in ("se_rao", "se_discrete", "hard"):
        status, _, body = s.request("POST", "/compute_info_gain", {
            "items": items, "options": {"variant": variant, "num_samples": 3,
                                        "clustering": "loose"}})
        assert status == 200, body
        assert body["errors"][0] is None, body
        assert -10 < body["scores"][0] < 10
    status, _, body = s.request("POST", "/compute_info_gain",
                                {"items": items, "options": {"variant": "se_magic"}})
    assert status == 400 and body["error"]["field"] == "options.variant", body
    # A key given twice is refused by its path, as on every route (helper-54: the last was
    # taken unseen).
    status, _, body = s.request("POST", "/compute_info_gain",
                                '{"items": [{"question": "q", "question": "r", "context": "c",'
                                ' "answers": ["a"]}]}')
    assert status == 400 and body["error"]["field"] == "items[0].question", body
    assert body["error"]["message"] == "items[0].question: given twice"
    status, _, body = s.request("POST", "/compute_info_gain", "[1]")
    assert status == 400, body
    assert body["error"]["message"] == "body: expected a JSON object with an 'items' list"
    # An optional field of null is absent, as on /v1/score and the OpenAI routes.
    status, _, body = s.request("POST", "/compute_info_gain", {
        "items": items, "reward": None, "priority": None, "deadline_ms": None, "options": None})
    assert status == 200 and body["errors"][0] is None, body


def test_em_info_gain_adds_the_weighted_delta_when_the_rollout_searched(make_server, provider):
    p = provider()
    s = make_server(graph_config(p))
    question = "What is the capital of France?"
    context = "Paris is the capital of France."
    rollout = ("<|im_start|>user\nAnswer the question. Question: " + question
               + "\n<|im_end|>\n<|im_start|>assistant\n<search>capital of France</search>"
               "<information>" + context + "</information><answer> Paris </answer>")
    no_search = ("<|im_start|>user\nQuestion: " + question
                 + "\n<|im_end|>\n<|im_start|>assistant\n<answer>Lyon</answer>")
    # Searched, but never answered: 0, as qa_em.py's `answer is None`.
    unanswered = rollout.replace("<answer> Paris </answer>", "It is Paris.")
    status, _, body = s.score({"items": [
        {"reward": "em_info_gain", "solution_str": rollout, "ground_truth": ["Paris"],
         "extra_info": {"num_samples": 3}},
        {"reward": "em_info_gain", "solution_str": no_search, "ground_truth": ["Paris"]},
        {"reward": "em_info_gain", "solution_str": unanswered, "ground_truth": ["Paris"]}]})
    assert status == 200, body
    searched, plain, silent = body["results"]
    assert plain["status"] == "ok" and plain["score"] == 0.0
    assert silent["status"] == "ok" and silent["score"] == 0.0, silent
    status, _, ig = s.request("POST", "/compute_info_gain", {
        "items": [{"question": question, "context": context, "answers": ["Paris"]}],
        "options": {"num_samples": 3}})
    assert status == 200, ig
    assert searched["status"] == "ok", searched
    assert searched["score"] == pytest.approx(1.0 + 0.6 * ig["scores"][0], abs=1e-12)
