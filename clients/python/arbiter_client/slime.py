"""slime reward functions that score through Arbiter.

    --custom-rm-path arbiter_client.slime.rm                  # one sample per call
    --custom-rm-path arbiter_client.slime.batched_rm --group-rm   # a whole group per call

Each sample becomes one item: `sample.response` is the solution, `sample.label` the ground
truth (it must be set: `--label-key`; a number is sent as the text str() gives it, 4 -> "4"),
and `sample.metadata` (a dict) the `extra_info`, with
`question` set from `sample.prompt` (a string, or the last user message of a message list)
unless the metadata has one. Each item carries its GRPO group (slime's `group_index`, else
the prompt; the call under --group-rm), so Arbiter scores a prompt's samples together, and
each request the step of the policy that generated it (`sample.weight_versions`), for
Arbiter's step accounts. The reward name is `args.arbiter_reward` when the arguments have
it, else ARBITER_REWARD (unset: Arbiter maps the item's data_source, which slime does not
send, so set one); the URL is `args.arbiter_url`, else ARBITER_URL. Other options:
the ARBITER_* variables (see ArbiterClient).

What slime passes, and what comes back (rewards in the samples' order, one request per call):
`rm` gets a Sample (-> a float), or a list of them (-> a list of floats) when a
--custom-generate-function-path returns several samples for one rollout and --group-rm is off
(slime's batched_async_rm then calls the --custom-rm-path function with the list). `batched_rm`
gets the group: a list of Samples, whose entries are lists of Samples for a generate function
that returns lists; such an entry gets a list of floats.

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
    # The GRPO group: the samples of one prompt. slime numbers a prompt's samples with one
    # `group_index`, counted over the whole run (saved and restored with its data source), as
    # its own metrics group them; without one, the prompt's text names it (a dataset's
    # duplicate prompts, or one prompt in two rollouts, were one group: helper-72).
    index = getattr(sample, "group_index", None)
    if isinstance(index, int) and not isinstance(index, bool):
        group = f"slime:g{index}"
    else:
        group = "slime:" + hashlib.sha1(question.encode("utf-8", "replace")).hexdigest()[:16]
    return {"solution_str": sample.response, "ground_truth": label, "extra_info": info,
            "group": group}


def _leaves(node, where, out):
    """Appends (sample, its name) for every Sample in `node`: a Sample or a list of nodes."""
    if isinstance(node, (list, tuple)):
        for i, child in enumerate(node):
            _leaves(child, f"{where}[{i}]", out)
    else:
        out.append((node, where))
    return out


def _shaped(node, scores):
    """The scores (an iterator, in _leaves' order) in the shape of `node`."""
    if isinstance(node, (list, tuple)):
        return [_shaped(child, scores) for child in node]
    return next(scores)


def _step(samples):
    """The request's training step: the weight version of the policy that generated its
    samples (slime's `sample.weight_versions`, one per weight update, the last for a sample
    generated over several), the latest among them; None when slime recorded none."""
    versions = []
    for sample in samples:
        seen = getattr(sample, "weight_versions", None)
        if isinstance(seen, (list, tuple)) and seen and isinstance(seen[-1], (str, int)) \
                and not isinstance(seen[-1], bool) and str(seen[-1]) != "":
            versions.append(str(seen[-1]))
    if not versions:
        return None
    if all(v.isdigit() for v in versions):
        return max(versions, key=int)
    return versions[-1]


async def _score(args, samples, where, group=None):
    """Every Sample in `samples` (a Sample, or nested lists of them) scored in one request;
    the scores in the same shape. `group`: one GRPO group for all of them (else each sample's
    group_index, or its prompt, names its group)."""
    client = _client(args)
    leaves = _leaves(samples, where, [])
    items = [_item(s, w) for s, w in leaves]
    if group is not None:
        for item in items:
            item["group"] = group
    step = _step([s for s, _ in leaves])
    results = await client.ascore(items, step=step) if items else []
    return _shaped(samples, iter([r.score for r in results]))


async def rm(args, sample, **kwargs):
    """slime's custom reward function: one sample, one float; a list of samples (slime's
    batched_async_rm passes one for a generate function that returns a list), their floats in
    order."""
    return await _score(args, sample, "samples" if isinstance(sample, (list, tuple))
                        else "sample")


async def batched_rm(args, samples, **kwargs):
    """slime's group reward function (--group-rm): the group in one request, floats in
    order; an entry that is a list of samples (a generate function that returns lists) gets
    a list of floats."""
    return await _score(args, samples, "samples", group=f"slime:{uuid.uuid4().hex}")
