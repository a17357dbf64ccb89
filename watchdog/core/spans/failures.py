"""How a span failed: its exception (unwrapped from an exporter's generic wrapper), its
error's type, message and signature, and a stop at a limit the failure names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from watchdog.core.redact import brief, mask
from watchdog.core.spans.attributes import ERROR_TYPE_KEYS, WRAPPED_EXCEPTION_TYPES
from watchdog.core.spans.outcome import (
    LIMIT_EXCEPTIONS,
    error_limit,
    phrase_limit,
    reported_error,
    short_type,
    status_limit,
    unwrapped_exception,
)
from watchdog.core.spans.record import SpanRecord
from watchdog.core.spans.values import MAX_ERROR_CHARS, MAX_NAME_CHARS, _first_str, stable_hash


def _exception(events: Any) -> tuple[str | None, str | None]:
    for event in events:
        if event.name == "exception":
            exc_type = exc_message = None
            for kv in event.attributes:
                if kv.key == "exception.type":
                    exc_type = kv.value.string_value
                elif kv.key == "exception.message":
                    exc_message = kv.value.string_value
            return exc_type, exc_message
    return None, None


def _wrapped_error(events: Any) -> bool:
    """Whether the span's exception is in the wrapper of an exporter that records only errors
    (the ``wrapped_exceptions`` of the conventions)."""
    exc_type, exc_message = _exception(events)
    if exc_type not in WRAPPED_EXCEPTION_TYPES or not exc_message:
        return False
    return unwrapped_exception(exc_type, exc_message) != (exc_type, exc_message)


def _fill_error(record: SpanRecord, attrs: Mapping[str, object], events: Any,
                status_message: str) -> None:
    exc_type, exc_message = _exception(events)
    if exc_type in WRAPPED_EXCEPTION_TYPES and exc_message:
        exc_type, exc_message = unwrapped_exception(exc_type, exc_message)
    status_stop = status_limit(status_message) if status_message else None
    # A limit only named by the status description ("Max turns exceeded: …") types the error.
    error_type = _first_str(attrs, ERROR_TYPE_KEYS) or exc_type or status_stop or "error"
    # (neither says what failed: the error the framework reports in an attribute, if it does)
    message = exc_message or status_message or reported_error(attrs)
    _failed(record, error_type, message, exc_type)
    for candidate in (error_type, exc_type):
        if candidate and short_type(candidate) in LIMIT_EXCEPTIONS:
            record.limit_stop = short_type(candidate)
            return
    # (a limit told only in words: the exception's message, an error the span reports)
    record.limit_stop = status_stop or (phrase_limit(exc_message) if exc_message else None) \
        or error_limit(attrs)


def _failed(record: SpanRecord, error_type: str, message: str,
            exc_type: str | None = None) -> None:
    """Mark the span failed: its error, the signature repeats are counted by (type + masked
    message) and the identity of the exception (the same on every span it passed through)."""
    prefix = short_type(error_type) + ": "
    if message.startswith(prefix):  # "RuntimeError: boom" -> "boom"; the type is kept apart
        message = message[len(prefix):]
    record.error = True
    record.error_type = error_type[:MAX_NAME_CHARS]
    record.error_message = brief(message, MAX_ERROR_CHARS)
    record.error_signature = stable_hash(error_type + ":" + mask(record.error_message))
    record.exception_id = stable_hash((exc_type or error_type) + "\0" + message)
