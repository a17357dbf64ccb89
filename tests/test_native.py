"""The compiled decode (native/otlp, Rust) reads every request as the Python path does.

Every recording of a real framework, delivered as it was exported, as one request, cut in two,
span by span, and span by span backwards, is read by both decodes: the records (every field)
and the runs the tracker makes of them (their whole snapshots) must be the same. Bytes that
are no request are refused by both in the same words; the nesting bound is upb's. The compiled
kernels of the conventions (limit phrases and status patterns, tool JSON, the stable hash) answer
as their Python twins do on texts made to find where Rust and Python read differently, and the
first-present facts the compiled decode resolves while it selects a span's attributes are the
ones the Python path looks up, on every recorded span and on spans of odd values.

The compiled decode is built by ``make`` (setuptools-rust, with cargo); these tests fail, and
say so, where it was not.
"""

from __future__ import annotations

import base64
import gc
import json
import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from tests.harness import running_server, sidecar_config
from tests.recorded import RECORDINGS, ScopedSpan, recorded_lines, request_of, scoped_spans
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook
from watchdog.core.spans import conventions, decode, model_calls, native, outcome, values
from watchdog.core.spans.attributes import F_AGENT_NAME, F_RUN_ID, F_SESSION, FIRST_FACTS
from watchdog.core.spans.decode import DecodeError, parse_json, parse_protobuf
from watchdog.core.spans.identity import Resource
from watchdog.core.spans.logs import LogJoin, parse_logs_json
from watchdog.core.spans.pipeline import (
    Decoded,
    attributes,
    records_from,
    released,
    slices_of,
)
from watchdog.core.spans.record import SpanRecord
from watchdog.core.step import Core
from watchdog.shell.config import load
from watchdog.shell.pricing import GenAIPrices

ROOT = Path(__file__).resolve().parent.parent
ALL = sorted((path.parent.name, path.stem) for path in RECORDINGS.glob("*/*.jsonl")
             if not path.stem.endswith(".logs"))  # (OTLP logs: the join's test below)
WITH_LOGS = sorted((path.parent.name, path.stem.removesuffix(".logs"))
                   for path in RECORDINGS.glob("*/*.logs.jsonl"))
NOT_BUILT = ("the compiled decode (watchdog.core.spans._native) is not built: `make` builds it "
             "where cargo is on the PATH (pip install -e . with setuptools-rust)")


@contextmanager
def decoding(compiled: bool) -> Iterator[None]:
    assert native.AVAILABLE, NOT_BUILT
    before = decode.compiled
    native.use_native(compiled)
    try:
        yield
    finally:
        native.use_native(before is not None)


def deliveries(driver: str, scenario: str) -> dict[str, list[bytes]]:
    """A recording's spans as protobuf request bodies, delivered five ways."""
    exported = [parse_json(line.encode()) for line in recorded_lines(driver, scenario)]
    spans: list[ScopedSpan] = scoped_spans(driver, scenario)
    half = len(spans) // 2
    return {
        "as exported": [request.SerializeToString() for request in exported],
        "one request": [request_of(spans).SerializeToString()],
        "cut in two": [request_of(spans[:half]).SerializeToString(),
                       request_of(spans[half:]).SerializeToString()],
        "span by span": [request_of([span]).SerializeToString() for span in spans],
        "backwards": [request_of([span]).SerializeToString() for span in reversed(spans)],
    }


def read(bodies: list[bytes], compiled: bool) -> tuple[list[Decoded], list[dict[str, Any]]]:
    """What one decode makes of ``bodies``: each request's records, and the runs (snapshots)."""
    with decoding(compiled):
        tracker = RunTracker()
        decoded = []
        for now, body in enumerate(bodies, start=1):
            request = parse_protobuf(body)
            assert type(request).__module__.endswith("_native") == compiled
            decoded.append(records_from(request))
            tracker.apply(decoded[-1].records, float(now))
        tracker.expire(1e12)
        return decoded, [run.to_dict() for run in tracker.ended()]


@pytest.mark.parametrize(("driver", "scenario"), ALL, ids=[f"{d}-{s}" for d, s in ALL])
def test_a_recording_reads_the_same_through_both_decodes(driver: str, scenario: str) -> None:
    for delivery, bodies in deliveries(driver, scenario).items():
        compiled, compiled_runs = read(bodies, compiled=True)
        python, python_runs = read(bodies, compiled=False)
        assert sum(len(d.records) for d in python) > 0, delivery
        for index, (ours, reference) in enumerate(zip(compiled, python, strict=True)):
            assert ours.records == reference.records, (delivery, index)
            assert ours.rejected == reference.rejected, (delivery, index)
            assert ours.message() == reference.message(), (delivery, index)
        assert compiled_runs == python_runs, delivery


def first_names_content(driver: str, scenario: str) -> bool:
    """Whether a recording's first log export has an event whose content joins a span."""
    join = LogJoin()
    join.add(parse_logs_json(recorded_lines(driver, f"{scenario}.logs")[0].encode()), 0.0)
    return join.events > 0


def joined(driver: str, scenario: str, compiled: bool, logs_first: bool) -> list[Any]:
    """The records of a recording whose content came in GenAI log events, joined: the spans
    held for their logs (the compiled decode's spans kept as protobuf's), then released."""
    logs = [parse_logs_json(line.encode()) for line in recorded_lines(driver, f"{scenario}.logs")]
    bodies = deliveries(driver, scenario)["as exported"]
    join = LogJoin()
    records: list[Any] = []
    with decoding(compiled):
        join.add(logs[0], 0.0)  # (the service is known to send GenAI events)
        if logs_first:
            for request in logs[1:]:
                join.add(request, 0.5)
        for now, body in enumerate(bodies, start=1):
            for part in slices_of(parse_protobuf(body), None, join, float(now)):
                records.extend(part.records)
        if not logs_first:
            for request in logs[1:]:
                records.extend(released(join.add(request, 100.0), join, 100.0).records)
        records.extend(released(join.expired(1e9), join, 1e9).records)
    return records


@pytest.mark.parametrize(("driver", "scenario"), WITH_LOGS)
@pytest.mark.parametrize("logs_first", [True, False])
def test_spans_joined_with_their_logs_read_the_same(driver: str, scenario: str,
                                                    logs_first: bool) -> None:
    compiled = joined(driver, scenario, compiled=True, logs_first=logs_first)
    assert compiled == joined(driver, scenario, compiled=False, logs_first=logs_first)
    # (the content was joined: the answer, from a GenAI event or an agent's own; with the logs
    # after the spans, where the first log export already named its service's events: the
    # spans waited for them)
    if logs_first or first_names_content(driver, scenario):
        assert any(record.final_output for record in compiled)


def refusal(body: bytes, compiled: bool) -> str | None:
    with decoding(compiled):
        try:
            records_from(parse_protobuf(body))
        except DecodeError as exc:
            return str(exc)
    return None


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def nested(levels: int, innermost: bytes = field(1, b"a")) -> bytes:
    """A request whose attribute value nests arrays ``levels`` deep (5 + 2 * levels messages,
    one more with an empty array innermost)."""
    value = innermost
    for _ in range(levels):
        value = field(5, field(1, value))
    return field(1, field(2, field(2, field(9, field(1, b"k") + field(2, value)))))


