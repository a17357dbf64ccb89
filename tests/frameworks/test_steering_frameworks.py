"""Steering at the decision point in frameworks that live in their own venvs (DESIGN §8):
LangChain (middleware), smolagents (its model and tools) and hermes-agent (its request builder
and its ``pre_tool_call`` hook). Each driver runs a real agent of its
framework against the scripted model server, with the client SDK imported from this repository
(``PYTHONPATH``: it needs only the OpenTelemetry SDK and the standard library), exporting real
OTLP to a real sidecar; nothing waits for a directive."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import CLIENT_SRC, DRIVERS, run_driver
from tests.frameworks.steering import (
    LATENCIES,
    LATENCY_IDS,
    REPORT,
    check_countdown,
    check_final,
    check_grace,
    cycling,
    failing,
    instructions,
    searching,
)
from tests.harness import (
    RunningServer,
    run_detail,
    running_server,
    sidecar_config,
    wait_until,
)

FRAMEWORKS = [("steering_langchain", "steering_langchain"),
              ("smolagents", "steering_smolagents"), ("hermes", "steering_hermes")]


def drive(sidecar: RunningServer, llm: FakeLLM, framework: tuple[str, str], scenario: str,
          model: str, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    env, driver = framework
    result = run_driver(env, driver, scenario, sidecar, llm, model,
                        extra_env={"PYTHONPATH": f"{DRIVERS}:{CLIENT_SRC}",
                                   "OTEL_BSP_SCHEDULE_DELAY": "200", **(extra_env or {})})
    # (smolagents' streamed output is drawn on stdout too, the result line can follow it on
    # the same line)
    line = [text[text.index('{"run_id"'):] for text in result.stdout.splitlines()
            if '{"run_id"' in text][-1]
    outcome: dict[str, Any] = json.loads(line)
    outcome["stderr"] = result.stderr
    return outcome


def ended(sidecar: RunningServer, run_id: str) -> dict[str, Any]:
    detail: dict[str, Any] = wait_until(
        lambda: (d := run_detail(sidecar.api, run_id)) and d["state"] == "ended" and d,
        what=f"run {run_id} to end")
    return detail


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
@pytest.mark.parametrize("framework", FRAMEWORKS, ids=[f[0] for f in FRAMEWORKS])
def test_budget_countdown_cap_and_report(sidecar: RunningServer, llm: FakeLLM,
                                         framework: tuple[str, str], latency: float) -> None:
    model = llm.script(f"{framework[0]}-budget-{latency}", searching(), delay=latency)
    outcome = drive(sidecar, llm, framework, "budget", model)
    requests = llm.requests(model)
    assert len(outcome["ran"]) == 10 and len(requests) == 11
    # no warning (a deprecated call of the framework's) and no traceback from the adapter
    assert "agent_watchdog_client/" not in outcome["stderr"], outcome["stderr"][-2000:]
    check_countdown(requests, lambda index: index, 10)
    check_final(requests)
    assert outcome["output"] == REPORT and outcome["report"] == REPORT
    detail = ended(sidecar, outcome["run_id"])
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["has_final_answer"] is True


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
@pytest.mark.parametrize("framework", FRAMEWORKS, ids=[f[0] for f in FRAMEWORKS])
def test_tool_cycle_wind_down_before_the_next_tool_call(
        sidecar: RunningServer, llm: FakeLLM, framework: tuple[str, str], latency: float) -> None:
    model = llm.script(f"{framework[0]}-cycle-{latency}", cycling(), delay=latency)
    outcome = drive(sidecar, llm, framework, "cycle", model)
    check_grace(llm.requests(model), len(outcome["ran"]))
    assert outcome["output"] == REPORT
    detail = ended(sidecar, outcome["run_id"])
    assert detail["terminal_state"] == "loop_detected"
    assert detail["has_final_answer"] is True


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
@pytest.mark.parametrize("framework", FRAMEWORKS, ids=[f[0] for f in FRAMEWORKS])
def test_error_loop_abort_before_the_next_tool_call(
        sidecar: RunningServer, llm: FakeLLM, framework: tuple[str, str], latency: float) -> None:
    """smolagents and Hermes (agento11y) end the failing tool's span as an error; LangChain's
    tool hands its error to the model (a ToolMessage with status "error") and its span ends OK:
    the result says it."""
    model = llm.script(f"{framework[0]}-errors-{latency}", failing(), delay=latency)
    outcome = drive(sidecar, llm, framework, "errors", model)
    requests = llm.requests(model)
    assert len(outcome["ran"]) == 5 and len(requests) == 6
    check_final(requests)
    assert "Error loop: the same error 5 times" in instructions(requests[-1])
    assert outcome["output"] == REPORT
    detail = ended(sidecar, outcome["run_id"])
    assert detail["terminal_state"] == "loop_detected"
    assert detail["has_final_answer"] is True
    # the error's text, as the framework gave it, is the run's last error and the report's one
    # distinct error (with ids, numbers and paths masked)
    assert detail["errors"] == 5
    assert "connection refused: http://backend/data" in detail["signals"]["last_error"]
    report = sidecar.get_json(f"/v1/runs/{outcome['run_id']}/report",
                              {"Accept": "application/json"})
    assert [(e["count"], e["names"]) for e in report["errors"]] == [(5, ["fetch"])]
    assert "connection refused: http://backend/data" in report["errors"][0]["error"]


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=[f[0] for f in FRAMEWORKS])
def test_sidecar_killed_mid_run_keeps_the_local_cap(llm: FakeLLM, tmp_path: Path,
                                                    framework: tuple[str, str]) -> None:
    """The sidecar dies at the agent's 5th model request: the agent goes on with its own count
    — the same countdown, no tool past the budget, the report — and says so once. (The OTLP
    exporter's retries to the dead sidecar are bounded by 2 s instead of its default 10 s: the
    driver's exit waits for them.)"""
    stack = ExitStack()
    sidecar = stack.enter_context(running_server(sidecar_config(tmp_path / "state")))
    model = llm.script(f"{framework[0]}-killed", searching(), delay=0.02,
                       on_request=lambda index: index == 4 and stack.close())
    outcome = drive(sidecar, llm, framework, "budget", model,
                    extra_env={"OTEL_EXPORTER_OTLP_TIMEOUT": "2"})
    requests = llm.requests(model)
    assert len(outcome["ran"]) == 10 and len(requests) == 11
    check_countdown(requests, lambda index: index, 10)
    check_final(requests)
    assert outcome["output"] == REPORT and outcome["report"] == REPORT
    assert outcome["stderr"].count("sidecar unreachable") == 1, outcome["stderr"]


def test_smolagents_streamed_outputs_are_steered_too(sidecar: RunningServer,
                                                      llm: FakeLLM) -> None:
    """``stream_outputs=True``: smolagents asks the model through ``generate_stream``, which is
    steered as ``generate`` is — the countdown, the final request without tools (streamed),
    its report as the answer — not left to the tool cap alone."""
    model = llm.script("smolagents-streamed", searching())
    outcome = drive(sidecar, llm, ("smolagents", "steering_smolagents"), "budget", model,
                    extra_env={"SMOLAGENTS_STREAM_OUTPUTS": "1"})
    requests = llm.requests(model)
    assert all(body.get("stream") for body in requests)
    assert len(outcome["ran"]) == 10 and len(requests) == 11
    check_countdown(requests, lambda index: index, 10)
    check_final(requests)
    assert outcome["output"] == REPORT and outcome["report"] == REPORT
    detail = ended(sidecar, outcome["run_id"])
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["has_final_answer"] is True
