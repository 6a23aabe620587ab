"""ArbiterClient: POST /v1/score with retries, batching and a failure policy."""
import asyncio
import concurrent.futures
import dataclasses
import json
import os
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterable, List, Mapping, Optional

from . import _settings
from ._json import to_json_value, to_reference_value
from ._retry import RetryDecision, RetryPolicy, classify_exception, classify_response
from ._transport import (CONNECTION_ERRORS, MAX_CONNECTIONS, AiohttpTransport,
                         StdlibTransport, aiohttp)
from .errors import ArbiterError, ArbiterItemError, ArbiterRequestError, ArbiterUnavailable

__version__ = "0.1.0"


@dataclass(frozen=True)
class ItemResult:
    """One item's answer, with the failure policy applied to `score`.

    `score` is Arbiter's score, or for a failed item None (policy `none`) or the failure score
    (policy `value`); under `raise` a failed item raises instead (the error's `results` hold
    it with score None). `failed` says the item
    failed whatever the policy. The other fields are Arbiter's, as docs/api.md describes them;
    `raw` is the whole result object.
    """
    score: Optional[float]
    failed: bool
    status: str
    source: Optional[str]
    cached: bool
    attempts: int
    queue_ms: float
    run_ms: float
    fallback_reason: Optional[str]
    error_code: Optional[str]
    error_message: Optional[str]
    raw: Mapping[str, Any]
    # What the reward returns beside its score (verl's math_dapo: acc, pred); empty for most.
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # For an item sent with a `group`: the group's statistics when the answer was written
    # (scored, failed, pending, mean, std, zero_std; docs/api.md); None otherwise.
    group: Optional[Mapping[str, Any]] = None

    @property
    def fallback(self):
        return self.status == "fallback"


_ITEM_INDEX = re.compile(r"^items\[(\d+)\]")

# Requests of one score() call in flight at once, when its items go in several.
SUBREQUESTS_IN_FLIGHT = 4


def _group_name(group):
    """The name Arbiter reports a group under: the string, or an integer's decimal text."""
    if isinstance(group, bool) or group is None:
        return None
    return str(group) if isinstance(group, (str, int)) else None


def _halves(error, offset, body):
    """For a request of several items that Arbiter refused as too large (413: more items than
    server.max_batch_items or the priority class holds, or a body over server.max_body_bytes),
    the two requests of half its items each, with their offsets; else None."""
    items = body["items"]
    if error.status != 413 or len(items) < 2:
        return None
    mid = len(items) // 2
    return [(offset, dict(body, items=items[:mid])),
            (offset + mid, dict(body, items=items[mid:]))]


def _joined(done, halves):
    """The results of a request sent again in halves: both halves' when both were answered;
    else the first error, carrying in `_answered` what the other half was answered (an error
    of the whole list then keeps those scores in its `results`)."""
    error = next((e for _, e in done if e is not None), None)
    if error is None:
        return [r for answered, _ in done for r in answered]
    answered = []
    for (results, e), (_, body) in zip(done, halves):
        answered += results if results is not None else \
            (getattr(e, "_answered", None) or [None] * len(body["items"]))
    error._answered = answered
    raise error


# Item failures that say nothing of the item: the server ended it as it shut down (its drain
# deadline passed first). Such items go again, by themselves, to the server that takes over.
_RESENT_CODES = frozenset({"shutting_down"})

# The least wait before items a draining server ended go again: it is restarting.
DRAINED_WAIT_S = 1.0


def _drained(answer):
    """The indexes of the items of `answer` that failed only because the server shut down."""
    return [i for i, r in enumerate(answer["results"])
            if isinstance(r, dict) and r.get("status") == "failed"
            and isinstance(r.get("error"), dict) and r["error"].get("code") in _RESENT_CODES]


def _merged(answer, indexes, again, items):
    """`answer` with the results at `indexes` replaced by those of `again`, the answer to
    those of `items` sent again. The statistics of a group with a member sent again are left
    out: neither server saw the whole group (the new one's would count only the members it
    scored, and could flag zero_std a group that is not)."""
    if len(again["results"]) != len(indexes):
        return answer
    results = list(answer["results"])
    for i, r in zip(indexes, again["results"]):
        results[i] = r
    groups = dict(answer["groups"]) if isinstance(answer.get("groups"), dict) else {}
    for i in indexes:
        groups.pop(_group_name(items[i].get("group")), None)
    return dict(answer, results=results, groups=groups)


def _rebuild(made):
    """An ArbiterClient from its settings (ArbiterClient.__reduce__)."""
    return ArbiterClient(**made)


