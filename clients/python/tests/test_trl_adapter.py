"""arbiter_client.trl against a real Arbiter (through a recording stand-in, to see the items
sent): the keyword arguments GRPOTrainer passes, string and conversational data."""
import asyncio
import inspect
import random

import pytest
from client_testing import FakeArray, failing_item, ratio

from arbiter_client import ArbiterClient
from arbiter_client.trl import make_async_reward_func, make_reward_func


class TrainerState:  # what TRL passes as trainer_state: not JSON
    global_step = 3


@pytest.fixture
def make_func():
    """make_reward_func, closing each function's client after the test."""
    made = []

    def make(*args, **kwargs):
        made.append(make_reward_func(*args, **kwargs))
        return made[-1]

    yield make
    for f in made:
        f.client.close()


def trl_kwargs(n):
    """The arguments TRL adds beside the dataset columns."""
    return {"completion_ids": [[1, 2]] * n, "trainer_state": TrainerState(),
            "log_extra": lambda column, values: None, "log_metric": lambda name, value: None}


def test_string_data_one_request_in_order_with_the_columns_in_extra_info(scripted,
                                                                         make_func):
    proxy = scripted()
    f = make_func(reward="lexical", url=proxy.url, columns="all")
    assert f.__name__ == "arbiter_lexical"
    prompts = ["Q: colour of the sky?", "Q: 2+2?", "Q: capital of France?"]
    completions = ["blue", "four", "Paris"]
    scores = f(prompts=prompts, completions=completions, ground_truth=["blue", "4", "paris"],
               task=["sky", "math", "geo"], difficulty=[1, 2, FakeArray([3])],
               meta=[{"a": 1}, None, {"b": [2]}], **trl_kwargs(3))
    assert scores == [1.0, ratio("four", "4"), ratio("Paris", "paris")]
    assert len(proxy.requests) == 1
    items = proxy.items()
    group = items[0].pop("group")
    assert items[0] == {"reward": "lexical", "solution_str": "blue", "ground_truth": "blue",
                        "extra_info": {"question": "Q: colour of the sky?", "task": "sky",
                                       "difficulty": 1, "meta": {"a": 1}}}
    assert items[2]["extra_info"]["difficulty"] == [3]
    assert len({group, items[1]["group"], items[2]["group"]}) == 3, "three prompts, three groups"


def test_only_the_question_columns_and_those_named_set_reward_options(scripted, make_func):
    """helper-57: every column went into extra_info, where a reward reads its options: a
    dataset's `score` column became gsm8k's correct score, `method` failed the step with a 400,
    `model` sent another model to the judge's provider."""
    proxy = scripted()
    f = make_func(reward="gsm8k", url=proxy.url)
    prompts = ["Natalia sold clips?"] * 3
    completions = ["#### 72", "#### 71", "no answer"]
    columns = {"ground_truth": ["72"] * 3, "score": [4.5] * 3, "method": ["algebra"] * 3,
               "model": ["deepseek-ai/DeepSeek-R1"] * 3, "problem": ["P"] * 3,
               "data_source": ["openai/gsm8k"] * 3}
    assert f(prompts=prompts, completions=completions, **columns, **trl_kwargs(3)) == \
        [1.0, 0.0, 0.0]
    assert proxy.items()[0]["extra_info"] == {"question": "Natalia sold clips?", "problem": "P"}
    assert proxy.items()[0]["data_source"] == "openai/gsm8k"
    # Named, a column sets its option per row; "all" sends every one, as before.
    g = make_func(reward="gsm8k", url=proxy.url, columns=("question", "format_score"))
    assert g(prompts=prompts, completions=completions, ground_truth=["72"] * 3,
             format_score=[0.25] * 3, score=[4.5] * 3, **trl_kwargs(3)) == [1.0, 0.25, 0.0]
    assert proxy.items()[0]["extra_info"] == {"question": "Natalia sold clips?",
                                              "format_score": 0.25}
    with pytest.raises(ValueError, match="columns: expected"):
        make_func(reward="gsm8k", url=proxy.url, columns=None)


