"""Haystack agents (haystack-ai 3.x ``haystack.components.agents.Agent``, a ``@tool``
function, ``OpenAIChatGenerator`` on the fake server), in venv ``.venvs/haystack``, traced the
two ways Haystack users trace with OpenTelemetry: Haystack's own tracer (driver
``haystack_native``) and OpenInference (``haystack_oi``).

Haystack's own tracer (haystack-ai 3.x moved ``OpenTelemetryTracer`` out of the core into the
``opentelemetry-haystack`` integration, ``haystack_integrations.tracing.opentelemetry``; 2.x
had it as ``haystack.tracing.OpenTelemetryTracer``, enabled automatically): one trace per
``agent.run``, the root ``haystack.agent.run`` (``haystack.agent.max_steps``,
``haystack.agent.steps_taken``; with ``HAYSTACK_CONTENT_TRACING_ENABLED=true`` also
``haystack.agent.input``/``haystack.agent.output``, the output the agent's whole result as
JSON: ``messages``, ``exit_reason``, ``step_count``, ``token_usage``) > ``haystack.agent.step``
per step > ``haystack.agent.step.llm`` (content only: ``haystack.agent.step.llm.output`` =
``{"replies": [ChatMessage as JSON: meta.finish_reason, meta.usage, content parts {"text"} or
{"tool_call"}]}``; the input is a Python repr) and ``haystack.agent.step.tool`` per tool call
(``haystack.tool.name``; content ``haystack.agent.step.tool.input``/``.output``). No
convention named any of these: the watchdog saw no model call, no tool call and no agent span
(each trace a run of nothing). In a ``Pipeline`` the root is ``haystack.pipeline.run`` >
``haystack.component.run`` (``haystack.component.name``/``type``) per component, the agent's
``haystack.agent.run`` inside its component span (both read as plumbing: a pipeline without an
Agent is no run; an Agent's span is its run wherever it hangs).

A tool's exception: by default (``raise_on_tool_invocation_failure=False``) Haystack hands
the error text to the model; the tool span ends OK with ``haystack.tool.error`` = true and its
output ``{"error": "..."}``. With ``raise_on_tool_invocation_failure=True`` the step and agent
spans end ERROR (``ToolInvocationError``; the tool span still ends OK, flagged).
``max_agent_steps`` raises nothing and asks the model for no answer: the loop ends after the
cap's step ran its tools, the agent span's ``steps_taken`` = ``max_steps``, its output's
``exit_reason`` = ``"max_agent_steps"`` (content tracing only). Streaming
(``streaming_callback``) changes no span (its replies have ``usage`` null: no token counts).

The watchdog now reads them as a convention of their own (``HAYSTACK`` in
``watchdog/core/spans/frameworks.py``): the span names give the roles, the replies' JSON the
finish reasons and usage, ``haystack.tool.error`` a failure handed to the model, the exit
reason (or, without content tracing, ``steps_taken`` ≥ ``max_steps``) the cap.

Known gaps (not tested as if right): without content tracing (Haystack's default) the model
calls carry nothing (no output, finish reason or usage): every run reads as unanswered
(``no_response``; ``test_nocontent_*`` pins the cause), and the cap is read from
``steps_taken`` = ``max_steps`` alone, so a model that answers in the cap's last step reads as
stopped by it (with content tracing, ``answer_at_cap``, the exit reason says it was not). No
span names the agent (in a pipeline only its component span, ``haystack.component.name``): the
agent is ``service.name``.
The model calls' input is a Python repr: the conversation length is not counted.

OpenInference (openinference-instrumentation-haystack 0.1.x) traces component ``run`` methods:
the Agent is a CHAIN ``Agent.run`` (the root, or below ``Pipeline.run``), each model call an LLM
span ``OpenAIChatGenerator.run`` (no finish reason; the flattened output messages say whether it
asked for tools; its ``output.value`` is a Python repr). The CHAIN's ``output.value`` is the
Agent's whole result as JSON of reprs, ``exit_reason`` included: the cap is read from it.
The watchdog took every model call for an answer (nothing it read said "tool request") and
the CHAIN's output for the run's answer, so a capped run was ``completed``: now a model call
whose flattened output messages carry ``tool_calls`` asked for tools, and a framing span's
output is the answer only if the last model call below it did not ask for tools. Known gap:
it makes no span for the Agent's tools (Haystack 3's Agent calls them itself, not through a
component): the run shows no tool calls and no tool failures (only an exception raised
through the Agent, as its CHAIN's error).

OpenInference wraps the ``run`` of the component classes registered (imported) when
``instrument()`` runs, and of those a ``Pipeline`` runs later: the driver imports Haystack
first, as OpenInference's examples do (a standalone ``agent.run`` whose classes were imported
after ``instrument()`` produced no span at all).
"""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    RECORDINGS,
    UNCHECKED,
    Expect,
    check_recorded,
    drive_and_check,
    recorded_spans,
)
from tests.frameworks.scenarios import ANSWER, script
from tests.harness import RunningServer

