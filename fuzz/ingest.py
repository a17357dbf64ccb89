"""Fuzz target: OTLP bytes -> decode (protobuf or JSON) -> normalise -> run signals -> what the
API and the rules see. Coverage-guided with atheris (libFuzzer).

The contract checked: a payload is either refused with ``DecodeError`` (a 400 / INVALID_ARGUMENT
with its message) or every span becomes a record or a counted rejection; the runs they make
have signals that encode as strict JSON (no ``Infinity``/``NaN``) and convert to the CEL
activation the rules read. Any other exception is a crash: libFuzzer stops and saves the input.

    .venv/bin/python fuzz/ingest.py -dict=fuzz/otlp.dict fuzz/corpus/ingest -runs=200000
    .venv/bin/python fuzz/ingest.py -help=1     # the libFuzzer options

The first byte of each input picks the route: 0 protobuf bytes, 1 OTLP/JSON bytes, 2 a
request *built* from the input (spans whose attributes are the ones normalisation reads, with
values of every type, including NaN, infinities and huge ints), so number handling is reached
without the fuzzer having to discover the protobuf encoding first.
"""

from __future__ import annotations

import json
import sys

import atheris
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

with atheris.instrument_imports(include=["watchdog"]):
    from watchdog.core.rules.signals import run_activation
    from watchdog.core.runs.tracker import RunTracker
    from watchdog.core.runs.view import run_detail
    from watchdog.core.spans.attributes import WANTED_ATTRIBUTES
    from watchdog.core.spans.decode import DecodeError, parse_json, parse_protobuf
    from watchdog.core.spans.pipeline import records_from

NOW = 1_900_000_000.0
KEYS = [*sorted(WANTED_ATTRIBUTES), "service.name", "other"]
NAMES = ["chat m", "execute_tool t", "invoke_agent a", "agent run", "running tool", "x"]
OPERATIONS = ["chat", "execute_tool", "invoke_agent", "text_completion"]
STRINGS = ["inf", "-inf", "nan", "1e999", "-5", "12", "{}", "[]", "null", "final_result",
           '{"password": "x"}', "a/b{c}", "\x00", "x" * 300]


def _value(data: atheris.FuzzedDataProvider, kv: KeyValue) -> None:
    kind = data.ConsumeIntInRange(0, 5)  # 4 and 5: strings
    if kind == 0:
        kv.value.double_value = data.ConsumeFloat()  # often NaN, +-inf, huge, tiny
    elif kind == 1:
        kv.value.int_value = data.ConsumeIntInRange(-(2**63), 2**63 - 1)
    elif kind == 2:
        kv.value.bool_value = data.ConsumeBool()
    elif kind == 3:
        kv.value.array_value.values.add().string_value = data.ConsumeUnicodeNoSurrogates(16)
    elif kind == 4:
        kv.value.string_value = data.PickValueInList(STRINGS)
    else:
        kv.value.string_value = data.ConsumeUnicodeNoSurrogates(48)


def built(data: atheris.FuzzedDataProvider) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    for _ in range(data.ConsumeIntInRange(0, 3)):
        kv = resource_spans.resource.attributes.add(key=data.PickValueInList(KEYS))
        _value(data, kv)
    spans = resource_spans.scope_spans.add().spans
    for _ in range(data.ConsumeIntInRange(1, 6)):
        span = spans.add(name=data.PickValueInList(NAMES),
                         trace_id=data.ConsumeBytes(16).ljust(16, b"\1"),
                         span_id=data.ConsumeBytes(8).ljust(8, b"\1"),
                         start_time_unix_nano=data.ConsumeIntInRange(0, 2**64 - 1),
                         end_time_unix_nano=data.ConsumeIntInRange(0, 2**64 - 1))
        if data.ConsumeBool():
            span.parent_span_id = data.ConsumeBytes(8)
        span.status.code = data.ConsumeIntInRange(0, 2)
        if data.ConsumeBool():
            span.attributes.add(key="gen_ai.operation.name").value.string_value = \
                data.PickValueInList(OPERATIONS)
        for _ in range(data.ConsumeIntInRange(0, 8)):
            _value(data, span.attributes.add(key=data.PickValueInList(KEYS)))
    return request


def test_one_input(data: bytes) -> None:
    if not data:
        return
    route = data[0] % 3
    try:
        if route == 2:
            request = parse_protobuf(built(atheris.FuzzedDataProvider(data[1:]))
                                     .SerializeToString())
        else:
            request = (parse_json if route == 1 else parse_protobuf)(data[1:])
    except DecodeError:
        return
    decoded = records_from(request)
    assert decoded.rejected_count == 0 or decoded.message()
    tracker = RunTracker(max_runs=100, run_end_timeout=60.0)
    tracker.apply(decoded.records, NOW)
    for run in list(tracker.active()) + list(tracker.ended()):
        json.dumps(run_detail(run.view(NOW + 1)), allow_nan=False)
        json.dumps(run.to_dict(), allow_nan=False)
        run_activation(run.signals(NOW + 1))


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
