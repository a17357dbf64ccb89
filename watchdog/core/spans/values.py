"""Reading a span's attribute values, bounded: only the attributes some table names are decoded
(:func:`select_attributes`, a JSON-encoded value as what it encodes), the first present of a
fact's places, hidden content as none, JSON without the standard wrapper's overhead, tool
arguments as canonical JSON, and hashes that are the same in every process.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from watchdog.core.bounds import token_count
from watchdog.core.spans.attributes import (
    FIRST_FACTS,
    HIDDEN_CONTENT,
    HIDDEN_CONTENT_CHARS,
    SCALAR_ATTRIBUTES,
    TOOL_ARGS_ENVELOPES,
    WANTED_ATTRIBUTES,
)
from watchdog.core.spans.decode import any_value
from watchdog.core.spans.record import EMPTY_OUTPUTS

# Bounds on what one span may put into memory; longer strings are cut (and redacted) first.
MAX_NAME_CHARS = 200
MAX_BRIEF_CHARS = 500
MAX_ERROR_CHARS = 500
def select_attributes(key_values: Any) -> dict[str, object]:
    """Decode only the attributes normalisation reads.

    Real agent spans carry large attributes nothing here needs (tool definitions, JSON schemas,
    request parameters); skipping them avoids building a Python string for each. Flattened
    message keys (``llm.input_messages.{i}.*``) are not kept either: the rare LLM span without
    JSON messages walks its keys again (:func:`_fill_llm`), so no other span pays a prefix test
    per attribute.
    """
    wanted = WANTED_ATTRIBUTES
    scalars = SCALAR_ATTRIBUTES
    selected: dict[str, object] = {}
    for kv in key_values:
        key = kv.key
        if key in wanted:
            value = kv.value
            # A non-empty string_value can only be the set member of the oneof; reading it first
            # spares the common case the WhichOneof dispatch.
            text = value.string_value
            if not text:
                selected[key] = any_value(value)
            elif text[0] == '"' or key in scalars:
                selected[key] = json_encoded(text, key in scalars)
            else:
                selected[key] = text
    return selected


# The compiled decode's Span type (watchdog.core.spans.native sets it when it loads the compiled
# module): no span is one before.
NATIVE_SPAN: Any = None


def selected(span: Any) -> dict[str, object]:
    """The attributes of ``span`` the conventions read, from either decode."""
    if type(span) is NATIVE_SPAN:  # (set once the compiled decode is loaded)
        return span.selected()  # type: ignore[no-any-return]
    return select_attributes(span.attributes)


def read(span: Any) -> tuple[dict[str, object], tuple[object, ...] | None]:
    """The attributes of ``span`` the conventions read and, from the compiled decode, their
    first-present facts (``FIRST_FACTS``, resolved in the same pass); None: the Python path
    looks each up when it is asked for (:class:`Firsts`)."""
    if type(span) is NATIVE_SPAN:
        return span.read()  # type: ignore[no-any-return]
    return select_attributes(span.attributes), None


_NUMBER_STARTS = frozenset("-0123456789")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_encoded(text: str, scalar: bool) -> object:
    """A value some SDKs JSON-encode (MLflow: every attribute) as the value it encodes: a
    JSON string (``"\\"TOOL\\""``) as its text, and where a number or flag is read
    (``scalar``) ``"12"`` as 12 and ``"true"`` as True; any other text as it is."""
    if text[0] == '"':
        if len(text) < 2 or text[-1] != '"':
            return text
        try:
            value = _load_json(text)
        except ValueError:
            return text
        if not isinstance(value, str) or ("\\u" in text and not _encodable(value)):
            return text  # (an escaped lone surrogate is no text a label or page can show)
        if not scalar or not value:
            return value
        text = value  # (a number JSON-encoded twice: "\\"12\\"")
    if not scalar:
        return text
    if text in ("true", "false"):
        return text == "true"
    if text[0] in _NUMBER_STARTS and len(text) <= 32:
        try:
            number = _load_json(text)
        except (ValueError, RecursionError):
            return text
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return number
    return text


def _first(attrs: Mapping[str, object], keys: tuple[str, ...]) -> object | None:
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value
    return None


def _content(attrs: Mapping[str, object], keys: tuple[str, ...],
             hidden: frozenset[str] = HIDDEN_CONTENT) -> object | None:
    """:func:`_first` of content (a message, an output, a tool's arguments or result): None
    where an instrumentation wrote its placeholder for hidden content (content capture off;
    ``hidden``: the placeholders of the span's scope)."""
    return _hidden(_first(attrs, keys), hidden)


def _hidden(value: object, hidden: frozenset[str] = HIDDEN_CONTENT) -> object | None:
    """Content as it is, or None where it is an instrumentation's placeholder for hidden content
    (content capture off; ``hidden``: the placeholders of the span's scope)."""
    if isinstance(value, str) and len(value) <= HIDDEN_CONTENT_CHARS and value in hidden:
        return None
    return value


def _first_str(attrs: Mapping[str, object], keys: tuple[str, ...]) -> str | None:
    """:func:`_first` as a string (its own loop: called ~6 times per span): a string, or an
    integer's digits; a flag, a double, a list or a map is no name or id (``True`` is no
    session), passed over."""
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            if isinstance(value, str):
                return value
            if type(value) is int:
                return str(value)
    return None


class FirstValues(Protocol):
    """A span's first-present facts by index: :class:`Firsts`, or the compiled decode's tuple."""

    def __getitem__(self, index: int, /) -> Any: ...


class Firsts:
    """The :data:`~watchdog.core.spans.attributes.FIRST_FACTS` of a span's selected attributes,
    each looked up when it is asked for (``firsts[F_SESSION]``): the Python path's twin of the
    tuple the compiled decode resolves them into in one pass (``Span.read``)."""

    __slots__ = ("attrs",)

    def __init__(self, attrs: Mapping[str, object]) -> None:
        self.attrs = attrs

    def __getitem__(self, index: int) -> Any:
        keys, as_text = FIRST_FACTS[index]  # (_first and _first_str inline: one call a fact)
        attrs = self.attrs
        for key in keys:
            value = attrs.get(key)
            if value is not None and value != "":
                if not as_text or isinstance(value, str):
                    return value
                if type(value) is int:  # (its digits; a flag, a double, a list: no text)
                    return str(value)
        return None


# finite, >= 0, bounded: never inf/NaN/overflow from a span (the function itself: no frame
# of its own around it, ~3 reads a model call)
_int = token_count


_SIGNED_64 = struct.Struct(">q")  # the same value as int.from_bytes(..., "big", signed=True)


# The compiled normalise's tables (watchdog.core.spans.native installs them with the compiled
# decode): a span of the compiled decode read by ``Span.record`` where it is sure of it
# (:func:`~watchdog.core.spans.conventions.normalised`).
compiled_normaliser: Any = None

# The compiled stable_hash (watchdog.core.spans.native installs it with the compiled decode): the
# same hash, or None for a text that is no UTF-8 (hashed below, its lone surrogates replaced).
compiled_hash: Callable[[str], int | None] | None = None


def stable_hash(text: str) -> int:
    """A 64-bit hash that is the same in every process (Python's ``hash`` is salted)."""
    if compiled_hash is not None and (compiled := compiled_hash(text)) is not None:
        return compiled
    digest = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).digest()
    value: int = _SIGNED_64.unpack(digest)[0]
    return value


# json.dumps builds a new encoder on every call with non-default options; this one is reused.
# Its values come from json.loads or OTLP AnyValues, which cannot be circular: no check.
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                   check_circular=False)
_JSON_DECODER = json.JSONDecoder()
_JSON_WHITESPACE = " \t\n\r"  # all the whitespace JSON allows around a value


