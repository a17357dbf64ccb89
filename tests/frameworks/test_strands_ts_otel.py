"""Strands Agents for TypeScript's own OpenTelemetry, watched only (``ts/strands/agent.ts`` with
``AGENT_OTEL=1``: ``setupTracer({ exporters: { otlp: true } })`` from
``@strands-agents/sdk/telemetry``, as its docs turn it on, OTLP/HTTP JSON to
``OTEL_EXPORTER_OTLP_ENDPOINT``; with ``RECORD_SPANS`` set, ``../recording.ts``'s exporter
instead, and recorded in ``recordings/strands_ts/``). Its tracer (scope ``strands-agents``)
writes Strands for Python's default format: per invocation a trace, ``invoke_agent <name>`` >
``execute_agent_loop_cycle`` per model call > ``chat`` and the ``execute_tool <tool>`` spans its
answer asked for; the messages, answers and tool arguments only in span events. Each case runs
live (one node process) and from its recording. Steered and traced at once, counted once:
``test_strands_ts.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import recorded_spans, replay
from tests.frameworks.test_eino import sums
from tests.frameworks.test_llamaindex_ts_olm import watching  # noqa: F401 (its sidecar)
from tests.frameworks.test_model_endpoint_text_actions import new_runs
from tests.frameworks.test_strands_ts import (
    OTEL_DRIVER,
    RECORDING,
    RECORDINGS,
    SORRY,
    check_watched,
    failing,
    results,
    traced,
)
from tests.harness import RunningServer

THREW = RECORDINGS / OTEL_DRIVER / "tool_error.jsonl"
LIMITED = RECORDINGS / OTEL_DRIVER / "limit_turns.jsonl"


def test_its_own_spans_are_read_live(watching: RunningServer, llm: FakeLLM,  # noqa: F811
                                     tmp_path: Path) -> None:
    """Turned on as its docs say, exported as OTLP/HTTP JSON: each invocation one run (with
    ``RECORD_SPANS`` set, exported by ../recording.ts instead, and recorded)."""
    if os.environ.get("RECORD_SPANS"):
        RECORDING.unlink(missing_ok=True)
    it = traced(watching, llm, tmp_path, RECORDING if os.environ.get("RECORD_SPANS") else None)
    assert results(it) == [{"output": "SUMS 0", "error": ""}, {"output": "SUMS 1", "error": ""}]
    check_watched(watching, set())


def test_its_own_spans_recorded(watching: RunningServer) -> None:  # noqa: F811
    """What it emitted (the recording, ``RECORD_SPANS=1``): per invocation a trace,
    ``invoke_agent adder`` > ``execute_agent_loop_cycle`` per model call > ``chat`` and the
    ``execute_tool add`` its answer asked for (GenAI's operation names, ``gen_ai.system``
    ``strands-agents``; the messages, answers and tool arguments only in span events), read as
    the live export is."""
    spans = recorded_spans(RECORDING)
    assert [span["name"] for span in spans] == ([
        "chat", "execute_tool add", "execute_agent_loop_cycle"] * 3 + [
        "chat", "execute_agent_loop_cycle", "invoke_agent adder"]) * 2
    assert len({span["traceId"] for span in spans}) == 2
    attributes = [{item["key"]: item["value"] for item in span["attributes"]} for span in spans]
    assert {attribute.get("gen_ai.system", {}).get("stringValue") for attribute in attributes} \
        == {"strands-agents", None}  # (a cycle's span has no GenAI attribute)
    assert [[event["name"] for event in span.get("events", [])] for span in spans][:2] == [
        ["gen_ai.system.message", "gen_ai.user.message", "gen_ai.choice"],
        ["gen_ai.tool.message", "gen_ai.choice"]]
    replay(watching, RECORDING)
    check_watched(watching, set())


@pytest.mark.parametrize("live", [True, False], ids=["live", "recorded"])
def test_a_tool_that_throws_is_an_error_in_its_spans(
        watching: RunningServer, llm: FakeLLM, tmp_path: Path, live: bool) -> None:  # noqa: F811
    """Its ``execute_tool`` span of a tool that threw ends ERROR with an ``exception`` event
    (``gen_ai.tool.status`` ``error``): each run's failed call, its error the exception's."""
    if live:
        record = os.environ.get("RECORD_SPANS")
        if record:
            THREW.unlink(missing_ok=True)
        it = traced(watching, llm, tmp_path, THREW if record else None, script=failing)
        assert results(it) == [{"output": SORRY, "error": ""}] * 2
    else:
        spans = recorded_spans(THREW)
        [tool, _] = [span for span in spans if span["name"] == "execute_tool add"]
        assert tool["status"] == {"code": 2, "message": "cannot add to -1"}, tool
        assert [event["name"] for event in tool["events"]] == [
            "gen_ai.tool.message", "gen_ai.choice", "exception"]
        replay(watching, THREW)
    runs = new_runs(watching, set(), lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"],
             run["signals"]["errors"]) for run in runs] == [
        (2, 1, "completed", SORRY, 1)] * 2, runs
    assert all("cannot add to -1" in run["signals"]["last_error"] for run in runs), runs


@pytest.mark.parametrize("live", [True, False], ids=["live", "recorded"])
def test_its_own_turn_limit_is_the_runs_limit(
        watching: RunningServer, llm: FakeLLM, tmp_path: Path, live: bool) -> None:  # noqa: F811
    """``limits: { turns: 2 }``: its ``invoke_agent`` span's ``gen_ai.choice`` says
    ``finish_reason`` ``limitTurns`` (Strands for Python's ``limit_turns``, camelCase), no
    text: the run stopped at its limit, ``tool_limit_reached``, as Python's (before, it read
    ``no_response``)."""
    if live:
        record = os.environ.get("RECORD_SPANS")
        if record:
            LIMITED.unlink(missing_ok=True)
        it = traced(watching, llm, tmp_path, LIMITED if record else None, script=sums,
                    tasks=("Add 100 to 0, 1, 2.",), turns=2)
        assert it.outcomes == [{"output": "", "stop": "limitTurns", "error": ""}]
    else:
        [agent] = [span for span in recorded_spans(LIMITED)
                   if span["name"] == "invoke_agent adder"]
        [choice] = [event for event in agent["events"] if event["name"] == "gen_ai.choice"]
        assert {item["key"]: item["value"]["stringValue"] for item in choice["attributes"]} \
            == {"message": "", "finish_reason": "limitTurns"}
        replay(watching, LIMITED)
    [run] = new_runs(watching, set(), lambda runs: runs[0]["state"] == "ended")
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        2, 2, "tool_limit_reached"), run

