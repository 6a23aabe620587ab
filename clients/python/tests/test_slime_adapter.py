"""arbiter_client.slime against a real Arbiter (through a recording stand-in): rm and
batched_rm with Sample-like objects."""
import inspect
from types import SimpleNamespace

import pytest
from client_testing import FakeScalar, failing_item, ratio, run_async

from arbiter_client.slime import batched_rm, rm


def sample(prompt, response, label, metadata=None):
    return SimpleNamespace(prompt=prompt, response=response, label=label, metadata=metadata,
                           tokens=[1, 2, 3], status="completed", index=0)


def test_rm_scores_one_sample(scripted, arbiter_env):
    proxy = scripted()
    arbiter_env(proxy.url)
    args = SimpleNamespace(arbiter_reward="lexical")
    assert inspect.iscoroutinefunction(rm) and inspect.iscoroutinefunction(batched_rm)
    score = run_async(rm, args, sample("<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
                                       "The answer is 4", "4", {"task": "math",
                                                                "rm_type": "remote_rm"}))
    assert score == ratio("The answer is 4", "4")
    items = proxy.items()
    assert items[0].pop("group").startswith("slime:"), "the prompt's group"
    assert items == [{
        "reward": "lexical", "solution_str": "The answer is 4", "ground_truth": "4",
        "extra_info": {"task": "math", "rm_type": "remote_rm",
                       "question": "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"}}]


def test_batched_rm_keeps_order_and_reads_message_prompts(scripted, arbiter_env):
    proxy = scripted()
    arbiter_env(proxy.url, ARBITER_REWARD="exact_match")
    messages = [{"role": "user", "content": "Capital of France?"}]
    group = [sample(messages, "Paris", "paris", {"question": "raw question"}),
             sample(messages, "Lyon", ["Paris"]),
             sample("plain prompt", "the paris", "Paris", "not a dict"),
             sample("2+2?", "4", 4), sample("half?", "0.5", FakeScalar(0.5)),
             sample("big?", "1e+16", 1e16)]
    assert run_async(batched_rm, SimpleNamespace(), group) == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    items = proxy.items()
    assert len(proxy.requests) == 1
    assert [i["extra_info"]["question"] for i in items] == [
        "raw question", "Capital of France?", "plain prompt", "2+2?", "half?", "big?"]
    assert [i["ground_truth"] for i in items[3:]] == ["4", "0.5", "1e+16"]
    assert all(i["reward"] == "exact_match" for i in items)
    assert len({i["group"] for i in items}) == 1, "the call is the group"


def test_slimes_group_index_names_the_group_and_its_weight_version_the_step(scripted,
                                                                          arbiter_env):
    """helper-72: the group was the prompt's text, though slime numbers each prompt's samples
    with a run-wide group_index (a dataset's duplicate prompts, or one prompt in two rollouts,
    were one group); and no step was sent, though each sample records the weight version of
    the policy that generated it."""
    proxy = scripted()
    arbiter_env(proxy.url, ARBITER_REWARD="exact_match")

    def generated(group_index, versions):
        s = sample("Q?", "4", "4")
        s.group_index, s.weight_versions = group_index, versions
        return s

    for s in (generated(7, ["12"]), generated(7, ["11", "12"]), generated(8, ["12"])):
        assert run_async(rm, SimpleNamespace(), s) == 1.0
    groups = [proxy.items(i)[0]["group"] for i in range(3)]
    assert groups[0] == groups[1] == "slime:g7" and groups[2] == "slime:g8", groups
    assert [proxy.requests[i][2].get("step") for i in range(3)] == ["12", "12", "12"]
    # A list takes its latest version; a sample with none, or none recorded, sends no step.
    assert run_async(rm, SimpleNamespace(), [generated(9, ["9"]), generated(9, ["10"])]) == \
        [1.0, 1.0]
    assert proxy.requests[-1][2].get("step") == "10"
    assert run_async(rm, SimpleNamespace(), sample("Q?", "4", "4")) == 1.0
    assert "step" not in proxy.requests[-1][2]
    assert proxy.items(len(proxy.requests) - 1)[0]["group"].startswith("slime:")