def _load_json(text: str) -> Any:
    """``json.loads(text)``, without the ~0.8 µs its wrapper spends per call around
    ``raw_decode`` (a BOM test and two whitespace regexes); raises ``ValueError`` where it does.
    """
    start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
    try:
        value, end = _JSON_DECODER.raw_decode(text, start)
    except RecursionError:  # nested deeper than the parser goes: no JSON a span needs
        raise ValueError("JSON nested too deeply") from None
    if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
        raise ValueError("extra data after the JSON value")
    return value


# The compiled canonical JSON (watchdog.core.spans.native installs it with the compiled decode):
# the text canonical_arguments writes, or None where this Python must write it.
compiled_canonical: Callable[[str], str | None] | None = None


def canonical_arguments(raw: object) -> str:
    """Tool arguments as canonical JSON (sorted keys, no whitespace) so that the same call with
    keys in another order or other spacing counts as the same call."""
    value: Any = raw
    if isinstance(raw, str):
        if compiled_canonical is not None and (canonical := compiled_canonical(raw)) is not None:
            return canonical
        try:
            value = _load_json(raw)
        except ValueError:
            return raw.strip()
    if isinstance(value, dict) and TOOL_ARGS_ENVELOPES:
        value = _unwrapped(value)
    try:
        return _CANONICAL_JSON.encode(value)
    except (TypeError, ValueError):
        return str(raw)


def _unwrapped(value: dict[str, Any]) -> Any:
    """The arguments inside a call's envelope (LangChain's ``inputs``, smolagents' ``kwargs``):
    the envelope's ids and metadata would make every call look new."""
    for keys, inner in TOOL_ARGS_ENVELOPES:
        if inner in value and keys.issubset(value.keys()):  # (the cheap test first)
            return value[inner]
    return value


def _is_empty_output(value: object) -> bool:
    if isinstance(value, str):
        return value.strip() in EMPTY_OUTPUTS
    return isinstance(value, (list, dict)) and not value


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(value)


def _count_messages(value: object) -> int:
    """Length of a JSON-encoded message list without parsing it.

    In JSON an unescaped ``"role"`` token occurs only as a key (or the literal string "role"),
    and every chat message object has exactly one ``role``; counting it is ~100x cheaper than
    ``json.loads`` on conversations that grow to hundreds of KiB.
    """
    if isinstance(value, str):
        return value.count('"role"')
    if isinstance(value, list):
        return len(value)
    return 0


def _flat_count(keys: Iterable[str], prefixes: tuple[str, ...]) -> int:
    highest = -1
    for key in keys:
        for prefix in prefixes:
            if key.startswith(prefix):
                index, _, _ = key[len(prefix):].partition(".")
                if index.isascii() and index.isdigit():  # (int() refuses "²", a digit too)
                    highest = max(highest, int(index))
    return highest + 1
