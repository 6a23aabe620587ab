"""What the trainer adapters share: one client per set of options, and text out of chat
messages."""
import json
import os
import threading

from ._settings import ENV_VARIABLES
from .client import ArbiterClient

_clients = {}
_lock = threading.Lock()


def shared_client(**options):
    """The process-wide ArbiterClient for these options (None = from the environment) and the
    current values of the ARBITER_* variables: one is made for each such combination."""
    given = tuple(sorted((k, v) for k, v in options.items() if v is not None))
    key = (given, tuple(os.environ.get(v) for v in ENV_VARIABLES))
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = ArbiterClient(**dict(given))
        return client


def close_shared():
    """Closes the standard-library connections of every shared client and forgets them (the
    next call makes new ones)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


async def aclose_shared():
    """Closes the running loop's sessions of every shared client (for tests and clean exits)."""
    with _lock:
        clients = list(_clients.values())
    for client in clients:
        await client.aclose()


def content_text(content):
    """A message's content: a string, or OpenAI content parts (their text parts joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def is_messages(value):
    return isinstance(value, (list, tuple)) and all(
        isinstance(m, dict) and "content" in m for m in value)


def prompt_text(prompt):
    """A prompt string as it is; for chat messages, the last user message's content (the
    last message's when none is from the user)."""
    if isinstance(prompt, str):
        return prompt
    if is_messages(prompt):
        users = [m for m in prompt if m.get("role") == "user"]
        chosen = users[-1] if users else (prompt[-1] if prompt else None)
        return content_text(chosen.get("content")) if chosen else ""
    raise TypeError(f"expected a string or a list of chat messages, got {type(prompt).__name__}")


def prompt_key(prompt):
    """The whole prompt as one text, to tell prompts apart: a string as it is; chat messages
    as their roles and contents (two prompts that differ only in their system message, or an
    earlier turn, are two prompts)."""
    if isinstance(prompt, str):
        return prompt
    if is_messages(prompt):
        return json.dumps([[m.get("role"), content_text(m.get("content"))] for m in prompt],
                          ensure_ascii=False)
    raise TypeError(f"expected a string or a list of chat messages, got {type(prompt).__name__}")


def completion_text(completion):
    """A completion string as it is; for chat messages, the assistant messages' contents
    joined by newlines (every message's when none is from the assistant)."""
    if isinstance(completion, str):
        return completion
    if is_messages(completion):
        chosen = [m for m in completion if m.get("role") == "assistant"] or list(completion)
        return "\n".join(content_text(m.get("content")) for m in chosen)
    raise TypeError(
        f"expected a string or a list of chat messages, got {type(completion).__name__}")
