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


def _plain(value):
    """A numpy value (anything with `.tolist()` or `.item()`) as the Python value it holds."""
    if value is None or isinstance(value, (str, bytes, bool, int, float, dict, list, tuple)):
        return value
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return value


def _number_text(value):
    """str(value) for an int or a float (a bool is no number here), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _numpy_float_text(value):
    """str() of a numpy float scalar, or of each member of a numpy float array (nested lists
    for more dimensions), else None: str(np.float32(0.1)) is "0.1", where `.tolist()` would
    widen it to 0.10000000149011612 first. A torch float tensor goes through numpy alike
    (bfloat16, which numpy lacks, as float32: exact)."""
    dtype = getattr(value, "dtype", None)
    if getattr(dtype, "is_floating_point", False) and hasattr(value, "detach"):
        value = value.detach().cpu()
        try:
            value = value.numpy()
        except TypeError:
            value = value.float().numpy()
        dtype = value.dtype
    if getattr(dtype, "kind", None) != "f" or not hasattr(value, "ndim"):
        return None
    if value.ndim == 0:
        return str(value)
    return [_numpy_float_text(member) for member in value]


def to_reference_value(value, path):
    """A `ground_truth` as Arbiter's /v1/score takes it: a string, or a list of strings (or
    `{"target": ...}` holding them), with every int or float (numpy's too, through
    `.tolist()` / `.item()`) turned into the text Python's `str()` gives it (72 -> "72",
    0.5 -> "0.5", 1e16 -> "1e+16", inf -> "inf"), as Arbiter turns a JSON number. Anything
    else goes as JSON (to_json_value), and Arbiter refuses a boolean or None with a 400 naming
    the field."""
    texts = _numpy_float_text(value)
    if texts is not None:
        return texts
    value = _plain(value)
    text = _number_text(value)
    if text is not None:
        return text
    if isinstance(value, dict) and "target" in value:
        # verl's search-R1 shape: its target holds the references, numbers turned as above
        # (a float32 array went as 0.10000000149011612, and "0.1" scored 0).
        out = {str(k): to_json_value(v, f"{path}[{k!r}]") for k, v in value.items()
               if k != "target"}
        out["target"] = to_reference_value(value["target"], f"{path}['target']")
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for i, member in enumerate(value):
            texts = _numpy_float_text(member)
            if texts is not None:
                out.append(texts)
                continue
            member = _plain(member)
            text = _number_text(member)
            out.append(text if text is not None else to_json_value(member, f"{path}[{i}]"))
        return out
    return to_json_value(value, path)


def is_json_value(value):
    """Whether `value` converts with to_json_value."""
    try:
        to_json_value(value, "")
    except (TypeError, ValueError, UnicodeDecodeError):
        return False
    return True