ENV = "haystack"
AGENT = "haystack-service"  # the resource's service.name: no span names the agent
SCENARIOS = ("three_tools", "three_tools_stream", "limit", "tool_error", "tool_error_raise",
             "pipeline")
SCRIPTS = {name: {"": script(name.replace("pipeline", "three_tools"))} for name in SCENARIOS}
SCRIPTS.update({
    "limit_nocontent": {"": script("limit")},
    "three_tools_nocontent": {"": script("three_tools")},
    "answer_at_cap": {"": fakellm.tools_then_answer("lookup", [{"key": "a"}, {"key": "b"}],
                                                    ANSWER)},
})
COMPLETED_3 = [Expect(AGENT, 4, 3, 0, "completed", True, None, None)]
NATIVE = {
    "three_tools": COMPLETED_3,
    "three_tools_stream": COMPLETED_3,
    "pipeline": COMPLETED_3,
    # max_agent_steps=3: three model calls, each asking for a tool, three tools run
    "limit": [Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "max_agent_steps", None)],
    # the tool span ends OK, flagged haystack.tool.error; the model is given the error text
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    # raise_on_tool_invocation_failure=True: the agent span ends ERROR
    "tool_error_raise": [Expect(AGENT, 1, 1, 1, "error", False, "ToolInvocationError", None)],
    # content tracing off (Haystack's default): steps_taken = max_steps says it
    "limit_nocontent": [Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "max_agent_steps",
                               None)],
    # the answer came in the cap's last step: the exit reason ("text") says it was no stop
    "answer_at_cap": [Expect(AGENT, 3, 2, 0, "completed", True, None, None)],
}
OI_COMPLETED = [Expect(AGENT, 4, 0, 0, "completed", True, None, None)]
OI = {
    "three_tools": OI_COMPLETED,
    "three_tools_stream": OI_COMPLETED,
    "pipeline": OI_COMPLETED,
    # no tool spans (a known gap); the cap is read from the exit reason in the CHAIN's output
    "limit": [Expect(AGENT, 3, 0, 0, "tool_limit_reached", False, "max_agent_steps", None)],
    "tool_error": [Expect(AGENT, 2, 0, 0, "completed", True, None, None)],
    # the failed tool has no span: only the CHAIN's error (not counted again) says it
    "tool_error_raise": [Expect(AGENT, 1, 0, 0, "error", False, "ToolInvocationError", None)],
}
CASES = [("haystack_native", scenario, expected) for scenario, expected in NATIVE.items()] + \
    [("haystack_oi", scenario, OI[scenario]) for scenario in SCENARIOS]
IDS = [f"{driver}-{scenario}" for driver, scenario, _ in CASES]


@pytest.mark.parametrize(("driver", "scenario", "expected"), CASES, ids=IDS)
def test_live(sidecar: RunningServer, llm: FakeLLM, driver: str, scenario: str,
              expected: list[Expect]) -> None:
    drive_and_check(sidecar, llm, ENV, driver, scenario, SCRIPTS[scenario], expected)
    if scenario.startswith(("limit", "answer_at_cap")):  # Haystack's cap: no last request
        assert len(llm.requests(f"{driver}-{scenario}")) == 3


@pytest.mark.parametrize(("driver", "scenario", "expected"), CASES, ids=IDS)
def test_recorded(sidecar: RunningServer, driver: str, scenario: str,
                  expected: list[Expect]) -> None:
    check_recorded(sidecar, driver, scenario, expected)


def test_nocontent_live(sidecar: RunningServer, llm: FakeLLM) -> None:
    """Content tracing off: the run shows its calls, but nothing says it answered (the known
    gap; the test pins its cause, below, not the outcome)."""
    drive_and_check(sidecar, llm, ENV, "haystack_native", "three_tools_nocontent",
                    SCRIPTS["three_tools_nocontent"],
                    [Expect(AGENT, 4, 3, 0, UNCHECKED, False)])


def test_nocontent_model_calls_carry_nothing() -> None:
    """Why, without content tracing, no Haystack run reads as answered: its model-call spans
    carry no attribute at all, its agent span only the step counts and configuration."""
    spans = recorded_spans(RECORDINGS / "haystack_native" / "three_tools_nocontent.jsonl")
    names = [span["name"] for span in spans]
    assert names.count("haystack.agent.step.llm") == 4
    assert names.count("haystack.agent.step.tool") == 3
    assert all(not span.get("attributes") for span in spans
               if span["name"] == "haystack.agent.step.llm")
    (agent,) = (span for span in spans if span["name"] == "haystack.agent.run")
    keys = {item["key"] for item in agent["attributes"]}
    assert "haystack.agent.output" not in keys
    assert {"haystack.agent.steps_taken", "haystack.agent.max_steps"} <= keys
