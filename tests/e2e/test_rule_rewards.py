"""verl's rule rewards through the real server: every case of the golden corpus (verl 0.9.1's
own results, tests/backends/make_rule_reward_corpus.py) scored through /v1/score, picked by
data_source alone where the case uses verl's defaults, and through the verl client with only
data_source, solution_str and ground_truth."""
import json
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "backends" / "fixtures" / "rule_reward_cases.jsonl"

# Every data_source verl's default_compute_score sends to a function Arbiter ports.
VERL_DATA_SOURCES = {
    "gsm8k": ["openai/gsm8k"],
    "math": ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"],
    "math_dapo": ["math_dapo", "math", "math_dapo_reasoning", "aime2024", "aime25"],
    "search_r1_qa_em": ["searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                        "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle"],
}


def load_cases():
    with CORPUS.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def as_item(case):
    """The /v1/score item a verl user's data would give: the data_source alone when the case
    uses the function's defaults, else the reward named with its options in extra_info."""
    item = {"solution_str": case["solution_str"], "ground_truth": case["ground_truth"]}
    if case["options"]:
        item["reward"] = case["fn"]
        item["extra_info"] = case["options"]
    else:
        item["data_source"] = case["data_source"]
    return item


def assert_scored_as_verl(server, cases, items):
    """Posts `items` (one per case) in chunks; every result must be ok and equal to verl's,
    math_dapo's extra included and no extra for the others."""
    mismatches = []
    for start in range(0, len(cases), 500):
        chunk = cases[start:start + 500]
        status, _, body = server.score({"items": items[start:start + 500]})
        assert status == 200, body
        for case, result in zip(chunk, body["results"]):
            got = {"score": result["score"]}
            if case["fn"] == "math_dapo":
                got.update(result.get("extra", {}))
            else:
                assert "extra" not in result
            assert result["status"] == "ok", result
            if got != case["expected"]:
                mismatches.append((case, got))
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ; first: {mismatches[:3]}"


def test_every_corpus_case_scores_as_verl_does(server):
    cases = load_cases()
    assert {c["fn"] for c in cases} == set(VERL_DATA_SOURCES)
    assert_scored_as_verl(server, cases, [as_item(c) for c in cases])


def test_unknown_and_unported_data_sources_are_refused_naming_them(server):
    for name in ["numina_olympiads", "hiyouga/geometry3k", "codecontests", "my_dataset"]:
        status, _, body = server.score({"items": [
            {"data_source": name, "solution_str": "x", "ground_truth": "y"}]})
        assert status == 400, body
        assert body["error"]["field"] == "items[0].data_source"
        assert name in body["error"]["message"]
        assert "openai/gsm8k" in body["error"]["message"]  # what is served is listed


def test_verl_client_with_only_verls_arguments(server, monkeypatch):
    """A verl user's compute_score, no reward named: every listed data_source works."""
    from arbiter_client import verl as verl_adapter
    monkeypatch.setenv("ARBITER_URL", server.url)
    samples = {
        "gsm8k": ("Natalia sold 48 clips... #### 72", "72", 1.0),
        "math": ("so the answer is $\\boxed{\\dfrac{1}{2}}$", "\\frac12", 1.0),
        "math_dapo": ("...\nAnswer: 1,000 dollars", "1000", 1.0),
        "search_r1_qa_em": ("<answer> The Paris </answer>", {"target": ["paris"]}, 1.0),
    }
    for fn, names in VERL_DATA_SOURCES.items():
        solution, truth, score = samples[fn]
        for name in names:
            value = verl_adapter.compute_score(data_source=name, solution_str=solution,
                                               ground_truth=truth)
            if fn == "math_dapo":
                # verl's own math_dapo returns this dict; reward_extra_info gets acc and pred.
                assert value == {"score": score, "acc": True, "pred": "1000"}, name
            else:
                assert value == score, name
    wrong = verl_adapter.compute_score(data_source="aime2024", solution_str="Answer: 3",
                                       ground_truth="4", return_dict=True)
    assert wrong["score"] == -1.0 and wrong["acc"] is False and wrong["pred"] == "3"
    assert wrong["arbiter_failed"] == 0


def test_options_from_extra_info_are_checked(server):
    status, _, body = server.score({"items": [
        {"reward": "gsm8k", "solution_str": "#### 1", "ground_truth": "1",
         "extra_info": {"method": "loose"}}]})
    assert status == 400, body
    assert body["error"]["field"] == "items[0].extra_info.method"


def verl_row(index, case):
    """The extra_info row verl's data preprocessing writes and its client forwards: split and
    index, a 128-bit id, the question and the reference solution (LaTeX, quotes, unicode), with
    any options."""
    return {"split": "train", "index": index, "uuid": 2 ** 127 + index,
            "question": "Compute \\frac{3}{4} of \"12\" apples — how many? ÷ Ελλάδα \u2028 end",
            "answer": case["solution_str"][:400], "nested": {"method": "strict", "list": [1, None]},
            **case["options"]}


def test_a_trainers_dataset_row_in_extra_info_changes_no_score(server):
    # Only the reward's own keys are read from extra_info; the rest of the row is skipped.
    cases = load_cases()
    items = [{**as_item(case), "extra_info": verl_row(index, case)}
             for index, case in enumerate(cases)]
    assert_scored_as_verl(server, cases, items)
    # A bad option among the row's fields is still refused by name.
    row = verl_row(0, {"solution_str": "", "options": {"format_score": "high"}})
    status, _, body = server.score({"items": [
        {"reward": "gsm8k", "solution_str": "#### 1", "ground_truth": "1", "extra_info": row}]})
    assert status == 400, body
    assert body["error"]["field"] == "items[0].extra_info.format_score"


@pytest.mark.parametrize("truth", [{"target": "Paris"}, ["Paris"], "Paris"])
def test_search_r1_ground_truth_shapes(server, truth):
    status, _, body = server.score({"items": [
        {"data_source": "searchR1_nq", "solution_str": "<answer>paris</answer>",
         "ground_truth": truth}]})
    assert status == 200, body
    assert body["scores"] == [1.0]


def test_no_reference_scores_search_r1_as_verl_does_and_fails_only_its_item(server, monkeypatch):
    """A search-R1 row with no golden answer ({"target": []}, a numpy array in verl's parquet
    rows) scores as verl's em_check does: no match. It was a 400 for the whole batch."""
    import numpy as np
    from arbiter_client import verl as verl_adapter
    monkeypatch.setenv("ARBITER_URL", server.url)
    scores = verl_adapter.compute_score_batched(
        data_sources=["searchR1_nq"] * 3,
        solution_strs=["<answer>paris</answer>", "<answer>paris</answer>", "no answer"],
        ground_truths=[{"target": np.array(["Paris"], dtype=object)},
                       {"target": np.array([], dtype=object)}, {"target": []}])
    assert scores == [1.0, 0.0, 0.0]
    status, _, body = server.score({"items": [
        {"data_source": "searchR1_nq", "solution_str": "<answer>x</answer>",
         "ground_truth": {"target": []}},
        {"reward": "search_r1_qa_em", "solution_str": "<answer>x</answer>",
         "ground_truth": [], "extra_info": {"format_score": 0.2}},
        {"reward": "lexical", "solution_str": "a", "ground_truth": []},
        {"reward": "lexical", "solution_str": "a", "ground_truth": "a"}]})
    assert status == 200, body
    assert body["scores"][:2] == [0.0, 0.2] and body["scores"][3] == 1.0
    failed = body["results"][2]
    assert failed["status"] == "failed", failed
    assert failed["error"]["message"] == "ground_truth is empty", failed


def test_picked_by_data_source_the_rows_extra_info_is_ignored_as_verl_does(server):
    """verl's default_compute_score calls the rule with its defaults whatever the row holds:
    a row field that happens to be an option's name changes nothing (verl 0.9.1's results)."""
    rows = [
        ({"data_source": "openai/gsm8k", "solution_str": "#### 72", "ground_truth": "72",
          "extra_info": {"score": 0.35, "split": "train", "index": 3}}, 1.0),
        ({"data_source": "openai/gsm8k", "solution_str": "the answer is 72",
          "ground_truth": "72", "extra_info": {"method": "flexible"}}, 0.0),
        ({"data_source": "openai/gsm8k", "solution_str": "#### 72", "ground_truth": "72",
          "extra_info": {"method": "cot"}}, 1.0),  # a value verl never reads: no 400
        ({"data_source": "math_dapo", "solution_str": "Answer: 5", "ground_truth": "5",
          "extra_info": {"strict_box_verify": True}}, 1.0),
        ({"data_source": "searchR1_nq", "solution_str": "<answer>x</answer>",
          "ground_truth": {"target": ["y"]}, "extra_info": {"format_score": 0.2}}, 0.0),
    ]
    status, _, body = server.score({"items": [item for item, _ in rows]})
    assert status == 200, body
    assert body["scores"] == [want for _, want in rows]
    # Named, the reward takes its options from extra_info, as documented.
    item = dict(rows[0][0], reward="gsm8k")
    assert server.score({"items": [item]})[2]["scores"] == [0.35]


@pytest.mark.parametrize("name", ["mathvista", "math_reward", "lighteval/MATH-Hard",
                                  "HuggingFaceH4/MATH-500-extra", "openai/gsm8k_v2",
                                  "openai/gsm8k ", "searchR1_other"])
def test_a_data_source_verl_refuses_is_refused_not_scored_by_a_neighbours_rule(server, name):
    status, _, body = server.score({"items": [
        {"data_source": name, "solution_str": "Answer: 5", "ground_truth": "5"}]})
    assert status == 400, body
    assert body["error"]["field"] == "items[0].data_source"
