"""verl reward functions that score through Arbiter.

    reward.custom_reward_function.path=$(python -c 'import arbiter_client.verl as m; print(m.__file__)')
    reward.custom_reward_function.name=compute_score_async
    reward.reward_manager.name=naive
    +reward.custom_reward_function.reward_kwargs.reward=judge

`compute_score` (sync), `compute_score_async` (verl awaits coroutine functions) and the legacy
batched `compute_score_batched` take verl's arguments. Options come from
`reward.custom_reward_function.reward_kwargs` (verl passes them as keyword arguments), else
from the ARBITER_* environment variables (see ArbiterClient):

| reward_kwargs key | variable | meaning |
|---|---|---|
| service_url | ARBITER_URL | Arbiter's base URL |
| reward | ARBITER_REWARD | reward name; unset: Arbiter maps the data_source |
| timeout_s | ARBITER_TIMEOUT | seconds per HTTP attempt |
| retries | ARBITER_RETRIES | attempts after the first |
| on_failure | ARBITER_ON_FAILURE | raise or value (none is refused: verl cannot take None) |
| failure_score | ARBITER_FAILURE_SCORE | the score of a failed item under value |
| return_dict | ARBITER_RETURN_DICT | return a dict (below) instead of a float |
| deadline_ms, priority | ARBITER_DEADLINE_MS, ARBITER_PRIORITY | passed to /v1/score |
| job | ARBITER_JOB | this job's name before its group names and steps (a shared server) |

The return value is a float, or a dict: with return_dict or on_failure=value, the same keys
for every sample, whichever reward scored it (verl builds its arrays from the first sample's
keys): `score`, `acc` and `pred` (math_dapo's own; for another reward `acc` is the score, as
verl's reward loop sets it for a number, and `pred` is None), `arbiter_failed`,
`arbiter_fallback`, `arbiter_cached` (0 or 1), `arbiter_queue_ms`, `arbiter_run_ms`. Without
them, a float, or for a reward that returns fields beside its score (math_dapo: `acc`, `pred`,
as verl's own math_dapo returns them) `score` with those fields: then a run that mixes
math_dapo with other rewards needs return_dict, as it would with verl's own function. verl's
reward_extra_info gets them.

A row whose ground truth is None is sent with no reference (its item fails alone, under the
failure policy); `extra_info` values JSON cannot carry (NaN, objects) are left out.

Each sample goes with its GRPO group (extra_info's `uid`, else the data source with the
dataset row's `split` and `index` that verl's preprocessing scripts set, and the step), so
Arbiter scores a prompt's rollouts together, and with its step: the weights version verl's
reward loop puts in extra_info (`global_steps`), for Arbiter's step accounts.

With no `reward`, Arbiter picks the reward from `data_source` as verl's
default_compute_score does (openai/gsm8k, lighteval/MATH, math_dapo, aime*, searchR1_*, ...;
docs/rewards.md lists them).
"""
import os

# Absolute imports: verl loads this file by path, as a module outside the package
# (importlib's spec_from_file_location), where relative imports fail.
from arbiter_client._adapters import shared_client
from arbiter_client._json import is_json_value
from arbiter_client._settings import env_value, parse_bool

DICT_KEYS = ("score", "acc", "pred", "arbiter_failed", "arbiter_fallback", "arbiter_cached",
             "arbiter_queue_ms", "arbiter_run_ms")

# reward_kwargs key -> ArbiterClient argument
_CLIENT_OPTIONS = {"service_url": "url", "url": "url", "reward": "reward",
                   "timeout_s": "timeout_s", "retries": "retries", "on_failure": "on_failure",
                   "failure_score": "failure_score", "api_key": "api_key",
                   "batch_size": "batch_size", "priority": "priority",
                   "deadline_ms": "deadline_ms", "job": "job"}


def _setup(kwargs):
    """(client, whether to return dicts) for one call's keyword arguments. Other keys are
    ignored: reward_router_address and reward_model_tokenizer (verl passes them when it runs
    its own reward model servers) and whatever else verl adds."""
    options = dict(kwargs)
    nested = options.pop("reward_kwargs", None)
    if isinstance(nested, dict):
        options.update(nested)
    client_options = {}
    for key, argument in _CLIENT_OPTIONS.items():
        if options.get(key) is not None:
            client_options[argument] = options[key]
    client = shared_client(**client_options)
    policy = client.settings.on_failure
    if policy == "none":
        raise ValueError(
            "arbiter_client.verl: on_failure='none' cannot be used with verl, which needs a "
            "number for every sample; use 'raise' (the step fails) or 'value' (failure_score "
            "with arbiter_failed=1)")
    if options.get("return_dict") is not None:
        as_dict = parse_bool(options["return_dict"], "return_dict")
    elif env_value(os.environ, "ARBITER_RETURN_DICT") is not None:
        as_dict = parse_bool(os.environ["ARBITER_RETURN_DICT"], "ARBITER_RETURN_DICT")
    else:
        as_dict = False
    return client, as_dict or policy == "value"


def _name_part(value):
    """A str or int (numpy's too) as group-name text, else None (an empty string too: it names
    nothing, and "uid:" would have made every such row one group)."""
    if not isinstance(value, (str, int)) and hasattr(value, "item"):
        value = value.item()
    if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "":
        return str(value)
    return None


