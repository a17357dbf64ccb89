"""google-adk (LiteLlm to the fake server) with its native OpenTelemetry tracing, and with
openinference-instrumentation-google-adk on top.

What ADK emits (details: the recordings and the findings): one trace per invocation,
``invoke_workflow <agent>`` > ``invoke_agent <agent>`` > ``generate_content <model>`` +
``execute_tool <tool>``; every ``generate_content`` says ``finish_reasons = ["stop"]``, tool calls
included. ``RunConfig(max_llm_calls=3)`` raises ``LlmCallsLimitExceededError`` before the 4th
model call; it is recorded on both the workflow and the agent span. A tool that raises ends the
invocation: the exception is on the tool span and on every span above it. OpenInference adds an
``invocation [app]`` CHAIN root and an ``agent_run [agent]`` AGENT span, and re-labels ADK's
spans with its own attributes.

Message content capture off (scenarios ``*_nocontent``; the switches in ``drivers/_adk.py``):
ADK's native spans are the same as by default — google-adk 2.13's GenAI semconv spans carry no
content unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` routes it to spans — so the
tool calls after each ``finish_reasons = ["stop"]`` still say it was no answer. Under
OpenInference (``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``) every ``input.value``/``output.value``
becomes ``__REDACTED__`` and the flattened messages go, so nothing in a model call says it asked
for tools, and its span stays open while those tools run (each tool ends before the model call
that asked for it). The watchdog read each model call as an answer (a capped run had
``has_final_answer``) and the placeholder as every tool's arguments (three identical calls):
now a placeholder is read as no content at all, and a tool that ran inside a model call's span
was asked for by it.

The expectations are DESIGN §3's: one run per invocation (the workflow span of a single agent
is the same invocation, not a parent run), iterations = model calls, tool calls, an error
counted once however many spans carry it, terminal state and reason, ``has_final_answer``, the
agent's name. Each case runs live and from its committed recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.frameworks.scenarios import scripted
from tests.harness import RunningServer

AGENT = "adk_researcher"
ENVS = {"google_adk_native": "google_adk", "google_adk_openinference": "google_adk_oi"}
EXPECTED: dict[str, list[Expect]] = {
    "three_tools": [Expect(agent=AGENT, iterations=4, tool_calls=3, errors=0,
                           terminal_state="completed", has_final_answer=True,
                           terminal_reason=None, parent_agent=None)],
    # max_llm_calls=3: three model calls and three tool calls, then LlmCallsLimitExceededError
    # (no answer; the limit is not a failed call, so no error).
    "limit": [Expect(agent=AGENT, iterations=3, tool_calls=3, errors=0,
                     terminal_state="tool_limit_reached",
                     terminal_reason="LlmCallsLimitExceededError", has_final_answer=False,
                     parent_agent=None)],
    # The tool's RuntimeError ends the invocation: one failed tool call, one error.
    "tool_error": [Expect(agent=AGENT, iterations=1, tool_calls=1, errors=1,
                          terminal_state="error", terminal_reason="RuntimeError",
                          has_final_answer=False, parent_agent=None)],
}
# Message content capture off (see ``drivers/_adk.py``): the same runs, read the same way.
EXPECTED.update({f"{scenario}_nocontent": expected for scenario, expected in EXPECTED.items()})
CASES = [(driver, scenario) for driver in ("google_adk_native", "google_adk_openinference")
         for scenario in EXPECTED]
IDS = [f"{driver}-{scenario}" for driver, scenario in CASES]


@pytest.mark.parametrize(("driver", "scenario"), CASES, ids=IDS)
def test_live(sidecar: RunningServer, llm: FakeLLM, driver: str, scenario: str) -> None:
    model = scripted(llm, driver, scenario)
    run_driver(ENVS[driver], driver, scenario, sidecar, llm, model)
    check_runs(sidecar, EXPECTED[scenario])
    if scenario.startswith("limit"):
        assert len(llm.requests(model)) == 3  # the framework's own limit stopped the loop


@pytest.mark.parametrize(("driver", "scenario"), CASES, ids=IDS)
def test_replay(sidecar: RunningServer, driver: str, scenario: str) -> None:
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])
