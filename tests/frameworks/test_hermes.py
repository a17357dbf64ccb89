"""hermes-agent (NousResearch), its real ``AIAgent.run_conversation`` loop, traced by the
grafana-agento11y-hermes plugin or by opentelemetry-instrumentation-openai-v2, with and without
``watchdog.client.adapters.hermes``.

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

from pathlib import Path

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, RECORDINGS, ROOT, Expect, check_runs, replay, \
    run_driver
from tests.frameworks.scenarios import scripted
from tests.harness import RunningServer

AGENT = "hermes-researcher"
LIMIT = {"terminal_state": "tool_limit_reached", "terminal_reason": "max_iterations"}


def ok(iterations: int, tool_calls: int) -> Expect:
    return Expect(agent=AGENT, iterations=iterations, tool_calls=tool_calls, errors=0,
                  terminal_state="completed", has_final_answer=True, parent_agent=None)


CASES: dict[tuple[str, str], list[Expect]] = {
    # -- the grafana-agento11y-hermes plugin: generateText + execute_tool spans, one trace per
    # model call, gen_ai.agent.name and gen_ai.conversation.id on every span.
    ("hermes_agento11y", "three_tools"): [ok(4, 3)],
    # The plugin traces the 3 model calls and 3 tool calls but not the summary request, and
    # nothing it emits says a limit stopped the turn: without the adapter the turn can only
    # come out as ended with no answer.
    ("hermes_agento11y", "limit"): [
        Expect(agent=AGENT, iterations=3, tool_calls=3, errors=0, terminal_state="no_response",
               has_final_answer=False, parent_agent=None)],
    # Hermes' registry turns the exception into a tool result; the plugin marks that tool span
    # failed: one error, and the model then answers.
    ("hermes_agento11y", "tool_error"): [
        Expect(agent=AGENT, iterations=2, tool_calls=1, errors=1, terminal_state="completed",
               has_final_answer=True, parent_agent=None)],
    ("hermes_agento11y", "three_tools_adapter"): [ok(4, 3)],
    ("hermes_agento11y", "limit_adapter"): [
        Expect(agent=AGENT, iterations=3, tool_calls=3, errors=0, has_final_answer=True,
               parent_agent=None, **LIMIT)],
    ("hermes_agento11y", "tool_error_adapter"): [
        Expect(agent=AGENT, iterations=2, tool_calls=1, errors=1, terminal_state="completed",
               has_final_answer=True, parent_agent=None)],
    # -- opentelemetry-instrumentation-openai-v2: one `chat` span per model call, each its own
    # trace, no tool spans, the agent name only as service.name.
    ("hermes_openai_v2", "three_tools"): [ok(4, 0)],
    # The summary request is traced (4 model calls); it is Hermes' own request text in a user
    # message, which marks the max_iterations stop and must not start a new run.
    ("hermes_openai_v2", "limit"): [
        Expect(agent=AGENT, iterations=4, tool_calls=0, errors=0, has_final_answer=True,
               parent_agent=None, **LIMIT)],
    # No tool span: the failed tool call is not visible as a call.
    ("hermes_openai_v2", "tool_error"): [ok(2, 0)],
    ("hermes_openai_v2", "three_tools_adapter"): [ok(4, 0)],
    ("hermes_openai_v2", "limit_adapter"): [
        Expect(agent=AGENT, iterations=4, tool_calls=0, errors=0, has_final_answer=True,
               parent_agent=None, **LIMIT)],
    ("hermes_openai_v2", "tool_error_adapter"): [ok(2, 0)],
}
IDS = [f"{driver}-{scenario}" for driver, scenario in CASES]


def _extra_env(scenario: str) -> dict[str, str]:
    # The adapter scenarios import watchdog.client from this checkout: it needs only the OTel
    # SDK and the standard library, which the hermes venv has.
    return {"PYTHONPATH": f"{DRIVERS}:{ROOT}"} if scenario.endswith("_adapter") else {}


@pytest.mark.parametrize(("driver", "scenario"), list(CASES), ids=IDS)
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
