"""What the normaliser reads from real frameworks: the recordings committed under
``tests/frameworks/recordings`` (what each framework really exported, as OTLP/JSON), normalised
span by span (:func:`tests.recorded.signature`), and folded into one run.

The folding here puts every span of a recording into one :class:`RunState`, so these tests pin
the facts on the records and the outcome they make, whatever the tracker later decides about
run identity (one trace per model call, nested agent spans); the end-to-end framework tests in
``tests/frameworks`` check the runs the sidecar shows.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, NamedTuple

import pytest
from agents import Agent, Runner, function_tool
from agents.exceptions import MaxTurnsExceeded
from agents.testing import ModelStep, ScriptedModel
from agents.testing.model import ModelCall, function_call

from tests.recorded import recorded_lines, recorded_records, records_of_lines, signatures
from tests.spans import SpanMaker, records_of
from watchdog.client.adapters.openai_agents import instrument_openai_agents
from watchdog.ingest.conventions import Resource, normalise, select_attributes
from watchdog.ingest.decode import attributes, parse_json
from watchdog.runs.record import SpanRecord
from watchdog.runs.run import RunState

# One line per span that says something, in export order (plumbing spans are left out).
SIGNATURES: dict[tuple[str, str], list[str]] = {
    ("crewai_openinference", "limit"): [
        'tool lookup {"key":"k0"}',
        'tool lookup {"key":"k1"}',
        'tool lookup {"key":"k2"}',
        'agent crewai-researcher answer limit=max_iter reports-calls=4',
        'agent None answer',
    ],
    ("crewai_openinference", "three_tools"): [
        'tool lookup {"key":"a"}',
        'tool lookup {"key":"b"}',
        'tool lookup {"key":"c"}',
        'agent crewai-researcher answer reports-calls=4',
        'agent None answer',
    ],
    ("crewai_openinference", "tool_error"): [
        'tool lookup {"key":"broken"} error=RuntimeError',
        'agent crewai-researcher answer reports-calls=2',
        'agent None answer',
    ],
    ("crewai_openinference_openai", "limit"): [
        'llm tool_calls asks-tools',
        'tool lookup {"key":"k0"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"k1"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"k2"}',
        'llm stop answer limit=max_iter',
        'agent crewai-researcher answer limit=max_iter reports-calls=4',
        'agent None answer',
    ],
    ("crewai_openinference_openai", "three_tools"): [
        'llm tool_calls asks-tools',
        'tool lookup {"key":"a"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"b"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"c"}',
        'llm stop answer',
        'agent crewai-researcher answer reports-calls=4',
        'agent None answer',
    ],
    ("crewai_openinference_openai", "tool_error"): [
        'llm tool_calls asks-tools',
        'tool lookup {"key":"broken"} error=RuntimeError',
        'llm stop answer',
        'agent crewai-researcher answer reports-calls=2',
        'agent None answer',
    ],
    ("google_adk_native", "limit"): [
        'llm stop answer',
        'tool lookup None',
        'llm stop answer',
        'tool lookup None',
        'llm stop answer',
        'tool lookup None',
        'agent adk_researcher limit=LlmCallsLimitExceededError error=LlmCallsLimitExceededError',
        'agent adk_researcher limit=LlmCallsLimitExceededError error=LlmCallsLimitExceededError',
    ],
    ("google_adk_native", "three_tools"): [
        'llm stop answer',
        'tool lookup None',
        'llm stop answer',
        'tool lookup None',
        'llm stop answer',
        'tool lookup None',
        'llm stop answer',
        'agent adk_researcher',
        'agent adk_researcher',
    ],
    ("google_adk_native", "tool_error"): [
        'llm stop answer',
        'tool lookup None error=RuntimeError',
        'agent adk_researcher error=RuntimeError',
        'agent adk_researcher error=RuntimeError',
    ],
    ("google_adk_openinference", "limit"): [
        'tool lookup {"key":"k0"}',
        'llm stop asks-tools',
        'tool lookup {"key":"k1"}',
        'llm stop asks-tools',
        'tool lookup {"key":"k2"}',
        'llm stop asks-tools',
        'other limit=LlmCallsLimitExceededError error=LlmCallsLimitExceededError',
        'agent adk_researcher limit=LlmCallsLimitExceededError error=LlmCallsLimitExceededError',
        'agent adk_researcher limit=LlmCallsLimitExceededError error=LlmCallsLimitExceededError',
        'other limit=LlmCallsLimitExceededError error=LlmCallsLimitExceededError',
        'agent None limit=LlmCallsLimitExceededError error=LlmCallsLimitExceededError',
    ],
    ("google_adk_openinference", "three_tools"): [
        'tool lookup {"key":"a"}',
        'llm stop asks-tools',
        'tool lookup {"key":"b"}',
        'llm stop asks-tools',
        'tool lookup {"key":"c"}',
        'llm stop asks-tools',
        'llm stop answer',
        'agent adk_researcher',
        'agent adk_researcher answer',
        'agent None answer',
    ],
    ("google_adk_openinference", "tool_error"): [
        'tool lookup {"key":"broken"} error=RuntimeError',
        'llm stop asks-tools',
        'agent adk_researcher error=RuntimeError',
        'agent adk_researcher error=RuntimeError',
        'other error=RuntimeError',
        'agent None error=RuntimeError',
    ],
    ("hermes_agento11y", "limit"): [
        'llm tool_calls asks-tools',
        'tool lookup {"key":"k0"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"k1"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"k2"}',
    ],
    ("hermes_agento11y", "limit_adapter"): [
        'llm tool_calls asks-tools',
        'tool lookup {"key":"k0"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"k1"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"k2"}',
        'agent hermes-researcher answer limit=max_iterations',
    ],
    ("hermes_agento11y", "three_tools"): [
        'llm tool_calls asks-tools',
        'tool lookup {"key":"a"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"b"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"c"}',
        'llm stop answer',
    ],
    ("hermes_agento11y", "three_tools_adapter"): [
        'llm tool_calls asks-tools',
        'tool lookup {"key":"a"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"b"}',
        'llm tool_calls asks-tools',
        'tool lookup {"key":"c"}',
        'llm stop answer',
        'agent hermes-researcher answer',
    ],
    ("hermes_agento11y", "tool_error"): [
        'llm tool_calls asks-tools',
        'tool lookup {"key":"broken"} error=tool_execution_error',
        'llm stop answer',
    ],
    ("hermes_agento11y", "tool_error_adapter"): [
        'llm tool_calls asks-tools',
        'tool lookup {"key":"broken"} error=tool_execution_error',
        'llm stop answer',
        'agent hermes-researcher answer',
    ],
    ("hermes_openai_v2", "limit"): [
        'llm tool_calls asks-tools',
        'llm tool_calls asks-tools',
        'llm tool_calls asks-tools',
        'llm stop answer limit=max_iterations',
    ],
    ("hermes_openai_v2", "limit_adapter"): [
        'llm tool_calls asks-tools',
        'llm tool_calls asks-tools',
        'llm tool_calls asks-tools',
        'llm stop answer limit=max_iterations',
        'agent hermes-researcher answer limit=max_iterations',
    ],
    ("hermes_openai_v2", "three_tools"): [
        'llm tool_calls asks-tools',
        'llm tool_calls asks-tools',
        'llm tool_calls asks-tools',
        'llm stop answer',
    ],
    ("hermes_openai_v2", "three_tools_adapter"): [
        'llm tool_calls asks-tools',
        'llm tool_calls asks-tools',
        'llm tool_calls asks-tools',
        'llm stop answer',
        'agent hermes-researcher answer',
    ],
    ("hermes_openai_v2", "tool_error"): [
        'llm tool_calls asks-tools',
        'llm stop answer',
    ],
    ("hermes_openai_v2", "tool_error_adapter"): [
        'llm tool_calls asks-tools',
        'llm stop answer',
        'agent hermes-researcher answer',
    ],
    ("strands_default", "limit"): [
        'llm tool_use asks-tools',
        'tool lookup {"key":"k0"}',
        'llm tool_use asks-tools',
        'tool lookup {"key":"k1"}',
        'llm tool_use asks-tools',
        'tool lookup {"key":"k2"}',
        'agent strands-researcher limit=limit_turns',
    ],
    ("strands_default", "three_tools"): [
        'llm tool_use asks-tools',
        'tool lookup {"key":"a"}',
        'llm tool_use asks-tools',
        'tool lookup {"key":"b"}',
        'llm tool_use asks-tools',
        'tool lookup {"key":"c"}',
        'llm end_turn answer',
        'agent strands-researcher answer',
    ],
    ("strands_default", "tool_error"): [
        'llm tool_use asks-tools',
        'tool lookup {"key":"broken"} error=RuntimeError',
        'llm end_turn answer',
        'agent strands-researcher answer',
    ],
    ("strands_latest", "limit"): [
        'llm tool_use asks-tools',
        'tool lookup {"key":"k0"}',
        'llm tool_use asks-tools',
        'tool lookup {"key":"k1"}',
        'llm tool_use asks-tools',
        'tool lookup {"key":"k2"}',
        'agent strands-researcher limit=limit_turns',
    ],
    ("strands_latest", "three_tools"): [
        'llm tool_use asks-tools',
        'tool lookup {"key":"a"}',
        'llm tool_use asks-tools',
        'tool lookup {"key":"b"}',
        'llm tool_use asks-tools',
        'tool lookup {"key":"c"}',
        'llm end_turn answer',
        'agent strands-researcher answer',
    ],
    ("strands_latest", "tool_error"): [
        'llm tool_use asks-tools',
        'tool lookup {"key":"broken"} error=RuntimeError',
        'llm end_turn answer',
        'agent strands-researcher answer',
    ],
}


@pytest.mark.parametrize(("driver", "scenario"), list(SIGNATURES),
                         ids=[f"{d}-{s}" for d, s in SIGNATURES])
def test_recorded_spans_read_as(driver: str, scenario: str) -> None:
    assert signatures(recorded_records(driver, scenario)) == SIGNATURES[driver, scenario]


class Outcome(NamedTuple):
    iterations: int
    tool_calls: int
    errors: int
    terminal_state: str
    terminal_reason: str | None
    has_final_answer: bool


def fold(records: list[SpanRecord]) -> RunState:
    run = RunState("run", records[0].key_source, records[0].trace_id, 0.0)
    for record in records:
        run.apply(record, 1.0)
    run.end(2.0)
    return run


def outcome(run: RunState) -> Outcome:
    return Outcome(run.iterations, run.tool_calls, run.errors, str(run.terminal_state),
                   run.terminal_reason, run.has_final_answer)


COMPLETED_3 = Outcome(4, 3, 0, "completed", None, True)
# Every span of one invocation folded into one run: the outcome DESIGN §3 asks for.
OUTCOMES: dict[tuple[str, str], Outcome] = {
    **{(driver, "three_tools"): COMPLETED_3 for driver in (
        "strands_default", "strands_latest", "google_adk_native", "google_adk_openinference",
        "hermes_agento11y", "crewai_openinference_openai", "crewai_openinference")},
    # strands: limits={"turns": 3} ends without an exception; the finish reason limit_turns is
    # in a span event (default format) or inside gen_ai.output.messages (latest format).
    ("strands_default", "limit"): Outcome(3, 3, 0, "tool_limit_reached", "limit_turns", False),
    ("strands_latest", "limit"): Outcome(3, 3, 0, "tool_limit_reached", "limit_turns", False),
    ("strands_default", "tool_error"): Outcome(2, 1, 1, "completed", None, True),
    ("strands_latest", "tool_error"): Outcome(2, 1, 1, "completed", None, True),
    # google-adk: every model call says finish_reasons=["stop"]; the tool calls that follow
    # say it was no answer. The limit exception is on several nested spans.
    ("google_adk_native", "limit"): Outcome(3, 3, 0, "tool_limit_reached",
                                            "LlmCallsLimitExceededError", False),
    ("google_adk_openinference", "limit"): Outcome(3, 3, 0, "tool_limit_reached",
                                                   "LlmCallsLimitExceededError", False),
    ("google_adk_native", "tool_error"): Outcome(1, 1, 1, "error", "RuntimeError", False),
    ("google_adk_openinference", "tool_error"): Outcome(1, 1, 1, "error", "RuntimeError", False),
    # hermes: the plugin shows nothing of the limit; the adapter says watchdog.limit_reached;
    # with openai-v2 (content captured) the summary request Hermes sends says it.
    ("hermes_agento11y", "limit"): Outcome(3, 3, 0, "no_response", None, False),
    ("hermes_agento11y", "tool_error"): Outcome(2, 1, 1, "completed", None, True),
    ("hermes_agento11y", "three_tools_adapter"): COMPLETED_3,
    ("hermes_agento11y", "limit_adapter"): Outcome(3, 3, 0, "tool_limit_reached",
                                                   "max_iterations", True),
    ("hermes_agento11y", "tool_error_adapter"): Outcome(2, 1, 1, "completed", None, True),
    ("hermes_openai_v2", "three_tools"): Outcome(4, 0, 0, "completed", None, True),
    ("hermes_openai_v2", "limit"): Outcome(4, 0, 0, "tool_limit_reached", "max_iterations", True),
    ("hermes_openai_v2", "tool_error"): Outcome(2, 0, 0, "completed", None, True),
    ("hermes_openai_v2", "limit_adapter"): Outcome(4, 0, 0, "tool_limit_reached",
                                                   "max_iterations", True),
    # crewai: max_iter makes one more model call with its own "final answer" request.
    ("crewai_openinference_openai", "limit"): Outcome(4, 3, 0, "tool_limit_reached", "max_iter",
                                                      True),
    ("crewai_openinference_openai", "tool_error"): Outcome(2, 1, 1, "completed", None, True),
    # crewai without the OpenAI instrumentation: no model-call span at all; the agent span's
    # TaskOutput conversation shows the calls (and, against the agent's max_iter, the limit).
    ("crewai_openinference", "limit"): Outcome(4, 3, 0, "tool_limit_reached", "max_iter", True),
    ("crewai_openinference", "tool_error"): Outcome(2, 1, 1, "completed", None, True),
}


@pytest.mark.parametrize(("driver", "scenario"), list(OUTCOMES),
                         ids=[f"{d}-{s}" for d, s in OUTCOMES])
def test_recorded_invocation_folds_into(driver: str, scenario: str) -> None:
    assert outcome(fold(recorded_records(driver, scenario))) == OUTCOMES[driver, scenario]


def test_adk_exception_on_nested_spans_has_one_identity() -> None:
    # The tool's RuntimeError is on the tool span and on every span above it.
    failed = [r for r in recorded_records("google_adk_openinference", "tool_error") if r.error]
    assert len(failed) >= 4
    assert {r.exception_id for r in failed} == {failed[0].exception_id}
    assert failed[0].exception_id is not None


def test_strands_tool_arguments_and_answer_come_from_span_events() -> None:
    records = recorded_records("strands_default", "three_tools")
    tools = [r for r in records if r.tool_name == "lookup"]
    assert [r.args_brief for r in tools] == ['{"key":"a"}', '{"key":"b"}', '{"key":"c"}']
    assert tools[0].result_brief == '[{"text": "value of a"}]'
    assert records[-1].final_output == "a, b and c are known.\n"


def test_crewai_agent_name_is_the_role_in_graph_node_id() -> None:
    records = recorded_records("crewai_openinference", "three_tools")
    agents = [r.agent for r in records if r.agent is not None]
    assert agents == ["crewai-researcher"]
    assert all(r.service == "crewai-service" for r in records)


def _without(lines: list[str], key: str) -> list[str]:
    """The recording with one attribute taken off every span."""
    out = []
    for line in lines:
        request = json.loads(line)
        for resource_spans in request["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    span["attributes"] = [kv for kv in span.get("attributes", [])
                                          if kv["key"] != key]
        out.append(json.dumps(request))
    return out


def test_hermes_exit_reason_alone_is_a_limit_stop() -> None:
    # The adapter sets both watchdog.limit_reached and Hermes' own turn_exit_reason; the state
    # field alone says it too.
    lines = _without(recorded_lines("hermes_agento11y", "limit_adapter"),
                     "watchdog.limit_reached")
    agent = [r for r in records_of_lines(lines) if r.kind == "agent"]
    assert [r.limit_stop for r in agent] == ["max_iterations"]


def test_streamed_answer_without_finish_reason_is_an_answer() -> None:
    # Hermes' streamed calls through openai-v2 carry their finish reason only inside
    # gen_ai.output.messages; without it, an output that ends with text is still the answer.
    lines = _without(recorded_lines("hermes_openai_v2", "three_tools"),
                     "gen_ai.output.messages")
    assert signatures(records_of_lines(lines))[-1] == "llm None"
    last = recorded_lines("hermes_openai_v2", "three_tools")[-1]
    request = json.loads(last)
    span = request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    for kv in span["attributes"]:
        if kv["key"] == "gen_ai.output.messages":
            messages = json.loads(kv["value"]["stringValue"])
            del messages[-1]["finish_reason"]
            kv["value"]["stringValue"] = json.dumps(messages)
    record = records_of_lines([json.dumps(request)])[-1]
    assert (record.finish_reason, record.final_answer, record.requested_tools) == (
        None, True, False)


def test_normalise_takes_the_decoded_attributes_unchanged() -> None:
    # Events are folded into a copy: the caller's attribute dict is not touched.
    request = parse_json(recorded_lines("strands_default", "three_tools")[-1].encode())
    resource_spans = request.resource_spans[0]
    resource = Resource.of(attributes(resource_spans.resource.attributes))
    span = resource_spans.scope_spans[0].spans[0]
    attrs = select_attributes(span.attributes)
    before = dict(attrs)
    record = normalise(span, attrs, resource)
    assert record.final_answer and attrs == before


def test_openai_agents_max_turns_only_in_a_nested_agent_status() -> None:
    # The real SDK (its own scripted test model) under OpenInference's instrumentor: the
    # MaxTurnsExceeded stop is only the nested agent span's status description; the root
    # "Agent workflow" span ends OK.
    maker = SpanMaker({"service.name": "openai-agents-service"})
    instrumentor = instrument_openai_agents(maker.provider)
    calls = iter(range(100))

    @function_tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    def respond(call: ModelCall) -> Any:
        number = next(calls)
        return [function_call("lookup", {"key": f"k{number}"}, call_id=f"call-{number}")]

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(10)], emit_traces=True)
    agent: Agent[Any] = Agent(name="oa-researcher", instructions="Look keys up.", model=model,
                              tools=[lookup])
    try:
        with pytest.raises(MaxTurnsExceeded):
            asyncio.run(Runner.run(agent, "Look up every key.", max_turns=3))
    finally:
        instrumentor.uninstrument()
    records = records_of(maker.take())
    assert signatures(records) == [
        "llm None", 'tool lookup {"key":"k0"}', "llm None", 'tool lookup {"key":"k1"}',
        "llm None", 'tool lookup {"key":"k2"}',
        "agent oa-researcher limit=MaxTurnsExceeded error=MaxTurnsExceeded", "agent None"]
    assert records[-1].parent_span_id is None and not records[-1].error
    assert outcome(fold(records)) == Outcome(3, 3, 0, "tool_limit_reached", "MaxTurnsExceeded",
                                             False)
