"""TRL reward functions (GRPOTrainer, RLOOTrainer `reward_funcs`) that score through Arbiter.

    from arbiter_client.trl import make_async_reward_func
    trainer = GRPOTrainer(..., reward_funcs=[make_async_reward_func(reward="judge")])

Each call sends the whole local batch in one request (more than batch_size items: several,
up to 4 at once) and returns one score per completion, in order. Prompts and completions may be
strings or chat messages. The ground truth comes from a dataset column (`ground_truth` by
default); the `question` and `problem` columns, and those named in `columns=`, go into each
item's `extra_info`, where a reward reads its options (`columns="all"`: every column), with
`question` set from the prompt unless a column gives it; a `data_source` column becomes the
item's `data_source`. Completions of the
same prompt are sent as one GRPO group, so Arbiter scores them together, and every request
carries TRL's `trainer_state.global_step` as its step: `reward_func.client.step_account(step)`
returns what that step's rewards took (calls, tokens, cost, 429s), and `log_step=True` puts it
in TRL's logs as numbers (`arbiter/items/ok`, `arbiter/totals/cost`, ...).

Failed items follow the client's failure policy (ARBITER_ON_FAILURE): `raise` (default) stops
the step with ArbiterItemError; `none` returns None, which TRL turns into NaN and leaves out of
that row's reward; `value` returns the failure score, which TRL cannot tell from a real one.
A row whose ground truth is None (a dataset row with no answer) is sent with no reference
(`[]`), as Arbiter would refuse a null for the whole request: a reward that needs one fails
that row alone (`ground_truth is empty`, or the reward's own message) under that policy.
"""
import asyncio
import hashlib
import itertools
import os
import secrets
import threading

from ._adapters import completion_text, prompt_key, prompt_text
from ._json import is_json_value
from .client import ArbiterClient, step_metrics

# Arguments TRL passes that are not dataset columns.
NOT_COLUMNS = ("completion_ids", "trainer_state", "log_extra", "log_metric", "environments")
# The columns sent in extra_info unless `columns=` says otherwise: the row's question, which
# judges and ΔIG read. Every extra_info key a reward reads is one of its options, so any other
# column would set one: a dataset's `score`, `model` or `method` column changed the scores,
# sent another model to the judge's provider, or failed the step with a 400.
CONTEXT_COLUMNS = ("question", "problem")


def _columns(names):
    return (names,) if isinstance(names, str) else tuple(names)


def _per_row(value, n):
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__"):
        return None
    if not (isinstance(value, (list, tuple)) or hasattr(value, "tolist")):
        return None
    rows = list(value)
    return rows if len(rows) == n else None


_calls = itertools.count()

# What the launcher of several processes sets alike on every rank (torchrun, accelerate).
LAUNCH_VARIABLES = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT",
                    "TORCHELASTIC_RESTART_COUNT", "WORLD_SIZE")


def _launch_tag():
    """A name for this launch of the trainer, in its groups' names: Arbiter remembers a group
    for `scheduler.group_memory_ms` (5 min), and a rerun's calls, counted from 0 again, joined
    the last run's groups (helper-70: groups of 4 scored 8). One process draws its own; the
    ranks of a launch name it alike, from the launcher's variables, so a group spread over them
    stays one (a relaunch with all of them equal, within that time, needs another `job`)."""
    if os.environ.get("WORLD_SIZE", "1") in ("", "1"):
        return secrets.token_hex(4)
    launch = "\0".join(os.environ.get(v, "") for v in LAUNCH_VARIABLES)
    return hashlib.sha256(launch.encode("utf-8")).hexdigest()[:8]


_launch = _launch_tag()


def _sent_columns(columns):
    if columns == "all":
        return None
    if isinstance(columns, str):
        return (columns,)
    if columns is None or not all(isinstance(c, str) for c in columns):
        raise ValueError(f"columns: expected \"all\" or column names, got {columns!r}")
    return tuple(columns)


def _items(prompts, completions, columns, ground_truth_columns, sent=CONTEXT_COLUMNS):
    n = len(completions)
    if len(prompts) != n:
        raise ValueError(f"{len(prompts)} prompts for {n} completions")
    truth_column = next((c for c in ground_truth_columns if c in columns), None)
    if truth_column is None:
        raise ValueError(
            f"no ground-truth column: expected one of {', '.join(ground_truth_columns)} among "
            f"the dataset columns ({', '.join(sorted(columns)) or 'none'}); set "
            f"ground_truth_column=")
    truths = _per_row(columns[truth_column], n)
    if truths is None:
        raise ValueError(f"column {truth_column!r}: expected one value per completion ({n})")
    extra = {}
    for name, value in columns.items():
        if name in NOT_COLUMNS or name == truth_column:
            continue
        if sent is not None and name not in sent and name != "data_source":
            continue
        rows = _per_row(value, n)
        if rows is not None:
            extra[name] = rows
    # GRPO's group: the rollouts of one prompt (TRL repeats it num_generations times), named by
    # the whole prompt (a hash of it: the system message too, helper-70), the launch and the
    # call, so later steps and reruns start new groups. Under DDP a group's rollouts may be
    # spread over the ranks, which call in step: each rank names it alike, so they are one
    # group, and two prompts are never one (a dataset's identical rows are one prompt).
    call = next(_calls)
    items = []
    for i in range(n):
        info = {"question": prompt_text(prompts[i])}
        group = hashlib.sha256(prompt_key(prompts[i]).encode("utf-8")).hexdigest()[:16]
        for name, rows in extra.items():
            if name != "data_source" and is_json_value(rows[i]):
                info[name] = rows[i]
        truth = [] if truths[i] is None else truths[i]  # no reference, not a 400 for the call
        item = {"solution_str": completion_text(completions[i]), "ground_truth": truth,
                "extra_info": info, "group": f"trl:{_launch}:{call}:{group}"}
        if "data_source" in extra and isinstance(extra["data_source"][i], str):
            item["data_source"] = extra["data_source"][i]
        items.append(item)
    return items


