"""Validation errors as JSON that any client can read: bounded in size, whatever the input.

pydantic's errors carry the offending ``input`` (a whole body for a missing field), a ``loc`` whose
parts can be dict keys of the input, and a ``ctx`` that can hold exception objects. Echoed as they
are, a NaN or an infinity (which JSON cannot carry), a lone surrogate (which UTF-8 cannot encode),
a 4,000-digit integer (which ``str`` refuses beyond 4,300 digits) or 10 MB of input turn the 422
into a 500, or into 10 MB of answer. :func:`json_safe_errors` keeps the first
:data:`MAX_ERRORS` errors, each with its text fields cut to a few hundred characters and its input
as a short preview.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

MAX_ERRORS = 20
"""Errors listed in one answer (a list of 10,000 invalid alerts has 10,000 of them)."""
MAX_TEXT = 200
"""Characters kept of an echoed input or a location part."""
MAX_MSG = 500
"""Characters kept of a message or a context value."""
_SAFE_INT = 2**53

_preview = reprlib.Repr()  # Python 3.11's Repr takes no keyword arguments
_preview.maxlevel, _preview.maxdict, _preview.maxlist, _preview.maxtuple = 2, 4, 4, 4
_preview.maxstring, _preview.maxlong, _preview.maxother = 60, 40, 60


def safe_text(value: str, limit: int = MAX_TEXT) -> str:
    """``value`` cut to ``limit`` characters, unpaired surrogates replaced (UTF-8 can carry it)."""
    cut = value[:limit] + ("..." if len(value) > limit else "")
    return cut.encode("utf-8", "replace").decode("utf-8")


def one_line(value: Any, limit: int = MAX_TEXT) -> str:
    """``value`` as log text on one line: cut to ``limit`` characters (:func:`safe_text`), control
    and non-ASCII characters escaped (a label name or a pod's value can hold a newline); quotes stay
    as they are, unlike :func:`ascii`."""
    return safe_text(str(value), limit).encode("unicode_escape").decode("ascii")


def safe_value(value: Any) -> Any:
    """A JSON scalar of ``value`` as it is when small and finite, else a short text preview."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -_SAFE_INT < value < _SAFE_INT else _preview.repr(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, bytes | bytearray):
        return safe_text(bytes(value[: MAX_TEXT * 4]).decode("utf-8", "replace"))
    return safe_text(_preview.repr(value))


def json_safe_error(error: Any) -> dict[str, Any]:
    """One pydantic or FastAPI error (``{type, loc, msg, input?, ctx?}``) as bounded JSON."""
    if not isinstance(error, dict):
        return {"type": "value_error", "loc": [], "msg": safe_text(str(error), MAX_MSG)}
    out: dict[str, Any] = {
        "type": safe_text(str(error.get("type", "value_error")), 100),
        "loc": [safe_value(p) for p in list(error.get("loc", ()))[:16]],
        "msg": safe_text(str(error.get("msg", "")), MAX_MSG),
    }
    if "input" in error:
        out["input"] = safe_value(error["input"])
    ctx = error.get("ctx")
    if isinstance(ctx, dict):
        out["ctx"] = {
            safe_text(str(k), 100): safe_text(_preview.repr(v) if not isinstance(v, str) else v)
            for k, v in list(ctx.items())[:8]
        }
    return out


def json_safe_errors(errors: Any) -> list[dict[str, Any]]:
    """The first :data:`MAX_ERRORS` of ``errors`` through :func:`json_safe_error`."""
    return [json_safe_error(e) for e in list(errors)[:MAX_ERRORS]]
