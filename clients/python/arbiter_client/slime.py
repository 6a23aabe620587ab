"""slime reward functions that score through Arbiter.

    --custom-rm-path arbiter_client.slime.rm                  # one sample per call
    --custom-rm-path arbiter_client.slime.batched_rm --group-rm   # a whole group per call

Each sample becomes one item: `sample.response` is the solution, `sample.label` the ground
truth (it must be set: `--label-key`; a number is sent as the text str() gives it, 4 -> "4"),
and `sample.metadata` (a dict) the `extra_info`, with
`question` set from `sample.prompt` (a string, or the last user message of a message list)
unless the metadata has one. Each item carries its GRPO group (the prompt, or the call under
--group-rm), so Arbiter scores a prompt's samples together. The reward name is `args.arbiter_reward` when the arguments have
it, else ARBITER_REWARD (unset: Arbiter maps the item's data_source, which slime does not
send, so set one); the URL is `args.arbiter_url`, else ARBITER_URL. Other options:
the ARBITER_* variables (see ArbiterClient).

Failed items: `raise` (default) raises ArbiterItemError and the rollout fails; `value` returns
ARBITER_FAILURE_SCORE; `none` is refused (slime needs a number).
"""
import hashlib
import uuid

from ._adapters import prompt_text, shared_client
from ._json import is_json_value, to_reference_value


def _client(args):
    client = shared_client(url=getattr(args, "arbiter_url", None),
                           reward=getattr(args, "arbiter_reward", None))
    if client.settings.on_failure == "none":
        raise ValueError(
            "arbiter_client.slime: on_failure='none' cannot be used with slime, which needs a "
            "number for every sample; use 'raise' or 'value'")
    return client


def _item(sample, where="sample"):
    if sample.label is None:
        raise ValueError(
            f"{where}.label is None: Arbiter scores against a ground truth; set --label-key "
            f"to the dataset field that holds it")
    label = to_reference_value(sample.label, f"{where}.label")  # 4 -> "4", as str() writes it
    metadata = getattr(sample, "metadata", None)
    info = {k: v for k, v in metadata.items() if is_json_value(v)} \
        if isinstance(metadata, dict) else {}
    question = prompt_text(sample.prompt)
    info.setdefault("question", question)
    # The GRPO group: the samples of one prompt (slime's group_index repeats across rollouts).
    group = "slime:" + hashlib.sha1(question.encode("utf-8", "replace")).hexdigest()[:16]
    return {"solution_str": sample.response, "ground_truth": label, "extra_info": info,
            "group": group}


async def rm(args, sample, **kwargs):
    """slime's custom reward function: one sample, one float."""
    client = _client(args)
    results = await client.ascore([_item(sample)])
    return results[0].score


async def batched_rm(args, samples, **kwargs):
    """slime's group reward function (--group-rm): the group in one request, floats in
    order."""
    client = _client(args)
    items = [_item(s, f"samples[{i}]") for i, s in enumerate(samples)]
    group = f"slime:{uuid.uuid4().hex}"  # the call is the group
    for item in items:
        item["group"] = group
    return [r.score for r in await client.ascore(items)]
