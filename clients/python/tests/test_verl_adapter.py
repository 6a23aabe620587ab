"""arbiter_client.verl against a real Arbiter: the shapes verl calls and reads."""
import asyncio
import inspect

import pytest
from client_testing import FakeArray, FakeScalar, failing_item, ratio, run_async

from arbiter_client import ArbiterItemError
from arbiter_client.verl import (DICT_KEYS, compute_score, compute_score_async,
                                 compute_score_batched)


def test_sync_returns_a_float_and_ignores_what_verl_adds(arbiter, arbiter_env):
    arbiter_env(arbiter.url)
    score = compute_score(data_source="gsm8k/main", solution_str="72", ground_truth="72",
                          extra_info={"split": "train", "index": 0, "num_turns": 2},
                          reward_router_address="10.0.0.5:41234",
                          reward_model_tokenizer=object())
    assert score == 1.0 and isinstance(score, float)
    # Positional, as the PRIME manager calls it; reward from reward_kwargs.
    assert compute_score("anything", "abc", "abd", None, reward="lexical") == ratio("abc", "abd")


def test_async_is_a_coroutine_function_and_runs_a_batch_concurrently(arbiter, arbiter_env):
    arbiter_env(arbiter.url, ARBITER_REWARD="lexical")
    assert inspect.iscoroutinefunction(compute_score_async)

    async def batch():
        return await asyncio.gather(*[
            compute_score_async(data_source="x", solution_str=f"answer {i}",
                                ground_truth=f"answer {i % 3}", extra_info={"index": i})
            for i in range(20)])

    assert run_async(batch) == [ratio(f"answer {i}", f"answer {i % 3}") for i in range(20)]


def test_reward_kwargs_override_the_environment(arbiter, arbiter_env):
    arbiter_env("http://127.0.0.1:9", ARBITER_REWARD="exact_match", ARBITER_RETRIES="0")
    kwargs = {"service_url": arbiter.url, "reward": "lexical", "timeout_s": 10,
              "on_failure": "value", "failure_score": -1.0}
    assert compute_score("x", "ab", "ab", **kwargs) == {
        "score": 1.0, "acc": 1.0, "pred": None, "arbiter_failed": 0, "arbiter_fallback": 0, "arbiter_cached": 0,
        "arbiter_queue_ms": pytest.approx(0, abs=1000), "arbiter_run_ms": pytest.approx(0, abs=1000)}
    failed = compute_score("x", failing_item()["solution_str"], "x", **kwargs)
    assert failed["score"] == -1.0 and failed["arbiter_failed"] == 1
    # A nested reward_kwargs dict works too.
    assert compute_score("x", "ab", "ab", reward_kwargs={"service_url": arbiter.url,
                                                         "reward": "lexical"}) == 1.0


def test_dicts_have_the_same_keys_and_scalar_values_for_every_sample(
        arbiter, down_arbiter, arbiter_env):
    # math_dapo gives acc and pred beside its score; mixed with other rewards in one run,
    # verl indexed every sample with the first one's keys: a KeyError, or math_dapo's dropped.
    arbiter_env(arbiter.url, ARBITER_ON_FAILURE="value", ARBITER_FAILURE_SCORE="0.25")
    rows = compute_score_batched(
        data_sources=["lexical", "lexical", "gsm8k", "lexical"],
        solution_strs=["same", failing_item()["solution_str"], "7", "abc"],
        ground_truths=["same", "x", ["7"], "abd"],
        extra_infos=[{}, None, {"index": 3}, {}])
    rows.append(compute_score(None, "Answer: 12", "12", reward="math_dapo"))
    fallback = compute_score(None, "The Cat", "the cat sat", reward="soft",
                             service_url=down_arbiter.url)
    for row in rows + [fallback]:
        assert tuple(sorted(row)) == tuple(sorted(DICT_KEYS))
        assert all(isinstance(v, (int, float)) and not isinstance(v, bool)
                   for k, v in row.items() if k not in ("acc", "pred"))
    assert [r["score"] for r in rows] == [1.0, 0.25, 1.0, ratio("abc", "abd"), 1.0]
    assert [r["arbiter_failed"] for r in rows] == [0, 1, 0, 0, 0]
    # acc is the score where the reward gives none, as verl's reward loop sets it; pred None.
    assert [r["acc"] for r in rows[:4]] == [r["score"] for r in rows[:4]]
    assert rows[4]["acc"] is True and rows[4]["pred"] == "12"
    assert all(r["pred"] is None for r in rows[:4])
    assert fallback["arbiter_fallback"] == 1 and fallback["arbiter_failed"] == 0
    assert fallback["score"] == pytest.approx(ratio("the cat", "the cat sat"))