def test_completions_of_one_prompt_go_as_one_group_new_for_each_call(scripted, make_func):
    """GRPO repeats each prompt num_generations times: those completions are one group, and a
    later call (the next step) starts new groups; Arbiter answers each group's statistics."""
    proxy = scripted()
    f = make_func(reward="exact_match", url=proxy.url)
    prompts = ["Q: a?", "Q: a?", "Q: b?", "Q: b?"]
    scores = f(prompts=prompts, completions=["x", "y", "z", "z"],
               ground_truth=["x", "x", "z", "z"], **trl_kwargs(4))
    assert scores == [1.0, 0.0, 1.0, 1.0]
    f(prompts=prompts[:1], completions=["x"], ground_truth=["x"], **trl_kwargs(1))
    groups = [item["group"] for i in (0, 1) for item in proxy.items(i)]
    assert groups[0] == groups[1] != groups[2] == groups[3]
    assert groups[4] not in groups[:4], "the same prompt in a later call is a new group"
    name = f"g{random.randrange(1 << 30)}"
    results = f.client.score([{"solution_str": "x", "ground_truth": "x", "group": name}] * 2)
    assert results[0].group == {"scored": 2, "failed": 0, "pending": 0, "mean": 1.0,
                                "std": 0.0, "zero_std": True}


def test_ranks_name_a_prompts_group_alike_and_two_prompts_never_alike(scripted, make_func,
                                                                      monkeypatch):
    """Under DDP each rank scores its share of the rollouts, in step. A group used to be named
    by the prompt's index in the rank's batch: rank 0's and rank 1's first prompts, different,
    were one group, and one prompt spread over both ranks was two."""
    import itertools

    import arbiter_client.trl as trl
    proxy = scripted()
    f = make_func(reward="exact_match", url=proxy.url)
    monkeypatch.setattr(trl, "_calls", itertools.count(5))
    f(prompts=["Q: a?", "Q: a?"], completions=["x", "y"], ground_truth=["x", "x"],
      **trl_kwargs(2))
    monkeypatch.setattr(trl, "_calls", itertools.count(5))  # the other rank, same call
    f(prompts=["Q: b?", "Q: a?"], completions=["z", "x"], ground_truth=["z", "x"],
      **trl_kwargs(2))
    rank0 = [item["group"] for item in proxy.items(0)]
    rank1 = [item["group"] for item in proxy.items(1)]
    assert rank0[0] == rank0[1] == rank1[1], "one prompt, one group, over both ranks"
    assert rank1[0] != rank0[0], "two prompts at the same index, two groups"
    assert all(g.startswith(f"trl:{trl._launch}:5:") for g in rank0 + rank1)


def test_prompts_that_differ_before_their_question_are_two_groups(scripted, make_func):
    """helper-70: a group was named by the prompt's last user message alone, so two prompts
    with the same question and other system messages (or earlier turns) were one group."""
    proxy = scripted()
    f = make_func(reward="exact_match", url=proxy.url)
    yes = [{"role": "system", "content": "Answer yes."}, {"role": "user", "content": "Q?"}]
    no = [{"role": "system", "content": "Answer no."}, {"role": "user", "content": "Q?"}]
    f(prompts=[yes, yes, no, no, "Q?"], completions=["yes", "yes", "no", "no", "x"],
      ground_truth=["yes"] * 2 + ["no"] * 2 + ["x"], **trl_kwargs(5))
    groups = [item["group"] for item in proxy.items()]
    assert groups[0] == groups[1] and groups[2] == groups[3], groups
    assert len({groups[0], groups[2], groups[4]}) == 3, groups
    assert {item["extra_info"]["question"] for item in proxy.items()} == {"Q?"}


