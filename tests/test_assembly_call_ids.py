"""Tool calls matched by the model's call id (issue 28, mechanism 2): a span that says which of
the model's tool calls it runs — ``gen_ai.tool.call.id``, a generic ``tool_call_id`` or
``call_id``, or the id inside its input JSON — answers that call, so two calls of one tool are
two calls, and a span named like the tool that answers no call asked for is no call when the
ids are known. Read on a real recording (``recordings/openai_olm_call_ids``: a hand-written
loop whose tool consults a cache traced under the tool's name) and on OpenTelemetry SDK spans
exported over real OTLP/HTTP to a sidecar."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.frameworks.harness import RECORDINGS, replay, runs_seen
from tests.harness import RunningServer
from tests.otel import export_http
from tests.recorded import recorded_records
from tests.spans import SpanMaker, chat_attrs, records_of, tool_attrs
from watchdog.core.spans.record import LLM, OTHER
from watchdog.core.spans.tool_calls import MAX_CALL_INPUT_CHARS

DRIVER = "openai_olm_call_ids"
SCENARIOS = ("parallel", "parallel_input", "parallel_error")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_loop_spans_say_which_asked_call_they_run(scenario: str) -> None:
    records = recorded_records(DRIVER, scenario)
    asked = [call_id for record in records if record.kind is LLM
             for _, call_id in record.asked_tools]
    assert len(asked) == 2 and all(call_id.startswith("call_") for call_id in asked)
    spans = [record for record in records if record.name == "lookup"]
    assert all(record.kind is OTHER for record in spans)  # no GenAI attribute on any
    # the loop's span per call: the call's id (an attribute, or in the input's tool call)
    assert sorted(r.tool_call_id for r in spans if r.tool_call_id in asked) == sorted(asked)
    # the cache's spans: its own request ids, each a recorded miss
    cache = [record for record in spans if record.tool_call_id not in asked]
    assert [r.tool_call_id for r in cache] == ["cache-1", "cache-2"]
    assert all(record.error and record.error_type == "KeyError" for record in cache)


@pytest.mark.parametrize(("scenario", "errors", "last_error"), [
    ("parallel", 0, ""), ("parallel_input", 0, ""),
    ("parallel_error", 1, "RuntimeError: backend unavailable for broken")])
def test_the_recording_reads_two_calls_and_no_cache_miss(sidecar: RunningServer, scenario: str,
                                                         errors: int, last_error: str) -> None:
    replay(sidecar, RECORDINGS / DRIVER / f"{scenario}.jsonl")
    (run,) = runs_seen(sidecar, 1)
    signals = run["signals"]
    assert (signals["iterations"], signals["tool_calls"], signals["tools"], signals["errors"]) \
        == (2, 2, {"lookup": 2}, errors)
    assert (signals["last_error"] or "") == last_error
    assert run["terminal_state"] == "completed"


# -- OpenTelemetry SDK spans over OTLP/HTTP ------------------------------------------------------

def _asking(*calls: tuple[str, str]) -> dict[str, Any]:
    """A model call (GenAI attributes) whose output asks for ``calls`` (tool, call id)."""
    return chat_attrs(finish="tool_calls", **{"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [
            {"type": "tool_call", "id": call_id, "name": tool, "arguments": "{}"}
            for tool, call_id in calls]}])})


def _run(sidecar: RunningServer, tool_spans: Any, asked: tuple[tuple[str, str], ...] = (
        ("search", "call_1"), ("search", "call_2"))) -> dict[str, Any]:
    """A run of one agent: a model call asking for ``asked``, the spans ``tool_spans(maker,
    root, t)`` makes, then the answer; sent by the SDK's OTLP/HTTP exporter. The run read."""
    maker = SpanMaker()
    t = time.time() - 30
    with maker.agent(attrs={"gen_ai.agent.name": "searcher"}, start=t, end=t + 10) as root:
        maker.span("chat", _asking(*asked), parent=root, start=t + 1, end=t + 2)
        tool_spans(maker, root, t + 2)
        maker.span("chat", chat_attrs(finish="stop"), parent=root, start=t + 8, end=t + 9)
    export_http(sidecar, maker.take())
    (run,) = runs_seen(sidecar, 1)
    return dict(run["signals"])


def test_two_calls_of_one_tool_and_a_namesake_that_answers_none(sidecar: RunningServer) -> None:
    """The loop's two ``search`` spans carry the two call ids; a third ``search`` span (a
    search client's request, its own ``call_id``) fails: no call, no error."""
    def spans(maker: SpanMaker, root: Any, t: float) -> None:
        maker.span("search", {"tool_call_id": "call_1"}, parent=root, start=t, end=t + 1)
        maker.span("search", {"call_id": "rpc-9"}, parent=root, start=t + 1.5, end=t + 2,
                   exception=TimeoutError("search backend timed out"))
        maker.span("search", {"tool_call_id": "call_2"}, parent=root, start=t + 2.5, end=t + 3)

    signals = _run(sidecar, spans)
    assert (signals["tool_calls"], signals["tools"], signals["errors"]) == (2, {"search": 2}, 0)


