"""What holds for every convention (docs/frameworks.md, "What holds for every convention"): read
from real recordings of tracing setups the tables name nothing special for — hand-written loops
traced by MLflow (every value JSON-encoded, only `mlflow.*` attributes), by Pydantic Logfire and
by OpenLLMetry's OpenAI instrumentation with plain spans of the loop's own, by OpenInference
with the agent named only in ``using_metadata`` — and, for the
shapes no recording shows, from spans a real OpenTelemetry SDK made.
"""

from __future__ import annotations

import json

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.recorded import recorded_records, scoped_spans
from tests.spans import T0, SpanMaker, chat_attrs, only_run, records_of, run_spans
from tests.test_rebatching import as_exported, ended_runs
from watchdog.core.runs.run import RunState
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.spans.combined import scoped
from watchdog.core.spans.conventions import select_attributes
from watchdog.core.spans.outcome import answer_text, phrase_limit
from watchdog.core.spans.record import AGENT, LLM, OTHER, TOOL, SpanRecord
from watchdog.core.spans.schema import Convention
from watchdog.core.spans.scopes import view_of
from watchdog.core.spans.values import json_encoded

LOOPS = ("mlflow_loop", "logfire_loop", "openai_olm_loop")
ANSWER = "a, b and c are known."


def _runs(driver: str, scenario: str) -> list[RunState]:
    return ended_runs(as_exported(driver, scenario))


def _fold(records: list[SpanRecord]) -> RunState:
    run = RunState("run", records[0].key_source, records[0].trace_id, 0.0)
    for record in records:
        run.apply(record, 1.0)
    run.end(2.0)
    return run


# -- 1. the answer of a run from its last model call -----------------------------------------

@pytest.mark.parametrize(("driver", "scenario", "answer"), [
    # a loop's own root span that records no output (OpenLLMetry's OpenAI spans)
    ("openai_olm_loop", "three_tools", ANSWER),
    ("openai_olm_loop", "tool_error", "The backend is down."),
    # Logfire: the loop's root holds its answer as an attribute of its own, in no convention
    ("logfire_loop", "three_tools", ANSWER),
    # loose calls: the Anthropic SDK's own span ends the run, OpenLLMetry's twin has the text
    ("anthropic_loop", "three_tools", ANSWER),
    ("anthropic_loop", "tool_error", "it is broken"),
    # loose calls of OpenInference's openai instrumentation (its output.value and flattened
    # llm.output_messages), tool spans of the loop's own OITracer
    ("openai_oi_loop", "three_tools", ANSWER),
    ("openai_oi_loop", "tool_error", "The backend is down."),
    # loose streamed calls of opentelemetry-instrumentation-openai-v2
    ("openai_v2_loop", "three_tools_stream", ANSWER),
    # agent spans that record no output: the OpenAI Agents SDK under OpenInference
    ("openai_agents_oi", "three_tools", ANSWER),
])
def test_a_run_without_an_output_span_answers_with_its_last_model_calls_text(
        driver: str, scenario: str, answer: str) -> None:
    runs = _runs(driver, scenario)
    assert [(run.terminal_state, run.final_output) for run in runs] == [
        (TerminalState.COMPLETED, answer)]


@pytest.mark.parametrize("driver", ["openai_olm_loop", "logfire_loop", "anthropic_loop",
                                    "openai_oi_loop"])
def test_a_run_whose_last_model_call_asked_for_tools_has_no_answer_text(driver: str) -> None:
    """Stopped at the loop's cap: the model calls before asked for tools; none answered."""
    assert [run.final_output for run in _runs(driver, "limit")] == [None]


def test_the_model_calls_answer_is_one_only_when_it_answered() -> None:
    records = recorded_records("openai_olm_loop", "three_tools")
    calls = [record for record in records if record.kind is LLM]
    assert [(call.final_answer, call.final_output) for call in calls] == [
        (False, None)] * 3 + [(True, ANSWER)]