def test_a_rerun_names_new_groups_and_the_ranks_of_a_launch_alike(monkeypatch):
    """helper-70: each process counts its calls from 0, so a rerun within the server's
    group_memory_ms joined the last run's groups (groups of 4 scored 8). A process alone
    draws its launch's name; the ranks of a launch take it from the launcher's variables."""
    import arbiter_client.trl as trl
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert trl._launch_tag() != trl._launch_tag()
    launcher = {"WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
                "TORCHELASTIC_RUN_ID": "d3b07384", "TORCHELASTIC_RESTART_COUNT": "0"}
    for name, value in launcher.items():
        monkeypatch.setenv(name, value)
    rank0 = trl._launch_tag()
    assert trl._launch_tag() == rank0, "every rank of one launch names it alike"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "c157a790")
    assert trl._launch_tag() != rank0, "another launch"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "d3b07384")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert trl._launch_tag() != rank0, "an elastic restart"


def test_a_job_keeps_its_groups_and_steps_apart_from_another_jobs(scripted, make_func,
                                                                  arbiter, make_client):
    """Group names and step tags are global on the server; two jobs on one dataset name them
    alike. `job` (ARBITER_JOB) puts each job's in its own namespace."""
    proxy = scripted()
    a = make_func(reward="exact_match", url=proxy.url, job="run-a")
    b = make_func(reward="exact_match", url=proxy.url, env={"ARBITER_JOB": "run-b"})
    for f in (a, b):
        f(prompts=["Q: a?", "Q: a?"], completions=["x", "y"], ground_truth=["x", "x"],
          **trl_kwargs(2))
    body_a, body_b = proxy.requests[0][2], proxy.requests[1][2]
    assert body_a["step"] == "run-a/3" and body_b["step"] == "run-b/3"
    assert body_a["items"][0]["group"].startswith("run-a/trl:")
    assert body_b["items"][0]["group"].startswith("run-b/trl:")
    # The recording stand-in forwards POSTs only: ask the server with a client of each job.
    account = make_client(arbiter.url, job="run-a").step_account(3)
    assert account["step"] == "run-a/3" and account["items"]["total"] == 2, "its own, not both"
    assert make_client(arbiter.url, job="run-b").step_account(3)["step"] == "run-b/3"
    # The list of recent steps is the job's own too (it held every job's).
    listed = {a["step"] for a in make_client(arbiter.url, job="run-a").step_account()}
    assert "run-a/3" in listed and all(s.startswith("run-a/") for s in listed), listed
    # An empty group or step is none, in a job too (helper-57: "run-a/" made every such item
    # one group, and one step).
    client = make_client(proxy.url, job="run-a", reward="exact_match")
    client.score([{"solution_str": "x", "ground_truth": "x", "group": ""}] * 2, step="")
    body = proxy.requests[-1][2]
    assert body.get("step", "") == "" and [i["group"] for i in body["items"]] == ["", ""], body
    assert make_client(arbiter.url, job="run-a").step_account("") is None


def test_step_account_takes_the_steps_score_takes(arbiter, make_client):
    """score(step=torch.tensor(5)) counted under 5; step_account(torch.tensor(5)) asked for
    "tensor(5)" and found nothing (helper-57)."""
    from client_testing import FakeScalar
    client = make_client(arbiter.url, reward="exact_match")
    client.score([{"solution_str": "x", "ground_truth": "x"}], step=FakeScalar(4105))
    assert client.step_account(FakeScalar(4105))["step"] == "4105"
    with pytest.raises(TypeError, match="step: expected a string or an integer"):
        client.step_account(4.5)


