"""Client settings: constructor arguments first, then ARBITER_* environment variables, then
the defaults. A bad value is a ValueError naming the argument or the variable. An empty
variable counts as unset."""
import math
import os
import urllib.parse
from dataclasses import dataclass
from typing import Mapping, Optional

DEFAULT_URL = "http://127.0.0.1:8080"
FAILURE_POLICIES = ("raise", "none", "value")


@dataclass(frozen=True)
class Settings:
    url: str                    # base URL, no trailing slash
    timeout_s: float            # per HTTP attempt
    retries: int                # attempts after the first
    reward: Optional[str]       # sent as each item's `reward` unless the item names one
    on_failure: str             # raise | none | value
    failure_score: float        # the score of a failed item under `value`
    api_key: Optional[str]      # sent as `Authorization: Bearer`
    batch_size: int             # items per request
    priority: Optional[str]     # the request's `priority`; None: the server's default
    deadline_ms: Optional[int]  # the request's `deadline_ms`; None: the server's default
    job: Optional[str] = None   # prefixes group names and step tags ("JOB/..."): see client.py


def _url(value, name):
    value = str(value).strip()
    problem = None
    if not value.startswith(("http://", "https://")) or len(value.split("://", 1)[1]) == 0:
        problem = "expected an http:// or https:// URL"
    else:
        parts = urllib.parse.urlsplit(value)
        try:
            parts.port  # noqa: B018 (raises for a port that is not a number in range)
        except ValueError:
            problem = "its port is not a number from 0 to 65535"
        if problem is None and not parts.hostname:
            problem = "it names no host"
    if problem is not None:
        raise ValueError(f"{name}: {problem}, got {value!r}")
    return value.rstrip("/")


def _api_key(value, name):
    value = _name(value, name)
    if not all(" " < ch < "\x7f" for ch in value):
        raise ValueError(f"{name}: a key is visible ASCII (no spaces, no line breaks), as an "
                         "Authorization header carries it")
    return value


def _number(value, name, minimum, exclusive=False):
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(number) or number < minimum or (exclusive and number == minimum):
        rel = ">" if exclusive else ">="
        raise ValueError(f"{name}: must be a finite number {rel} {minimum:g}, got {value!r}")
    return number


def _finite(value, name):
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name}: must be a finite number, got {value!r}")
    return number


def _integer(value, name, minimum):
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip()
        try:
            number = int(text)
        except ValueError:
            raise ValueError(f"{name}: expected an integer, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return number


def _name(value, name):
    value = str(value).strip()
    if not value:
        raise ValueError(f"{name}: must not be empty")
    return value


def _policy(value, name):
    value = str(value).strip().lower()
    if value not in FAILURE_POLICIES:
        raise ValueError(f"{name}: must be one of raise, none, value; got {value!r}")
    return value


def parse_bool(value, name):
    """true/false, 1/0, yes/no, on/off (any case); a bool passes as it is."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}: expected true/false or 1/0, got {value!r}")


# field: (environment variable, parser, default)
_FIELDS = {
    "url": ("ARBITER_URL", _url, DEFAULT_URL),
    "timeout_s": ("ARBITER_TIMEOUT", lambda v, n: _number(v, n, 0, exclusive=True), 300.0),
    "retries": ("ARBITER_RETRIES", lambda v, n: _integer(v, n, 0), 5),
    "reward": ("ARBITER_REWARD", _name, None),
    "on_failure": ("ARBITER_ON_FAILURE", _policy, "raise"),
    "failure_score": ("ARBITER_FAILURE_SCORE", _finite, 0.0),
    "api_key": ("ARBITER_API_KEY", _api_key, None),
    "batch_size": ("ARBITER_BATCH_SIZE", lambda v, n: _integer(v, n, 1), 256),
    "priority": ("ARBITER_PRIORITY", _name, None),
    "deadline_ms": ("ARBITER_DEADLINE_MS", lambda v, n: _integer(v, n, 1), None),
    "job": ("ARBITER_JOB", _name, None),
}


def env_value(env, variable):
    """The variable's value, or None when it is unset or empty."""
    value = env.get(variable)
    if value is None or not value.strip():
        return None
    return value


def resolve(env: Optional[Mapping[str, str]] = None, **given) -> Settings:
    """Settings from `given` (None = not given), else `env` (default os.environ), else the
    defaults."""
    env = os.environ if env is None else env
    unknown = set(given) - set(_FIELDS)
    if unknown:
        raise TypeError(f"unknown client option(s): {', '.join(sorted(unknown))}")
    values = {}
    for field, (variable, parse, default) in _FIELDS.items():
        if given.get(field) is not None:
            values[field] = parse(given[field], field)
        elif env_value(env, variable) is not None:
            values[field] = parse(env_value(env, variable), variable)
        else:
            values[field] = default
    return Settings(**values)


ENV_VARIABLES = tuple(variable for variable, _, _ in _FIELDS.values())
