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

With Strands' redaction on for every sensitive attribute (``*_nocontent``: the token
``gen_ai_unredacted_attributes=`` in ``OTEL_SEMCONV_STABILITY_OPT_IN``) messages, answers, tool
arguments and results are ``[REDACTED]``. The watchdog took the placeholder for every tool's
arguments (three identical calls: repeats) and, in the latest format, for the agent's answer (a
run stopped at ``limit_turns`` read ``completed``): a hidden tool argument or result, or agent
output, is no content now; a hidden model output says the model said something (the answer,
unless a tool call follows). The default format keeps its finish reasons in ``gen_ai.choice``
events, unredacted: its runs read as with content. Known gap (not tested as if right): in the
latest format the finish reasons are only inside ``gen_ai.output.messages``, redacted whole, so
no span says a run stopped at its limit: a run stopped by ``limits`` reads unanswered but not
``tool_limit_reached`` (``test_redacted_latest_format_*`` pins the cause).

The expectations are DESIGN §3's (one run per invocation, iterations = model calls, tool calls,
errors once, terminal state and reason, ``has_final_answer``, the agent's name). Each case runs
live and from its committed recording.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    RECORDINGS,
    UNCHECKED,
    Expect,
    check_runs,
    recorded_spans,
    replay,
    run_driver,
)
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
# Strands' redaction of every sensitive attribute (see ``drivers/_strands.py``): the default
# format reads the same; the latest format says nothing of a limit (the known gap): a capped run
# reads unanswered, its state not checked
EXPECTED_LATEST = {"limit_nocontent": [replace(expect, terminal_state=UNCHECKED,
                                               terminal_reason=UNCHECKED)
                                       for expect in EXPECTED["limit"]]}
EXPECTED.update({f"{scenario}_nocontent": expected for scenario, expected in EXPECTED.items()})
CASES = [(driver, scenario) for driver in ("strands_default", "strands_latest")
         for scenario in EXPECTED]


def expected(driver: str, scenario: str) -> list[Expect]:
    if driver == "strands_latest" and scenario in EXPECTED_LATEST:
        return EXPECTED_LATEST[scenario]
    return EXPECTED[scenario]
IDS = [f"{driver}-{scenario}" for driver, scenario in CASES]


@pytest.mark.parametrize(("driver", "scenario"), CASES, ids=IDS)
def test_live(sidecar: RunningServer, llm: FakeLLM, driver: str, scenario: str) -> None:
    model = scripted(llm, driver, scenario)
    run_driver("strands", driver, scenario, sidecar, llm, model)
    check_runs(sidecar, expected(driver, scenario))
    if scenario.startswith("limit"):
        assert len(llm.requests(model)) == 3  # the framework's own cap stopped the loop


@pytest.mark.parametrize(("driver", "scenario"), CASES, ids=IDS)
def test_replay(sidecar: RunningServer, driver: str, scenario: str) -> None:
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl")
    check_runs(sidecar, expected(driver, scenario))


def test_redacted_latest_format_says_nothing_of_the_limit() -> None:
    """Why a redacted run in the latest format stopped by its limit does not read
    ``tool_limit_reached``: its model calls carry no finish reason (``limit_turns`` was inside
    ``gen_ai.output.messages``), and every message, answer and tool argument is the placeholder
    ``[REDACTED]``."""
    spans = recorded_spans(RECORDINGS / "strands_latest" / "limit_nocontent.jsonl")
    contents = {next(iter(item["value"].values())) for span in spans
                for item in [*span.get("attributes", ()),
                             *(a for event in span.get("events", ()) for a in event["attributes"])]
                if item["key"] in ("gen_ai.input.messages", "gen_ai.output.messages",
                                   "gen_ai.tool.call.arguments", "gen_ai.tool.call.result")}
    assert contents == {"[REDACTED]"}
    chats = [span for span in spans if span["name"] == "chat"]
    assert len(chats) == 3
    assert not any("finish" in item["key"] for span in chats
                   for item in span.get("attributes", ()))