def span_named(name: bytes) -> bytes:
    """A request of one span whose name is ``name``."""
    return field(1, field(2, field(2, field(5, name))))


ODD_BODIES = {
    "a lone byte": b"\xff",
    "field 0": b"\x00\x01",
    "an end group outside a group": b"\x0c",
    "an unknown group": b"\x0b\x0c",
    "a group ended by another field": b"\x0b\x14",
    "wire type 6": b"\x0e",
    "wire type 7": b"\x0f",
    "a known field as a varint": b"\x08\x01",
    "a varint of 11 bytes": b"\x10" + b"\xff" * 10 + b"\x01",
    "a varint of 10 bytes": b"\x10" + b"\xff" * 9 + b"\x7f",
    "a short fixed32": b"\x15ab",
    "a length past the end": b"\x12\x05ab",
    "the largest field number": b"\xf8\xff\xff\xff\x0f\x01",
    "a tag past 32 bits": b"\xf8\xff\xff\xff\x1f\x01",
    "a tag of 11 bytes": b"\x80" * 10 + b"\x01",
    "a name that is no UTF-8": field(1, field(2, field(2, field(5, b"\xff")))),
    "a key that is no UTF-8": field(1, field(2, field(2, field(9, field(1, b"\xc3"))))),
    "an unknown field that is no UTF-8": field(1, field(9, b"\xff")),
    "an entity ref that is no UTF-8": field(1, field(1, field(3, field(3, b"\xff")))),
    # (a string's ASCII is checked a word at a time, the rest byte by byte)
    "a long name, ASCII to its last byte": span_named(b"a" * 40 + b"\xff"),
    "a long name, a bad byte after 8": span_named(b"a" * 8 + b"\xc3(" + b"b" * 9),
    "a long name, UTF-8 past ASCII": span_named(b"a" * 17 + "é✓".encode() + b"z"),
    "99 levels": nested(47),
    "100 levels": nested(47, field(5, b"")),
    "101 levels, the last an empty array": nested(48, field(5, b"")),
    "101 levels": nested(48),
    "a deep unknown group": b"\x1b" * 120 + b"\x1c" * 120,
    # (found by fuzz/native_decode.py: upb checks a string's UTF-8 before its end)
    "a string past its message, no UTF-8": b"\x0a\x03\x1a\x05\xff" + b"\x0a\x00\xff\xff",
    "a string past its message": b"\x0a\x03\x1a\x05a" + b"\x0a\x00aa",
    "a string past the body, no UTF-8": b"\x0a\x03\x1a\x05\xff",
    "a key past two messages, no UTF-8": b"\x0a\x06\x0a\x04\x0a\x02\x0a\x05" + b"\xff" * 6,
    "a message past its message": b"\x0a\x02\x12\x05" + b"\x1a\x03\xff\xff\xff",
}


@pytest.mark.parametrize("name", sorted(ODD_BODIES))
def test_odd_bytes_are_read_or_refused_alike(name: str) -> None:
    body = ODD_BODIES[name]
    assert refusal(body, compiled=True) == refusal(body, compiled=False)


CORPUS = sorted((ROOT / "fuzz" / "corpus" / "native_decode").iterdir())


@pytest.mark.parametrize("path", CORPUS, ids=[path.name for path in CORPUS])
def test_the_fuzz_corpus_reads_alike(path: Path) -> None:
    """fuzz/native_decode.py's seeds and what it found (``found-*``: a length whose varint
    runs past its message, then a string that is no UTF-8: upb reads on and says so)."""
    body = path.read_bytes()[1:]  # (the first byte is the target's route)
    answer = refusal(body, compiled=False)
    assert refusal(body, compiled=True) == answer
    if answer is None:
        with decoding(compiled=True):
            ours = records_from(parse_protobuf(body)).records
        with decoding(compiled=False):
            assert ours == records_from(parse_protobuf(body)).records