def _step(extra_info):
    """The training step of a sample: verl 0.9's reward loop puts the weights version that
    generated it in `extra_info` (`global_steps`, from the rollout servers; a partial rollout
    over several versions has `max_global_steps`, the last), the trainer's step minus one in
    the synchronous trainers (helper-71). None where verl sets neither (its legacy managers,
    the reward-model path)."""
    if not isinstance(extra_info, dict):
        return None
    for key in ("max_global_steps", "global_steps"):
        step = _name_part(extra_info.get(key))
        if step is not None:
            return step
    return None


def _request_step(extra_infos):
    """One step for a request of several samples: the latest of theirs."""
    steps = [s for s in (_step(e) for e in extra_infos) if s is not None]
    if not steps:
        return None
    return max(steps, key=int) if all(s.lstrip("-").isdigit() for s in steps) else steps[-1]


def _group(extra_info, data_source=None):
    """The GRPO group of a verl sample, so that Arbiter scores a prompt's rollouts together.
    verl does not pass the rollout `uid` to reward functions; its data preprocessing scripts put
    the dataset row's `index` (and `split`) in extra_info, which every rollout of a prompt
    shares. Rows of two datasets may share a split and an index, so the data source is part of
    the name. A `uid` in extra_info (an agent loop or dataset may set one) wins."""
    if not isinstance(extra_info, dict):
        return None
    uid = _name_part(extra_info.get("uid"))
    if uid is not None:
        return f"uid:{uid}"
    index = _name_part(extra_info.get("index"))
    if index is not None:
        split = _name_part(extra_info.get("split"))
        source = _name_part(data_source)
        prefix = f"{source}:" if source is not None else ""
        name = f"{prefix}{split}:{index}" if split is not None else f"{prefix}index:{index}"
        # The row's rollouts of one step: the same row in a later epoch is another group.
        step = _step(extra_info)
        return name if step is None else f"{name}@{step}"
    return None


def _item(data_source, solution_str, ground_truth, extra_info):
    # A row with no answer (None) is an item with no reference, which fails alone (the failure
    # policy applies), not a 400 for the request: in a batch, that would fail every row.
    item = {"solution_str": solution_str, "ground_truth": [] if ground_truth is None
            else ground_truth}
    if data_source is not None:
        item["data_source"] = data_source
    if isinstance(extra_info, dict):
        # Values JSON cannot carry (a NaN a dataset column holds, an object) are left out, as
        # the TRL and slime adapters leave them: Arbiter reads a few known keys only.
        item["extra_info"] = {k: v for k, v in extra_info.items() if is_json_value(v)}
    elif extra_info is not None:
        item["extra_info"] = extra_info
    group = _group(extra_info, data_source)
    if group is not None:
        item["group"] = group
    return item


def _rows(column):
    """A list of a column verl may give as a numpy array."""
    return column.tolist() if hasattr(column, "tolist") else list(column)


def _value(result, as_dict):
    """A float, or a dict when the reward returns extra fields (math_dapo's acc and pred, as
    verl's own function returns them) or as_dict asks for Arbiter's fields."""
    if not as_dict and not result.extra:
        return result.score
    value = {"score": result.score}
    if as_dict:
        # Every sample has the same keys, whichever reward scored it (verl builds its arrays
        # from the first sample's keys): math_dapo's acc and pred where it gives them, else
        # acc = score, as verl's reward loop sets it for a reward that returns a number, and
        # pred = None, which verl's validation metrics skip.
        value.update({"acc": result.score, "pred": None})
    value.update(result.extra)
    if as_dict:
        value.update({"arbiter_failed": int(result.failed),
                      "arbiter_fallback": int(result.fallback),
                      "arbiter_cached": int(result.cached),
                      "arbiter_queue_ms": result.queue_ms, "arbiter_run_ms": result.run_ms})
    return value


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl's single-sample contract, blocking (verl runs it in a thread pool)."""
    client, as_dict = _setup(kwargs)
    result = client.score([_item(data_source, solution_str, ground_truth, extra_info)],
                          step=_step(extra_info))[0]
    return _value(result, as_dict)


async def compute_score_async(data_source, solution_str, ground_truth, extra_info=None,
                              **kwargs):
    """verl's single-sample contract as a coroutine function: verl awaits it, so a whole
    batch is in flight at once."""
    client, as_dict = _setup(kwargs)
    results = await client.ascore([_item(data_source, solution_str, ground_truth, extra_info)],
                                  step=_step(extra_info))
    return _value(results[0], as_dict)


def compute_score_batched(data_sources, solution_strs, ground_truths, extra_infos=None,
                          **kwargs):
    """The legacy batched contract (reward_manager=batch, verl <= 0.7.0): one list in, one
    list out, in order, sent in batch_size requests."""
    client, as_dict = _setup(kwargs)
    data_sources, solution_strs, ground_truths = (
        _rows(data_sources), _rows(solution_strs), _rows(ground_truths))
    extra_infos = [None] * len(solution_strs) if extra_infos is None else _rows(extra_infos)
    n = len(solution_strs)
    if not len(data_sources) == len(ground_truths) == len(extra_infos) == n:
        raise ValueError(
            f"compute_score_batched: lists of different lengths (data_sources "
            f"{len(data_sources)}, solution_strs {n}, ground_truths {len(ground_truths)}, "
            f"extra_infos {len(extra_infos)})")
    items = [_item(*row) for row in zip(data_sources, solution_strs, ground_truths, extra_infos)]
    return [_value(r, as_dict) for r in client.score(items, step=_request_step(extra_infos))]