def test_a_step_account_goes_to_a_logger_as_flat_numbers(arbiter, make_client):
    """helper-70: TRL's log_metric takes numbers; the nested account killed training with a
    TypeError. step_metrics flattens it, the step tag left out."""
    from arbiter_client import step_metrics
    client = make_client(arbiter.url, reward="exact_match")
    step = f"s{random.randrange(1 << 30)}"
    client.score([{"solution_str": "x", "ground_truth": "x"},
                  {"solution_str": "y", "ground_truth": "x"}], step=step)
    flat = step_metrics(client.step_account(step))
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat.values())
    assert flat["arbiter/items/total"] == 2 and flat["arbiter/items/ok"] == 2, flat
    assert flat["arbiter/totals/calls"] == 0, "exact_match runs no model"
    assert any(k.startswith("arbiter/sources/") and k.endswith("/calls") for k in flat), flat
    assert "arbiter/step" not in flat
    assert step_metrics(None) == {}
    assert step_metrics({"step": "1", "failures": {"deadline_exceeded": 2}}, prefix="a.") == \
        {"a.failures/deadline_exceeded": 2}


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_log_step_logs_each_step_once_the_trainer_moved_past_it(arbiter, make_func, kind):
    """log_step=True: the account of the previous call's step goes through TRL's log_metric,
    as numbers, when a call comes with another step (both calls of step 3 counted in it)."""
    job = f"j{random.randrange(1 << 30)}"
    if kind == "sync":
        f = make_func(reward="exact_match", url=arbiter.url, job=job, log_step=True)
    else:
        f = make_async_reward_func(reward="exact_match", url=arbiter.url, job=job,
                                   log_step=True)
    logged = []

    def call(func, step, n):
        state = type("State", (), {"global_step": step})()
        kwargs = {**trl_kwargs(n), "trainer_state": state,
                  "log_metric": lambda name, value: logged.append((step, name, value))}
        scores = func(["Q?"] * n, ["x"] * n, ground_truth=["x"] * n, **kwargs)
        return asyncio.run(scores) if inspect.iscoroutine(scores) else scores

    try:
        call(f, 3, 2)
        call(f, 3, 1)
        assert logged == [], "step 3 is not over while calls come with it"
        assert call(f, 4, 1) == [1.0]
        metrics = {name: value for step, name, value in logged}
        assert {step for step, _, _ in logged} == {4} and len(metrics) == len(logged)
        assert metrics["arbiter/items/total"] == 3 and metrics["arbiter/items/ok"] == 3, metrics
        assert "arbiter/totals/cost" in metrics
        before = len(logged)
        plain = make_func(reward="exact_match", url=arbiter.url, job=job)
        call(plain, 5, 1)
        call(plain, 6, 1)
        assert len(logged) == before, "nothing logged without log_step"
    finally:
        f.client.close()


