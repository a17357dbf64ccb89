"""LlamaIndex agents (llama-index-core 0.14: ``FunctionAgent``, ``AgentWorkflow``) on the
OpenAI-compatible ``OpenAILike`` LLM, traced by OpenInference
(openinference-instrumentation-llama-index), in venv ``.venvs/llamaindex``.

What LlamaIndex emits (details: the recordings): one trace per ``agent.run(...)``, its root a
CHAIN span named after the workflow's class (``FunctionAgent.run``, ``AgentWorkflow.run``) with
the final ``StopEvent`` as ``output.value``; below it, flat, one CHAIN span per workflow step
(``BaseWorkflowAgent.init_run`` / ``setup_agent`` / ``run_agent_step`` / ``parse_agent_output``
/ ``call_tool`` / ``aggregate_tool_results``); a TOOL span ``FunctionTool.acall`` (``tool.name``,
``input.value`` = ``{"kwargs": {...}}``) below ``call_tool``. Every traced method of the LLM
object is an LLM span: ``OpenAILike._prepare_chat_with_tools`` (builds the request; its input
and output recorded, no messages, no finish reason) and ``OpenAILike.astream_chat`` (or
``achat``) twice, one inside the other (the subclass's method around its parent's): only the
inner one carries ``llm.input_messages.*``, ``llm.output_messages.*`` and ``llm.finish_reason``.
The watchdog read each model call three times until model-kind spans with their input recorded
but nothing of a model call (no messages, finish reason or usage) were no longer model calls.

No span names the agent: its name is only in the Python repr of the workflow's events
(``current_agent_name='li_researcher'`` inside ``output.value``), so the run's agent is the
resource's ``service.name``; the root's span name (a class) is not taken for it (it was: the
``<agent>.run`` span-name pattern of smolagents' agent spans read ``FunctionAgent``).

``run(max_iterations=n)`` stops after the n-th model call: by default it raises the generic
``WorkflowRuntimeError("Max iterations of n reached! ...")`` from ``parse_agent_output`` before
the n-th tool request is run (the step and the root end ERROR, the limit only in the message);
with ``early_stopping_method="generate"`` it appends a system message of its own ("You have
reached the maximum number of iterations (n)...") and asks the model once more, without
tools. Both are ``tool_limit_reached`` with reason ``max_iterations``. A tool's exception ends
the TOOL span ERROR; LlamaIndex gives the error text to the model, which answers.
``FunctionAgent`` streams from the model by default; consuming ``handler.stream_events()``
changes no span, ``streaming=False`` makes the model spans ``achat`` (and adds token counts).

Every scenario again with content hidden (``<scenario>_nocontent``: ``OPENINFERENCE_HIDE_INPUTS``/
``_OUTPUTS``/``_INPUT_MESSAGES``/``_OUTPUT_MESSAGES``/``_INPUT_TEXT``/``_OUTPUT_TEXT``): every
``input.value``/``output.value`` is ``__REDACTED__`` (the tool's arguments, the root's
``StopEvent``, the model calls' requests and replies) and ``llm.input_messages.*``/
``llm.output_messages.*``/``llm.tools.*`` are dropped. What remains: the span kinds and names,
``tool.name``, the inner model span's ``llm.finish_reason``, the invocation parameters, the
statuses (the ``force`` cap's ``WorkflowRuntimeError`` message, the tool's exception). The
runs read as with content (no fix needed: the three spans per model call are still one call,
read by the finish reason; a hidden tool input is no arguments, so three calls are no repeats;
the conversation length is unknown, ``messages`` 0) but one, a known gap pinned by
``test_nocontent_generate_cap_is_only_in_the_hidden_prompt``: with
``early_stopping_method="generate"`` the cap was read only from LlamaIndex's system message in
the last request, hidden, so ``limit_generate_nocontent`` reads ``completed`` with its answer
(nothing else tells that call from an ``output_cls`` request made by the same step).

Known gap (not tested as if right): an ``AgentWorkflow`` handoff. Every agent's steps hang
flat below the one workflow span and no span says which agent ran (only the event reprs do):
the watchdog sees one run, the ``handoff`` call one of its tool calls, not a child run per
agent. ``test_handoff_*`` checks the handoff happened and that the spans name no agent.

Known gap, not tested: LlamaIndex's native ``llama-index-observability-otel`` (0.7) emits the
same spans (named after the traced methods) with no span kind and no convention's attributes,
its facts only in span events named after LlamaIndex's events (``LLMChatStartEvent``...): the
watchdog reads every span as plumbing and sees no run. Use OpenInference's instrumentation.
"""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    RECORDINGS,
    Expect,
    check_recorded,
    drive_and_check,
    recorded_spans,
    run_driver,
)
from tests.frameworks.scenarios import ANSWER, script
from tests.harness import RunningServer

DRIVER = "llamaindex_oi"
ENV = "llamaindex"
AGENT = "llamaindex-service"  # the resource's service.name: no span names the agent
WRITER = "li_writer"
SCRIPTS = {name: {"": script(name)} for name in (
    "three_tools", "three_tools_stream", "three_tools_nostream", "limit", "limit_generate",
    "tool_error")}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "three_tools_stream": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "three_tools_nostream": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # max_iterations=3: three model calls, the third one's tool request never run
    "limit": [Expect(AGENT, 3, 2, 0, "tool_limit_reached", False, "max_iterations", None)],
    # ... and with early_stopping_method="generate" a fourth call, asked for the answer
    "limit_generate": [Expect(AGENT, 4, 2, 0, "tool_limit_reached", True, "max_iterations",
                              None)],
    # the tool span ends ERROR; the model is given the error text and answers
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
}
# Every scenario again with content hidden (OPENINFERENCE_HIDE_*; ``<scenario>_nocontent``)
NOCONTENT = ("three_tools", "three_tools_stream", "three_tools_nostream", "limit",
             "limit_generate", "tool_error")