def _step(kwargs):
    """The training step TRL is at (trainer_state.global_step), for Arbiter's step accounts
    (client.step_account(step)); None when TRL passes no state."""
    step = getattr(kwargs.get("trainer_state"), "global_step", None)
    return step if isinstance(step, int) and not isinstance(step, bool) else None


class _StepLog:
    """`log_step=True`: the last step's account, flattened (`step_metrics`), into TRL's logs
    through the `log_metric` TRL passes. A step's rewards are scored before TRL steps, so the
    account of the step of the previous call is complete when a call comes with another step
    (a generation batch spanning several steps is scored at its first); TRL averages what
    the ranks log, which all read the same account."""

    def __init__(self):
        self.last = None
        self.lock = threading.Lock()

    def finished(self, kwargs):
        """The step whose account is complete now, or None; notes this call's step."""
        step = _step(kwargs)
        if step is None or not callable(kwargs.get("log_metric")):
            return None
        with self.lock:
            done, self.last = self.last, step
        return done if done is not None and done != step else None

    def log(self, kwargs, account):
        for name, value in step_metrics(account).items():
            kwargs["log_metric"](name, value)


def _name(name, reward):
    return name or (f"arbiter_{reward}" if reward else "arbiter")


def make_reward_func(reward=None, url=None, *, ground_truth_column="ground_truth",
                     columns=CONTEXT_COLUMNS, name=None, log_step=False, client=None,
                     **client_options):
    """A sync reward function `f(prompts, completions, **kwargs) -> list[float | None]`.

    `reward`, `url` and `client_options` configure an ArbiterClient (unset: the ARBITER_*
    environment variables), unless `client` is given. `ground_truth_column` is a column name
    or several tried in order (e.g. ("ground_truth", "solution", "answer")). `columns`: the
    dataset columns sent in each item's `extra_info`, where a column named like one of the
    reward's options sets it for its row (default `question` and `problem`; "all": every
    column). `name` becomes the function's `__name__`, which TRL logs (default
    `arbiter_<reward>`). `log_step=True` logs each step's account, once the trainer has moved
    past it, through TRL's `log_metric` (`arbiter/items/ok`, `arbiter/totals/cost`, ...)."""
    client = client or ArbiterClient(url, reward=reward, **client_options)
    truth_columns = _columns(ground_truth_column)
    sent = _sent_columns(columns)
    step_log = _StepLog() if log_step else None

    def reward_func(prompts, completions, **kwargs):
        items = _items(prompts, completions, kwargs, truth_columns, sent)
        scores = [r.score for r in client.score(items, step=_step(kwargs))]
        done = step_log.finished(kwargs) if step_log else None
        if done is not None:
            step_log.log(kwargs, client.step_account(done))
        return scores

    reward_func.__name__ = reward_func.__qualname__ = _name(name, reward or client.settings.reward)
    reward_func.client = client
    return reward_func


def make_async_reward_func(reward=None, url=None, *, ground_truth_column="ground_truth",
                           columns=CONTEXT_COLUMNS, name=None, log_step=False,
                           client=None, **client_options):
    """make_reward_func, as an `async def` function: TRL runs async reward functions together
    on its own event loop."""
    client = client or ArbiterClient(url, reward=reward, **client_options)
    truth_columns = _columns(ground_truth_column)
    sent = _sent_columns(columns)
    step_log = _StepLog() if log_step else None

    async def reward_func(prompts, completions, **kwargs):
        items = _items(prompts, completions, kwargs, truth_columns, sent)
        scores = [r.score for r in await client.ascore(items, step=_step(kwargs))]
        done = step_log.finished(kwargs) if step_log else None
        if done is not None:
            account = await asyncio.get_running_loop().run_in_executor(
                None, client.step_account, done)
            step_log.log(kwargs, account)
        return scores

    reward_func.__name__ = reward_func.__qualname__ = _name(name, reward or client.settings.reward)
    reward_func.client = client
    return reward_func
