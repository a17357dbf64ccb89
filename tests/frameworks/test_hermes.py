"""hermes-agent (NousResearch), its real ``AIAgent.run_conversation`` loop, traced by the
grafana-agento11y-hermes plugin or by opentelemetry-instrumentation-openai-v2, with and without
``agent_watchdog_client.adapters.hermes``.

What Hermes emits (details: the recordings, and the findings in the README table): no span for a
turn; one trace per model call (plugin: ``generateText <model>`` with ``gen_ai.operation.name =
generateText`` and its ``execute_tool`` children; openai-v2: ``chat <model>``, no tool spans);
``max_iterations`` stops the turn and Hermes then asks the model for a summary with a ``user``
message and no tools (the plugin does not trace that request; openai-v2 does).

The expectations are DESIGN §3's: one run per turn, iterations = model calls the spans show,
tool calls, errors counted once, the terminal state and reason (a ``max_iterations`` stop is
``tool_limit_reached``/``max_iterations``, with ``has_final_answer`` when the summary came),
the configured agent name. Each case runs live and from its committed recording.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_watchdog_client.adapters.hermes import limit_of

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    CLIENT_SRC,
    DRIVERS,
    RECORDINGS,
    UNCHECKED,
    Expect,
    check_runs,
    replay,
    run_driver,
)
from tests.frameworks.scenarios import SUMMARY, scripted
from tests.harness import RunningServer, running_server, sidecar_config

AGENT = "hermes-researcher"
SERVICE = "hermes-service"  # openai-v2 spans name no agent: service.name is all there is
# Without the adapter Hermes' model calls are loose (one trace each, no invocation span): such a
# run ends with the call that answered or after `loose_run_gap` without a call (default 2 min).
# The shared framework sidecar waits 1 s; Hermes' live calls (a tool, hooks, a new API thread
# between two calls) can be further apart than that on a busy machine, so these tests wait 8 s.
LOOSE_RUN_GAP = 8.0
LIMIT = {"terminal_state": "tool_limit_reached", "terminal_reason": "max_iterations"}


def ok(iterations: int, tool_calls: int, errors: int = 0, agent: str = AGENT) -> Expect:
    return Expect(agent=agent, iterations=iterations, tool_calls=tool_calls, errors=errors,
                  terminal_state="completed", has_final_answer=True, terminal_reason=None,
                  parent_agent=None)


CASES: dict[tuple[str, str], list[Expect]] = {
    # -- the grafana-agento11y-hermes plugin: `generateText <model>` spans (operation
    # generateText) with their `execute_tool <tool>` children, one trace per model call,
    # gen_ai.agent.name and gen_ai.conversation.id on every span.
    ("hermes_agento11y", "three_tools"): [ok(4, 3)],
    # The plugin traces the 3 model calls and 3 tool calls but not the summary request, and
    # nothing it emits says how the turn ended (turn_exit_reason is on no span): the terminal
    # state cannot be read without the adapter, and no answer is seen.
    ("hermes_agento11y", "limit"): [
        Expect(agent=AGENT, iterations=3, tool_calls=3, errors=0, terminal_state=UNCHECKED,
               has_final_answer=False, parent_agent=None)],
    # Hermes' registry turns the exception into a tool result; the plugin marks that tool span
    # failed (status ERROR, error.type tool_execution_error): one error; the model answers.
    ("hermes_agento11y", "tool_error"): [ok(2, 1, errors=1)],
    # With the adapter: one trace, the adapter's invoke_agent span, Hermes' exit reason on it.
    ("hermes_agento11y", "three_tools_adapter"): [ok(4, 3)],
    ("hermes_agento11y", "limit_adapter"): [
        Expect(agent=AGENT, iterations=3, tool_calls=3, errors=0, has_final_answer=True,
               parent_agent=None, **LIMIT)],
    ("hermes_agento11y", "tool_error_adapter"): [ok(2, 1, errors=1)],
    # -- opentelemetry-instrumentation-openai-v2 (latest GenAI conventions, messages on the
    # span): one `chat <model>` span per model call, each its own trace, no tool spans, no agent
    # name, no conversation id.
    ("hermes_openai_v2", "three_tools"): [ok(4, 0, agent=SERVICE)],
    # The summary request is traced (4 model calls): Hermes' own request text in a user message
    # at the end of gen_ai.input.messages. It marks the max_iterations stop and must not start
    # a new run.
    ("hermes_openai_v2", "limit"): [
        Expect(agent=SERVICE, iterations=4, tool_calls=0, errors=0, has_final_answer=True,
               parent_agent=None, **LIMIT)],
    # No tool span: the failed tool call is only a tool message in the next request.
    ("hermes_openai_v2", "tool_error"): [ok(2, 0, agent=SERVICE)],
    ("hermes_openai_v2", "three_tools_adapter"): [ok(4, 0)],
    ("hermes_openai_v2", "limit_adapter"): [
        Expect(agent=AGENT, iterations=4, tool_calls=0, errors=0, has_final_answer=True,
               parent_agent=None, **LIMIT)],
    ("hermes_openai_v2", "tool_error_adapter"): [ok(2, 0)],
}
IDS = [f"{driver}-{scenario}" for driver, scenario in CASES]


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(sidecar_config(tmp_path / "state", loose_run_gap=LOOSE_RUN_GAP)) as server:
        yield server


def _extra_env(scenario: str) -> dict[str, str]:
    # The adapter scenarios import agent_watchdog_client from this checkout: it needs only the OTel
    # SDK and the standard library, which the hermes venv has.
    return {"PYTHONPATH": f"{DRIVERS}:{CLIENT_SRC}"} if scenario.endswith("_adapter") else {}


# hermes_openai_v2/limit_adapter runs live in test_adapter_marks_the_turn_and_the_summary_request.
LIVE = [case for case in CASES if case != ("hermes_openai_v2", "limit_adapter")]


@pytest.mark.parametrize(("driver", "scenario"), LIVE,
                         ids=[f"{driver}-{scenario}" for driver, scenario in LIVE])
def test_live(sidecar: RunningServer, llm: FakeLLM, driver: str, scenario: str) -> None:
    model = scripted(llm, driver, scenario)
    run_driver("hermes", driver, scenario, sidecar, llm, model, extra_env=_extra_env(scenario))
    check_runs(sidecar, CASES[driver, scenario])
    if scenario.startswith("limit"):
        requests = llm.requests(model)
        assert len(requests) == 4 and not requests[-1].get("tools")  # 3 + the summary


@pytest.mark.parametrize(("driver", "scenario"), list(CASES), ids=IDS)
def test_replay(sidecar: RunningServer, driver: str, scenario: str) -> None:
    recording: Path = RECORDINGS / driver / f"{scenario}.jsonl"
    replay(sidecar, recording)
    check_runs(sidecar, CASES[driver, scenario])


def _spans(recording: Path) -> list[dict[str, Any]]:
    """The spans of an OTLP/JSON recording, attributes as a plain dict."""
    spans = []
    for line in recording.read_text(encoding="utf-8").splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    span["attrs"] = {a["key"]: next(iter(a["value"].values()), None)
                                     for a in span.get("attributes", [])}
                    spans.append(span)
    return spans


def test_adapter_marks_the_turn_and_the_summary_request(sidecar: RunningServer, llm: FakeLLM,
                                                         tmp_path: Path) -> None:
    """The adapter's own work, read from what the real Hermes loop emitted: one trace; the
    turn's invoke_agent span carries Hermes' exit reason, the limit and the summary answer;
    every model call carries the run id; only the summary request is marked as one."""
    driver, scenario = "hermes_openai_v2", "limit_adapter"
    model = scripted(llm, driver, scenario)
    recording = (RECORDINGS / driver / f"{scenario}.jsonl" if os.environ.get("RECORD_SPANS")
                 else tmp_path / "spans.jsonl")
    recording.unlink(missing_ok=True)
    run_driver("hermes", driver, scenario, sidecar, llm, model,
               extra_env={**_extra_env(scenario), "RECORD_SPANS": str(recording)})
    requests = llm.requests(model)
    assert len(requests) == 4 and not requests[-1].get("tools")  # 3 + the summary
    spans = _spans(recording)
    assert len({span["traceId"] for span in spans}) == 1
    turn = [span for span in spans if span["attrs"].get("gen_ai.operation.name") ==
            "invoke_agent"]
    assert len(turn) == 1
    assert turn[0]["attrs"]["hermes.turn_exit_reason"] == "max_iterations_reached(3/3)"
    assert turn[0]["attrs"]["watchdog.limit_reached"] == "max_iterations"
    assert turn[0]["attrs"]["output.value"] == SUMMARY
    chats = sorted((span for span in spans if span["name"].startswith("chat ")),
                   key=lambda span: int(span["startTimeUnixNano"]))
    assert len(chats) == 4
    assert {span["attrs"]["watchdog.run.id"] for span in chats} == {
        turn[0]["attrs"]["watchdog.run.id"]}
    assert [span["attrs"].get("hermes.summary_request") for span in chats] == [
        None, None, None, True]
    check_runs(sidecar, CASES[driver, scenario])


@pytest.mark.parametrize(("reason", "limit"), [
    ("max_iterations_reached(3/3)", "max_iterations"), ("budget_exhausted", "max_iterations"),
    ("text_response(finish_reason=stop)", None), ("interrupted_by_user", None), (None, None)])
def test_limit_of_exit_reason(reason: str | None, limit: str | None) -> None:
    assert limit_of(reason) == limit