def test_a_span_carrying_an_asked_id_is_that_call_whatever_its_name(
        sidecar: RunningServer) -> None:
    """Ids in the input JSON (the tool call object as the model gave it), and a span named
    after the loop's step rather than the tool: the ids say which calls ran; the second
    call's own failure is the run's error."""
    def spans(maker: SpanMaker, root: Any, t: float) -> None:
        for index, (call_id, failure) in enumerate(
                [("call_1", None), ("call_2", RuntimeError("index offline"))]):
            call = {"id": call_id, "type": "function",
                    "function": {"name": "search", "arguments": "{}"}}
            maker.span("run tool", {"input": json.dumps(call)}, parent=root,
                       start=t + 2 * index, end=t + 2 * index + 1, exception=failure)

    signals = _run(sidecar, spans)
    assert (signals["tool_calls"], signals["tools"], signals["errors"]) == (2, {"search": 2}, 1)
    assert signals["last_error"] == "RuntimeError: index offline"


def test_one_call_traced_twice_under_its_id_is_one_call(sidecar: RunningServer) -> None:
    """The framework's GenAI tool span and, inside it, the tool's own span with the same call
    id; then the second call, by a GenAI span alone: two calls."""
    def spans(maker: SpanMaker, root: Any, t: float) -> None:
        outer = maker.open("execute_tool search", tool_attrs(
            "search", "{}", **{"gen_ai.tool.call.id": "call_1"}), parent=root, start=t)
        maker.span("search", {"tool_call_id": "call_1"}, parent=outer, start=t + 0.1,
                   end=t + 0.5)
        outer.end(int((t + 1) * 1e9))
        maker.span("execute_tool search", tool_attrs(
            "search", "{}", **{"gen_ai.tool.call.id": "call_2"}), parent=root, start=t + 2,
            end=t + 3)

    signals = _run(sidecar, spans)
    assert (signals["tool_calls"], signals["tools"]) == (2, {"search": 2})


def test_a_namesake_without_id_inside_the_first_call_leaves_the_second_its_failure(
        sidecar: RunningServer) -> None:
    """Two calls of one tool in one response; the first call's span (its id) holds the search
    library's own span named after the tool (no id), which ends first and is taken as the
    first call; the second call's span fails: its failure is the run's error."""
    def spans(maker: SpanMaker, root: Any, t: float) -> None:
        first = maker.open("search", {"tool_call_id": "call_1"}, parent=root, start=t)
        maker.span("search", {"input": "{}"}, parent=first, start=t + 0.1, end=t + 0.5)
        first.end(int((t + 1) * 1e9))
        maker.span("search", {"tool_call_id": "call_2"}, parent=root, start=t + 2, end=t + 3,
                   exception=RuntimeError("index offline"))

    signals = _run(sidecar, spans)
    assert (signals["tool_calls"], signals["tools"], signals["errors"]) == (2, {"search": 2}, 1)
    assert signals["last_error"] == "RuntimeError: index offline"


def test_without_ids_on_the_model_side_names_still_match(sidecar: RunningServer) -> None:
    """The model's output gave no ids: a span carrying one is matched by its name."""
    def spans(maker: SpanMaker, root: Any, t: float) -> None:
        maker.span("search", {"tool_call_id": "toolu_1"}, parent=root, start=t, end=t + 1)

    signals = _run(sidecar, spans, asked=(("search", ""),))
    assert (signals["tool_calls"], signals["tools"]) == (1, {"search": 1})


# -- where the id is read, and what is not an id -------------------------------------------------

@pytest.mark.parametrize(("attrs", "expected"), [
    ({"gen_ai.tool.call.id": "call_a"}, "call_a"),
    ({"tool_call_id": "call_a", "call_id": "other"}, "call_a"),
    ({"input": json.dumps({"tool_call_id": "call_a", "key": "k"})}, "call_a"),
    ({"input": json.dumps({"call": {"id": "toolu_1", "name": "search", "input": {}}})},
     "toolu_1"),
    ({"mlflow.spanInputs": json.dumps({"item": {"call_id": "fc_1", "arguments": "{}"}})},
     "fc_1"),
    # an id that is the tool's own argument, not a tool call's: none
    ({"input": json.dumps({"id": 7, "name": "x"})}, None),
    ({"input": json.dumps({"id": "user-7"})}, None),
    ({"input": json.dumps({"calls": [{"id": "call_a", "function": {}}]})}, None),  # a list
    ({"input": "{not json, but \"id\": 1"}, None),
    ({"input": json.dumps({"tool_call_id": "call_a", "pad": "x" * MAX_CALL_INPUT_CHARS})},
     None),  # too long to parse per span
])
def test_where_a_span_carries_its_call_id(attrs: dict[str, Any], expected: str | None) -> None:
    maker = SpanMaker()
    maker.span("search", attrs)
    (record,) = records_of(maker.take())
    assert record.tool_call_id == expected