def test_return_dict_from_the_environment_or_the_kwargs(arbiter, arbiter_env):
    arbiter_env(arbiter.url, ARBITER_REWARD="good_judge", ARBITER_RETURN_DICT="1")

    async def twice():
        first = await compute_score_async("d", "blue sky today", "blue sky",
                                          extra_info={"question": "colour?"})
        second = await compute_score_async("d", "blue sky today", "blue sky",
                                           extra_info={"question": "colour?"})
        return first, second

    first, second = run_async(twice)
    assert tuple(first) == tuple(second) == DICT_KEYS
    # The fake judge scores word overlap; the second answer comes from Arbiter's cache.
    assert first["score"] == second["score"] == pytest.approx(2 / 3, abs=1e-3)
    assert second["arbiter_cached"] == 1
    assert isinstance(compute_score("d", "a", "a", reward="lexical", return_dict=False), float)


def test_policy_raise_fails_the_call_and_none_is_refused(arbiter, arbiter_env):
    arbiter_env(arbiter.url)
    with pytest.raises(ArbiterItemError) as e:
        compute_score("lexical", failing_item()["solution_str"], "x")
    assert e.value.code == "reward_failed"
    with pytest.raises(ValueError, match="on_failure='none' cannot be used with verl"):
        compute_score("lexical", "a", "a", on_failure="none")
    arbiter_env(arbiter.url, ARBITER_ON_FAILURE="none")
    with pytest.raises(ValueError, match="verl"):
        run_async(compute_score_async, "lexical", "a", "a")


def test_numpy_like_ground_truths_and_extra_info(arbiter, arbiter_env):
    arbiter_env(arbiter.url)
    assert compute_score(data_source="gsm8k", solution_str="b",
                         ground_truth=FakeArray(["a", "b"]),
                         extra_info={"index": FakeScalar(4), "answer": FakeArray([1, 2])}) == 1.0
    scores = compute_score_batched(FakeArray(["gsm8k", "gsm8k"]), ["1", "2"],
                                   [FakeArray(["1"]), "3"], None)
    assert scores == [1.0, 0.0]


def test_batched_checks_its_lists(arbiter, arbiter_env):
    arbiter_env(arbiter.url)
    with pytest.raises(ValueError, match="different lengths"):
        compute_score_batched(["a"], ["x", "y"], ["x", "y"], [{}, {}])


