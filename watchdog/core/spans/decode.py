"""OTLP payload decoding: bytes in, ``ExportTraceServiceRequest`` out, or a :class:`DecodeError`.

Protobuf decoding uses the ``opentelemetry-proto`` messages on protobuf's ``upb`` backend (the
pure-Python backend is ~20x slower; :func:`protobuf_backend` lets the server warn about it):
the reference. Where the compiled decode is built (:mod:`watchdog.core.spans.native`), it reads
protobuf requests instead, into objects that read as these messages do.
OTLP/JSON differs from protobuf's canonical JSON mapping in one way that matters: trace and span
ids are hex strings, not base64, so they are converted before parsing (one that is not hex is
read as no id: :func:`hex_ids_to_base64`).

protobuf and the OTLP messages load at their first use (the Python decode, OTLP/JSON, a partial
success answered), not with this module: an idle sidecar, and one whose exports the compiled
decode reads, does not hold them (docs/performance.md, Footprint).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from watchdog.core.bounds import load_json

if TYPE_CHECKING:
    from google.protobuf.message import Message
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    from watchdog.core.spans._native import Request as NativeRequest

__all__ = [
    "DecodeError",
    "ExportTraceServiceRequest",
    "ExportTraceServiceResponse",
    "TraceRequest",
    "attributes",
    "parse_json",
    "parse_protobuf",
    "protobuf_backend",
    "request_digest",
    "response_json",
    "response_protobuf",
]


def __getattr__(name: str) -> Any:
    """The OTLP trace messages (``ExportTraceServiceRequest``, ...), loaded when first asked for."""
    if name in ("ExportTraceServiceRequest", "ExportTraceServiceResponse"):
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        return getattr(trace_service_pb2, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class DecodeError(ValueError):
    """The payload is not a valid OTLP trace export request; the message says why."""


def protobuf_backend() -> str:
    """The protobuf implementation in use: ``upb`` (fast), ``cpp`` or ``python`` (slow)."""
    from google.protobuf.internal import api_implementation

    return str(api_implementation.Type())


DIGEST_SPAN = 64 * 1024  # bytes of a body's head and tail that identify it


def request_digest(body: bytes) -> bytes:
    """An identity for an export body, to recognise an exporter's retry of it.

    Hashing the length, the first and the last 64 KiB is as discriminating as hashing all of
    it — every span carries a random span id and nanosecond timestamps, so two different
    requests never share their head and tail — at a constant cost instead of ~1 ms per MiB.
    """
    if len(body) <= 2 * DIGEST_SPAN:
        return hashlib.sha1(body, usedforsecurity=False).digest()
    digest = hashlib.sha1(len(body).to_bytes(8, "big"), usedforsecurity=False)
    digest.update(body[:DIGEST_SPAN])
    digest.update(body[-DIGEST_SPAN:])
    return digest.digest()


# A decoded export request: protobuf's message, or the compiled decode's reading of it.
TraceRequest: TypeAlias = "ExportTraceServiceRequest | NativeRequest"

# The compiled decode when it is on (watchdog.core.spans.native installs it), else None.
compiled: Callable[[bytes], NativeRequest] | None = None


def parse_protobuf(body: bytes) -> TraceRequest:
    """An OTLP protobuf export request, or a :class:`DecodeError` that says why it is not one;
    the compiled decode's when it is on (the same request, the same errors)."""
    if compiled is not None and type(body) is bytes:
        return compiled(body)
    return parse_protobuf_python(body)


def parse_protobuf_python(body: bytes) -> ExportTraceServiceRequest:
    """:func:`parse_protobuf` by protobuf's own parser: the reference."""
    from google.protobuf.message import DecodeError as ProtoDecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except ProtoDecodeError as exc:
        raise DecodeError(f"invalid OTLP protobuf payload: {exc}") from None
    return request


_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def hex_ids_to_base64(obj: dict[str, Any]) -> None:
    """``obj``'s hex ids as protobuf's JSON mapping reads bytes (base64). An id that is not
    hex (base64, say: what protobuf's own JSON writer makes of bytes) is read as no id, as the
    protobuf path reads an id of the wrong length: a span without its trace or span id is
    rejected by itself (``partial_success``), the rest of the request applied; a parent span id
    that is not hex makes the span a root."""
    for field in _ID_FIELDS:
        value = obj.get(field)
        if isinstance(value, str) and value:
            try:
                obj[field] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
            except ValueError:
                obj[field] = ""


def parse_json(body: bytes) -> ExportTraceServiceRequest:
    document = json_document(body)
    try:
        for resource_spans in document.get("resourceSpans") or document.get("resource_spans") or ():
            for scope_spans in resource_spans.get("scopeSpans") or resource_spans.get(
                "scope_spans"
            ) or ():
                for span in scope_spans.get("spans") or ():
                    hex_ids_to_base64(span)
                    for link in span.get("links") or ():
                        hex_ids_to_base64(link)
    except (AttributeError, TypeError):
        raise DecodeError("invalid OTLP/JSON payload: unexpected structure") from None
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    return parse_document(document, ExportTraceServiceRequest())


M = TypeVar("M", bound="Message")


def json_document(body: bytes) -> dict[str, Any]:
    """An OTLP/JSON body's top-level object. UTF-8, decoded strictly (load_json): a
    UTF-8-encoded surrogate (ED A0 80) let through would make protobuf's parser raise
    SystemError on a field name that holds one."""
    try:
        document = load_json(body)
    except ValueError as exc:
        raise DecodeError(f"invalid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise DecodeError("invalid OTLP/JSON payload: the top level must be an object")
    return document


def parse_document(document: dict[str, Any], request: M) -> M:
    """``document`` (its hex ids made base64) read into ``request``; every failure of the
    parser a :class:`DecodeError`, never a 500."""
    from google.protobuf import json_format

    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except (json_format.ParseError, binascii.Error, ValueError, TypeError) as exc:
        raise DecodeError(f"invalid OTLP/JSON payload: {exc}") from None
    except RecursionError:
        raise DecodeError("invalid OTLP/JSON payload: nested too deeply") from None
    except SystemError:  # protobuf's upb parser on input it cannot represent
        raise DecodeError("invalid OTLP/JSON payload: a field the parser cannot read") from None
    return request


def response_json(rejected: int, message: str) -> bytes:
    """An OTLP/JSON ``ExportTraceServiceResponse`` body."""
    if not rejected and not message:
        return b"{}"
    return json.dumps(
        {"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}}
    ).encode()


def response_protobuf(rejected: int, message: str) -> bytes:
    """A binary ``ExportTraceServiceResponse`` (empty bytes on full success)."""
    if not rejected and not message:
        return b""  # the empty message, written without loading protobuf
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    response = ExportTraceServiceResponse()
    response.partial_success.rejected_spans = rejected
    response.partial_success.error_message = message
    body: bytes = response.SerializeToString()
    return body


def any_value(value: Any) -> object:
    """The Python value of an OTLP ``AnyValue`` (lists and maps recursively; protobuf's or
    the compiled decode's)."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "bool_value":
        return value.bool_value
    if which == "double_value":
        return value.double_value
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return None


def attributes(key_values: Iterable[Any]) -> dict[str, object]:
    """OTLP attributes as a dict (a repeated key keeps its last value, as the SDKs do).

    On the hot path: strings, the common case, are read without the generic dispatch.
    """
    result: dict[str, object] = {}
    for kv in key_values:
        value = kv.value
        if value.WhichOneof("value") == "string_value":
            result[kv.key] = value.string_value
        else:
            result[kv.key] = any_value(value)
    return result
