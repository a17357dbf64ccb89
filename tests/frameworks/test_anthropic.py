"""A home-grown tool loop on the Anthropic client (Messages API, ``tool_use`` / ``tool_result``
content blocks), traced by OpenLLMetry's opentelemetry-instrumentation-anthropic: one
``anthropic.chat`` span per model call, each its own trace, no span for the invocation and none
for the tools (the loop runs them itself). The calls are grouped into one run per invocation.

The Anthropic SDK (2.x) traces its API calls itself too, by default, once a tracer provider is
set: each model call is also an ``anthropic.messages.create`` span (scope
``com.anthropic.sdk.python``, ``gen_ai.operation.name`` ``chat``, the same
``gen_ai.response.id``), a trace of its own, not around nor inside OpenLLMetry's. The two spans
of one call are paired by that id and count as one model call (they counted twice).

``anthropic_oi``: the same loop traced by OpenInference (openinference-instrumentation-anthropic):
one ``messages.create`` LLM span per call (``llm.finish_reason`` ``tool_use`` / ``end_turn``),
the SDK's own span inside it (a twin, as a framework's span around its client library's). Sent
span by span, the SDK's span comes first and opens a run of its trace; OpenInference's span, the
loose root, folds that run into its agent's run of loose calls.

``anthropic_sdk``: the same loop with no instrumentation, the SDK's own spans all there is; its
stop reason (``anthropic.message.stop_reason``) tells an answer from a tool request. With
OpenLLMetry's span too, the SDK's span of the answer ends the run; OpenLLMetry's of the same
call, after it, is its twin, not the first call of a next run."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import test_openai_v2, test_pydantic_ai
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    RECORDINGS,
    Expect,
    check_runs,
    replay,
    run_driver,
)
from tests.harness import RunningServer, running_server, sidecar_config

AGENT = "anthropic-loop"  # no agent name on these spans: the service name is all there is
AGENT_OI = "anthropic-loop-oi"  # the same loop traced by OpenInference
AGENT_SDK = "anthropic-sdk"  # ... by the SDK's own spans only
# The loop and its scripts are the OpenAI v2 loop's (test_openai_v2), on the Messages API; so
# are the readings (the tool's failure is only a tool_result block in the next request: not a
# span, not an error here), for the agent of each driver (_expected).
SCENARIOS = ("three_tools", "limit", "tool_error")
SCRIPTS = {scenario: test_openai_v2.SCRIPTS[scenario] for scenario in SCENARIOS}
EXPECTED = {scenario: [dataclasses.replace(expect, agent=AGENT)
                       for expect in test_openai_v2.EXPECTED[scenario]] for scenario in SCENARIOS}


# driver -> (its venv, the service name it exports as: the run's agent)
DRIVERS = {"anthropic_loop": ("anthropic", AGENT), "anthropic_oi": ("anthropic_oi", AGENT_OI),
           "anthropic_sdk": ("anthropic", AGENT_SDK)}
CASES = [(driver, scenario) for driver in DRIVERS for scenario in EXPECTED]


def _expected(driver: str, scenario: str) -> list[Expect]:
    agent = DRIVERS[driver][1]
    return [dataclasses.replace(expect, agent=agent) for expect in EXPECTED[scenario]]


@pytest.mark.parametrize(("driver", "scenario"), CASES)
def test_live(sidecar: RunningServer, llm: FakeLLM, driver: str, scenario: str) -> None:
    model = llm.script(f"{driver}-{scenario}", SCRIPTS[scenario])
    run_driver(DRIVERS[driver][0], driver, scenario, sidecar, llm, model)
    check_runs(sidecar, _expected(driver, scenario))


# A recording holds one export request per span, as each ended (OpenInference's span of a call
# after the SDK's span inside it, in a request of its own); a batch exporter (as live) sends a
# call's two spans together: both are replayed.
@pytest.mark.parametrize("per_trace", [False, True], ids=["as_recorded", "a_request_per_trace"])
@pytest.mark.parametrize(("driver", "scenario"), CASES)
def test_recorded(sidecar: RunningServer, tmp_path: Path, driver: str, scenario: str,
                  per_trace: bool) -> None:
    recording = RECORDINGS / driver / f"{scenario}.jsonl"
    if per_trace:
        recording = _regrouped(recording, tmp_path, lambda span, scope: span["traceId"])
    replay(sidecar, recording)
    check_runs(sidecar, _expected(driver, scenario))


def _regrouped(recording: Path, tmp_path: Path, request_of: Callable[[dict[str, Any], str], str]
               ) -> Path:
    """The recording's spans sent again in other export requests: one per value of
    ``request_of(span, scope name)``, in order of first appearance, each grouped by scope as an
    SDK exporter groups a batch."""
    requests = [json.loads(line) for line in recording.read_text(encoding="utf-8").splitlines()
                if line.strip()]
    resource = requests[0]["resourceSpans"][0]["resource"]
    batches: dict[str, dict[str, dict[str, Any]]] = {}
    for request in requests:
        for resource_spans in request["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                scope = scope_spans["scope"]
                for span in scope_spans["spans"]:
                    batch = batches.setdefault(request_of(span, scope["name"]), {})
                    batch.setdefault(scope["name"], {"scope": scope, "spans": []})[
                        "spans"].append(span)
    out = tmp_path / recording.name
    out.write_text("".join(json.dumps({"resourceSpans": [
        {"resource": resource, "scopeSpans": list(batch.values())}]}) + "\n"
        for batch in batches.values()), encoding="utf-8")
    return out


def test_recorded_in_one_batch(sidecar: RunningServer, tmp_path: Path) -> None:
    """The whole OpenLLMetry run in one export request, grouped by scope as an SDK batch is:
    every span of the SDK's before every span of OpenLLMetry's. Each call's two spans are still
    paired by their response id: four model calls, not eight."""
    recording = RECORDINGS / "anthropic_loop" / "three_tools.jsonl"
    scopes: set[str] = set()

    def one(span: dict[str, Any], scope: str) -> str:
        scopes.add(scope)
        return ""

    replay(sidecar, _regrouped(recording, tmp_path, one))
    assert scopes == {"com.anthropic.sdk.python", "opentelemetry.instrumentation.anthropic"}
    check_runs(sidecar, EXPECTED["three_tools"])


def test_openinference_span_by_span_is_one_run_and_stays_one_after_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Span by span, each request stored before the next: the run each SDK span opened (its
    root not yet come) is folded into the agent's run when its root comes, and its stored row
    goes with it, so a restarted sidecar has the one run too, not runs left to be abandoned."""
    config = sidecar_config(tmp_path / "state", loose_run_gap=1.0, eval_interval=0.2)
    caplog.set_level(logging.INFO, logger="watchdog.decisions")
    with running_server(config) as first:
        replay(first, RECORDINGS / "anthropic_oi" / "three_tools.jsonl", after_each=first.flush)
        (run,) = check_runs(first, _expected("anthropic_oi", "three_tools"))
    merged = [record for record in caplog.records if record.getMessage().startswith("run_merged")]
    # (the first call's inner span opened the run all four calls are in; each later one's, a
    # run of its own, folded in)
    assert len(merged) == 3 and all(f"into={run['id']}" in record.getMessage()
                                    for record in merged), [r.getMessage() for r in merged]
    with running_server(config) as second:
        runs = second.get_json("/v1/runs?limit=1000")["runs"]
        assert [(run["agent"], run["state"], run["terminal_state"]) for run in runs] == [
            (AGENT_OI, "ended", "completed")], runs


