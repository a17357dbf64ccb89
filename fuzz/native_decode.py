"""Fuzz target: the compiled decode (watchdog.core.spans._native, Rust) against the Python one
(protobuf's upb parser), on the same bytes. Coverage-guided with atheris (libFuzzer).

The contract checked: both refuse the bytes in the same words (the same ``DecodeError``), or
both read them into the same records and the same counted rejections (the compiled path with
its kernels of the conventions: limit phrases, tool JSON, the stable hash, a span's head), each
span with the same first-present facts (``FIRST_FACTS``: resolved by the compiled decode while
it selects the attributes, looked up by the Python path).
Any difference, or any other exception, is a crash: libFuzzer stops and saves the input.

    .venv/bin/python fuzz/native_decode.py -dict=fuzz/otlp.dict fuzz/corpus/native_decode
    .venv/bin/python fuzz/native_decode.py -help=1     # the libFuzzer options

The compiled normalise (``Span.record``) is held to ``normalise`` on its own too: every span
of the compiled decode it is sure of, read both ways from the same attributes, must make the same
record (as reprs), and neither may raise where the other does not.

The first byte picks the route: 0 the bytes as they are, 1 a request *built* from them (the
attributes normalisation reads, values of every type: :func:`ingest.built`), 2 one built of
model, tool and agent calls (:func:`calls_built`: a call's facts most often there, what else a
span may carry beside them). The Rust decoder alone, with AddressSanitizer, is
``native/otlp/fuzz`` (cargo-fuzz).
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with atheris.instrument_imports(include=["watchdog"]):
    from watchdog.core.spans import conventions, decode, native, values
    from watchdog.core.spans.attributes import FIRST_FACTS
    from watchdog.core.spans.identity import Resource
    from watchdog.core.spans.pipeline import Decoded, attributes, records_from

from ingest import KEYS, NAMES, _value, built
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

# a model or a tool call's facts, each most often there (calls_built)
CALL_FACTS = ("gen_ai.tool.name", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
              "gen_ai.tool.call.id", "gen_ai.agent.name", "gen_ai.agent.call.id",
              "gen_ai.usage.input_tokens", "gen_ai.output.messages", "gen_ai.input.messages",
              "gen_ai.response.finish_reasons", "gen_ai.request.model", "gen_ai.response.id",
              "error.type", "output.value", "input.value", "llm.output_messages.0.message.content",
              "gen_ai.agent.turn.count", "gen_ai.caller.name")
CALL_TEXTS = ["read_file", "final_result", "finish", "[REDACTED]", '{"path": "a", "n": 1}',
              '{"x": 1.5}', '{"k": "[REDACTED]"}', "not json", "agent-0", "é" * 250,
              "content='no' name='t' status='error'", '[{"role": "user", "content": "hi"}]',
              "tool_calls", "limit_turns", "stop", '["tool_call"]', "RuntimeError",
              '[{"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "t"}]}]',
              # an answer (answers.rs): its text parts, JSON the two parsers may read otherwise,
              # the answer tool, Python's spaces, a prompt naming a limit, an agent's stand-in
              '[{"role": "assistant", "parts": [{"type": "text", "content": "done"}], '
              '"finish_reason": "stop"}]', '["stop"]', '[{"role": "a", "content": [" ", "x"]}]',
              '{"a": 1, "a": [NaN]}', '["\\ud800"]', "[[ ## thought ## ]]", " \x1c\u3000",
              "__REDACTED__", '[{"parts": [{"type": "tool_call", "name": "final_result"}]}]',
              '[{"role": "user", "content": "Now it\'s time you MUST give your absolute best '
              'final answer"}]', "<coroutine object Agent.run at 0x7f1e>", '""',
              "Function invocation limit reached before a final answer could be produced",
              '{"response": "None", "sources": []}', "end_turn"]
# a span's status and its exception (failures.rs): the limits and errors they may name
STATUS_TEXTS = ["", "boom", "Max turns exceeded: 3", "UsageLimitExceeded: 5", "é",
                "RuntimeError: locked", "recursion limit of 25 reached"]
EXCEPTION_TEXTS = ["", "RuntimeError", "pkg.MaxTurnsExceeded", "Exception", "boom",
                   "RuntimeError('boom')", "max turns (3) exceeded", "RuntimeError: x"]

if not native.AVAILABLE:
    sys.exit("the compiled decode (watchdog.core.spans._native) is not built: run make")


def read(compiled: bool, body: bytes) -> str | tuple[Decoded, list[str]]:
    """The bytes read by the compiled decode and kernels, or by the Python path alone: the
    records, and each span's selected attributes and first-present facts (as reprs: NaN)."""
    native.use_native(compiled)
    try:
        request = decode.parse_protobuf(body)
    except decode.DecodeError as exc:
        return str(exc)
    facts = []
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs, firsts = values.read(span)
                found = firsts if firsts is not None else values.Firsts(attrs)
                facts.append(repr((attrs, [found[index] for index in range(len(FIRST_FACTS))])))
    return records_from(request), facts


