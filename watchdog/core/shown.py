"""A client's value as an error message quotes it: as JSON, the language the client wrote it
in (``null``, ``true``, ``"text"``, ``[1, 2]``), never as Python's repr (``None``, ``True``,
``'text'``), and cut, for a body may hold a megabyte of it. Pure."""

from __future__ import annotations

import json

MAX_SHOWN_CHARS = 80  # what an error message quotes of a value; the rest is "..."


def shown(value: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """``value`` as JSON (non-ASCII as it is, control characters and unpaired surrogates
    escaped), cut to ``limit`` characters; a value JSON cannot write (a NaN, an object nested
    past the interpreter's limit, no JSON type at all) in plain words."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")  # (an unpaired surrogate: written escaped instead)
    except UnicodeEncodeError:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        text = _words(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _words(value: object) -> str:
    if isinstance(value, float):
        return str(value)  # nan, inf, -inf
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"


def readable_path(path: str) -> str:
    """A file name as a message shows it: the bytes of a name that is no UTF-8 (which Python
    holds as surrogate escapes, ``\\udce9``) as backslash escapes (``\\xe9``), as ``ls -b``
    shows them; any other text as it is."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        pass
    try:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # (a surrogate no byte was decoded to: escaped as code point)
        return path.encode("utf-8", "backslashreplace").decode("utf-8")