def test_a_missing_label_is_a_clear_error(arbiter, arbiter_env):
    arbiter_env(arbiter.url, ARBITER_REWARD="lexical")
    with pytest.raises(ValueError, match=r"^sample\.label is None"):
        run_async(rm, SimpleNamespace(), sample("p", "r", None))
    with pytest.raises(ValueError, match=r"^samples\[1\]\.label is None"):
        run_async(batched_rm, SimpleNamespace(), [sample("p", "r", "x"), sample("p", "r", None)])


def test_failure_policies(arbiter, arbiter_env):
    bad = sample("p", failing_item()["solution_str"], "x")
    args = SimpleNamespace(arbiter_reward="lexical", arbiter_url=arbiter.url)
    arbiter_env("http://127.0.0.1:9", ARBITER_ON_FAILURE="value", ARBITER_FAILURE_SCORE="-1")
    assert run_async(batched_rm, args, [bad, sample("p", "x", "x")]) == [-1.0, 1.0]
    arbiter_env("http://127.0.0.1:9", ARBITER_ON_FAILURE="raise")
    from arbiter_client import ArbiterItemError
    with pytest.raises(ArbiterItemError):
        run_async(rm, args, bad)
    arbiter_env("http://127.0.0.1:9", ARBITER_ON_FAILURE="none")
    with pytest.raises(ValueError, match="slime"):
        run_async(rm, args, bad)


def test_rm_takes_the_list_slimes_fan_out_passes(scripted, arbiter_env):
    """A --custom-generate-function-path that returns list[Sample] (slime's agent docs), with no
    --group-rm: slime's generate_and_rm calls batched_async_rm(args, samples), which calls the
    --custom-rm-path function with the list and zips the rewards back onto it in order."""
    proxy = scripted()
    arbiter_env(proxy.url, ARBITER_REWARD="exact_match")
    segments = [sample("Q: a?", "4", "4"), sample("Q: a?", "5", "4"),
                sample("Q: b?", "x", "x")]
    assert run_async(rm, SimpleNamespace(), segments) == [1.0, 0.0, 1.0]
    assert len(proxy.requests) == 1, "the list in one request"
    groups = [i["group"] for i in proxy.items()]
    assert groups[0] == groups[1] != groups[2], "each sample's group is its prompt's"
    assert run_async(rm, SimpleNamespace(), []) == [], "every sample already had a reward"
    assert len(proxy.requests) == 1, "nothing to send"
    with pytest.raises(ValueError, match=r"^samples\[1\]\.label is None"):
        run_async(rm, SimpleNamespace(), [sample("p", "r", "x"), sample("p", "r", None)])


def test_batched_rm_takes_a_group_whose_rollouts_are_lists(scripted, arbiter_env):
    """Under --group-rm, slime's generate_and_rm_group gathers what generate_and_rm returned
    per rollout: a Sample, or a list of them for a generate function that fans out. Such an
    entry gets a list of rewards, in order."""
    proxy = scripted()
    arbiter_env(proxy.url, ARBITER_REWARD="exact_match")
    group = [[sample("Q?", "4", "4"), sample("Q?", "3", "4")], sample("Q?", "4", "4"),
             [sample("Q?", "5", "4")], []]
    assert run_async(batched_rm, SimpleNamespace(), group) == [[1.0, 0.0], 1.0, [0.0], []]
    items = proxy.items()
    assert len(proxy.requests) == 1 and len(items) == 4
    assert [i["solution_str"] for i in items] == ["4", "3", "4", "5"]
    assert len({i["group"] for i in items}) == 1, "the call is the group"
    with pytest.raises(ValueError, match=r"^samples\[0\]\[1\]\.label is None"):
        run_async(batched_rm, SimpleNamespace(), [[sample("p", "r", "x"), sample("p", "r", None)]])