def calls_built(data: atheris.FuzzedDataProvider) -> ExportTraceServiceRequest:
    """A request of model, tool and agent calls: a call's facts most often there, other attributes
    normalisation reads beside them, values of every type."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    for _ in range(data.ConsumeIntInRange(0, 2)):
        _value(data, resource_spans.resource.attributes.add(key=data.PickValueInList(KEYS)))
    spans = resource_spans.scope_spans.add().spans
    for index in range(data.ConsumeIntInRange(1, 6)):
        span = spans.add(name=data.PickValueInList(NAMES),
                         trace_id=b"\1" * 16, span_id=(index + 1).to_bytes(8, "big"),
                         start_time_unix_nano=1_700_000_000_000_000_000,
                         end_time_unix_nano=1_700_000_001_000_000_000)
        if data.ConsumeBool():
            span.parent_span_id = b"\2" * 8
        span.attributes.add(key="gen_ai.operation.name").value.string_value = \
            data.PickValueInList(["chat", "execute_tool", "invoke_agent"])
        for key in CALL_FACTS:
            if data.ConsumeIntInRange(0, 3):
                kv = span.attributes.add(key=key)
                if data.ConsumeBool():
                    kv.value.string_value = data.PickValueInList(CALL_TEXTS)
                else:
                    _value(data, kv)
        for _ in range(data.ConsumeIntInRange(0, 3)):
            _value(data, span.attributes.add(key=data.PickValueInList(KEYS)))
        if data.ConsumeIntInRange(0, 2) == 0:
            span.status.code = data.ConsumeIntInRange(0, 2)
            span.status.message = data.PickValueInList(STATUS_TEXTS)
            if data.ConsumeBool():
                event = span.events.add(name=data.PickValueInList(["exception", "log"]))
                for key in ("exception.type", "exception.message"):
                    if data.ConsumeIntInRange(0, 3):
                        event.attributes.add(key=key).value.string_value = \
                            data.PickValueInList(EXCEPTION_TEXTS)
    return request


def normalised_alike(body: bytes) -> None:
    """Each span of ``body`` the compiled normalise is sure of reads as ``normalise`` reads it."""
    native.use_native(True)
    try:
        request = decode.parse_protobuf(body)
    except decode.DecodeError:
        return
    normaliser = values.compiled_normaliser
    for resource_spans in request.resource_spans:
        resource = Resource.of(attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs, firsts = span.read()
                if span.record(attrs, firsts, resource, normaliser) is None:
                    continue
                ours = conventions.normalised(span, attrs, resource, firsts)
                reference = conventions.normalise(span, attrs, resource, firsts)
                assert repr(ours) == repr(reference), (ours, reference)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    body = data[1:]
    route = data[0] % 3
    if route == 1:
        body = built(atheris.FuzzedDataProvider(body)).SerializeToString()
    elif route == 2:
        body = calls_built(atheris.FuzzedDataProvider(body)).SerializeToString()
    normalised_alike(body)
    ours, reference = read(True, body), read(False, body)
    if isinstance(reference, str) or isinstance(ours, str):
        assert ours == reference, (ours, reference)
        return
    (ours, our_facts), (reference, their_facts) = ours, reference
    assert repr(ours.records) == repr(reference.records)  # (as reprs: a NaN is no equal of itself)
    assert (ours.rejected, ours.message()) == (reference.rejected, reference.message())
    assert our_facts == their_facts


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