def test_verl_can_load_the_file_by_path(arbiter, arbiter_env):
    # What verl's load_extern_object does with reward.custom_reward_function.path.
    import importlib.util

    import arbiter_client.verl
    spec = importlib.util.spec_from_file_location("custom_module_1", arbiter_client.verl.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    arbiter_env(arbiter.url)
    assert module.compute_score("gsm8k", "72", "72") == 1.0
    assert run_async(module.compute_score_async, "gsm8k", "72", "71") == 0.0


def test_samples_go_with_their_grpo_group(scripted, arbiter_env):
    """verl gives reward functions no rollout uid; its preprocessing puts the dataset row's
    split and index in extra_info, which a prompt's rollouts share. A uid there wins."""
    proxy = scripted()
    arbiter_env(proxy.url, ARBITER_REWARD="lexical")
    import numpy as np
    compute_score_batched(["x"] * 5 + ["gsm8k", "MATH"],
                          ["a", "a", "b", "c", "d", "e", "f"], ["a"] * 7,
                          [{"split": "train", "index": 3}, {"split": "train", "index": 3},
                           {"index": 4}, {"uid": "u-1", "index": 3}, {"question": "q"},
                           {"split": "train", "index": np.int64(3)},
                           {"split": "train", "index": 3}])
    # Two datasets' rows with the same split and index are not one group; numpy ints name
    # groups as ints do.
    assert [item.get("group") for item in proxy.items()] == [
        "x:train:3", "x:train:3", "x:index:4", "uid:u-1", None, "gsm8k:train:3",
        "MATH:train:3"]
    # An empty uid names no group: "uid:" made every such row one (helper-57).
    compute_score_batched(["x", "x"], ["a", "b"], ["a", "a"],
                          [{"uid": "", "index": 7}, {"uid": ""}])
    assert [item.get("group") for item in proxy.items()][-2:] == ["x:index:7", None]


def test_the_step_verls_reward_loop_puts_in_extra_info_is_sent(scripted, arbiter_env):
    """helper-71: verl 0.9.1's reward loop merges the rollout's weights version into
    extra_info (`global_steps`; `max_global_steps` for a partial rollout over several), which
    the adapter took for no step. It tags the request and the row's group, so the same row in
    a later epoch is another group."""
    import numpy as np
    proxy = scripted()
    arbiter_env(proxy.url, ARBITER_REWARD="exact_match")
    row = {"split": "train", "index": 3}
    assert compute_score("x", "a", "a", {**row, "global_steps": np.int64(41)}) == 1.0
    assert run_async(compute_score_async, "x", "a", "a",
                     {**row, "global_steps": 41, "min_global_steps": 40,
                      "max_global_steps": 42}) == 1.0
    assert compute_score("x", "a", "a", dict(row)) == 1.0
    bodies = [proxy.requests[i][2] for i in range(3)]
    assert [b.get("step") for b in bodies] == ["41", "42", None]
    assert [b["items"][0]["group"] for b in bodies] == [
        "x:train:3@41", "x:train:3@42", "x:train:3"]
    compute_score_batched(["x", "x"], ["a", "a"], ["a", "a"],
                          [{**row, "global_steps": 9}, {**row, "global_steps": 10}])
    assert proxy.requests[-1][2]["step"] == "10"
    assert compute_score("x", "a", "a", {"uid": "u", "global_steps": 5}) == 1.0
    assert proxy.requests[-1][2]["items"][0]["group"] == "uid:u", "a uid is the group as is"


def test_numbers_in_a_search_r1_target_go_as_python_writes_them(arbiter, arbiter_env):
    """A float32 array inside {"target": ...} went as 0.10000000149011612, so "0.1" scored 0
    (helper-57); at the top level it went as "0.1"."""
    import numpy as np
    arbiter_env(arbiter.url)
    gt = {"target": np.array([0.1], dtype=np.float32), "other": 1}
    for truth in (gt, np.float32(0.1)):
        assert compute_score("searchR1_nq", "<answer>0.1</answer>", truth,
                             reward="search_r1_qa_em") == 1.0, truth


def test_a_row_without_an_answer_or_with_values_json_cannot_carry_fails_alone(arbiter,
                                                                                arbiter_env):
    # A None ground truth was a 400 for the whole request (every row of a batch), and a NaN
    # in extra_info a ValueError before sending: neither reached the failure policy.
    arbiter_env(arbiter.url, ARBITER_ON_FAILURE="value", ARBITER_FAILURE_SCORE="-1")
    rows = compute_score_batched(
        data_sources=["lexical", "lexical", "lexical"], solution_strs=["a", "b", "c\ud800d"],
        ground_truths=["a", None, "c\ufffdd"],
        extra_infos=[{"difficulty": float("nan"), "index": 1}, {}, {"seen": object()}])
    assert [r["score"] for r in rows] == [1.0, -1.0, 1.0], rows
    assert [r["arbiter_failed"] for r in rows] == [0, 1, 0]