def _agent_and_answer(order: str) -> RunState:
    otel = SpanMaker()
    with otel.agent("invoke_agent planner", {
            "gen_ai.agent.name": "planner", "output.value": "The agent's own answer."}):
        otel.span("chat m", chat_attrs(finish="stop", **{
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": "The model's text."}], "finish_reason": "stop"}])}))
    llm, agent = records_of(otel.take())
    return _fold([agent, llm] if order == "agent first" else [llm, agent])


@pytest.mark.parametrize("order", ["agent first", "model call first"])
def test_an_agent_spans_output_comes_before_the_model_calls_whatever_the_order(
        order: str) -> None:
    """An exporter groups a batch by scope: the agent span may come before its model call."""
    assert _agent_and_answer(order).final_output == "The agent's own answer."


@pytest.mark.parametrize(("output", "text"), [
    ("plain text", "plain text"),
    # OTel GenAI messages: the text part, not the tool call or the reasoning
    (json.dumps([{"role": "assistant", "parts": [
        {"type": "reasoning", "content": "hmm"}, {"type": "text", "content": "Done."}]}]),
     "Done."),
    # OpenAI's ChatCompletion (MLflow's output of a model call)
    (json.dumps({"id": "x", "choices": [{"finish_reason": "stop", "message": {
        "role": "assistant", "content": "Done.", "tool_calls": None}}],
        "usage": {"prompt_tokens": 3}}), "Done."),
    # Anthropic's content blocks, the Responses API's output items
    (json.dumps({"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}),
     "Done."),
    (json.dumps([{"type": "message", "content": [{"type": "output_text", "text": "Done."}]}]),
     "Done."),
    (json.dumps({"answer": 42}), None),  # a structured output: no text
    ("   ", None),
])
def test_answer_text_reads_the_text_parts_of_every_message_shape(output: str,
                                                                 text: str | None) -> None:
    assert answer_text(output) == text


def test_a_model_calls_answer_is_bounded_and_redacted() -> None:
    otel = SpanMaker()
    secret = "sk-" + "A" * 40
    otel.span("chat m", chat_attrs(finish="stop", **{
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": f"key {secret} " + "x" * 5000}]}])}))
    [record] = records_of(otel.take())
    assert record.final_output is not None
    assert secret not in record.final_output and len(record.final_output) <= 500


# -- 3. values encoded as JSON strings ---------------------------------------------------------

@pytest.mark.parametrize(("scenario", "state", "reason", "tools", "errors"), [
    ("three_tools", TerminalState.COMPLETED, None, 3, 0),
    ("tool_error", TerminalState.COMPLETED, None, 1, 1),
    ("limit", TerminalState.TOOL_LIMIT_REACHED, "max_steps", 5, 0),
])
def test_mlflow_whose_every_value_is_json_encoded_reads_like_any_convention(
        scenario: str, state: TerminalState, reason: str | None, tools: int,
        errors: int) -> None:
    """MLflow's spans carry only `mlflow.*` attributes, each JSON-encoded ("\\"TOOL\\"",
    "20"): they made no run at all before the values were read decoded."""
    [run] = _runs("mlflow_loop", scenario)
    assert (run.terminal_state, run.terminal_reason, run.tool_calls, run.errors) == (
        state, reason, tools, errors)
    assert run.agent_name == "research_agent"
    assert run.iterations == tools + (scenario != "limit")
    assert run.input_tokens > 0 and run.output_tokens > 0  # mlflow.chat.tokenUsage
    if scenario == "three_tools":
        records = recorded_records("mlflow_loop", scenario)
        assert [r.args_brief for r in records if r.kind is TOOL] == [
            '{"key":"a"}', '{"key":"b"}', '{"key":"c"}']


def test_json_encoded_values_are_decoded_where_a_signal_reads_them() -> None:
    assert json_encoded('"LLM"', scalar=False) == "LLM"
    assert json_encoded('"a \\"quoted\\" answer"', scalar=False) == 'a "quoted" answer'
    assert json_encoded("12", scalar=True) == 12
    assert json_encoded('"12"', scalar=True) == 12  # encoded twice
    assert json_encoded("true", scalar=True) is True
    assert json_encoded("12", scalar=False) == "12"  # a name that is a number stays a name
    assert json_encoded('""', scalar=True) == ""
    for text in ('"unterminated', '"', '"a" "b"', "12 apples", "-", '"\\ud800"'):
        assert json_encoded(text, scalar=True) == text
    assert answer_text('[{"role": "assistant", "content": "a\\ud800b"}]') == "a?b"


def _kv(key: str, text: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=text))


def test_a_genai_span_whose_values_are_json_encoded_is_a_model_call_with_its_usage() -> None:
    attrs = select_attributes([
        _kv("gen_ai.operation.name", '"chat"'), _kv("gen_ai.usage.input_tokens", "12"),
        _kv("gen_ai.usage.output_tokens", '"5"'),
        _kv("gen_ai.response.finish_reasons", '["stop"]'),
        _kv("watchdog.budget.max_tool_calls", "3"), _kv("tool.description", '"ignored"')])
    assert attrs == {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 12,
                     "gen_ai.usage.output_tokens": 5,
                     "gen_ai.response.finish_reasons": '["stop"]',
                     "watchdog.budget.max_tool_calls": 3}
    otel = SpanMaker()
    otel.span("chat m", {"gen_ai.operation.name": '"chat"', "gen_ai.usage.input_tokens": "12",
                         "gen_ai.usage.output_tokens": "5",
                         "gen_ai.response.finish_reasons": '"stop"',
                         "watchdog.budget.max_tool_calls": '"3"'})
    [record] = records_of(otel.take())
    assert (record.kind, record.input_tokens, record.output_tokens) == (LLM, 12, 5)
    assert (record.finish_reason, record.final_answer) == ("stop", True)
    assert record.budget == {"max_tool_calls": 3.0}


# -- 6. limits told only in words ----------------------------------------------------------------

@pytest.mark.parametrize("driver", LOOPS)
def test_a_loop_that_says_it_stopped_at_its_cap_only_in_words_reached_a_limit(
        driver: str) -> None:
    """The loop raises its own StepLimitReached("Agent stopped: maximum number of steps (5)
    reached"): an exception type no table names, a limit in its message (read `error`
    before)."""
    [run] = _runs(driver, "limit")
    assert (run.terminal_state, run.terminal_reason) == (
        TerminalState.TOOL_LIMIT_REACHED, "max_steps")


@pytest.mark.parametrize(("text", "limit"), [
    ("Agent stopped: maximum number of steps (5) reached", "max_steps"),
    ("Max turns (3) exceeded", "max_turns"),
    ("Reached the maximum number of iterations (10)", "max_iterations"),
    ("stopped due to the iteration limit", "max_iterations"),
    ("Agent was not able to resolve the task in 4 iterations.", "max_iterations"),  # BeeAI
    ("Could not finish within 10 turns", "max_turns"),
    ("failed to converge in 3 steps", "max_steps"),
    ("the task failed in 2 places", None),
    ("not able to resolve the host in the 3 tries", None),
    ("backend unavailable for broken", None),
    ("maximum retries exceeded", None),
    ("the steps of the recipe", None),
])
def test_limit_phrases(text: str, limit: str | None) -> None:
    assert phrase_limit(text) == limit


def test_a_limit_inside_an_error_the_agent_span_reports_is_that_limit() -> None:
    otel = SpanMaker()
    with otel.agent("invoke_agent planner", {
            "gen_ai.agent.name": "planner",
            "output.value": json.dumps({"error": "Max turns (3) exceeded", "result": None})}):
        otel.span("chat m", chat_attrs(finish="tool_calls"))
    tracker, _ = run_spans(otel.take())
    run = only_run(tracker)
    assert (run.terminal_state, run.terminal_reason) == (
        TerminalState.TOOL_LIMIT_REACHED, "max_turns")


def test_a_tool_error_that_names_no_limit_stays_an_error() -> None:
    otel = SpanMaker()
    with otel.agent("invoke_agent planner", {"gen_ai.agent.name": "planner"},
                    error="RuntimeError: maximum retries exceeded"):
        otel.span("chat m", chat_attrs(finish="tool_calls"))
    tracker, _ = run_spans(otel.take())
    run = only_run(tracker)
    assert (run.terminal_state, run.terminal_reason) == (TerminalState.ERROR, "error")


# -- 7. the agent's name from the root's own fields -------------------------------------------

@pytest.mark.parametrize(("attrs", "agent"), [
    ({"metadata": json.dumps({"agent_name": "planner", "user": "u1"})}, "planner"),
    ({"input.value": json.dumps({"agent": {"name": "researcher"}, "task": "t"})},
     "researcher"),
    ({"input.value": "Look up a, b and c."}, "test-agent"),  # nothing names it: service.name
])
def test_a_root_that_names_its_agent_in_its_input_or_metadata_names_the_run(
        attrs: dict[str, str], agent: str) -> None:
    otel = SpanMaker()
    root = otel.open("run", attrs, start=T0)
    otel.span("chat m", chat_attrs(finish="stop", **{
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "Done."}]}])}), parent=root, start=T0 + 1)
    root.end(end_time=int((T0 + 5) * 1e9))
    tracker, _ = run_spans(otel.take())
    run = only_run(tracker)
    assert (run.agent_name, run.final_output) == (agent, "Done.")


@pytest.mark.parametrize("scenario", ["three_tools", "tool_error", "limit"])
def test_a_run_named_only_in_its_roots_openinference_metadata_is_that_agents(
        scenario: str) -> None:
    """A real recording: OpenInference's ``using_metadata({"agent_name": ...})`` around a
    hand-written loop (``openai_oi_metadata``) puts the name in the ``metadata`` JSON of every
    span, and nowhere else; the run is that agent's, not the service's."""
    spans = scoped_spans("openai_oi_metadata", scenario)
    (root,) = [span for _, _, span in spans if not span.parent_span_id]
    attrs = {kv.key: kv.value.string_value for kv in root.attributes}
    assert json.loads(attrs["metadata"])["agent_name"] == "research-agent"
    assert [key for key, value in attrs.items() if "research-agent" in value] == ["metadata"]
    services = {kv.value.string_value for resource, _, _ in spans
                for kv in resource.attributes if kv.key == "service.name"}
    assert services == {"openai-oi-metadata"}
    (run,) = _runs("openai_oi_metadata", scenario)
    assert run.agent_name == "research-agent"


@pytest.mark.parametrize(("name", "metadata", "agent"), [
    ("lg_researcher", {"ls_integration": "langgraph"}, "lg_researcher"),
    ("LangGraph", {"ls_integration": "langgraph"}, "test-agent"),  # a graph given no name
    ("lg_researcher", {"ls_integration": "langchain_chat_model"}, "test-agent"),
])
def test_a_graphs_own_root_is_named_after_the_graph(name: str, metadata: dict[str, str],
                                                    agent: str) -> None:
    """LangGraph.js under OpenInference names its graph only in its root CHAIN's span name,
    its metadata LangGraph's alone: the run is that graph's (not the service's)."""
    otel = SpanMaker()
    root = otel.open(name, {"openinference.span.kind": "CHAIN",
                            "metadata": json.dumps(metadata)}, start=T0)
    otel.span("chat m", chat_attrs(finish="stop"), parent=root, start=T0 + 1)
    root.end(end_time=int((T0 + 5) * 1e9))
    tracker, _ = run_spans(otel.take())
    assert only_run(tracker).agent_name == agent


@pytest.mark.parametrize("scenario", ["three_tools", "tool_error", "limit"])
def test_a_langgraphjs_run_is_named_after_its_graph(scenario: str) -> None:
    """A real recording: no span of LangGraph.js under OpenInference is AGENT or names an
    agent; the root CHAIN is named after the graph."""
    spans = scoped_spans("langgraphjs_oi", scenario)
    assert not any(kv.key in ("agent.name", "gen_ai.agent.name")
                   or (kv.key == "openinference.span.kind" and kv.value.string_value == "AGENT")
                   for _, _, span in spans for kv in span.attributes)
    (run,) = _runs("langgraphjs_oi", scenario)
    assert run.agent_name == "lg_researcher"


def test_a_convention_that_names_the_agent_comes_before_the_roots_fields() -> None:
    otel = SpanMaker()
    with otel.agent("invoke_agent x", {"gen_ai.agent.name": "named",
                                       "metadata": json.dumps({"agent_name": "other"})}):
        otel.span("chat m", chat_attrs(finish="tool_calls"))
    records = records_of(otel.take())
    assert [r.agent for r in records if r.kind is AGENT] == ["named"]


def test_json_nested_deeper_than_the_parser_goes_is_no_crash() -> None:
    """Every place that parses JSON a span carries (tool arguments, model outputs, an agent's
    output and error, a root's metadata) reads such a value as text, not as a crash."""
    deep = "[" * 100_000 + "]" * 100_000
    otel = SpanMaker()
    root = otel.open("root", {"metadata": '{"agent_name": ' + deep + "}",
                              "input.value": '{"name": ' + deep + "}"})
    otel.span("execute_tool t", {"gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": "t", "gen_ai.tool.call.arguments": deep,
                                 "gen_ai.tool.call.result": deep}, parent=root)
    otel.span("chat m", chat_attrs(finish="stop", **{"gen_ai.output.messages": deep,
                                                     "gen_ai.input.messages": deep}),
              parent=root)
    otel.span("invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                 "output.value": '{"error": ' + deep + "}"}, parent=root)
    root.end()
    records = records_of(otel.take())
    assert [record.kind for record in records] == [TOOL, LLM, AGENT, OTHER]
    assert all(len(record.final_output or "") <= 500 for record in records)


def test_a_json_encoded_value_in_a_span_event_is_read_decoded() -> None:
    """Strands-style events (`gen_ai.choice`) whose values an SDK JSON-encoded."""
    otel = SpanMaker()
    span = otel.open("chat m", {"gen_ai.operation.name": "chat"})
    span.add_event("gen_ai.choice", {"finish_reason": '"end_turn"',
                                     "message": '"a, b and c are known."'})
    span.end()
    [record] = records_of(otel.take())
    assert (record.finish_reason, record.final_answer, record.final_output) == (
        "end_turn", True, ANSWER)


def test_a_streamed_answer_recorded_a_chunk_a_message_is_joined_only_where_its_entry_says() -> None:
    """Gemini CLI's output messages are its streamed answer's chunks (`chunked_answers`, read on
    its scope's spans): joined as they came; elsewhere each message is a line of its own; an
    entry without scopes cannot say so (it would be read on every emitter's spans)."""
    chunks = json.dumps([{"role": "model", "parts": [{"text": word}]}
                         for word in ("The ", "file ", "is ", "found.")])
    assert answer_text(chunks, chunked=True) == "The file is found."
    assert answer_text(chunks) == "The \nfile \nis \nfound."
    assert view_of("gemini-cli").chunked and not view_of("openinference.x").chunked
    with pytest.raises(ValueError, match="chunked_answers needs scopes"):
        scoped(Convention("x", "y", chunked_answers=True))
