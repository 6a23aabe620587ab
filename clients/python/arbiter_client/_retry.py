"""What one HTTP attempt's outcome means, and what to do next. Plain code: no I/O, no clock of
its own; the client sleeps the returned delay. Randomness comes from the injected `rng`, the
wall-clock time a `Retry-After` date is read against from the injected `now`."""
import enum
import datetime
import email.utils
import json
import random
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Optional

from .errors import ArbiterRequestError


class OutcomeKind(enum.Enum):
    ok = "ok"                              # 200 with a body
    rejected = "rejected"                  # a 4xx other than 429: never retried
    rate_limited = "rate_limited"          # 429: wait Retry-After
    unavailable = "unavailable"            # 503: wait Retry-After (draining, restarting)
    server_error = "server_error"          # other 5xx (Retry-After honoured when sent),
                                           # other statuses, unusable 200 bodies
    connection_error = "connection_error"  # refused, reset, timed out
    unreachable = "unreachable"            # a name that does not resolve, a TLS failure:
                                           # the same on every attempt, never retried


@dataclass
class Outcome:
    kind: OutcomeKind
    reason: str                                   # for ArbiterUnavailable
    body: Optional[dict] = None                   # the parsed 200 body
    retry_after_s: Optional[float] = None         # from a 429 or 503
    error: Optional[ArbiterRequestError] = None   # for `rejected`


def _retry_after(headers, now):
    """Seconds to wait from a `Retry-After` of delay-seconds or an HTTP-date (RFC 9110 10.2.3:
    IMF-fixdate, RFC 850 or asctime; a date in the past means now); None for garbage."""
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None  # garbage: use the backoff instead
    if when.tzinfo is None:  # asctime's form names no zone: HTTP-dates are GMT
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - now())


def _error_fields(data, status):
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return error.get("code"), error.get("message"), error.get("field")
    return None, f"HTTP {status}", None


def classify_response(status, headers, data, now=time.time):
    """`headers` has lower-case names; `data` is the body as bytes; `now` gives the wall-clock
    time (seconds since the epoch) a `Retry-After` date is read against."""
    parsed = None
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        pass
    if status == 200:
        if isinstance(parsed, dict) and isinstance(parsed.get("results"), list):
            return Outcome(OutcomeKind.ok, "ok", body=parsed)
        return Outcome(OutcomeKind.server_error, "200 with a body that is not a /v1/score answer")
    code, message, field = _error_fields(parsed, status)
    if message is None:
        message = f"HTTP {status}"
    reason = f"HTTP {status}" + (f" {code}: {message}" if code else "")
    if status == 429:
        return Outcome(OutcomeKind.rate_limited, reason, retry_after_s=_retry_after(headers, now))
    if status == 503:
        return Outcome(OutcomeKind.unavailable, reason, retry_after_s=_retry_after(headers, now))
    if 400 <= status < 500:
        # 400, 422 and the rest: the same request would fail the same way.
        if code is None and parsed is None:
            message = (data or b"").decode("utf-8", "replace")[:200] or message
        return Outcome(OutcomeKind.rejected, reason,
                       error=ArbiterRequestError(status, code, message, field))
    # Another 5xx (504 deadline_exceeded comes with Retry-After): its Retry-After, else backoff.
    return Outcome(OutcomeKind.server_error, reason, retry_after_s=_retry_after(headers, now))


def _causes(exc):
    """`exc` and what it wraps (aiohttp keeps the OS error in `os_error`)."""
    seen = []
    while exc is not None and exc not in seen and len(seen) < 8:
        seen.append(exc)
        exc = getattr(exc, "os_error", None) or exc.__cause__ or exc.__context__
    return seen


def _unreachable(exc):
    """A failure no retry mends: a TLS handshake or certificate failure (https to a plain
    HTTP port, an untrusted certificate), or a host name that does not exist. A name server
    that did not answer in time (EAI_AGAIN) may answer next time, and is retried."""
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLError):
            return True
        if isinstance(cause, socket.gaierror) and cause.errno == socket.EAI_NONAME:
            return True
    return False


def classify_exception(exc):
    text = str(exc) or type(exc).__name__
    kind = OutcomeKind.unreachable if _unreachable(exc) else OutcomeKind.connection_error
    return Outcome(kind, f"{type(exc).__name__}: {text}")


class RetryDecision(enum.Enum):
    done = "done"          # use outcome.body
    fail = "fail"          # raise outcome.error
    retry = "retry"        # sleep `delay_s`, then try again
    give_up = "give_up"    # raise ArbiterUnavailable(outcome.reason)


class RetryPolicy:
    """`retries` attempts after the first. Answers with a Retry-After (429, 503, other 5xx)
    wait it (at most `max_retry_after_s`, plus up to 10% jitter); other retryable outcomes
    wait min(cap, base * 2**attempt) scaled by a random factor in [0.5, 1). A 4xx other than
    429 (400, 422, ...) is never retried."""

    def __init__(self, retries, backoff_base_s=0.5, backoff_cap_s=8.0, max_retry_after_s=60.0,
                 rng=None):
        self.retries = retries
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.max_retry_after_s = max_retry_after_s
        self.rng = rng or random.Random()

    def decide(self, attempt, outcome):
        """`attempt` counts from 0. Returns (RetryDecision, delay in seconds)."""
        if outcome.kind is OutcomeKind.ok:
            return RetryDecision.done, 0.0
        if outcome.kind is OutcomeKind.rejected:
            return RetryDecision.fail, 0.0
        if attempt >= self.retries or outcome.kind is OutcomeKind.unreachable:
            return RetryDecision.give_up, 0.0
        if outcome.retry_after_s is not None:
            wait = min(outcome.retry_after_s, self.max_retry_after_s)
            return RetryDecision.retry, wait * (1 + 0.1 * self.rng.random())
        return RetryDecision.retry, self.backoff_s(attempt)

    def backoff_s(self, attempt):
        """The wait before attempt `attempt` + 1 where no Retry-After says how long."""
        backoff = min(self.backoff_cap_s, self.backoff_base_s * 2 ** attempt)
        return backoff * (0.5 + 0.5 * self.rng.random())