def _shift_index(text, offset):
    """`items[3].x` in a request that started at item `offset` -> `items[3+offset].x`."""
    if not text or not offset:
        return text
    return _ITEM_INDEX.sub(lambda m: f"items[{int(m.group(1)) + offset}]", text)


def _step_tag(step):
    """A step as score() and step_account() send it: a string, an integer (numpy's and torch's
    too, as trainers count steps) or None."""
    if step is not None and not isinstance(step, (str, int)) and hasattr(step, "item"):
        step = step.item()
    if step is not None and (isinstance(step, bool) or not isinstance(step, (str, int))):
        raise TypeError(f"step: expected a string or an integer, got {type(step).__name__}")
    return step


def step_metrics(account, prefix="arbiter/"):
    """A step account (`ArbiterClient.step_account(step)`) as flat numbers for a trainer's
    logger, which takes scalars only (TRL's `log_metric` failed on the nested dict):
    `arbiter/items/ok`, `arbiter/failures/deadline_exceeded`, `arbiter/totals/cost`,
    `arbiter/sources/provider-a/rate_limited`, ... An empty dict for None (no such step)."""
    flat = {}

    def walk(value, name):
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{name}/{key}" if name else str(key))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[prefix + name] = value

    if account is not None:
        walk({k: v for k, v in account.items() if k != "step"}, "")
    return flat


