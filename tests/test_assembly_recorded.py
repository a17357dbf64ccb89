"""Run assembly (issue 28, mechanisms 4 and 5) on real recordings (``tests/frameworks/
recordings``), span records made by the normaliser from what the frameworks exported, applied
request by request as they were sent.

4. A run ends when its root ends, whatever else the root carries: LiteLLM's OpenTelemetry
   callback (``litellm_logfire_loop``) writes every model call's attributes onto the span active
   around the call, the hand-written loop's root, which arrives as a ``chat`` model call.
5. One exception echoed on nested spans is one failure: pydantic-ai traced by Logfire, its tool
   also by OpenInference's tool decorator (``pydantic_ai_logfire``): each execution two tool
   spans, one directly inside the other, and a failure the same exception on both.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.recorded import recorded_records, scoped_spans
from tests.test_rebatching import as_exported
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.pipeline import records_from
from watchdog.core.spans.record import LLM, TOOL

LITELLM = "litellm_logfire_loop"
CHAT = "Chat Completion with {request_data[model]!r}"  # Logfire's span per model call


def _attributes(driver: str, scenario: str, name: str) -> list[dict[str, object]]:
    """The raw attributes of the recording's spans named ``name``, in export order."""
    return [{kv.key: kv.value.string_value or kv.value.int_value for kv in span.attributes}
            for _, _, span in scoped_spans(driver, scenario) if span.name == name]


def _applied(driver: str, scenario: str) -> tuple[RunTracker, list[bool]]:
    """The tracker after the recording's requests, applied as exported, and after each
    request whether a run was still active."""
    tracker = RunTracker()
    active = []
    for now, request in enumerate(as_exported(driver, scenario), start=1):
        tracker.apply(records_from(request).records, float(now))
        active.append(bool(list(tracker.active())))
    return tracker, active


# -- 4. a run ends when its root ends, whatever else the root carries -------------------------

@pytest.mark.parametrize("scenario", ["three_tools", "tool_error", "limit"])
def test_litellm_writes_model_calls_onto_the_loops_root(scenario: str) -> None:
    """What the recording shows: the loop's root (Logfire's ``research agent`` span) carries a
    model call's attributes LiteLLM wrote onto it, and the model calls ran inside it."""
    records = recorded_records(LITELLM, scenario)
    (root,) = [r for r in records if r.parent_span_id is None]
    assert root.name == "research agent {task}" and root.kind is LLM
    (attrs,) = _attributes(LITELLM, scenario, root.name)
    assert attrs["gen_ai.operation.name"] == "chat" and "litellm.call_id" in attrs
    calls = [r for r in records if r.name == CHAT]
    assert len(calls) >= 2 and all(r.kind is LLM and r.parent_span_id == root.span_id
                                   for r in calls)
    # a copy of one call: its response id is one of theirs (not a call of its own)
    assert root.response_id in {r.response_id for r in calls}


@pytest.mark.parametrize(("scenario", "calls", "tools", "errors", "state", "reason"), [
    ("three_tools", 4, 3, 0, TerminalState.COMPLETED, None),
    ("tool_error", 2, 1, 1, TerminalState.COMPLETED, None),
    # the loop's cap: an exception the root records, its status the OK LiteLLM set
    ("limit", 5, 5, 0, TerminalState.TOOL_LIMIT_REACHED, "max_steps"),
])
def test_a_root_made_a_model_call_ends_its_run_with_the_loops_calls(
        scenario: str, calls: int, tools: int, errors: int, state: TerminalState,
        reason: str | None) -> None:
    tracker, active = _applied(LITELLM, scenario)
    records = recorded_records(LITELLM, scenario)
    (root,) = [r for r in records if r.parent_span_id is None]
    # the run ends with the request that brings its root, not before, and none is left open
    root_request = next(index for index, request in enumerate(as_exported(LITELLM, scenario))
                        if any(r.span_id == root.span_id
                               for r in records_from(request).records))
    assert active[:root_request] == [True] * root_request
    assert not any(active[root_request:])
    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls, run.errors, run.terminal_state, run.terminal_reason) \
        == (calls, tools, errors, state, reason)
    # each call's usage once: the root's copy of one call is not added again
    chats = [r for r in records if r.name == CHAT]
    assert (run.input_tokens, run.output_tokens) == (
        sum(r.input_tokens for r in chats), sum(r.output_tokens for r in chats))
    assert run.has_final_answer is (state is TerminalState.COMPLETED)


# -- 5. one exception echoed on nested spans is one failure -----------------------------------

PYDANTIC = "pydantic_ai_logfire"


def _exception_of(span: Any) -> tuple[str, str] | None:
    for event in span.events:
        if event.name == "exception":
            found = {kv.key: kv.value.string_value for kv in event.attributes}
            return found["exception.type"], found["exception.message"]
    return None


def test_a_tool_traced_twice_echoes_its_exception_on_the_span_around_it() -> None:
    """What the recording shows: pydantic-ai's ``execute_tool lookup`` span (Logfire) and
    OpenInference's ``lookup`` TOOL span directly inside it, both tool calls to the
    normaliser, both recording the one exception the tool raised."""
    spans = [span for _, _, span in scoped_spans(PYDANTIC, "tool_error")]
    by_id = {span.span_id: span for span in spans}
    (inner,) = [span for span in spans if span.name == "lookup"]
    outer = by_id[inner.parent_span_id]
    assert outer.name == "execute_tool lookup"
    assert _exception_of(inner) == _exception_of(outer) \
        == ("RuntimeError", "backend unavailable for broken")
    kinds = {r.name: r.kind for r in recorded_records(PYDANTIC, "tool_error")}
    assert kinds["lookup"] is TOOL and kinds["execute_tool lookup"] is TOOL


@pytest.mark.parametrize(("scenario", "tools", "errors"), [
    ("three_tools", 3, 0), ("limit", 3, 0), ("tool_error", 1, 1)])
def test_a_tool_traced_twice_is_one_call_and_its_echoed_exception_one_error(
        scenario: str, tools: int, errors: int) -> None:
    tracker, _ = _applied(PYDANTIC, scenario)
    (run,) = tracker.ended()
    assert (run.tool_calls, run.errors, dict(run.tools)) == (tools, errors, {"lookup": tools})
    assert run.repeated_error == errors  # the echo is no repeat of the error either