def one_response_id(spans: list[dict[str, Any]]) -> None:
    """A model server that gives every response the same id (a scripted or local one may)."""
    for span in spans:
        for attribute in span.get("attributes", ()):
            if attribute["key"] == "gen_ai.response.id":
                attribute["value"] = {"stringValue": "chatcmpl-1"}


ONE_ID_CASES = [("openai_v2_loop", "three_tools", test_openai_v2.EXPECTED["three_tools"]),
                ("openai_v2_loop", "limit", test_openai_v2.EXPECTED["limit"]),
                ("pydantic_ai_agent", "three_tools", test_pydantic_ai.EXPECTED["three_tools"]),
                ("anthropic_sdk", "three_tools", [dataclasses.replace(
                    EXPECTED["three_tools"][0], agent=AGENT_SDK)])]


@pytest.mark.parametrize(("driver", "scenario", "expected"), ONE_ID_CASES,
                         ids=[f"{driver}-{scenario}" for driver, scenario, _ in ONE_ID_CASES])
def test_one_response_id_for_every_call_is_no_twin(sidecar: RunningServer, driver: str,
                                                   scenario: str, expected: list[Expect]
                                                   ) -> None:
    """Twins by response id are spans of two instrumentations (two scopes): the calls one
    instrumentation traced are as many calls, whatever ids the model server gives them."""
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl", edit=one_response_id)
    check_runs(sidecar, expected)
