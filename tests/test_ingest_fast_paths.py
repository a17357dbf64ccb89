"""The ingest hot path's shortcuts give exactly what the plain code they replace gives.

Each shortcut (the trigger pattern before redaction, the JSON parse of tool arguments, the hash
of a call, the run snapshot) is held against the straightforward version it stands for, on the
awkward inputs and on random ones.
"""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from tests.spans import T0, SpanMaker, only_run, record_of, run_spans, tool_attrs
from watchdog.core.redact import _ANCHOR as _TRIGGER
from watchdog.core.redact import _AT_ANCHOR
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.fields import RunFields
from watchdog.core.spans.conventions import canonical_arguments, stable_hash
from watchdog.core.spans.record import SpanKind


@pytest.fixture
def otel() -> SpanMaker:
    return SpanMaker()


_TRIGGERS = tuple(_AT_ANCHOR)  # the anchor words redaction scans for


def has_trigger(lowered: str) -> bool:
    return any(trigger in lowered for trigger in _TRIGGERS)


def test_trigger_pattern_finds_a_trigger_exactly_when_a_substring_test_does() -> None:
    rng = random.Random(7)
    alphabet = "abcdeghiknoprstuwxyzj_-:/ 0\n" + "".join({c for t in _TRIGGERS for c in t})
    texts = ["", "tests pass", "key", "ghz_", "gh_p", "-----begi", "://", "a" * 500]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
              for _ in range(20_000)]
    for trigger in _TRIGGERS:  # each one, alone, at either end and inside text
        texts += [trigger, trigger + " tail", "head " + trigger, f"x{trigger}y", trigger[:-1]]
    for text in texts:
        assert (_TRIGGER.search(text) is not None) == has_trigger(text), text


def reference_canonical(raw: object) -> str:
    """canonical_arguments as first written: json.loads, then json.dumps with sorted keys."""
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return raw.strip()
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(raw)


AWKWARD_ARGUMENTS = [
    "", " ", "{}", ' {"b": 1, "a": 2} ', '{"a":1} x', '{"a":1}{"b":2}', "\x0c{}", "{}\x0c",
    "\u00a0{}", "{}\u00a0", "\ufeff{}", "\t\n\r[1, 2]\r\n", '"text"', "3", "NaN", "[NaN]",
    '{"é": "ü", "a": [true, null, 1.5e3]}', "not json {", "{'single': 'quotes'}", "01",
    None, 7, 2.5, [1, "a"], {"b": 1, "a": [True, None]},
]


@pytest.mark.parametrize("raw", AWKWARD_ARGUMENTS)
def test_canonical_arguments_is_json_loads_then_sorted_dumps(raw: object) -> None:
    assert canonical_arguments(raw) == reference_canonical(raw)


def test_canonical_arguments_on_random_json_like_text() -> None:
    rng = random.Random(11)
    pieces = ['{', '}', '[', ']', '"a"', '"b"', ':', ',', ' ', '\t', '\n', '\x0c', '\u00a0',
              '1', '-2.5e3', 'true', 'null', 'NaN', '"é"', 'x', '""']
    for _ in range(20_000):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        assert canonical_arguments(raw) == reference_canonical(raw), raw


def test_stable_hash_is_the_signed_64_bit_blake2b_digest() -> None:
    # Hashes are persisted with run snapshots: the function must never change silently.
    for text in ("", "read_file\0{}", "RuntimeError:file <path> is locked", "é" * 100):
        digest = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).digest()
        assert stable_hash(text) == int.from_bytes(digest, "big", signed=True)
    assert stable_hash("read_file\0{}") == stable_hash("read_file\0{}")


def test_an_array_valued_request_type_does_not_fail_the_export(otel: SpanMaker) -> None:
    # OpenLLMetry's llm.request.type is a string; a list used to raise TypeError (unhashable)
    # and fail the whole export request. A kind told by a string array takes the first string
    # the table names (Griptape's tags); one it names none of is no kind.
    record = record_of(otel.span("llm call", {"llm.request.type": ["chat"]}))
    assert record.kind is SpanKind.LLM
    record = record_of(otel.span("llm call", {"llm.request.type": ["nothing", 3]}))
    assert record.kind is SpanKind.OTHER


def test_activity_entries_are_store_rows(otel: SpanMaker) -> None:
    otel.span("execute_tool grep", tool_attrs("grep", '{"q": "x"}', "found"))
    _, result = run_spans(otel.take(), now=T0 + 1)
    (entry,) = result.activity
    assert isinstance(entry, ActivityEntry)
    assert tuple(entry) == (entry.run_key, 1, entry.at, "tool", "grep", '{"q":"x"}', "found",
                            None)


def test_run_snapshot_is_plain_json(otel: SpanMaker) -> None:
    root = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"})
    for _ in range(2):
        otel.span("execute_tool grep", tool_attrs("grep", '{"q": "x"}', "found"), parent=root)
    root.end(end_time=int((T0 + 2) * 1e9))
    tracker, _ = run_spans(otel.take(), now=T0 + 3)
    run = only_run(tracker)
    data = run.to_dict()
    assert list(data) == list(RunFields.__slots__)  # the snapshot's layout is the slots' order
    assert type(data["key_source"]) is str and type(data["terminal_state"]) is str
    assert data["_call_counts"] and all(type(key) is str for key in data["_call_counts"])
    assert json.loads(json.dumps(data)) == data
