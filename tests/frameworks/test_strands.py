"""strands-agents with its native OpenTelemetry tracing (OpenAI model provider), in its default
span format and in the newer GenAI one (``OTEL_SEMCONV_STABILITY_OPT_IN=
gen_ai_latest_experimental``).

What Strands emits (details: the recordings and the findings): one trace per invocation,
``invoke_agent <name>`` > ``execute_event_loop_cycle`` > ``chat`` + ``execute_tool <tool>``.
Default format: answers, finish reasons and tool arguments/results only in span events
(``gen_ai.choice``, ``gen_ai.tool.message``). Latest format: ``gen_ai.input.messages`` /
``gen_ai.output.messages`` (with ``finish_reason``) and ``gen_ai.tool.call.arguments|result``
attributes. ``limits={"turns": 3}`` stops the loop without an exception: the agent span's
answer is empty with finish reason ``limit_turns``.

The expectations are DESIGN §3's (one run per invocation, iterations = model calls, tool calls,
errors once, terminal state and reason, ``has_final_answer``, the agent's name). Each case runs
live and from its committed recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.frameworks.scenarios import scripted
from tests.harness import RunningServer

AGENT = "strands-researcher"
EXPECTED: dict[str, list[Expect]] = {
    "three_tools": [Expect(agent=AGENT, iterations=4, tool_calls=3, errors=0,
                           terminal_state="completed", has_final_answer=True,
                           terminal_reason=None, parent_agent=None)],
    # limits={"turns": 3}: three cycles of model call + tool call, then Strands stops with
    # stop_reason "limit_turns" and no answer (and no exception).
    "limit": [Expect(agent=AGENT, iterations=3, tool_calls=3, errors=0,
                     terminal_state="tool_limit_reached", terminal_reason="limit_turns",
                     has_final_answer=False, parent_agent=None)],
    # The tool span ends with status ERROR and an exception event; the model then answers.
    "tool_error": [Expect(agent=AGENT, iterations=2, tool_calls=1, errors=1,
                          terminal_state="completed", has_final_answer=True,
                          terminal_reason=None, parent_agent=None)],
}
CASES = [(driver, scenario) for driver in ("strands_default", "strands_latest")
         for scenario in EXPECTED]
IDS = [f"{driver}-{scenario}" for driver, scenario in CASES]


@pytest.mark.parametrize(("driver", "scenario"), CASES, ids=IDS)
def test_live(sidecar: RunningServer, llm: FakeLLM, driver: str, scenario: str) -> None:
    model = scripted(llm, driver, scenario)
    run_driver("strands", driver, scenario, sidecar, llm, model)
    check_runs(sidecar, EXPECTED[scenario])
    if scenario == "limit":
        assert len(llm.requests(model)) == 3  # the framework's own cap stopped the loop


@pytest.mark.parametrize(("driver", "scenario"), CASES, ids=IDS)
def test_replay(sidecar: RunningServer, driver: str, scenario: str) -> None:
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])
