"""An agent's own log events (Qwen Code's, Claude Code's), as the conventions name them, met by
their spans in the log join (``watchdog.core.spans.logs``): within its bounds, and an event whose
span never comes dropped and counted, never kept. (Their runs, live and recorded, in either
order: ``tests/frameworks/test_qwen_code_otel.py``, ``test_claude_code_otel.py``; both decodes
alike: ``tests/test_native.py``.)"""

from __future__ import annotations

import json
from typing import Any

from tests.frameworks.harness import RECORDINGS
from tests.recorded import recorded_lines
from watchdog.core.spans.decode import parse_json
from watchdog.core.spans.logs import (
    CONTENT_WAIT_SECONDS,
    DROPPED,
    LATE,
    WITH_SPAN,
    LogJoin,
    parse_logs_json,
)
from watchdog.core.spans.pipeline import late_content, released, slices_of


def logs(driver: str, scenario: str, scope: str | None = None) -> list[bytes]:
    """A recording's log exports (``scope``: its log scopes renamed)."""
    bodies = []
    for line in recorded_lines(driver, f"{scenario}.logs"):
        document = json.loads(line)
        if scope is not None:
            for resource in document["resourceLogs"]:
                for scoped in resource["scopeLogs"]:
                    scoped["scope"]["name"] = scope
        bodies.append(json.dumps(document).encode())
    return bodies


def add_all(join: LogJoin, bodies: list[bytes], now: float) -> None:
    for body in bodies:
        join.add(parse_logs_json(body), now)


def test_an_event_whose_span_never_comes_is_dropped_and_counted() -> None:
    join = LogJoin()
    add_all(join, logs("qwen_code", "loop"), 0.0)
    # 5 answers (qwen-code.api_response) and 4 tools' arguments (qwen-code.tool_call)
    assert join.events == 9
    assert join.expired(CONTENT_WAIT_SECONDS - 0.1) == []
    assert join.content_counts() == {WITH_SPAN: 0, LATE: 0, DROPPED: 0}
    join.expired(CONTENT_WAIT_SECONDS + 0.1)
    assert join.content_counts() == {WITH_SPAN: 0, LATE: 0, DROPPED: 9}
    # nothing kept: the spans that come now are read without it
    records = [record for line in recorded_lines("qwen_code", "loop")
               for part in slices_of(parse_json(line.encode()), None, join, 11.0)
               for record in part.records]
    records += released(join.expired(1e9), join, 1e9).records
    assert [record.final_output for record in records if record.final_output] == []
    assert {record.args_brief for record in records if record.kind == "tool"} == {None}


def test_events_wait_within_the_joins_bounds() -> None:
    """Its bytes bounded as a GenAI event's content is: what does not fit is dropped, counted."""
    join = LogJoin(max_bytes=1)
    add_all(join, logs("qwen_code", "loop"), 0.0)
    assert join.content_counts()[DROPPED] == 9


def _cut(bodies: list[bytes]) -> tuple[bytes, bytes]:
    """The recording's log exports as two: up to its first event the join reads, and the rest."""
    records = [(document, record) for body in bodies
               for document in [json.loads(body)]
               for record in document["resourceLogs"][0]["scopeLogs"][0]["logRecords"]]
    cut = next(index for index, (_, record) in enumerate(records)
               if {"key": "event.name", "value": {"stringValue": "qwen-code.api_response"}}
               in record["attributes"]) + 1
    halves = []
    for part in (records[:cut], records[cut:]):
        document = json.loads(json.dumps(part[0][0]))
        document["resourceLogs"][0]["scopeLogs"][0]["logRecords"] = [r for _, r in part]
        halves.append(json.dumps(document).encode())
    return halves[0], halves[1]


def test_spans_wait_for_their_events_and_read_them() -> None:
    """Its service known (an event came), its tool and model-call spans wait with their trace:
    each read with its event's facts, the answer and every tool's arguments."""
    join = LogJoin()
    # its first event alone first (its service known), the rest after the spans
    first, rest = _cut(logs("qwen_code", "loop"))
    join.add(parse_logs_json(first), 0.0)
    assert join.events == 1
    bodies = [rest]
    records = [record for line in recorded_lines("qwen_code", "loop")
               for part in slices_of(parse_json(line.encode()), None, join, 1.0)
               for record in part.records]
    assert join.held_traces == 1
    for body in bodies:
        records += released(join.add(parse_logs_json(body), 2.0), join, 2.0).records
    assert join.held_traces == 0 and not late_content(join)
    assert [record.final_output for record in records if record.final_output] == [
        "The file is /srv/a.txt."]
    assert [record.args_brief for record in records if record.kind == "tool"] == [
        '{"command":"echo \'again\' >> ran.txt"}'] * 4


def test_an_event_of_its_name_from_another_scope_is_not_read() -> None:
    """Claude Code's `assistant_response` is read from its own log scope only (the name alone
    is any agent's)."""
    join = LogJoin()
    add_all(join, logs("claude_code", "three_tools", scope="another.agent"), 0.0)
    assert join.events == 0
    add_all(join, logs("claude_code", "three_tools"), 0.0)
    assert join.events == 1


def codex_logs(scenario: str, call_ids: bool = True) -> list[bytes]:
    """The Codex CLI's log exports (``call_ids``: False, its events' ``call_id`` left out)."""
    bodies = []
    path = RECORDINGS / "codex" / f"{scenario}.logs.ndjson"
    for line in path.read_text("utf-8").splitlines():
        document = json.loads(line)
        for resource in document["resourceLogs"]:
            for scoped in resource["scopeLogs"]:
                for record in scoped["logRecords"]:
                    record["attributes"] = [kv for kv in record["attributes"]
                                            if call_ids or kv["key"] != "call_id"]
        bodies.append(json.dumps(document).encode())
    return bodies


def codex_records(join: LogJoin, scenario: str, now: float) -> list[Any]:
    lines = (RECORDINGS / "codex" / f"{scenario}.jsonl").read_text("utf-8").splitlines()
    records = [record for line in lines
               for part in slices_of(parse_json(line.encode()), None, join, now)
               for record in part.records]
    return records + released(join.expired(1e9), join, 1e9).records


def test_codex_tool_results_name_their_tools_by_call_id() -> None:
    """``codex.tool_result`` (its name in ``event.name``: the record's field is a source
    location) names a child of its tool's span: it is read on the tool's span that carries its
    ``call_id``, not on the span it names, nor on the command's span below that carries the id
    as well."""
    join = LogJoin()
    add_all(join, codex_logs("loop"), 0.0)
    assert join.events == 4  # its 4 tool results; its other events are not read
    records = codex_records(join, "loop", 1.0)
    command = '{"cmd":"echo \'the file\' >> ran.txt"}'
    assert [record.args_brief for record in records if record.kind == "tool"] == [command] * 4
    assert [record.name for record in records if record.args_brief] == ["exec_command"] * 4
    assert join.content_counts() == {WITH_SPAN: 4, LATE: 0, DROPPED: 0}


def test_a_codex_tool_result_without_its_call_id_names_no_span() -> None:
    join = LogJoin()
    add_all(join, codex_logs("loop", call_ids=False), 0.0)
    records = codex_records(join, "loop", 1.0)
    assert {record.args_brief for record in records if record.kind == "tool"} == {None}
    join.expired(CONTENT_WAIT_SECONDS + 2.0)
    assert join.content_counts() == {WITH_SPAN: 0, LATE: 0, DROPPED: 0}  # (never kept)