class ArbiterClient:
    """A client of one Arbiter server. Thread-safe; usable from any number of event loops.

    Every argument left as None is read from its ARBITER_* environment variable (`env`,
    default os.environ), else takes its default:

    | argument | variable | default |
    |---|---|---|
    | url | ARBITER_URL | http://127.0.0.1:8080 |
    | timeout_s | ARBITER_TIMEOUT | 300 (seconds, per HTTP attempt) |
    | retries | ARBITER_RETRIES | 5 (attempts after the first) |
    | reward | ARBITER_REWARD | none: the server maps each item's data_source |
    | on_failure | ARBITER_ON_FAILURE | raise (or none, value) |
    | failure_score | ARBITER_FAILURE_SCORE | 0.0 |
    | api_key | ARBITER_API_KEY | none (else sent as Authorization: Bearer) |
    | batch_size | ARBITER_BATCH_SIZE | 256 (items per request) |
    | priority | ARBITER_PRIORITY | the server's default class |
    | deadline_ms | ARBITER_DEADLINE_MS | the server's default deadline |
    | job | ARBITER_JOB | none (else "JOB/" before every non-empty group name and step tag) |

    `job` keeps the group names and step tags of jobs that share one server apart: they are
    global there, and two jobs on one dataset name their groups alike (verl by the row's
    index, TRL by the prompt). step_account(step) looks the step up in the job.

    `use_aiohttp`: None uses aiohttp for the async methods when it is importable, False always
    uses the standard library (each attempt in a worker thread), True requires aiohttp.
    `backoff_base_s`, `backoff_cap_s`, `max_retry_after_s` and `rng` tune the retries.
    """

    def __init__(self, url=None, *, timeout_s=None, retries=None, reward=None, on_failure=None,
                 failure_score=None, api_key=None, batch_size=None, priority=None,
                 deadline_ms=None, job=None, use_aiohttp=None, env=None, backoff_base_s=0.5,
                 backoff_cap_s=8.0, max_retry_after_s=60.0, rng=None):
        # What a copy in another process is made from (__reduce__): its settings as resolved
        # here (the environment read once), not its connections, threads or locks.
        self._made_with = dict(
            url=url, timeout_s=timeout_s, retries=retries, reward=reward, on_failure=on_failure,
            failure_score=failure_score, api_key=api_key, batch_size=batch_size,
            priority=priority, deadline_ms=deadline_ms, job=job, use_aiohttp=use_aiohttp,
            backoff_base_s=backoff_base_s, backoff_cap_s=backoff_cap_s,
            max_retry_after_s=max_retry_after_s, rng=rng)
        self.settings = _settings.resolve(
            env, url=url, timeout_s=timeout_s, retries=retries, reward=reward,
            on_failure=on_failure, failure_score=failure_score, api_key=api_key,
            batch_size=batch_size, priority=priority, deadline_ms=deadline_ms, job=job)
        s = self.settings
        self._retry = RetryPolicy(s.retries, backoff_base_s, backoff_cap_s, max_retry_after_s,
                                  rng)
        # Arbiter answers every item by its deadline; hanging up before that would drop its
        # work (the server cancels a request whose client has gone) and a retry would start
        # over, so an attempt waits at least the deadline and a margin.
        self.attempt_timeout_s = s.timeout_s
        if s.deadline_ms is not None:
            self.attempt_timeout_s = max(s.timeout_s, s.deadline_ms / 1000.0 + 10.0)
        self._threads = None
        self._threads_lock = threading.Lock()
        self._threads_pid = os.getpid()
        self._sync = StdlibTransport(s.url, self.attempt_timeout_s)
        if use_aiohttp and aiohttp is None:
            raise ImportError("use_aiohttp=True but aiohttp is not installed: "
                              "pip install 'arbiter-client[aiohttp]'")
        self._async = (AiohttpTransport(s.url, self.attempt_timeout_s)
                       if aiohttp is not None and use_aiohttp is not False else None)
        self._headers = {"Content-Type": "application/json",
                         "User-Agent": f"arbiter-client/{__version__}"}
        if s.api_key:
            self._headers["Authorization"] = f"Bearer {s.api_key}"

    def __reduce__(self):
        # A client pickles (Ray, cloudpickle'd reward functions) as its settings: the copy
        # opens its own connections. It failed on its locks ("cannot pickle '_thread.lock'").
        s = self.settings
        made = dict(self._made_with, env={}, url=s.url, timeout_s=s.timeout_s,
                    retries=s.retries, reward=s.reward, on_failure=s.on_failure,
                    failure_score=s.failure_score, api_key=s.api_key, batch_size=s.batch_size,
                    priority=s.priority, deadline_ms=s.deadline_ms, job=s.job)
        return (_rebuild, (made,))

    @property
    def async_transport(self):
        """"aiohttp" or "stdlib": what the async methods use."""
        return "aiohttp" if self._async is not None else "stdlib"

    # --- public API ------------------------------------------------------------------------

    def score(self, items: Iterable[Mapping[str, Any]], step=None) -> List[ItemResult]:
        """Scores `items` (dicts with verl's field names: solution_str, ground_truth, and
        reward or data_source; extra_info optional), answered in order. A number in
        ground_truth is sent as the text str() gives it (72 -> "72"). Lists longer than
        batch_size go in several requests, up to SUBREQUESTS_IN_FLIGHT at once; a request
        Arbiter refuses as too large (413) is sent again in halves. An item may carry a `group`
        (a GRPO group: the rollouts of one prompt); its result's `group` then holds the group's
        statistics. `step` (a string or an integer) tags the items with the training step,
        whose accounting step_account() returns.

        An error raised here carries `results`: one entry per item, its ItemResult where
        Arbiter answered it, else None, so that a failed request loses no other request's
        scores."""
        requests = list(self._requests(items, step))
        if len(requests) <= 1:
            done = [self._capture(lambda: self._batch_sync(*r)) for r in requests]
        else:
            pool = self._thread_pool()
            in_flight = threading.BoundedSemaphore(SUBREQUESTS_IN_FLIGHT)

            def run(request):
                with in_flight:
                    return self._capture(lambda: self._batch_sync(*request))
            done = list(pool.map(run, requests))
        return self._gathered(requests, done)

    async def ascore(self, items: Iterable[Mapping[str, Any]], step=None) -> List[ItemResult]:
        """score() for asyncio."""
        requests = list(self._requests(items, step))
        in_flight = asyncio.Semaphore(SUBREQUESTS_IN_FLIGHT)

        async def run(request):
            async with in_flight:
                try:
                    return await self._batch_async(*request), None
                except ArbiterError as exc:
                    return None, exc
        done = await asyncio.gather(*(run(r) for r in requests))
        return self._gathered(requests, done)

    def step_account(self, step=None):
        """What Arbiter accounted for training step `step` (items by status, and per source
        its calls, tokens, cost, 429s, retries and hedges; docs/api.md, GET /v1/steps), as a
        dict, or None when the step is not among the recent ones. With no step: the list of
        the recent steps' accounts. For a trainer's logger (`step_metrics` flattens it);
        blocking. With `job`, the steps are this job's: the list holds no other job's.
        A 429, a 503 or a connection that fails is retried as score() retries."""
        if step == "":
            return None  # an empty step tag is no step (docs/api.md): nothing is accounted to it
        step = self._job_name(_step_tag(step))
        path = "/v1/steps" if step is None else \
            "/v1/steps/" + urllib.parse.quote(str(step), safe="")
        attempt = 0
        while True:
            try:
                status, headers, data = self._sync.get(path, self._headers)
            except CONNECTION_ERRORS as exc:
                outcome = classify_exception(exc)
            else:
                if status == 404 and step is not None:
                    return None
                if status == 200:
                    answer = json.loads(data)
                    if step is not None:
                        return answer
                    prefix = None if self.settings.job is None else self.settings.job + "/"
                    return [s for s in answer["steps"]
                            if prefix is None or str(s.get("step", "")).startswith(prefix)]
                outcome = classify_response(status, headers, data)
            time.sleep(self._decide(attempt, outcome, 0))
            attempt += 1

    def close(self):
        """Closes the standard-library connections (and ascore()'s threads, if it made any)."""
        self._forget_parents_threads()
        with self._threads_lock:
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=False)
        self._sync.close()

    async def aclose(self):
        """Closes the running loop's aiohttp session (and the standard-library connections)."""
        if self._async is not None:
            await self._async.aclose()
        self._sync.close()

    # --- requests --------------------------------------------------------------------------

    def _requests(self, items, step=None):
        """Yields (offset of the first item, request body) per batch_size items."""
        prepared = [self._prepare(item, i) for i, item in enumerate(items)]
        step = self._job_name(_step_tag(step))
        size = self.settings.batch_size
        for offset in range(0, len(prepared), size):
            body = {"items": prepared[offset:offset + size]}
            if step is not None:
                body["step"] = step
            if self.settings.priority is not None:
                body["priority"] = self.settings.priority
            if self.settings.deadline_ms is not None:
                body["deadline_ms"] = self.settings.deadline_ms
            yield offset, body

    def _prepare(self, item, index):
        if not isinstance(item, Mapping):
            raise TypeError(f"items[{index}]: expected a dict, got {type(item).__name__}")
        out = {}
        for key, value in item.items():
            path = f"items[{index}][{key!r}]"
            out[str(key)] = (to_reference_value(value, path) if key == "ground_truth"
                             else to_json_value(value, path))
        if "reward" not in out and self.settings.reward is not None:
            out["reward"] = self.settings.reward
        if isinstance(out.get("group"), (str, int)) and not isinstance(out["group"], bool):
            out["group"] = self._job_name(out["group"])
        return out

    def _job_name(self, name):
        """A group name or step tag in this client's job (`job`: "JOB/name"), or as it is; an
        empty one (no group, no step) stays empty."""
        if name is None or name == "" or self.settings.job is None:
            return name
        return f"{self.settings.job}/{name}"

    def _encode(self, body):
        text = json.dumps(body, ensure_ascii=False, allow_nan=False)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (text decoded with surrogateescape, a pair cut in two): UTF-8
            # cannot carry it, so it goes as U+FFFD, as a tokenizer would read it, rather than
            # failing the request with an error that names no item.
            return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace") \
                .encode("utf-8")

    @staticmethod
    def _capture(call):
        try:
            return call(), None
        except ArbiterError as exc:
            return None, exc

    def _batch_sync(self, offset, body):
        """The results of one request's items; a request refused as too large goes again in
        halves."""
        try:
            return self._results(self._post_sync(body, offset), offset, body["items"])
        except ArbiterRequestError as exc:
            halves = _halves(exc, offset, body)
            if halves is None:
                raise
            return _joined([self._capture(lambda h=h: self._batch_sync(*h)) for h in halves],
                           halves)

    async def _batch_async(self, offset, body):
        try:
            answer = await self._post_async(body, offset)
            return self._results(answer, offset, body["items"])
        except ArbiterRequestError as exc:
            halves = _halves(exc, offset, body)
            if halves is None:
                raise
            done = []
            for half in halves:
                try:
                    done.append((await self._batch_async(*half), None))
                except ArbiterError as error:
                    done.append((None, error))
            return _joined(done, halves)

    def _gathered(self, requests, done):
        """The requests' results in item order; raises the first error (a request's, else the
        first failed item's under on_failure=raise) with `results` attached."""
        results = []
        first_error = None
        for (offset, body), (answered, error) in zip(requests, done):
            if answered is None:
                first_error = first_error or error
                answered = getattr(error, "_answered", None) or [None] * len(body["items"])
            results += answered
        if first_error is None and self.settings.on_failure == "raise":
            index = next((i for i, r in enumerate(results) if r.failed), None)
            if index is not None:
                failed = results[index]
                first_error = ArbiterItemError(index, failed.error_code, failed.error_message,
                                               failed.raw)
        if first_error is not None:
            first_error.results = results
            raise first_error
        return results

    def _post_sync(self, body, offset):
        """The answer to `body`; the items a draining server ended go again (`_drained`), up
        to `retries` times, and keep their failure when the server does not come back."""
        answer = self._post_once_sync(body, offset)
        for attempt in range(self.settings.retries):
            drained = _drained(answer)
            if not drained:
                break
            time.sleep(max(DRAINED_WAIT_S, self._retry.backoff_s(attempt)))
            try:
                again = self._post_once_sync(
                    dict(body, items=[body["items"][i] for i in drained]), offset)
            except ArbiterError:
                break
            answer = _merged(answer, drained, again, body["items"])
        return answer

    async def _post_async(self, body, offset):
        answer = await self._post_once_async(body, offset)
        for attempt in range(self.settings.retries):
            drained = _drained(answer)
            if not drained:
                break
            await asyncio.sleep(max(DRAINED_WAIT_S, self._retry.backoff_s(attempt)))
            try:
                again = await self._post_once_async(
                    dict(body, items=[body["items"][i] for i in drained]), offset)
            except ArbiterError:
                break
            answer = _merged(answer, drained, again, body["items"])
        return answer

    def _post_once_sync(self, body, offset):
        data = self._encode(body)
        attempt = 0
        while True:
            try:
                outcome = classify_response(*self._sync.post("/v1/score", data, self._headers))
            except CONNECTION_ERRORS as exc:
                outcome = classify_exception(exc)
            delay = self._decide(attempt, outcome, offset)
            if delay is None:
                return outcome.body
            time.sleep(delay)
            attempt += 1

    async def _post_once_async(self, body, offset):
        data = self._encode(body)
        attempt = 0
        while True:
            try:
                if self._async is not None:
                    answer = await self._async.post("/v1/score", data, self._headers)
                else:
                    answer = await asyncio.get_running_loop().run_in_executor(
                        self._thread_pool(), self._sync.post, "/v1/score", data,
                        self._headers)
                outcome = classify_response(*answer)
            except CONNECTION_ERRORS as exc:
                outcome = classify_exception(exc)
            delay = self._decide(attempt, outcome, offset)
            if delay is None:
                return outcome.body
            await asyncio.sleep(delay)
            attempt += 1

    def _forget_parents_threads(self):
        """In a child process after a fork: its copy of the parent's pool has none of the
        pool's threads, so work given to it would never start (and no timeout would end the
        wait); a new pool is made when needed."""
        if self._threads_pid != os.getpid():
            self._threads_pid = os.getpid()
            self._threads_lock = threading.Lock()
            self._threads = None

    def _thread_pool(self):
        """The threads that carry ascore()'s requests without aiohttp: asyncio's default
        executor has only a few (cores + 4), which would send a verl worker's chunk a few
        requests at a time."""
        self._forget_parents_threads()
        with self._threads_lock:
            if self._threads is None:
                self._threads = concurrent.futures.ThreadPoolExecutor(
                    max_workers=MAX_CONNECTIONS, thread_name_prefix="arbiter-client")
            return self._threads

    def _decide(self, attempt, outcome, offset):
        """None: done, use outcome.body; else the seconds to wait before the next attempt."""
        decision, delay = self._retry.decide(attempt, outcome)
        if decision is RetryDecision.done:
            return None
        if decision is RetryDecision.fail:
            e = outcome.error
            raise ArbiterRequestError(e.status, e.code, _shift_index(e.message, offset),
                                      _shift_index(e.field, offset))
        if decision is RetryDecision.give_up:
            raise ArbiterUnavailable(outcome.reason, attempt + 1)
        return delay

    # --- results ---------------------------------------------------------------------------

    def _results(self, answer, offset, items):
        """One request's results, each with the failure policy applied to its score."""
        raw = answer["results"]
        if len(raw) != len(items):
            raise ArbiterError(f"Arbiter answered {len(raw)} results for {len(items)} items")
        groups = answer.get("groups") if isinstance(answer.get("groups"), dict) else {}
        return [self._result(r, groups.get(_group_name(item.get("group"))))
                for r, item in zip(raw, items)]

    def _result(self, r, group=None):
        status = r.get("status")
        error = r.get("error") or {}
        failed = status == "failed" or r.get("score") is None
        score = r.get("score")
        if failed:
            # Under `raise`, the caller raises once every request is answered (`_gathered`).
            score = self.settings.failure_score if self.settings.on_failure == "value" else None
        return ItemResult(
            score=None if score is None else float(score), failed=failed,
            status=status, source=r.get("source"), cached=bool(r.get("cached")),
            attempts=int(r.get("attempts") or 0), queue_ms=float(r.get("queue_ms") or 0.0),
            run_ms=float(r.get("run_ms") or 0.0), fallback_reason=r.get("fallback_reason"),
            error_code=error.get("code"), error_message=error.get("message"), raw=r,
            extra=r.get("extra") if isinstance(r.get("extra"), dict) else {},
            group=group if isinstance(group, dict) else None)
