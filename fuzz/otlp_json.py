"""Fuzz target: the OTLP/JSON decode edge and normalisation. Each input is either JSON bytes as
they come (first byte even) or steers the building of a small, well-formed OTLP/JSON document
(odd) — every field the spec names for resources, scopes, spans, events, links and status, with
values of each type — into whose field names and string values raw bytes from the input are
then spliced (invalid UTF-8, encoded surrogates, quotes, escapes). The contract: a payload is
either refused with ``DecodeError`` (a 400 with its message) or every span becomes a record or
a counted rejection; any other exception (``SystemError`` from protobuf's parser was one, an
HTTP 500) is a crash. ``fuzz/ingest.py`` takes OTLP/JSON on through the runs, more slowly.

    .venv/bin/python fuzz/otlp_json.py -dict=fuzz/otlp.dict CORPUS -runs=1000000 -max_len=4096

The seeds are ``fuzz/corpus/otlp_json/`` (``fuzz/make_corpus.py``).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import atheris

with atheris.instrument_imports(include=["watchdog"]):
    from watchdog.core.spans.attributes import WANTED_ATTRIBUTES
    from watchdog.core.spans.decode import DecodeError, parse_json
    from watchdog.core.spans.pipeline import records_from

KEYS = [*sorted(WANTED_ATTRIBUTES), "service.name", "other"]
NAMES = ["chat m", "execute_tool t", "invoke_agent a", "x"]
STRINGS = ["chat", "execute_tool", "invoke_agent", "inf", "nan", "1e999", "-5", "12", "{}",
           "[]", "null", '{"a": 1}', "\x00", "x" * 300]


# spliced into strings: UTF-8-encoded surrogates (protobuf's parser raised SystemError on a field
# name holding one), stray continuation and lead bytes, overlong and beyond-U+10FFFF forms,
# escapes of surrogates and NUL, and what ends a string early
FRAGMENTS = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xb0\x80x", b"\x80", b"\xc3", b"\xff",
             b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98\x80",
             b"\\ud800", b"\\udfff\\ud800", b"\\u0000", b'\\"', b'"', b"\\", b"\x00",
             b"\xef\xbb\xbf"]


def _value(data: atheris.FuzzedDataProvider, depth: int = 0) -> dict[str, Any]:
    kind = data.ConsumeIntInRange(0, 7 if depth < 2 else 5)
    if kind == 0:
        return {"intValue": str(data.ConsumeIntInRange(-(2**63), 2**63 - 1))}
    if kind == 1:
        return {"doubleValue": data.ConsumeRegularFloat()}
    if kind == 2:
        return {"boolValue": data.ConsumeBool()}
    if kind == 3:
        return {"bytesValue": "AAEC"}
    if kind == 4:
        return {"stringValue": data.PickValueInList(STRINGS)}
    if kind == 5:
        return {"stringValue": data.ConsumeUnicodeNoSurrogates(24)}
    if kind == 6:
        return {"arrayValue": {"values": [_value(data, depth + 1)]}}
    return {"kvlistValue": {"values": _attributes(data, depth + 1)}}


def _attributes(data: atheris.FuzzedDataProvider, depth: int = 0) -> list[dict[str, Any]]:
    return [{"key": data.PickValueInList(KEYS), "value": _value(data, depth)}
            for _ in range(data.ConsumeIntInRange(0, 4))]


def _hex(data: atheris.FuzzedDataProvider, size: int) -> str:
    return data.ConsumeBytes(size).ljust(size, b"\1").hex()


def document(data: atheris.FuzzedDataProvider) -> bytes:
    """A small OTLP/JSON export request, then raw bytes spliced in at the start of some of its
    strings (field names and values alike)."""
    start = data.ConsumeIntInRange(0, 2**64 - 1)
    span: dict[str, Any] = {
        "traceId": _hex(data, 16), "spanId": _hex(data, 8), "name": data.PickValueInList(NAMES),
        "kind": data.ConsumeIntInRange(0, 5), "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(data.ConsumeIntInRange(0, 2**64 - 1)),
        "attributes": _attributes(data),
        "status": {"code": data.ConsumeIntInRange(0, 2), "message": "boom"},
    }
    if data.ConsumeBool():
        span["parentSpanId"] = _hex(data, 8)
    if data.ConsumeBool():
        span["events"] = [{"name": "exception", "timeUnixNano": str(start),
                           "attributes": _attributes(data)}]
    if data.ConsumeBool():
        span["links"] = [{"traceId": _hex(data, 16), "spanId": _hex(data, 8)}]
    body = json.dumps({"resourceSpans": [{
        "resource": {"attributes": _attributes(data)},
        "scopeSpans": [{"scope": {"name": "s", "version": "1"}, "spans": [span]}]}]}).encode()
    quotes = [match.start() for match in re.finditer(b'"', body)]
    for _ in range(data.ConsumeIntInRange(0, 3)):
        at = data.PickValueInList(quotes) + 1
        cut = data.ConsumeIntInRange(0, 4)  # bytes of the string replaced
        insert = (data.PickValueInList(FRAGMENTS) if data.ConsumeBool()
                  else data.ConsumeBytes(data.ConsumeIntInRange(1, 6)))
        body = body[:at] + insert + body[at + cut:]
        quotes = [index for index in quotes if index < at] or [0]
    return body


def test_one_input(data: bytes) -> None:
    if not data:
        return
    body = document(atheris.FuzzedDataProvider(data[1:])) if data[0] % 2 else data[1:]
    try:
        request = parse_json(body)
    except DecodeError:
        return
    decoded = records_from(request)
    assert decoded.rejected_count == 0 or decoded.message()


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