def test_every_cut_and_flip_of_a_real_request_is_read_or_refused_alike() -> None:
    driver, scenario = ALL[0]
    body = request_of(scoped_spans(driver, scenario)).SerializeToString()
    refused = 0
    for end in range(0, len(body), max(1, len(body) // 400)):
        cut = body[:end]
        answer = refusal(cut, compiled=False)
        refused += answer is not None
        assert refusal(cut, compiled=True) == answer, end
    for at in range(0, len(body), max(1, len(body) // 200)):
        flipped = body[:at] + bytes([body[at] ^ 0x80]) + body[at + 1:]
        assert refusal(flipped, compiled=True) == refusal(flipped, compiled=False), at
    assert refused > 0  # (the cuts do reach the refusals)


def test_the_switch_chooses_the_decode() -> None:
    assert native.AVAILABLE, NOT_BUILT
    body = nested(1)
    with decoding(compiled=False):
        assert native.native_state() == "off"
        assert isinstance(parse_protobuf(body), decode.ExportTraceServiceRequest)
    with decoding(compiled=True):
        assert native.native_state() == "on"
        assert not isinstance(parse_protobuf(body), decode.ExportTraceServiceRequest)
        # (another buffer than bytes takes the Python path)
        assert isinstance(parse_protobuf(bytearray(body)),  # type: ignore[arg-type]
                          decode.ExportTraceServiceRequest)
    assert load(env={"WATCHDOG_NATIVE": "off"}).native is False
    assert load(env={}).native is True


def test_the_sidecar_says_which_decode_reads(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert native.AVAILABLE, NOT_BUILT
    cases = [(False, True, "Python (native: false)", "off"),
             (True, True, "compiled (Rust)", "on"),
             (True, False, "Python (the compiled decode was not built: no Rust toolchain at "
                           "install)", "unavailable")]
    with decoding(compiled=True):
        for number, (setting, built, said, state) in enumerate(cases):
            monkeypatch.setattr(native, "AVAILABLE", built)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="watchdog"), \
                    running_server(sidecar_config(tmp_path / str(number), native=setting)):
                assert native.native_state() == state
            assert f"OTLP protobuf decode: {said}" in caplog.text


# Where Rust and Python might read a text differently: case folding beyond ASCII ("ı", "İ", "ſ",
# the Kelvin sign), re's \s separators, lone surrogates, floats and -0, NaN, integers longer
# than Python's int reads, duplicate keys, escapes, deep nesting, envelopes.
ODD_PIECES = ["max turns exceeded", "Max Iterations reached", "reached the maximum number of "
              "steps", "max ıterations exceeded", "Max turns limit hİt",
              "Recursion limit of 25 reached", "Max turns exceeded: 3", "ı", "İ", "ſ",
              "\u212a", "\x1c", "\x1f", "\ud800", "é", "😀", " ", "\n", ".", "1.5", "-0", "1e5",
              "NaN", "Infinity", "9" * 4400, '"\\ud800"', '"\\u00e9"', '"\\n"', '"a":1,"a":2',
              '"inputs":{"q":1},"input_str":"q"', '"kwargs":{"b":2,"a":1},"args":[],'
              '"sanitize_inputs_outputs":true', '"tool_calls":[{"id":"c1","function":{"name":'
              '"f"}}]', '"parts":[{"type":"tool_call","id":"c2","name":"g"}]', '{', '}', '[', ']',
              ",", ":", "null", "true", '""', '"\\x"', '"a\tb"', '"content":"\\ud83d"',
              '"content":"\\q"', '"content":[1,{"a":"\\ud800\\udc00"}]', "1e999", "-"]


def odd_texts(count: int) -> list[str]:
    rng = random.Random(31)
    texts = [piece for piece in ODD_PIECES]
    texts += [json.dumps(value) for value in (
        {"b": 1, "a": [1, 2, {"z": "é", "y": None}]}, {"x": "a\nb\u0001\u007f"}, [[[[]]]],
        [{"role": "assistant", "tool_calls": [{"id": "c" * 300, "function": {"name": "n" * 300}}]}],
        [{"parts": [{"type": "tool_call", "name": f"t{i}", "id": str(i)} for i in range(20)]}])]
    texts += ["[" * depth + "]" * depth for depth in (100, 200, 1200)]
    for _ in range(count):
        pieces = rng.choices(ODD_PIECES, k=rng.randint(1, 8))
        glue = rng.choice(["", " ", ",", ":"])
        text = glue.join(pieces)
        texts.append(rng.choice([text, "{" + text + "}", "[{" + text + "}]", "[" + text + "]"]))
    return texts


def kernels_read(text: str) -> tuple[object, ...]:
    return (outcome.phrase_limit(text), outcome.status_limit(text),
            values.canonical_arguments(text), model_calls.asked_tools(text, None),
            values.stable_hash(text))


def test_the_compiled_kernels_answer_as_their_python_twins() -> None:
    with decoding(compiled=True):
        assert None not in (outcome.compiled_phrases, outcome.compiled_status,
                            values.compiled_canonical, model_calls.compiled_asked,
                            values.compiled_hash)
        texts = odd_texts(3000)
        ours = [kernels_read(text) for text in texts]
        kernels = (outcome.compiled_phrases, values.compiled_canonical, model_calls.compiled_asked)
        answered = [sum(kernel(text) not in (None, -2) for text in texts)  # type: ignore[misc]
                    for kernel in kernels]
    with decoding(compiled=False):
        assert outcome.compiled_phrases is None and values.compiled_hash is None
        for text, read in zip(texts, ours, strict=True):
            assert read == kernels_read(text), text
    assert min(answered) > 20, answered  # (the compiled ones answer: not all left to Python)


def first_facts(span: Any, compiled: bool) -> tuple[str, list[str]]:
    """A span's selected attributes and each of its first-present facts (``FIRST_FACTS``), as
    one decode reads them (repr: the type counts, and NaN is not equal to itself)."""
    if compiled:
        attrs, facts = span.read()
        assert len(facts) == len(FIRST_FACTS)
    else:
        attrs = values.select_attributes(span.attributes)
        facts = values.Firsts(attrs)
    return repr(attrs), [repr(facts[index]) for index in range(len(FIRST_FACTS))]


def both_reads(body: bytes) -> Iterator[tuple[Any, Any]]:
    """Each span of ``body`` as the compiled decode reads it and as protobuf's does."""
    with decoding(compiled=True):
        ours = parse_protobuf(body)
    reference = decode.parse_protobuf_python(body)
    for mine, theirs in zip(ours.resource_spans, reference.resource_spans, strict=True):
        for my_scope, their_scope in zip(mine.scope_spans, theirs.scope_spans, strict=True):
            yield from zip(my_scope.spans, their_scope.spans, strict=True)


def test_every_recorded_span_has_the_same_first_present_facts_on_both_paths() -> None:
    found = 0
    for driver, scenario in ALL:
        body = request_of(scoped_spans(driver, scenario)).SerializeToString()
        for ours, reference in both_reads(body):
            attrs, facts = first_facts(ours, compiled=True)
            assert (attrs, facts) == first_facts(reference, compiled=False), (driver, scenario)
            found += sum(fact != "None" for fact in facts)
    assert found > 1000, found  # (the recordings do name these facts)


# Values a fact's names may hold, as OTLP AnyValues: empty and unset, JSON-encoded (a string,
# "", a number, a flag), numbers and flags where a text is read, lists, maps, bytes.
ODD_VALUES: list[dict[str, Any]] = [
    {"string_value": ""}, {}, {"string_value": "gpt-4o"}, {"string_value": '"\\"\\""'},
    {"string_value": '""'}, {"string_value": '"12"'}, {"string_value": "12"},
    {"string_value": "true"}, {"string_value": '"a\\u00e9"'}, {"string_value": '"\\ud800"'},
    {"string_value": " "}, {"string_value": "-0"}, {"string_value": "1e999"},
    {"string_value": "[REDACTED]"}, {"string_value": "é"}, {"int_value": 0}, {"int_value": -7},
    {"bool_value": False}, {"bool_value": True}, {"double_value": 0.0},
    {"double_value": float("nan")}, {"double_value": 1.5}, {"bytes_value": b"\x01\xff"},
    {"array_value": {"values": []}}, {"array_value": {"values": [{"string_value": "x"}]}},
    {"kvlist_value": {"values": [{"key": "a", "value": {"int_value": 1}}]}},
    {"bytes_value": b""}, {"kvlist_value": {}}, {"array_value": {}}, {"double_value": -0.0},
]


def test_first_present_facts_of_odd_values_are_the_same_on_both_paths() -> None:
    names = sorted({name for keys, _ in FIRST_FACTS for name in keys} | {"not.a.fact"})
    rng = random.Random(31)
    spans = []
    for index in range(600):
        span = ProtoSpan(trace_id=bytes(range(1, 17)), span_id=(index + 1).to_bytes(8, "big"),
                         name="chat", start_time_unix_nano=1_700_000_000_000_000_000,
                         end_time_unix_nano=1_700_000_001_000_000_000)
        for _ in range(rng.randint(0, 24)):  # (a name repeated: its last value is read)
            key_value = span.attributes.add(key=rng.choice(names))
            key_value.value.CopyFrom(AnyValue(**rng.choice(ODD_VALUES)))
        spans.append(span)
    request = decode.ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    present = 0
    for ours, reference in both_reads(request.SerializeToString()):
        facts = first_facts(ours, compiled=True)
        assert facts == first_facts(reference, compiled=False), list(reference.attributes)
        present += sum(fact != "None" for fact in facts[1])
    assert present > 2000, present


@pytest.mark.parametrize(("value", "read"), [
    ({"string_value": "s-1"}, "s-1"), ({"int_value": 7}, "7"), ({"bool_value": True}, None),
    ({"double_value": 7.0}, None), ({"array_value": {"values": [{"string_value": "x"}]}}, None),
    ({"kvlist_value": {"values": [{"key": "a", "value": {"int_value": 1}}]}}, None)])
def test_a_name_or_id_is_a_string_or_an_integers_digits_on_both_paths(
        value: dict[str, Any], read: str | None) -> None:
    """A session, a run id or an agent's name is a string, or an integer's digits (7 is
    "7"); a flag, a double, a list or a map is none (``True`` was the session "True", two
    runs' one session): passed over for the next name, on the span and on its resource."""
    span = ProtoSpan(trace_id=bytes(range(1, 17)), span_id=(1).to_bytes(8, "big"), name="chat",
                     start_time_unix_nano=1_700_000_000_000_000_000,
                     end_time_unix_nano=1_700_000_001_000_000_000)
    for name in ("gen_ai.conversation.id", "watchdog.run.id", "gen_ai.agent.name"):
        span.attributes.add(key=name).value.CopyFrom(AnyValue(**value))
    span.attributes.add(key="session.id", value=AnyValue(string_value="fallback"))
    request = decode.ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(span)
    for ours, reference in both_reads(request.SerializeToString()):
        for facts in (first_facts(ours, compiled=True)[1],
                      first_facts(reference, compiled=False)[1]):
            assert [facts[F_SESSION], facts[F_RUN_ID], facts[F_AGENT_NAME]] == [
                repr(read or "fallback"), repr(read), repr(read)]
    resource = Resource.of(attributes(request.resource_spans[0].scope_spans[0].spans[0]
                                      .attributes))
    assert (resource.run_id, resource.session) == (read, read or "fallback")


# The compiled normalise (native/otlp/src/normalise.rs): on every span it is sure of, the record
# `normalise` makes of the same read; every other span left to `normalise`.

def normalised_both_ways(body: bytes) -> Iterator[tuple[str, str] | None]:
    """Each span of ``body`` (the compiled decode's) the compiled normalise is sure of, as it
    reads it and as ``normalise`` does (reprs: a value's type counts); None for one it leaves
    to ``normalise``."""
    with decoding(compiled=True):
        request = parse_protobuf(body)
        normaliser = values.compiled_normaliser
        assert normaliser is not None
        for resource_spans in request.resource_spans:
            resource = Resource.of(attributes(resource_spans.resource.attributes))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attrs, firsts = span.read()
                    if span.record(attrs, firsts, resource, normaliser) is None:
                        yield None
                        continue
                    ours = conventions.normalised(span, attrs, resource, firsts)
                    yield repr(ours), repr(conventions.normalise(span, attrs, resource, firsts))


def test_the_compiled_normalise_reads_every_recorded_span_as_normalise_does() -> None:
    sure, kinds = 0, set()
    for driver, scenario in ALL:
        for delivery, bodies in deliveries(driver, scenario).items():
            for body in bodies:
                for both in normalised_both_ways(body):
                    if both is not None:
                        ours, reference = both
                        assert ours == reference, (driver, scenario, delivery)
                        sure += 1
                        kinds.add(reference.split("kind=", 1)[1].split(",", 1)[0])
    # (it is sure of many: model and tool calls; a model call's reader may find it is none)
    assert sure > 1000 and {"<SpanKind.LLM: 'llm'>", "<SpanKind.TOOL: 'tool'>"} <= kinds, \
        (sure, kinds)


# Out of the garbage collector's walk: the compiled decode's spans and the records the compiled
# normalise makes are untracked (a request's spans and records live through all its slices).
# The collector cannot break a cycle through an untracked object, so none may pass through one:
# a span shows the collector no reference anyway (a pyclass without __traverse__), and a
# record holds only atomic values and trees of them, after the core has folded and priced it.

ATOMS = (str, int, float, bytes, type(None), Enum)  # (bool and the enums' str members too)


def tree_of_atoms(value: object, path: str) -> Iterator[str]:
    """Where ``value`` holds anything but atoms and tuples, lists and dicts of them: a path."""
    if isinstance(value, ATOMS):
        return
    if isinstance(value, tuple | list):
        for index, item in enumerate(value):
            yield from tree_of_atoms(item, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from tree_of_atoms(key, f"{path} key")
            yield from tree_of_atoms(item, f"{path}[{key!r}]")
    else:
        yield f"{path}: {type(value).__name__}"


def test_the_compiled_reads_leave_the_collector_and_no_cycle_can_pass_through_a_record() -> None:
    untracked = 0
    for driver, scenario in ALL:
        step = Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(load_rules([])),
                    pricer=GenAIPrices())
        records: list[SpanRecord] = []
        with decoding(compiled=True):
            for now, body in enumerate(deliveries(driver, scenario)["as exported"], start=1):
                request = parse_protobuf(body)
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        assert not any(gc.is_tracked(span) for span in scope_spans.spans)
                decoded = records_from(request)
                records.extend(decoded.records)
                step.apply(decoded.records, float(now))
        step.tracker.expire(1e12)
        for record in records:  # (as the core left them: flagged, priced, named)
            untracked += not gc.is_tracked(record)
            for name in SpanRecord.__slots__:
                odd = list(tree_of_atoms(getattr(record, name), name))
                assert not odd, (driver, scenario, odd)
    # (the compiled normalise is sure of most spans: model and tool calls)
    assert untracked > 500, untracked


def test_a_kind_told_by_a_string_array_is_read_by_the_compiled_normalise() -> None:
    """Griptape's recorded spans: the model and tool calls its ``tags`` (a string array) tell
    are read by the compiled normalise itself (not left to ``normalise``), as ``normalise``
    reads them; and so are arrays whose named string comes after others, or after no string."""
    both = [pair for scenario in ("three_tools", "tool_error")
            for body in deliveries("griptape_native", scenario)["as exported"]
            for pair in normalised_both_ways(body) if pair is not None]
    assert all(ours == reference for ours, reference in both), both
    kinds = sorted(reference.split("kind=", 1)[1].split(",", 1)[0] for _, reference in both)
    assert kinds == ["<SpanKind.LLM: 'llm'>"] * 6 + ["<SpanKind.TOOL: 'tool'>"] * 4, kinds
    request = decode.ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for index, tags in enumerate((["x", "Tool.run()"], [1, "PromptDriver.run()"], ["x"], [],
                                  ["PromptDriver.run()", "Tool.run()"])):
        span = spans.add(trace_id=bytes(range(1, 17)), span_id=(index + 1).to_bytes(8, "big"),
                         parent_span_id=b"\7" * 8, name="Thing.run()",
                         start_time_unix_nano=1_700_000_000_000_000_000,
                         end_time_unix_nano=1_700_000_001_000_000_000)
        values_ = span.attributes.add(key="tags").value.array_value.values
        for tag in tags:
            values_.add(**({"string_value": tag} if isinstance(tag, str) else {"int_value": tag}))
    read = list(normalised_both_ways(request.SerializeToString()))
    assert [pair is not None for pair in read] == [True, True, False, False, True], read
    assert all(pair[0] == pair[1] for pair in read if pair is not None), read
    assert ["kind=<SpanKind.TOOL" in read[0][1], "kind=<SpanKind.LLM" in read[1][1],
            "kind=<SpanKind.LLM" in read[4][1]] == [True, True, True], read  # type: ignore[index]


def test_an_odd_string_array_reads_the_same_both_ways() -> None:
    """A kind attribute's array is read for the strings directly in it alone: a named string
    inside a nested array or a key-value list, as bytes, with a space or in other case names
    nothing (the span is left to ``normalise``); one after other kinds of value, or after
    100,000 strings, is read; both normalises read each alike, and so do both decodes."""
    def text(value: str) -> dict[str, Any]:
        return {"stringValue": value}

    prompt, tool = text("PromptDriver.run()"), text("Tool.run()")
    nested = {"arrayValue": {"values": [prompt]}}
    arrays: list[tuple[list[dict[str, Any]], str | None]] = [
        ([nested], None), ([{"kvlistValue": {"values": [{"key": "tags", "value": prompt}]}}],
                           None),
        ([{"bytesValue": base64.b64encode(b"PromptDriver.run()").decode()}], None),
        ([text("")], None), ([text("PromptDriver.run() ")], None),
        ([text("promptdriver.run()")], None), ([{}], None),
        ([{"boolValue": True}, {"doubleValue": 1.5}, {"intValue": "7"}, tool], "TOOL"),
        ([text("x"), nested, tool], "TOOL"), ([text("x")] * 100_000 + [prompt], "LLM"),
        ([prompt, prompt], "LLM"), ([text("é"), tool], "TOOL")]
    spans = [{"traceId": bytes(range(1, 17)).hex(), "spanId": f"{index + 1:016x}",
              "parentSpanId": "07" * 8, "name": "Thing.run()",
              "startTimeUnixNano": "1700000000000000000",
              "endTimeUnixNano": "1700000001000000000",
              "attributes": [{"key": "tags", "value": {"arrayValue": {"values": tags}}}]}
             for index, (tags, _) in enumerate(arrays)]
    body = parse_json(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
                      .encode()).SerializeToString()
    read_ = list(normalised_both_ways(body))
    assert all(pair is None or pair[0] == pair[1] for pair in read_), read_
    kinds = [None if pair is None else pair[1].split("kind=<SpanKind.", 1)[1].split(":", 1)[0]
             for pair in read_]
    assert kinds == [kind for _, kind in arrays], kinds
    assert read([body], compiled=True) == read([body], compiled=False)


# What a model or tool call's span may carry where the compiled normalise reads it, and the
# attributes of every branch it leaves to `normalise`.
NORMALISED_KEYS = sorted({
    "gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind", "gen_ai.tool.name",
    "gen_ai.tool.call.id", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "tool.name",
    "input.value", "output.value", "gen_ai.agent.name", "gen_ai.agent.call.id",
    "watchdog.run.id", "watchdog.parent_run.id", "gen_ai.conversation.id", "session.id",
    "gen_ai.transfer.target.name", "watchdog.tool.refused", "metadata", "haystack.tool.error",
    "watchdog.budget.max_tokens", "gen_ai.usage.input_tokens", "gen_ai.output.messages",
    "gen_ai.input.messages", "gen_ai.response.finish_reasons", "gen_ai.request.model",
    "tool_call_id", "call_id", "traceloop.entity.output", "gen_ai.completion", "not.a.fact",
    "gen_ai.agent.source", "gen_ai.provider.name", "gen_ai.application_name", "output"})
NORMALISED_VALUES: list[dict[str, Any]] = [
    {"string_value": text} for text in (
        "execute_tool", "chat", "invoke_agent", "TOOL", "LLM", "tool", "read_file",
        "final_result", "final_result_x", "finish", "Completed.", "[REDACTED]", "__REDACTED__",
        '{"path": "a.py", "line": 1}', '{"b": 1, "a": {"c": [1, 2]}}', '{"x": 1.5}',
        '{"k": "[REDACTED]"}', "not json", "ok status='error' here", "x" * 300, "é" * 250,
        "agent-0", "run-1", "call_1", '[{"role": "user", "content": "hi"}]',
        '[{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}]', '["stop"]',
        "secret password=hunter2 in /home/user/file.txt", "langgraph", "langchain",
        "StructuredTool", '{"tool_call_id": "call_1", "content": "ok"}',
        "content='no such file' name='read_file' tool_call_id='c1' status='error'")
] + ODD_VALUES


def test_the_compiled_normalise_reads_odd_spans_as_normalise_does() -> None:
    rng = random.Random(31)
    request = decode.ExportTraceServiceRequest()
    for resource_index in range(40):
        resource_spans = request.resource_spans.add()
        for key in rng.sample(["gen_ai.agent.name", "watchdog.run.id", "service.name",
                               "watchdog.budget.max_tokens", "session.id"], rng.randint(0, 3)):
            resource_spans.resource.attributes.add(key=key).value.string_value = \
                rng.choice(["r", "", "5", "x" * 300])
        spans = resource_spans.scope_spans.add().spans
        for index in range(60):
            span = spans.add(trace_id=bytes(range(1, 17)),
                             span_id=(resource_index * 100 + index + 1).to_bytes(8, "big"),
                             name=rng.choice(["chat gpt-4o", "execute_tool read_file", "x" * 300,
                                              "watchdog.run a", "lookup.acall", "invoke_agent",
                                              "invoke_agent a", "Agent._run_step"]),
                             start_time_unix_nano=1_700_000_000_000_000_000,
                             end_time_unix_nano=1_700_000_001_000_000_000)
            if rng.random() < 0.8:
                span.parent_span_id = (index + 7).to_bytes(8, "big")
            if rng.random() < 0.1:
                span.status.code = rng.choice([1, 2])
                span.status.message = rng.choice(["", "max turns exceeded"])
            if rng.random() < 0.05:
                span.events.add(name="exception")
            span.attributes.add(key="gen_ai.operation.name").value.string_value = \
                rng.choice(["execute_tool", "chat", "invoke_agent"])
            for key in ("gen_ai.tool.name", "gen_ai.tool.call.arguments",
                        "gen_ai.tool.call.result", "gen_ai.tool.call.id"):
                if rng.random() < 0.7:  # (a tool call's facts, most often there)
                    key_value = span.attributes.add(key=key)
                    key_value.value.CopyFrom(AnyValue(**rng.choice(NORMALISED_VALUES)))
            for _ in range(rng.randint(0, 4)):
                key_value = span.attributes.add(key=rng.choice(NORMALISED_KEYS))
                key_value.value.CopyFrom(AnyValue(**rng.choice(NORMALISED_VALUES)))
    # and a clean tool call with each value as its name, its arguments and its result
    spans = request.resource_spans.add().scope_spans.add().spans
    for index, value in enumerate(NORMALISED_VALUES * 3):
        span = spans.add(trace_id=bytes(range(1, 17)), span_id=(10_000 + index).to_bytes(8, "big"),
                         parent_span_id=b"\7" * 8, name="execute_tool t",
                         start_time_unix_nano=1_700_000_000_000_000_000,
                         end_time_unix_nano=1_700_000_001_000_000_000)
        facts = {"gen_ai.operation.name": {"string_value": "execute_tool"},
                 "gen_ai.tool.name": {"string_value": "read_file"},
                 "gen_ai.tool.call.arguments": {"string_value": '{"path": "a.py"}'},
                 "gen_ai.tool.call.result": {"string_value": "fine"}}
        facts[("gen_ai.tool.name", "gen_ai.tool.call.arguments",
               "gen_ai.tool.call.result")[index // len(NORMALISED_VALUES)]] = value
        for key, fact in facts.items():
            span.attributes.add(key=key).value.CopyFrom(AnyValue(**fact))
    sure = unsure = 0
    for both in normalised_both_ways(request.SerializeToString()):
        if both is None:
            unsure += 1
            continue
        sure += 1
        assert both[0] == both[1]
    assert sure > 300 and unsure > 300, (sure, unsure)  # (both ways are taken)


# A model call's facts and a span's failure (native/otlp/src/model_calls.rs, failures.rs): read
# whole where they are table reads, left to `_fill_facts` or `_fill_role` where they are not.

MODEL_CALL = {
    "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
    "gen_ai.provider.name": "openai", "gen_ai.response.id": "chatcmpl-1",
    "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 40,
    "gen_ai.response.finish_reasons": ["tool_call"],
    "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "fix"}]}]',
    "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": "tool_call", "id": '
                              '"c1", "name": "read_file", "arguments": {"path": "a.py"}}]}]',
}
FAILED_TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
               "gen_ai.tool.call.id": "call_1",
               "gen_ai.tool.call.arguments": '{"path": "src/a.py"}'}


def proto_span(index: int, facts: dict[str, object], status: tuple[int, str] = (0, ""),
               exception: tuple[str, str] | None = None, name: str = "chat gpt-4o") -> ProtoSpan:
    span = ProtoSpan(trace_id=bytes(range(1, 17)), span_id=(index + 1).to_bytes(8, "big"),
                     parent_span_id=b"\7" * 8, name=name,
                     start_time_unix_nano=1_700_000_000_000_000_000,
                     end_time_unix_nano=1_700_000_001_000_000_000)
    for key, value in facts.items():
        any_value = span.attributes.add(key=key).value
        if isinstance(value, dict):
            any_value.CopyFrom(AnyValue(**value))
        elif isinstance(value, list):
            for item in value:
                any_value.array_value.values.add(string_value=item)
        elif isinstance(value, int):
            any_value.int_value = value
        else:
            any_value.string_value = str(value)
    span.status.code, span.status.message = status
    if exception is not None:
        event = span.events.add(name="exception")
        for key, text in zip(("exception.type", "exception.message"), exception, strict=True):
            if text:
                event.attributes.add(key=key).value.string_value = text
    return span


def filled_both_ways(spans: list[ProtoSpan]) -> Iterator[tuple[int | None, str, str]]:
    """Each span as (what the compiled normalise left of it to fill, None: unsure; its record
    as ``normalised`` makes it; as ``normalise`` does)."""
    request = decode.ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    with decoding(compiled=True):
        normaliser = values.compiled_normaliser
        for span in parse_protobuf(request.SerializeToString()).resource_spans[0] \
                .scope_spans[0].spans:
            attrs, firsts = span.read()
            resource = Resource.of({})
            made = span.record(attrs, firsts, resource, normaliser)
            yield (made[1] if made is not None else None,
                   repr(conventions.normalised(span, attrs, resource, firsts)),
                   repr(conventions.normalise(span, attrs, resource, firsts)))


def read_whole(spans: list[ProtoSpan]) -> list[tuple[int | None, str, str]]:
    """``filled_both_ways`` of spans the compiled normalise fills whole, each read alike."""
    read = list(filled_both_ways(spans))
    for left, ours, reference in read:
        assert left == 0, reference
        assert ours == reference
    return read


def test_model_calls_and_failures_are_read_whole_by_the_compiled_normalise() -> None:
    limit = {**MODEL_CALL, "gen_ai.response.finish_reasons": ["limit_turns"]}
    spans = [proto_span(0, MODEL_CALL), proto_span(1, limit),
             proto_span(2, FAILED_TOOL, (2, "file src/a.py is locked"),
                        ("RuntimeError", "file src/a.py is locked")),
             proto_span(3, MODEL_CALL, (2, ""), ("UsageLimitExceeded", "out of tokens")),
             proto_span(4, FAILED_TOOL, (1, "Max turns exceeded: 3")),
             proto_span(5, {**{key: value for key, value in MODEL_CALL.items()
                               if "messages" not in key},
                            "llm.input_messages.0.message.role": "user",
                            "llm.input_messages.1.message.role": "assistant",
                            "gen_ai.completion.0.tool_calls.0.name": "read_file",
                            "gen_ai.completion.0.tool_calls.0.id": "c2"})]
    read = read_whole(spans)
    assert "requested_tools=True" in read[0][2] and "('read_file', 'c1')" in read[0][2]
    assert "limit_stop='limit_turns'" in read[1][2]
    assert "error_type='RuntimeError'" in read[2][2]
    assert "limit_stop='UsageLimitExceeded'" in read[3][2]
    assert "messages=3" in read[5][2] and "('read_file', 'c2')" in read[5][2]


ODD_MODEL_VALUES: list[dict[str, Any]] = [
    {"string_value": text} for text in (
        "tool_calls", "TOOL_CALLS", "stop", "limit_turns", "length", '["tool_calls"]', "[x",
        "é", '"gpt-4o"', "gpt-4o", "12", "1e3", "RuntimeError", "pkg.UsageLimitExceeded",
        '[{"role": "user"}, {"role": "assistant"}]', '{"error": {"message": "max turns"}}',
        '[{"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "t"}]}]',
        '[{"role": "assistant", "parts": [{"type": "tool_call", "name": "final_result"}]}]',
        '[{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "t"}}]}]',
        '{"input": 3, "output": 4}', "x" * 300)
] + [{"array_value": {"values": [{"string_value": text} for text in texts]}}
     for texts in ((), ("tool_call",), ("stop", "limit_turns"), ("é",))
     ] + [{"int_value": n} for n in (0, 7, -3, 10**12)] + [{"double_value": 0.25}] + ODD_VALUES
ODD_MODEL_KEYS = sorted({
    "gen_ai.response.finish_reasons", "gen_ai.output.messages", "gen_ai.input.messages",
    "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.total_tokens",
    "gen_ai.usage.cost", "gen_ai.usage.cache_read.input_tokens", "gen_ai.response.id",
    "gen_ai.request.model", "gen_ai.response.model", "gen_ai.provider.name", "error.type",
    "output.value", "llm.token_count.prompt", "langfuse.observation.usage_details",
    "gen_ai.framework.error.message", "gen_ai.tool.call.arguments", "gen_ai.tool.name",
    # (flattened messages, counted by their keys, and the tool calls they ask for)
    "llm.input_messages.0.message.role", "llm.input_messages.12.message.content",
    "llm.input_messages.\u00b2.message.role", "gen_ai.prompt.1.role", "gen_ai.completion.0.role",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
    "llm.output_messages.0.message.tool_calls.0.tool_call.id",
    "gen_ai.completion.0.tool_calls.1.name", "gen_ai.completion.0.tool_calls.1.id",
    "gen_ai.input.messages_delta"})
ODD_STATUSES = [(0, ""), (1, ""), (2, ""), (2, "boom"), (0, "Max turns exceeded"),
                (2, "RuntimeError: file locked"), (2, "UsageLimitExceeded: 5 requests"),
                (2, "é"), (1, "recursion limit of 25 reached")]
ODD_EXCEPTIONS = [None, None, ("RuntimeError", "boom"), ("", "max turns (3) exceeded"),
                  ("pkg.MaxTurnsExceeded", ""), ("Exception", "RuntimeError('boom')"),
                  ("ValueError", "RuntimeError: x"), ("ValueError", "é" * 3000)]


def test_odd_model_calls_and_failures_read_as_normalise_does() -> None:
    rng = random.Random(31)
    spans = []
    for index in range(1500):
        facts: dict[str, object] = {
            "gen_ai.operation.name": rng.choice(["chat", "chat", "execute_tool"])}
        if rng.random() < 0.7:  # (most often the facts it reads whole)
            facts.update(MODEL_CALL if facts["gen_ai.operation.name"] == "chat" else FAILED_TOOL)
        for _ in range(rng.randint(0, 4)):
            facts[rng.choice(ODD_MODEL_KEYS)] = rng.choice(ODD_MODEL_VALUES)
        spans.append(proto_span(index, facts, rng.choice(ODD_STATUSES),
                                rng.choice(ODD_EXCEPTIONS)))
    filled = left = 0
    for made, ours, reference in filled_both_ways(spans):
        assert ours == reference
        if made == 0:
            filled += 1
        else:
            left += 1
    assert filled > 300 and left > 300, (filled, left)  # (both ways are taken)


# A model call's answer (native/otlp/src/answers.rs): its text, whether it asked for tools,
# the limit its prompt names, read whole where Python's json and str would read them alike.

ANSWER = {
    **MODEL_CALL, "gen_ai.response.finish_reasons": ["stop"],
    "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": "reasoning", "content":'
                              ' "hm"}, {"type": "text", "content": "Done: a.py fixed."}]}]',
}
ODD_OUTPUTS = [
    "plain answer", "  \u3000\x1c ", "__REDACTED__", " __REDACTED__\n", "[[ ## thought ## ]]",
    "{not json", "[NaN]", '["\\udc00"]', '{"a": 1, "a": 2}', "[" * 200 + "]" * 200, "é" * 400,
    '[{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}]',
    '[{"role": "assistant", "parts": [{"type": "text", "content": " "}]}]',
    '[{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"text": "b"}], '
    '"finish_reason": "stop"}]',
    '[{"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "t"}]}]',
    '[{"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "final_result", '
    '"arguments": {"x": 1}}]}]',
    '[{"role": "assistant", "parts": [{"type": "tool_call", "name": "final_result"}, '
    '{"type": "tool_call", "name": "t"}]}]',
    '{"role": "assistant", "tool_calls": [{"function": {"name": "final_answer"}}]}',
    '{"choices": [{"finish_reason": "length", "message": {"content": "cut"}}]}',
    '[{"finish_reason": "tool_calls", "content": "x"}, {"finish_reason": "", "text": "y"}]',
    '[{"finish_reason": ["stop"]}]', '{"finish_reason": "stop", "content": 5}',
    '{"output": [{"content": [{"text": "resp"}]}], "usage": {"text": "no"}}',
    '[{"role": "a"}, 3]', '[{"role": "a", "content": ["x"]}]', "[]", "{}", "[1e400]",
    '{"toolUse": {}}', '{"tool_use": [{"name": "final_answer"}]}', '"quoted"',
    '[{"role": "assistant", "id": {"text": "an id"}, "input": [{"content": "in"}], '
    '"arguments": {"text": "args"}, "content": [{"type": "thinking", "text": "hm"}, '
    '{"type": "output_text", "text": "said"}]}]',
    # (a key written twice: its first place, its last value; text nine and ten objects deep)
    '[{"role": "assistant", "content": "first", "text": "t", "content": "second"}]',
    '{"a": ' * 9 + '{"text": "nine deep"}' + "}" * 9,
    '[{"a": ' * 8 + '{"content": "ten"}' + "}]" * 8,
]
ODD_PROMPTS = [
    '[{"role": "user", "content": "go"}]',
    '[{"role": "system", "content": "An agent tried to answer a user query but it got stuck and '
    'failed"}, {"role": "user", "content": "x"}]',
    '[{"role": "user", "content": "Now it\'s time you MUST give your absolute best final '
    'answer"}]',
    '[{"role": "user", "content": "Now it\'s time you MUST give your absolute best final '
    'answer"}, {"role": "assistant", "content": "ok"}]',
    '{"messages": [{"content": "Tool call limit reached. Tool call x", "role": "tool"}]}',
    'prose: "role" Tool call limit reached. Tool call ', "é" * 3000 + "Tool call limit reached. "
    "Tool call ", "[NaN, \"You have reached the maximum number of iterations (\"]",
    # (the system prompt is looked for in the first 2,048 characters, the last message's texts
    # in the last 2,048)
    '[{"role": "system", "content": "An agent tried to answer a user query but it got stuck and '
    'failed"}, {"role": "user", "content": "' + "é" * 3000 + '"}]',
    '[{"role": "user", "content": "' + "é" * 3000 + '"}, {"role": "system", "content": "An agent '
    'tried to answer a user query but it got stuck and failed"}]',
]
ODD_ANSWER_VALUES: list[dict[str, Any]] = [
    {"string_value": text} for text in (
        *ODD_OUTPUTS, *ODD_PROMPTS, "stop", "STOP", "end_turn", "length", '["stop"]',
        '["tool_calls"]', '["stop", 1]', '["tool_calls", "stop"]', '["stop", "tool_calls"]', "[]",
        "[x", "é", "tool_calls", "limit_turns")
] + [{"array_value": {"values": [{"string_value": text} for text in texts]}}
     for texts in ((), ("stop",), ("tool_calls", "stop"), ('["stop"]',))
     ] + [{"int_value": 3}] + ODD_VALUES
ODD_ANSWER_KEYS = sorted({
    "gen_ai.response.finish_reasons", "gen_ai.output.messages", "gen_ai.input.messages",
    "output.value", "input.value", "llm.output_messages.0.message.content",
    "gen_ai.completion.0.content", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
    "gen_ai.usage.total_tokens", "gen_ai.response.id", "gen_ai.completion", "mlflow.spanOutputs",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
    "llm.input_messages.0.message.role", "llm.finish_reason"})


def test_answers_are_read_whole_by_the_compiled_normalise() -> None:
    spans = [proto_span(0, ANSWER),
             proto_span(1, {key: value for key, value in ANSWER.items()
                            if key != "gen_ai.response.finish_reasons"}),
             proto_span(2, {**ANSWER, "gen_ai.response.finish_reasons": '["stop"]',
                            "gen_ai.input.messages": ODD_PROMPTS[3]}),
             proto_span(3, {**ANSWER, "gen_ai.input.messages": ODD_PROMPTS[2]}),
             proto_span(4, {**ANSWER, "gen_ai.output.messages": ODD_OUTPUTS[15]}),
             proto_span(5, {"openinference.span.kind": "LLM", "input.value": "hi"})]
    read = read_whole(spans)
    assert "final_answer=True" in read[0][2] and "final_output='Done: a.py fixed.'" in read[0][2]
    assert "final_output='Done: a.py fixed.'" in read[1][2] and "finish_reason=None" in read[1][2]
    assert "finish_reason='stop'" in read[2][2] and "limit_stop=None" in read[2][2]
    assert "limit_stop='max_iter'" in read[3][2]
    assert "final_answer=True" in read[4][2] and "requested_tools=False" in read[4][2]
    assert "kind=<SpanKind.OTHER" in read[5][2]


def odd_spans_read_alike(call: dict[str, object], whole: dict[str, object], share: float,
                         keys: list[str], odd: list[dict[str, Any]],
                         names: list[str]) -> tuple[int, int, set[str]]:
    """1,500 spans of ``call``'s facts, ``whole``'s on ``share`` of them, one to five odd facts
    each, read by the compiled normalise as ``normalise`` reads them: how many it filled whole,
    how many it left, the kinds it filled."""
    rng = random.Random(20)
    spans = []
    for index in range(1500):
        facts = dict(call)
        if rng.random() < share:
            facts.update(whole)
        for _ in range(rng.randint(1, 5)):
            facts[rng.choice(keys)] = rng.choice(odd)
        spans.append(proto_span(index, facts, rng.choice(ODD_STATUSES[:5]),
                                rng.choice(ODD_EXCEPTIONS[:2]), rng.choice(names)))
    filled = left = 0
    kinds = set()
    for made, ours, reference in filled_both_ways(spans):
        assert ours == reference
        if made == 0:
            filled += 1
            kinds.add(reference.split("kind=", 1)[1].split(",", 1)[0])
        else:
            left += 1
    return filled, left, kinds


def test_odd_answers_read_as_normalise_does() -> None:
    filled, left, kinds = odd_spans_read_alike(
        {"gen_ai.operation.name": "chat"}, ANSWER, 0.6, ODD_ANSWER_KEYS, ODD_ANSWER_VALUES,
        ["chat gpt-4o", "lookup.acall", "Agent.__call__"])
    assert filled > 500 and left > 200, (filled, left)  # (both ways are taken)
    assert "<SpanKind.OTHER: 'other'>" in kinds, kinds


def test_the_switch_chooses_the_normalise() -> None:
    with decoding(compiled=False):
        assert values.compiled_normaliser is None
    with decoding(compiled=True):
        assert values.compiled_normaliser is not None


# An agent's facts (native/otlp/src/agents.rs): its answer, finish reason and limit, read whole
# where they are table reads; a table's regex or an error's JSON asked of the Python function.

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder",
         "gen_ai.input.messages": '[{"role": "user", "content": "fix"}]',
         "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": "text", '
                                   '"content": "Fixed a.py."}]}]'}
ODD_AGENT_VALUES: list[dict[str, Any]] = [
    {"string_value": text} for text in (
        *ODD_OUTPUTS[:12], "<coroutine object Agent.run at 0x7f1e2d>",
        "<generator object é at 0x1>", "<coroutine object Agent.<locals>.run at 0xa0>",
        "<coroutine object run at 0xA0>",
        '""', " null ", "Function invocation limit reached before a final answer could be "
        "produced", '[{"role": "assistant", "content": "Function invocation limit reached before '
        'a final answer could be produced"}]', '{"response": "None", "sources": []}',
        '{"error": "Max turns (3) exceeded"}', "max_turns", "MAX_TURNS_exceeded", "limit_turns",
        "stop", '["limit_turns"]', "max_iterations_reached", "caller-agent",
        '{"finish_reason": "limit_turns", "content": "x"}', '{"trajectory": {"thought_0": "a"}}',
        '{"expected_output": "x", "messages": [{"role": "assistant"}]}', "é" * 300)
] + [{"int_value": n} for n in (0, 3, 50)] + ODD_VALUES[:20]
ODD_AGENT_KEYS = sorted({
    "gen_ai.output.messages", "output.value", "final_result", "gen_ai.response.finish_reasons",
    "watchdog.limit_reached", "gen_ai.agent.invocation.end_reason", "hermes.turn_exit_reason",
    "smolagents.max_steps", "task_key", "gen_ai.framework.error.message", "gen_ai.input.messages",
    "gen_ai.agent.turn.count", "gen_ai.caller.name", "haystack.agent.steps_taken",
    "haystack.agent.max_steps", "expected_output"})


def test_agents_are_read_whole_by_the_compiled_normalise() -> None:
    spans = [proto_span(0, AGENT, name="invoke_agent coder"),
             proto_span(1, {**AGENT, "gen_ai.response.finish_reasons": ["limit_turns"]},
                        name="invoke_agent coder"),
             proto_span(2, {**AGENT, "gen_ai.agent.invocation.end_reason": "max_turns"},
                        name="invoke_agent coder"),
             proto_span(3, {**AGENT, "gen_ai.output.messages": ODD_AGENT_VALUES[12]
                            ["string_value"]}, name="invoke_agent coder"),
             proto_span(4, {**AGENT, "gen_ai.output.messages": "__REDACTED__", "task_key": "t"},
                        name="invoke_agent coder")]
    read = read_whole(spans)
    assert "final_output='Fixed a.py.'" in read[0][2] and "messages=1" in read[0][2]
    assert "limit_stop='limit_turns'" in read[1][2] and "final_answer=False" in read[1][2]
    assert "limit_stop='max_turns'" in read[2][2] and "final_answer=True" in read[2][2]
    assert "final_answer=False" in read[3][2]  # (an unawaited coroutine's repr)
    assert "final_answer=True" in read[4][2]  # (a hidden output that ends OK only answered)


def test_odd_agents_read_as_normalise_does() -> None:
    filled, left, _ = odd_spans_read_alike(
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder"}, AGENT, 0.5,
        ODD_AGENT_KEYS, ODD_AGENT_VALUES, ["invoke_agent coder", "ReAct.forward", "coder"])
    assert filled > 500 and left > 200, (filled, left)  # (both ways are taken)


def test_an_instruction_is_no_answer_to_either_normalise() -> None:
    """Koog's recorded spans read alike both ways (its agent span, whose
    ``gen_ai.output.messages`` is its system prompt, is left to ``normalise``); an agent span's
    output of instructions alone, ``system``/``developer`` in any case, is no answer to the
    compiled normalise as to ``normalise``, while one with an answer beside them (or a role
    that is no string) is an answer."""
    both = [pair for body in deliveries("koog", "three_tools")["as exported"]
            for pair in normalised_both_ways(body) if pair is not None]
    assert all(ours == reference for ours, reference in both), both
    assert both, "the compiled normalise reads Koog's model and tool calls itself"
    request = decode.ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    answer = {"type": "text", "content": "The answer."}
    outputs = ([{"role": "SYSTEM", "parts": [answer]}], [{"role": "developer", "parts": [answer]}],
               [{"role": "System", "parts": [answer]}, {"role": "assistant", "parts": [answer]}],
               [{"role": 7, "parts": [answer]}], [{"role": "Assistant", "parts": [answer]}])
    for index, output in enumerate(outputs):
        span = spans.add(trace_id=bytes(range(1, 17)), span_id=(index + 1).to_bytes(8, "big"),
                         name="invoke_agent researcher",
                         start_time_unix_nano=1_700_000_000_000_000_000,
                         end_time_unix_nano=1_700_000_001_000_000_000)
        for key, value in (("gen_ai.operation.name", "invoke_agent"),
                           ("gen_ai.agent.name", "researcher"),
                           ("gen_ai.output.messages", json.dumps(output))):
            span.attributes.add(key=key).value.string_value = value
    read = list(normalised_both_ways(request.SerializeToString()))
    assert all(pair is not None and pair[0] == pair[1] for pair in read), read
    assert ["final_answer=True" in pair[1] for pair in read if pair is not None] == [
        False, False, True, True, True], read
