"""Turning trainer values into JSON without importing numpy: anything with `.tolist()` (numpy
arrays and scalars, torch tensors) or `.item()` is converted through it."""
import math


def to_json_value(value, path):
    """A copy of `value` made of dict, list, str, int, float, bool and None. Raises TypeError
    (or ValueError for NaN and infinities) naming `path` for what JSON cannot carry."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value!r} cannot be sent as JSON")
        return value
    if isinstance(value, dict):
        return {str(k): to_json_value(v, f"{path}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "tolist"):
        return to_json_value(value.tolist(), path)
    if hasattr(value, "item"):
        return to_json_value(value.item(), path)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8")
    if isinstance(value, (set, frozenset)):
        return [to_json_value(v, f"{path}[{i}]") for i, v in enumerate(sorted(value, key=repr))]
    raise TypeError(f"{path}: a {type(value).__name__} cannot be sent as JSON")


def is_json_value(value):
    """Whether `value` converts with to_json_value."""
    try:
        to_json_value(value, "")
    except (TypeError, ValueError, UnicodeDecodeError):
        return False
    return True