def test_conversational_data(scripted, make_func):
    proxy = scripted()
    f = make_func(reward="exact_match", url=proxy.url, name="em")
    assert f.__name__ == "em"
    prompts = [[{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is 2+2?"}],
               [{"role": "user", "content": [{"type": "text", "text": "Capital of "},
                                             {"type": "text", "text": "France?"}]}]]
    completions = [[{"role": "assistant", "content": "4"}],
                   [{"role": "assistant", "content": "It is"},
                    {"role": "tool", "content": "lookup: Paris"},
                    {"role": "assistant", "content": "Paris"}]]
    scores = f(prompts, completions, ground_truth=["4", ["Paris", "paris, france"]])
    assert scores == [1.0, 0.0]  # "It is\nParis" is not "paris"
    items = proxy.items()
    assert items[0]["extra_info"]["question"] == "What is 2+2?"
    assert items[1]["extra_info"]["question"] == "Capital of France?"
    assert items[1]["solution_str"] == "It is\nParis"


def test_async_factory(arbiter, scripted):
    proxy = scripted()
    f = make_async_reward_func(reward="good_judge", url=proxy.url)
    assert inspect.iscoroutinefunction(f) and f.__name__ == "arbiter_good_judge"

    async def main():
        try:
            return await f(["Colour?", "Colour?"], ["blue sky today", "green grass"],
                           ground_truth=["blue sky", "blue sky"])
        finally:
            await f.client.aclose()

    assert asyncio.run(main()) == [pytest.approx(2 / 3, abs=1e-3), 0.0]


def test_the_ground_truth_column_is_configurable(arbiter, make_func):
    f = make_func(reward="exact_match", url=arbiter.url,
                         ground_truth_column=("ground_truth", "solution", "answer"))
    assert f(["q"], ["42"], answer=["42"], solution=["41"]) == [0.0]  # solution comes first
    assert f(["q"], ["42"], answer=["42"]) == [1.0]
    with pytest.raises(ValueError, match="no ground-truth column: expected one of "
                                         "ground_truth, solution, answer"):
        f(["q"], ["42"], label=["42"])


def test_data_source_column_picks_the_reward(scripted, make_func):
    proxy = scripted()
    f = make_func(url=proxy.url)
    assert f.__name__ == "arbiter"
    assert f(["q", "q"], ["7", "7"], ground_truth=["7", "8"],
             data_source=["gsm8k", "lexical"]) == [1.0, 0.0]
    assert proxy.items()[0]["data_source"] == "gsm8k"
    assert "data_source" not in proxy.items()[0]["extra_info"]


def test_failure_policies(arbiter, make_func):
    bad = failing_item()["solution_str"]
    none = make_func(reward="lexical", url=arbiter.url, on_failure="none")
    assert none(["q", "q"], [bad, "x"], ground_truth=["x", "x"]) == [None, 1.0]
    value = make_func(reward="lexical", url=arbiter.url, on_failure="value",
                             failure_score=-1)
    assert value(["q", "q"], [bad, "x"], ground_truth=["x", "x"]) == [-1.0, 1.0]
    from arbiter_client import ArbiterItemError
    with pytest.raises(ArbiterItemError):
        make_func(reward="lexical", url=arbiter.url)(["q"], [bad], ground_truth=["x"])


def test_the_environment_configures_the_factory(arbiter, arbiter_env, make_func):
    arbiter_env(arbiter.url, ARBITER_REWARD="lexical", ARBITER_ON_FAILURE="none")
    f = make_func()
    assert f.__name__ == "arbiter_lexical"
    assert f(["q"], [failing_item()["solution_str"]], ground_truth=["x"]) == [None]


def test_each_call_carries_trls_global_step_and_its_account_can_be_read(arbiter, scripted,
                                                                        make_func):
    proxy = scripted()
    f = make_func(reward="exact_match", url=proxy.url)
    state = TrainerState()
    state.global_step = random.randrange(1 << 30)
    f(prompts=["Q?", "Q?"], completions=["a", "b"], ground_truth=["a", "a"],
      trainer_state=state)
    assert proxy.requests[-1][2]["step"] == state.global_step
    client = ArbiterClient(arbiter.url)  # the recording stand-in answers only POST
    try:
        account = client.step_account(state.global_step)
        assert account["items"] == {"total": 2, "ok": 2, "fallback": 0, "failed": 0}
        assert client.step_account(state.global_step + 1) is None
        assert any(a["step"] == str(state.global_step) for a in client.step_account())
    finally:
        client.close()


def test_a_row_with_no_ground_truth_fails_alone(scripted, make_func):
    """Arbiter refuses a null ground_truth with a 400 for the whole request; a dataset row with
    no answer goes with no reference, and fails alone under the failure policy."""
    proxy = scripted()
    prompts, completions = ["a?", "b?", "c?"], ["4", "4", "5"]
    truths = ["4", None, "4"]
    none = make_func(reward="exact_match", url=proxy.url, on_failure="none")
    assert none(prompts, completions, ground_truth=truths, **trl_kwargs(3)) == [1.0, None, 0.0]
    assert [i["ground_truth"] for i in proxy.items()] == ["4", [], "4"]
    value = make_func(reward="exact_match", url=proxy.url, on_failure="value",
                      failure_score=-1)
    assert value(prompts, completions, ground_truth=truths) == [1.0, -1.0, 0.0]
    from arbiter_client import ArbiterItemError
    with pytest.raises(ArbiterItemError) as raised:
        make_func(reward="exact_match", url=proxy.url)(prompts, completions,
                                                       ground_truth=truths)
    assert raised.value.index == 1 and raised.value.code == "reward_failed"
    assert "ground_truth is empty" in raised.value.message
    assert [r.score if r else r for r in raised.value.results] == [1.0, None, 0.0]


def test_a_row_with_no_ground_truth_fails_alone_async(scripted):
    proxy = scripted()
    f = make_async_reward_func(reward="exact_match", url=proxy.url, on_failure="none")

    async def main(truths):
        try:
            return await f(["a?", "b?", "c?"], ["4", "4", "4"], ground_truth=truths)
        finally:
            await f.client.aclose()

    assert asyncio.run(main([None, "4", "5"])) == [None, 1.0, 0.0]
    f.client.close()