SCRIPTS.update({f"{scenario}_nocontent": SCRIPTS[scenario] for scenario in NOCONTENT})
EXPECTED.update({f"{scenario}_nocontent": EXPECTED[scenario] for scenario in NOCONTENT})
# the known gap (test_nocontent_generate_cap_is_only_in_the_hidden_prompt): the cap was read
# from LlamaIndex's system message in the last model call's input, hidden; the run reads as an
# ordinary answer
EXPECTED["limit_generate_nocontent"] = [Expect(AGENT, 4, 2, 0, "completed", True, None, None)]
HANDOFF = {"": fakellm.steps(*(fakellm.call("lookup", key=key) for key in "abc"),
                             fakellm.call("handoff", to_agent=WRITER, reason="write it up")),
           "-sub": fakellm.steps(fakellm.answer("Report: " + ANSWER))}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, ENV, DRIVER, scenario, SCRIPTS[scenario], EXPECTED[scenario])
    if scenario.startswith("limit"):  # LlamaIndex's own cap stopped the loop
        requests = llm.requests(f"{DRIVER}-{scenario}")
        assert len(requests) == EXPECTED[scenario][0].iterations
        if scenario.startswith("limit_generate"):
            assert not requests[-1].get("tools")


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])


def test_handoff_live(sidecar: RunningServer, llm: FakeLLM) -> None:
    """The researcher hands off (three lookups, then ``handoff``) and the writer answers."""
    model = f"{DRIVER}-handoff"
    for suffix, steps in HANDOFF.items():
        llm.script(model + suffix, steps)
    result = run_driver(ENV, DRIVER, "handoff", sidecar, llm, model)
    assert len(llm.requests(model)) == 4 and len(llm.requests(model + "-sub")) == 1
    assert "Report: " + ANSWER in result.stdout


def test_handoff_spans_name_no_agent() -> None:
    """Why a handoff is no child run (the known gap): in what LlamaIndex emitted, no span is
    of agent kind or names an agent; the agents are named only inside the event reprs."""
    spans = recorded_spans(RECORDINGS / DRIVER / "handoff.jsonl")
    attributes = [{item["key"]: item["value"].get("stringValue")
                   for item in span.get("attributes", ())} for span in spans]
    kinds = {attrs.get("openinference.span.kind") for attrs in attributes}
    assert kinds == {"CHAIN", "LLM", "TOOL"}
    assert not any(key in attrs for attrs in attributes
                   for key in ("agent.name", "gen_ai.agent.name", "graph.node.id"))
    assert [span["name"] for span in spans if not span.get("parentSpanId")] == \
        ["AgentWorkflow.run"]
    assert any(f"current_agent_name='{WRITER}'" in (attrs.get("output.value") or "")
               for attrs in attributes)
    assert sum(attrs.get("tool.name") == "handoff" for attrs in attributes) == 1


def test_nocontent_generate_cap_is_only_in_the_hidden_prompt() -> None:
    """Why ``limit_generate_nocontent`` reads ``completed`` (not ``tool_limit_reached``,
    ``max_iterations``): with ``early_stopping_method="generate"`` nothing fails, and the cap is
    told only by the system message LlamaIndex appends to the last model call's input ("You have
    reached the maximum number of iterations (3)...", the ``limit_prompts`` entry). Content
    hidden, that input is ``__REDACTED__`` and its messages and the tools offered (which a
    request without tools would show) are gone; every span ends OK. What remains, that the last
    model call is made from the ``parse_agent_output`` step rather than ``run_agent_step``, is
    no cap either: the same step asks the model for a structured output (``output_cls``)."""
    def attributes(scenario: str) -> list[dict[str, object]]:
        return [{item["key"]: next(iter(item["value"].values()), None)
                 for item in span.get("attributes", ())}
                for span in recorded_spans(RECORDINGS / DRIVER / f"{scenario}.jsonl")]

    cap = "You have reached the maximum number of iterations (3)"
    assert any(cap in str(value) for attrs in attributes("limit_generate")
               for value in attrs.values())
    hidden = attributes("limit_generate_nocontent")
    assert not any("maximum number of iterations" in str(value)
                   for attrs in hidden for value in attrs.values())
    assert {attrs[key] for attrs in hidden for key in attrs
            if key in ("input.value", "output.value")} == {"__REDACTED__"}
    assert not any(key.startswith(("llm.input_messages.", "llm.output_messages.", "llm.tools."))
                   for attrs in hidden for key in attrs)
    spans = recorded_spans(RECORDINGS / DRIVER / "limit_generate_nocontent.jsonl")
    assert {span.get("status", {}).get("code") for span in spans} == {1}  # all OK
    names = {span["spanId"]: span["name"] for span in spans}
    last_call = [names.get(span.get("parentSpanId", "")) for span in spans
                 if span["name"] == "OpenAILike.astream_chat"][-1]
    assert last_call == "BaseWorkflowAgent.parse_agent_output"
