"""Every supported instrumentation convention, through the real data path.

Spans are made by the OpenTelemetry SDK (or by a real pydantic-ai agent), encoded with the SDK's
OTLP encoder, decoded by ``parse_protobuf``/``parse_json`` and normalised by ``records_from``;
run-level assertions go through ``RunTracker``. Attribute names follow the published
conventions: OTel GenAI semconv, OpenInference (``openinference.semconv.trace``) and
OpenLLMetry (``opentelemetry.semconv_ai``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Status, StatusCode
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    InstrumentationSettings,
    ModelResponse,
    ModelRetry,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelRequest
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from tests.spans import (
    NS,
    T0,
    SpanMaker,
    chat_attrs,
    decode,
    encode,
    only_run,
    record_of,
    records_of,
    run_spans,
    tool_attrs,
)
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.decode import DecodeError, parse_json, parse_protobuf
from watchdog.core.spans.pipeline import records_from
from watchdog.core.spans.record import KeySource, SpanKind


@pytest.fixture
def otel() -> SpanMaker:
    return SpanMaker()


# ---------------------------------------------------------------------------------------------
# OTel GenAI semantic conventions


def test_genai_chat_span_reads_usage_finish_reason_and_conversation_length(otel: SpanMaker
                                                                           ) -> None:
    messages = json.dumps([
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "hello"}]},
    ])
    output = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "bye"}]}])
    record = record_of(otel.span("chat gpt-4o", chat_attrs(
        120, 30, finish="stop", **{"gen_ai.input.messages": messages,
                                   "gen_ai.output.messages": output})))
    assert record.kind is SpanKind.LLM
    assert (record.input_tokens, record.output_tokens) == (120, 30)
    assert record.finish_reason == "stop"
    assert record.final_answer is True
    assert record.messages == 4  # 3 in + 1 out


def test_genai_legacy_prompt_and_completion_token_names(otel: SpanMaker) -> None:
    record = record_of(otel.span("chat m", {
        "gen_ai.operation.name": "chat",
        "gen_ai.usage.prompt_tokens": 70,
        "gen_ai.usage.completion_tokens": 9,
    }))
    assert (record.input_tokens, record.output_tokens) == (70, 9)


@pytest.mark.parametrize("operation", ["chat", "text_completion", "generate_content",
                                       # Semantic Kernel's own (<= 1.37; text_completions since)
                                       "chat.completions", "chat.streaming_completions",
                                       "text.completions", "text.streaming_completions",
                                       "text_completions"])
def test_genai_llm_operations_are_iterations(otel: SpanMaker, operation: str) -> None:
    assert record_of(otel.span("x", {"gen_ai.operation.name": operation})).kind is SpanKind.LLM


@pytest.mark.parametrize("operation", ["invoke_agent", "invoke_workflow"])
def test_genai_agent_operations(otel: SpanMaker, operation: str) -> None:
    assert record_of(otel.span("x", {"gen_ai.operation.name": operation})).kind is SpanKind.AGENT


def test_genai_create_agent_is_not_a_run(otel: SpanMaker) -> None:
    # DESIGN §3: a span that creates or configures an agent without running it is no run.
    record = record_of(otel.span("create_agent x", {"gen_ai.operation.name": "create_agent"}))
    assert (record.kind, record.creates_agent) == (SpanKind.OTHER, True)


def test_genai_tool_call_finish_reason_is_not_an_answer(otel: SpanMaker) -> None:
    record = record_of(otel.span("chat m", chat_attrs(finish="tool_calls")))
    assert record.finish_reason == "tool_calls"
    assert record.final_answer is False


def test_genai_execute_tool_reads_name_arguments_and_result(otel: SpanMaker) -> None:
    record = record_of(otel.span("execute_tool search", tool_attrs(
        "search", '{"q": "paris", "limit": 3}', "3 hits")))
    assert record.kind is SpanKind.TOOL
    assert record.tool_name == "search"
    assert record.args_brief == '{"limit":3,"q":"paris"}'  # canonical JSON
    assert record.result_brief == "3 hits"


def test_genai_tool_arguments_in_another_key_order_are_the_same_call(otel: SpanMaker) -> None:
    a = record_of(otel.span("execute_tool s", tool_attrs("s", '{"q": "x", "n": 1}', "r")))
    b = record_of(otel.span("execute_tool s", tool_attrs("s", '{"n":1,"q":"x"}', "r")))
    c = record_of(otel.span("execute_tool s", tool_attrs("s", '{"n":2,"q":"x"}', "r")))
    other_tool = record_of(otel.span("execute_tool t", tool_attrs("t", '{"n":1,"q":"x"}', "r")))
    assert a.args_hash == b.args_hash
    assert a.args_hash != c.args_hash
    assert a.args_hash != other_tool.args_hash


def test_genai_tool_name_falls_back_to_span_name(otel: SpanMaker) -> None:
    record = record_of(otel.span("execute_tool fetch_page", {"gen_ai.operation.name":
                                                            "execute_tool"}))
    assert record.tool_name == "fetch_page"


# A tool call no model asked for (Semantic Kernel's kernel.invoke_prompt: the prompt function's
# execute_tool, without gen_ai.tool.call.id): the tracker may make it the invocation (at a trace
# root) or the frame of its run's model loop (inside a run). Anything a model asked for stays a
# tool call.
PROMPT_FUNCTION = tool_attrs("func3f2a", "{}", "[ChatMessageContent(...)]")


@pytest.mark.parametrize("where", ["root", "nested", "watchdog.run.id", "gen_ai.agent.call.id"])
def test_genai_tool_without_a_call_id_is_unasked(otel: SpanMaker, where: str) -> None:
    attrs: dict[str, Any] = dict(PROMPT_FUNCTION)
    parent = None
    if where == "nested":
        parent = otel.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"})
    elif where != "root":
        attrs[where] = "run-1"
    spans = [otel.span("execute_tool func3f2a", attrs, parent=parent)]
    if parent is not None:
        parent.end()
    record = records_of(spans)[0]
    assert record.kind is SpanKind.TOOL and record.unasked is True
    assert record.tool_name == "func3f2a" and record.result_brief == "[ChatMessageContent(...)]"
    empty_id = {**attrs, "gen_ai.tool.call.id": ""}  # an empty id is no id
    assert record_of(otel.span("execute_tool func3f2a", empty_id)).unasked is True


@pytest.mark.parametrize("why", ["call id", "OpenInference", "output tool"])
def test_a_tool_call_that_is_asked_for_is_not_unasked(otel: SpanMaker, why: str) -> None:
    if why == "call id":  # a model asked for it
        attrs = {**PROMPT_FUNCTION, "gen_ai.tool.call.id": "call_1"}
    elif why == "OpenInference":  # no convention there gives tool spans a call id
        attrs = {"openinference.span.kind": "TOOL", "tool.name": "t", "output.value": "x"}
    else:  # the output tool is the answer, not a tool call at all
        attrs = tool_attrs("final_result", '{"a": 1}')
    assert record_of(otel.span("execute_tool func3f2a", attrs)).unasked is False


@pytest.mark.parametrize("compiled", [False, True], ids=["python", "compiled"])
def test_a_tool_call_the_client_refused_is_no_tool_call(otel: SpanMaker, compiled: bool) -> None:
    """The client SDK refused the call (its budget, a stop) and marked the span the framework
    still traced around it: no tool ran, so no tool call and no count of the tool (both
    decodes select the mark)."""
    from watchdog.core.spans import decode as decoding
    from watchdog.core.spans import native

    assert native.AVAILABLE, "the compiled decode is not built (make builds it)"
    before = decoding.compiled
    native.use_native(compiled)
    try:
        _refused_calls(otel)
    finally:
        native.use_native(before is not None)


def _refused_calls(otel: SpanMaker) -> None:
    with otel.agent():
        otel.span("execute_tool search", tool_attrs("search", '{"q": 1}', "2 hits"))
        otel.span("execute_tool search", {**tool_attrs("search", '{"q": 2}', "Not run: ..."),
                                          "watchdog.tool.refused": True})
        otel.span("execute_tool search", {**tool_attrs("search", '{"q": 3}', "1 hit"),
                                          "watchdog.tool.refused": False})
    spans = otel.take()
    assert [record.kind for record in records_of(spans)[:3]] == [
        SpanKind.TOOL, SpanKind.OTHER, SpanKind.TOOL]
    run = only_run(run_spans(spans)[0])
    assert run.tool_calls == 2 and dict(run.tools) == {"search": 2}


def test_genai_tool_without_captured_arguments_is_never_a_repeat(otel: SpanMaker) -> None:
    with otel.agent():
        for _ in range(3):
            otel.span("execute_tool s", tool_attrs("s"))
    tracker, _ = run_spans(otel.take())
    run = only_run(tracker)
    assert run.tool_calls == 3
    assert run.repeated_tool_call == 0


def test_genai_error_status_with_exception_event(otel: SpanMaker) -> None:
    record = record_of(otel.span("execute_tool w", tool_attrs("w"),
                                 exception=FileNotFoundError("no such file /tmp/a1")))
    assert record.error is True
    assert record.error_type == "FileNotFoundError"
    assert record.error_message == "no such file /tmp/a1"  # no "FileNotFoundError: " prefix
    assert record.error_signature is not None


def test_genai_error_type_attribute_wins_over_exception_type(otel: SpanMaker) -> None:
    record = record_of(otel.span("chat m", chat_attrs(**{"error.type": "rate_limited"}),
                                 error="429 Too Many Requests"))
    assert record.error_type == "rate_limited"
    assert record.error_message == "429 Too Many Requests"


def test_error_type_without_error_status_is_not_a_failure(otel: SpanMaker) -> None:
    # An exception event on its own (handled and recorded) does not fail the span.
    span = otel.open("execute_tool w", tool_attrs("w"))
    span.record_exception(ValueError("handled"))
    span.end(end_time=int((T0 + 1) * NS))
    assert record_of(otel.take()[0]).error is False


def test_genai_identity_session_and_agent_name(otel: SpanMaker) -> None:
    record = record_of(otel.span("invoke_agent researcher", {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "researcher",
        "gen_ai.conversation.id": "conv-1",
    }))
    assert record.agent == "researcher"
    assert record.session == "conv-1"
    assert record.service == "test-agent"
    assert record.run_key == "trace:" + record.trace_id
    assert record.key_source is KeySource.TRACE


def test_run_key_precedence() -> None:
    maker = SpanMaker(resource={"watchdog.run.id": "from-resource"})
    explicit = record_of(maker.span("s", {"watchdog.run.id": "from-span",
                                          "gen_ai.agent.call.id": "call-1"}))
    resource = record_of(maker.span("s", {"gen_ai.agent.call.id": "call-1"}))
    assert (explicit.run_key, explicit.key_source) == ("from-span", KeySource.WATCHDOG)
    assert (resource.run_key, resource.key_source) == ("from-resource", KeySource.WATCHDOG)

    plain = SpanMaker()
    call = record_of(plain.span("s", {"gen_ai.agent.call.id": "call-1"}))
    assert (call.run_key, call.key_source) == ("call-1", KeySource.AGENT_CALL)


def test_agent_name_precedence_and_service_fallback(otel: SpanMaker) -> None:
    both = record_of(otel.span("s", {"watchdog.agent.name": "wd", "gen_ai.agent.name": "ga",
                                     "agent.name": "oi"}))
    assert both.agent == "wd"
    assert record_of(otel.span("s", {"agent.name": "oi"})).agent == "oi"
    otel.take()
    with otel.agent("invoke_agent", {}):
        pass
    tracker, _ = run_spans(otel.take())
    assert only_run(tracker).agent_name == "test-agent"  # resource service.name


@pytest.mark.parametrize(("output", "answered"), [
    ('[{"role": "assistant", "parts": [{"type": "text", "content": "4"}]}]', True),
    ("[]", False),
    ("", False),
])
def test_genai_agent_output_messages_are_the_answer(otel: SpanMaker, output: str,
                                                    answered: bool) -> None:
    with otel.agent("invoke_agent a", {"gen_ai.output.messages": output}):
        otel.span("chat m", chat_attrs())  # no finish reason: the agent span decides
    tracker, _ = run_spans(otel.take())
    run = only_run(tracker)
    assert run.has_final_answer is answered
    assert run.terminal_state is (TerminalState.COMPLETED if answered
                                  else TerminalState.NO_RESPONSE)


def test_genai_whole_run(otel: SpanMaker) -> None:
    with otel.agent("invoke_agent planner", {"gen_ai.agent.name": "planner"}) as root:
        otel.span("chat m", chat_attrs(100, 10, finish="tool_calls"), parent=root, start=T0 + 1)
        otel.span("execute_tool ls", tool_attrs("ls", '{"dir": "/"}', "etc usr"), parent=root,
                  start=T0 + 2)
        otel.span("execute_tool cat", tool_attrs("cat", '{"f": "/x"}'), parent=root,
                  start=T0 + 3, exception=OSError("permission denied"))
        otel.span("chat m", chat_attrs(200, 20, finish="stop"), parent=root, start=T0 + 4)
    tracker, result = run_spans(otel.take())
    run = only_run(tracker)
    signals = run.signals(T0 + 100)
    assert signals["agent"] == "planner"
    assert signals["iterations"] == 2
    assert signals["tool_calls"] == 2
    assert signals["tools"] == {"ls": 1, "cat": 1}
    assert (signals["input_tokens"], signals["output_tokens"], signals["total_tokens"]) == (
        300, 30, 330)
    assert signals["errors"] == 1
    assert signals["last_error"] == "OSError: permission denied"
    # the model call that reads a tool's error is no recovery: only a working tool call is
    assert signals["consecutive_errors"] == 1
    assert signals["has_final_answer"] is True
    assert signals["ended"] is True
    assert run.terminal_state is TerminalState.COMPLETED
    # metric deltas (the agent label of child spans depends on what had arrived before them)
    assert sorted(tool for _, tool in result.tool_calls.elements()) == ["cat", "ls"]
    assert sum(n for (_, d), n in result.tokens.items() if d == "input") == 300
    assert sum(n for (_, d), n in result.tokens.items() if d == "output") == 30
    assert [t for _, t in result.errors.elements()] == ["OSError"]


# ---------------------------------------------------------------------------------------------
# OpenInference (openinference.semconv.trace.SpanAttributes / MessageAttributes)


def test_openinference_llm_span(otel: SpanMaker) -> None:
    record = record_of(otel.span("ChatOpenAI", {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o",
        "llm.token_count.prompt": 80,
        "llm.token_count.completion": 12,
        "llm.token_count.total": 92,
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": "be brief",
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": "hi",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "hello",
        "llm.finish_reason": "stop",
        "session.id": "sess-9",
    }))
    assert record.kind is SpanKind.LLM
    assert (record.input_tokens, record.output_tokens) == (80, 12)
    assert record.messages == 3
    assert record.finish_reason == "stop"
    assert record.final_answer is True
    assert record.session == "sess-9"


@pytest.mark.parametrize("attrs", [
    # a request built, not sent (LlamaIndex's _prepare_chat_with_tools)
    {"input.value": '{"messages": ["..."], "tools": []}',
     "output.value": '{"messages": ["..."], "tools": []}'},
    # a method around the one that called the model (a subclass's astream_chat around its
    # parent's): only the inner span has the messages
    {"input.value": '{"messages": ["..."], "kwargs": {}}'},
], ids=["helper", "wrapper"])
def test_openinference_llm_kind_span_without_a_model_call(otel: SpanMaker,
                                                          attrs: dict[str, Any]) -> None:
    # Its input recorded, yet no messages, finish reason or usage: the instrumentation gives
    # the model kind to every traced method of a model object; this one called no model.
    record = record_of(otel.span("OpenAILike._prepare_chat_with_tools",
                                 {"openinference.span.kind": "LLM", **attrs}))
    assert record.kind is SpanKind.OTHER and not record.final_answer


def test_openinference_llm_span_recording_nothing_is_a_model_call(otel: SpanMaker) -> None:
    # the OpenAI Agents SDK's `generation` for an application's own model carries nothing
    assert record_of(otel.span("generation", {"openinference.span.kind": "LLM"})).kind \
        is SpanKind.LLM
    # ... and a model-kind span that failed is a failed model call, whatever it recorded
    failed = record_of(otel.span("OpenAILike.astream_chat", {
        "openinference.span.kind": "LLM", "input.value": '{"messages": []}'},
        exception=RuntimeError("connection refused")))
    assert failed.kind is SpanKind.LLM and failed.error


def test_workflow_span_name_is_no_agent_name(otel: SpanMaker) -> None:
    # smolagents names its agent spans "<agent name>.run"; a workflow root named after the
    # code that frames the run (LlamaIndex's "FunctionAgent.run", a CHAIN) names no agent
    record = record_of(otel.span("FunctionAgent.run", {"openinference.span.kind": "CHAIN"}))
    assert record.kind is SpanKind.AGENT and record.workflow and record.agent is None
    agent = record_of(otel.span("smol_researcher.run", {"openinference.span.kind": "AGENT"}))
    assert agent.agent == "smol_researcher"


def test_openinference_total_tokens_only(otel: SpanMaker) -> None:
    record = record_of(otel.span("llm", {"openinference.span.kind": "LLM",
                                         "llm.token_count.total": 40}))
    assert record.input_tokens + record.output_tokens == 40


def test_openinference_tool_span(otel: SpanMaker) -> None:
    record = record_of(otel.span("search", {
        "openinference.span.kind": "TOOL",
        "tool.name": "search",
        "tool.parameters": '{"type": "object"}',  # the schema, not the call's arguments
        "input.value": '{"query": "x"}',
        "output.value": "found x",
    }))
    assert record.kind is SpanKind.TOOL
    assert record.tool_name == "search"
    assert record.args_brief == '{"query":"x"}'
    assert record.result_brief == "found x"


@pytest.mark.parametrize(("metadata", "agent"), [
    ('{"lc_agent_name": "lc_researcher", "langgraph_node": "tools"}', "lc_researcher"),
    ('{"lc_agent_name": "lc_researcher"', None),  # cut: not JSON, no name, no failure
    ('["lc_agent_name"]', None),
    ('{"lc_agent_name": 7}', None),
    ("", None),
])
def test_openinference_langchain_agent_name_from_metadata(otel: SpanMaker, metadata: str,
                                                          agent: str | None) -> None:
    record = record_of(otel.span("lookup", {"openinference.span.kind": "TOOL",
                                            "metadata": metadata}))
    assert record.kind is SpanKind.TOOL
    assert record.agent == agent


def test_openinference_langchain_span_named_after_its_agent_is_the_agent(otel: SpanMaker
                                                                         ) -> None:
    metadata = '{"lc_agent_name": "lc_researcher", "langgraph_node": "tools"}'
    tool = otel.open("research", {"openinference.span.kind": "TOOL"})
    nested = record_of(otel.span("lc_researcher", {"openinference.span.kind": "CHAIN",
                                                   "metadata": metadata}, parent=tool))
    step = record_of(otel.span("model", {"openinference.span.kind": "CHAIN",
                                         "metadata": metadata}, parent=tool))
    assert (nested.kind, nested.agent) == (SpanKind.AGENT, "lc_researcher")
    assert (step.kind, step.agent) == (SpanKind.OTHER, "lc_researcher")


def test_openinference_langgraph_node_named_agent_is_a_step(otel: SpanMaker) -> None:
    node = record_of(otel.span("agent", {
        "openinference.span.kind": "AGENT",
        "metadata": '{"ls_integration": "langgraph", "langgraph_node": "agent"}'}))
    agent = record_of(otel.span("agent", {"openinference.span.kind": "AGENT"}))
    assert node.kind is SpanKind.OTHER
    assert agent.kind is SpanKind.AGENT


def test_openlit_agent_kind_steps_and_handoffs_are_no_agents(otel: SpanMaker) -> None:
    # OpenLIT gives the agent operation to spans that are no agent: the OpenAI Agents SDK's task
    # and turn spans (bare "invoke_agent", no name), LangGraph's nodes and LangChain's chains
    # named "agent"; a handoff names the agent handed to and the one handing off
    root = otel.open("invoke_workflow Agent workflow", {
        "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "Agent workflow"})
    turn = record_of(otel.span("invoke_agent", {"gen_ai.operation.name": "invoke_agent"},
                               parent=root))
    node = record_of(otel.span("invoke_agent model", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "model",
        "gen_ai.provider.name": "langgraph", "gen_ai.application_name": "app"}, parent=root))
    chain = record_of(otel.span("invoke_agent agent", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agent",
        "gen_ai.provider.name": "langchain", "gen_ai.application_name": "app"}, parent=root))
    handoff = record_of(otel.span("invoke_agent billing", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing",
        "gen_ai.agent.source": "triage"}, parent=root))
    assert [(r.kind, r.agent) for r in (turn, node, chain)] == [(SpanKind.OTHER, None)] * 3
    assert (handoff.kind, handoff.agent) == (SpanKind.TOOL, None)
    # the same names elsewhere are agents: a named agent, an unnamed one at the root, and
    # OpenLLMetry's sub-agent (which says "langgraph" too, but is no OpenLIT span)
    named = record_of(otel.span("invoke_agent", {"gen_ai.operation.name": "invoke_agent",
                                                 "gen_ai.agent.name": "researcher"},
                                parent=root))
    unnamed_root = record_of(otel.span("invoke_agent", {"gen_ai.operation.name": "invoke_agent"}))
    sub_agent = record_of(otel.span("invoke_agent lc_researcher", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "lc_researcher",
        "gen_ai.provider.name": "langgraph"}, parent=root))
    assert [(r.kind, r.agent) for r in (named, sub_agent)] == [
        (SpanKind.AGENT, "researcher"), (SpanKind.AGENT, "lc_researcher")]
    assert unnamed_root.kind is SpanKind.AGENT


def test_a_workflow_span_without_its_operation_is_one_by_its_name(otel: SpanMaker) -> None:
    # OpenLIT's LangGraph root that ended in an error keeps only its name and workflow name
    record = record_of(otel.span("invoke_workflow lc_researcher",
                                 {"gen_ai.workflow.name": "lc_researcher"},
                                 error="GraphRecursionError: Recursion limit of 6 reached"))
    assert (record.kind, record.workflow, record.agent) == (SpanKind.AGENT, True,
                                                            "lc_researcher")


@pytest.mark.parametrize(("result", "failed"), [
    ("content='backend unavailable' name='lookup' tool_call_id='call_1' status='error'", True),
    ('content="it\'s down" name=\'lookup\' tool_call_id=\'c\' status=\'error\'', True),
    ("content='Error: none' name='lookup' tool_call_id='call_1' status='success'", False),
    ("the status='error'", False),
])
def test_a_tool_message_repr_with_status_error_is_a_failed_call(
        otel: SpanMaker, result: str, failed: bool) -> None:
    # OpenLIT writes LangChain's ToolMessage as its repr: its status field says it failed
    record = record_of(otel.span("execute_tool lookup", tool_attrs("lookup", "{}", result)))
    assert record.error is failed
    if failed:
        assert record.error_type == "tool_error"
        assert record.error_message in {"backend unavailable", "it's down"}


@pytest.mark.parametrize(("output", "message"), [
    ("status='failure' result=None error='backend unavailable for broken' "
     "updated_session_state=None images=None videos=None audios=None files=None",
     "backend unavailable for broken"),
    ('status=\'failure\' result=None error="it\'s down"', "it's down"),
    ("status='success' result='ok' error=None updated_session_state=None", None),
    ("the status='failure' of the run", None),
])
def test_an_agno_tool_execution_repr_with_status_failure_is_a_failed_call(
        otel: SpanMaker, output: str, message: str | None) -> None:
    # OpenLLMetry writes Agno's ToolExecution as the tool span's output (as recorded: a tool
    # that raised, its span ended OK)
    record = record_of(otel.span("lookup.tool", {
        "traceloop.span.kind": "tool", "traceloop.entity.name": "lookup",
        "traceloop.entity.output": output}))
    assert record.kind is SpanKind.TOOL
    assert record.error is (message is not None)
    if message is not None:
        assert (record.error_type, record.error_message) == ("tool_error", message)


def test_openinference_agent_span_output_is_the_answer(otel: SpanMaker) -> None:
    record = record_of(otel.span("Agent", {
        "openinference.span.kind": "AGENT",
        "agent.name": "helper",
        "output.value": "the answer is 4",
    }))
    assert record.kind is SpanKind.AGENT
    assert record.agent == "helper"
    assert record.final_answer is True
    assert record.final_output == "the answer is 4"


def test_openinference_nested_chain_is_not_work(otel: SpanMaker) -> None:
    with otel.agent("Agent", {"openinference.span.kind": "AGENT"}) as root:
        otel.span("RunnableSequence", {"openinference.span.kind": "CHAIN",
                                       "output.value": "intermediate"}, parent=root)
    records = records_of(otel.take())
    chain = next(r for r in records if r.name == "RunnableSequence")
    assert chain.kind is SpanKind.OTHER
    assert chain.final_answer is False


def test_openinference_langgraph_run_with_chain_root(otel: SpanMaker) -> None:
    """LangChain/LangGraph traced with OpenInference: the root is a CHAIN span whose
    ``output.value`` is the run's answer."""
    root = otel.open("LangGraph", {"openinference.span.kind": "CHAIN",
                                   "input.value": '{"messages": ["hi"]}',
                                   "output.value": '{"messages": ["hi", "hello"]}',
                                   "session.id": "thread-7"})
    otel.span("ChatOpenAI", {"openinference.span.kind": "LLM", "llm.token_count.prompt": 5,
                             "llm.token_count.completion": 2}, parent=root)
    otel.span("agent", {"openinference.span.kind": "CHAIN", "output.value": "x"}, parent=root)
    otel.span("get_weather", {"openinference.span.kind": "TOOL", "tool.name": "get_weather",
                              "input.value": '{"city": "Oslo"}', "output.value": "rain"},
              parent=root)
    root.end(end_time=int((T0 + 5) * NS))
    tracker, _ = run_spans(otel.take())
    run = only_run(tracker)
    assert run.session == "thread-7"
    assert (run.iterations, run.tool_calls, run.tools) == (1, 1, {"get_weather": 1})
    assert run.ended
    assert run.has_final_answer is True
    assert run.terminal_state is TerminalState.COMPLETED


def test_openinference_flat_tool_calls_ask_for_tools(otel: SpanMaker) -> None:
    """No finish reason and an output text that hides the request (OpenInference's Haystack
    writes a Python repr): the flattened output message's tool calls say it asked for tools."""
    record = record_of(otel.span("OpenAIChatGenerator.run", {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup",
        "output.value": '{"replies": ["ChatMessage(_content=[ToolCall(tool_name=\'lookup\')])"]}',
    }))
    assert record.requested_tools and not record.final_answer
    text = record_of(otel.span("OpenAIChatGenerator.run", {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "done",
        "output.value": '{"replies": ["ChatMessage(_content=[TextContent(text=\'done\')])"]}',
    }))
    assert text.final_answer and not text.requested_tools


def test_chain_root_output_is_no_answer_after_a_tool_request(otel: SpanMaker) -> None:
    """A framing span returns whatever the loop left (OpenInference's Haystack ``Agent.run``
    at ``max_agent_steps``: the whole result, its last message a tool's): when the last model
    call below it asked for tools, that is no answer."""
    root = otel.open("Agent.run", {"openinference.span.kind": "CHAIN",
                                   "output.value": '{"messages": ["...", "tool result"]}'})
    otel.span("ChatOpenAI", {"openinference.span.kind": "LLM", "llm.finish_reason": "tool_calls",
                             "llm.output_messages.0.message.role": "assistant"}, parent=root)
    root.end(end_time=int((T0 + 5) * NS))
    tracker, _ = run_spans(otel.take())
    run = only_run(tracker)
    assert run.has_final_answer is False
    assert run.terminal_state is TerminalState.NO_RESPONSE


def test_openinference_failed_chain_root_ends_the_run_in_error(otel: SpanMaker) -> None:
    root = otel.open("LangGraph", {"openinference.span.kind": "CHAIN"})
    otel.span("ChatOpenAI", {"openinference.span.kind": "LLM"}, parent=root)
    root.record_exception(KeyError("state"))
    root.set_status(Status(StatusCode.ERROR, "KeyError: 'state'"))
    root.end(end_time=int((T0 + 5) * NS))
    tracker, _ = run_spans(otel.take())
    run = only_run(tracker)
    assert run.terminal_state is TerminalState.ERROR
    assert run.terminal_reason == "KeyError"


# ---------------------------------------------------------------------------------------------
# OpenLLMetry / Traceloop (opentelemetry.semconv_ai.SpanAttributes)


def _traceloop_llm_attrs(**extra: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "llm.request.type": "chat",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.prompt.0.role": "system",
        "gen_ai.prompt.0.content": "be brief",
        "gen_ai.prompt.1.role": "user",
        "gen_ai.prompt.1.content": "weather in Oslo?",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "Rain.",
        "gen_ai.completion.0.finish_reason": "stop",
        "gen_ai.usage.prompt_tokens": 33,
        "gen_ai.usage.completion_tokens": 4,
        "llm.usage.total_tokens": 37,
    }
    attrs.update(extra)
    return attrs


def test_openllmetry_llm_span(otel: SpanMaker) -> None:
    record = record_of(otel.span("openai.chat", _traceloop_llm_attrs()))
    assert record.kind is SpanKind.LLM
    assert (record.input_tokens, record.output_tokens) == (33, 4)
    assert record.messages == 3
    assert record.finish_reason == "stop"
    assert record.final_answer is True


def test_openllmetry_total_tokens_only(otel: SpanMaker) -> None:
    record = record_of(otel.span("openai.chat", {"llm.request.type": "chat",
                                                 "llm.usage.total_tokens": 50}))
    assert record.input_tokens + record.output_tokens == 50


@pytest.mark.parametrize("request_type", ["embedding", "rerank"])
def test_openllmetry_embedding_and_rerank_calls_are_not_iterations(otel: SpanMaker,
                                                                   request_type: str) -> None:
    record = record_of(otel.span("openai.embeddings", {"llm.request.type": request_type,
                                                       "llm.usage.total_tokens": 8}))
    assert record.kind is not SpanKind.LLM


def test_openllmetry_tool_and_workflow(otel: SpanMaker) -> None:
    root = otel.open("weather_report.workflow", {
        "traceloop.span.kind": "workflow",
        "traceloop.entity.name": "weather_report",
        "traceloop.workflow.name": "weather_report",
    })
    otel.span("plan.task", {"traceloop.span.kind": "task", "traceloop.entity.name": "plan",
                            "traceloop.entity.output": '{"steps": 1}'}, parent=root)
    otel.span("openai.chat", _traceloop_llm_attrs(**{"gen_ai.completion.0.finish_reason":
                                                     "tool_calls"}), parent=root)
    for _ in range(2):
        otel.span("get_weather.tool", {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "get_weather",
            "traceloop.entity.input": '{"args": [], "kwargs": {"city": "Oslo"}}',
            "traceloop.entity.output": '"rain"',
        }, parent=root)
    otel.span("openai.chat", _traceloop_llm_attrs(), parent=root)
    root.set_attribute("traceloop.entity.output", '"Rain in Oslo."')
    root.end(end_time=int((T0 + 9) * NS))
    tracker, _ = run_spans(otel.take())
    run = only_run(tracker)
    assert run.agent_name == "weather_report"
    assert run.iterations == 2
    assert (run.input_tokens, run.output_tokens) == (66, 8)
    assert run.tools == {"get_weather": 2}
    assert run.repeated_tool_call == 2
    assert run.ended and run.has_final_answer
    assert run.final_output == "Rain in Oslo."  # (OpenLLMetry JSON-encodes it: read decoded)
    assert run.terminal_state is TerminalState.COMPLETED


# ---------------------------------------------------------------------------------------------
# LangChain: a tool error the tool handles itself (handle_tool_error) ends its span OK; only the
# ToolMessage it returns says status "error". The shapes are the tracers' own (recorded from
# langchain-core 1.7 under openinference-instrumentation-langchain 0.1.80 and
# opentelemetry-instrumentation-langchain 0.62).


def _oi_tool_message(content: Any, status: str) -> str:
    return json.dumps({"type": "tool", "data": {
        "content": content, "additional_kwargs": {}, "response_metadata": {}, "type": "tool",
        "name": "fetch", "id": None, "tool_call_id": "call_1", "artifact": None,
        "status": status}})


def _traceloop_tool_message(content: Any, status: str) -> str:
    return json.dumps({"output": {
        "lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"],
        "kwargs": {"content": content, "type": "tool", "name": "fetch",
                   "tool_call_id": "call_1", "status": status}},
        "kwargs": {"tags": ["seq:step:1"], "color": "green", "name": "fetch"}})


def _oi_tool(output: str) -> dict[str, Any]:
    return {"openinference.span.kind": "TOOL", "tool.name": "fetch",
            "input.value": '{"url": "http://backend/data"}', "output.value": output}


def _traceloop_tool(output: str) -> dict[str, Any]:
    return {"traceloop.span.kind": "tool", "traceloop.entity.name": "fetch",
            "traceloop.entity.input": '{"input_str": "{}", "inputs": {"url": "http://backend/data"}}',
            "traceloop.entity.output": output}


LANGCHAIN_TRACERS = {"openinference": (_oi_tool, _oi_tool_message),
                     "openllmetry": (_traceloop_tool, _traceloop_tool_message)}


@pytest.mark.parametrize("tracer", list(LANGCHAIN_TRACERS))
@pytest.mark.parametrize("content", [
    "connection refused: http://backend/data",
    [{"type": "text", "text": "connection refused: http://backend/data"}],
], ids=["text", "content-blocks"])
def test_langchain_tool_message_with_status_error_is_a_tool_error(
        otel: SpanMaker, tracer: str, content: Any) -> None:
    span_attrs, message = LANGCHAIN_TRACERS[tracer]
    record = record_of(otel.span("fetch", span_attrs(message(content, "error"))))
    assert record.kind is SpanKind.TOOL and record.tool_name == "fetch"
    assert record.error is True
    assert (record.error_type, record.error_message) == (
        "tool_error", "connection refused: http://backend/data")
    assert record.result_brief is not None  # the result is still what the model saw


@pytest.mark.parametrize("tracer", list(LANGCHAIN_TRACERS))
@pytest.mark.parametrize("output", [
    "success-message",  # a ToolMessage with status success whose text is an error message
    '{"status": "error", "message": "no such key"}',  # a tool's own JSON: no ToolMessage
    "Error: no such key",
    '"error"',
    "{not json, \"type\": \"tool\", \"status\": \"error\"",
])
def test_a_tool_result_that_mentions_an_error_is_no_error(
        otel: SpanMaker, tracer: str, output: str) -> None:
    span_attrs, message = LANGCHAIN_TRACERS[tracer]
    if output == "success-message":
        output = message("Error: no such key. Please fix your mistakes.", "success")
    record = record_of(otel.span("fetch", span_attrs(output)))
    assert record.kind is SpanKind.TOOL
    assert record.error is False and record.error_type is None


@pytest.mark.parametrize("tracer", list(LANGCHAIN_TRACERS))
def test_langchain_tool_message_on_a_chain_span_is_not_counted(
        otel: SpanMaker, tracer: str) -> None:
    """LangGraph's ``tools`` node repeats the tool's messages in its own output: plumbing."""
    _, message = LANGCHAIN_TRACERS[tracer]
    attrs = ({"openinference.span.kind": "CHAIN", "output.value": message("boom", "error")}
             if tracer == "openinference" else
             {"traceloop.span.kind": "task", "traceloop.entity.name": "tools",
              "traceloop.entity.output": message("boom", "error")})
    with otel.agent("invoke_agent lc") as root:
        otel.span("tools", attrs, parent=root)
    record = next(r for r in records_of(otel.take()) if r.name == "tools")
    assert record.kind is SpanKind.OTHER and record.error is False


@pytest.mark.parametrize("tracer", list(LANGCHAIN_TRACERS))
def test_langchain_handled_tool_errors_repeat_as_one_error(otel: SpanMaker, tracer: str
                                                           ) -> None:
    span_attrs, message = LANGCHAIN_TRACERS[tracer]
    with otel.agent("invoke_agent lc") as root:
        for index in range(5):
            otel.span("fetch", span_attrs(message("connection refused: http://backend/data",
                                                  "error")),
                      parent=root, start=T0 + index)
    tracker, result = run_spans(otel.take())
    run = only_run(tracker)
    assert (run.tool_calls, run.errors, run.repeated_error) == (5, 5, 5)
    assert run.consecutive_errors == 5
    assert run.last_error == "tool_error: connection refused: http://backend/data"
    assert sum(result.errors.values()) == 5


# ---------------------------------------------------------------------------------------------
# pydantic-ai, really running (FunctionModel stands in for the LLM; everything else is real)


def _requests(messages: list[ModelMessage]) -> int:
    return sum(isinstance(m, ModelRequest) for m in messages)


Instrument = Callable[..., SpanMaker]


@pytest.fixture
def instrument() -> Iterator[Instrument]:
    def start(version: int = 5) -> SpanMaker:
        maker = SpanMaker()
        Agent.instrument_all(InstrumentationSettings(tracer_provider=maker.provider,
                                                     version=version))
        return maker

    yield start
    Agent.instrument_all(False)


def _tools_then_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if _requests(messages) == 1:
        return ModelResponse(
            parts=[ToolCallPart("read", {"path": "/etc/hosts", "lines": 5}, tool_call_id="c1"),
                   ToolCallPart("read", {"lines": 5, "path": "/etc/hosts"}, tool_call_id="c2"),
                   ToolCallPart("count", {"n": 3}, tool_call_id="c3")],
            usage=RequestUsage(input_tokens=100, output_tokens=20), finish_reason="tool_call")
    return ModelResponse(parts=[TextPart("Final answer: 42")],
                         usage=RequestUsage(input_tokens=200, output_tokens=7),
                         finish_reason="stop")


def _agent_with_tools(model: FunctionModel, **kwargs: Any) -> Agent[None, Any]:
    """The tools are coroutines: the calls of one model response run as tasks on the agent's
    loop and end in the order they were asked for (sync tools run in a thread pool and end in
    any order, which makes order-dependent signals such as cycle_repeats differ between runs)."""
    agent: Agent[None, Any] = Agent(model, name="reader", **kwargs)

    @agent.tool_plain
    async def read(path: str, lines: int) -> str:
        return f"{lines} lines of {path}"

    @agent.tool_plain
    async def count(n: int) -> dict[str, int]:
        return {"count": n * 2}

    return agent


def _track(spans: list[ReadableSpan]) -> RunTracker:
    now = max(s.end_time or 0 for s in spans) / NS + 1
    tracker, _ = run_spans(spans, now=now)
    return tracker


def test_pydantic_ai_tool_calls_repeats_tokens_and_final_answer(instrument: Instrument) -> None:
    otel = instrument()
    result = _agent_with_tools(FunctionModel(_tools_then_answer)).run_sync("What is it?")
    assert result.output == "Final answer: 42"
    spans = otel.take()
    run = only_run(_track(spans))

    agent_span = next(s for s in spans if s.name == "invoke_agent reader")
    assert run.key == agent_span.attributes["gen_ai.agent.call.id"]
    assert run.key_source is KeySource.AGENT_CALL
    assert run.session == agent_span.attributes["gen_ai.conversation.id"]
    assert run.agent_name == "reader"
    assert run.iterations == 2
    assert run.tool_calls == 3
    assert run.tools == {"read": 2, "count": 1}
    assert run.repeated_tool_call == 2  # same arguments, keys in another order
    assert run.messages == 4
    assert run.terminal_state is TerminalState.COMPLETED
    assert run.has_final_answer is True
    assert run.final_output == "Final answer: 42"


def test_pydantic_ai_aggregated_usage_is_not_counted_twice(instrument: Instrument) -> None:
    otel = instrument()
    _agent_with_tools(FunctionModel(_tools_then_answer)).run_sync("What is it?")
    spans = otel.take()
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    agent_span = next(s for s in spans if s.attributes.get("gen_ai.operation.name")
                      == "invoke_agent")
    chat_input = sum(s.attributes["gen_ai.usage.input_tokens"] for s in chats)
    chat_output = sum(s.attributes["gen_ai.usage.output_tokens"] for s in chats)
    # the run-level aggregate really is there, and equals the sum of the chat spans
    assert agent_span.attributes["gen_ai.aggregated_usage.input_tokens"] == chat_input == 300
    assert agent_span.attributes["gen_ai.aggregated_usage.output_tokens"] == chat_output == 27
    run = only_run(_track(spans))
    assert (run.input_tokens, run.output_tokens) == (chat_input, chat_output)


def test_pydantic_ai_tool_exception_is_an_error_run(instrument: Instrument) -> None:
    otel = instrument()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("write_file", {"path": "/tmp/x/f"})],
                             usage=RequestUsage(input_tokens=50, output_tokens=10))

    agent: Agent[None, str] = Agent(FunctionModel(model), name="writer")

    @agent.tool_plain
    def write_file(path: str) -> str:
        raise RuntimeError(f"disk {path} full")

    with pytest.raises(RuntimeError):
        agent.run_sync("Write it")
    run = only_run(_track(otel.take()))
    assert run.errors == 1  # the agent span repeats the tool's error; it is not counted again
    assert run.consecutive_errors == 1
    assert run.last_error == "RuntimeError: disk /tmp/x/f full"  # type and message
    assert run.terminal_state is TerminalState.ERROR
    assert run.terminal_reason == "RuntimeError"
    assert run.has_final_answer is False


def test_pydantic_ai_model_retry_counts_errors_until_a_success(instrument: Instrument) -> None:
    otel = instrument()
    calls = {"n": 0}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = _requests(messages)
        if step > 3:
            return ModelResponse(parts=[TextPart("done")], finish_reason="stop")
        return ModelResponse(parts=[ToolCallPart("flaky", {"attempt": step})])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="retrier")

    @agent.tool_plain(retries=3)
    def flaky(attempt: int) -> str:
        calls["n"] += 1
        if calls["n"] < 3:
            raise ModelRetry(f"try again (call {calls['n']})")
        return "ok"

    assert agent.run_sync("go").output == "done"
    spans = otel.take()
    tracker = RunTracker()
    tools = [s for s in spans if s.name == "execute_tool flaky"]
    # after the two failed attempts: two consecutive errors with one masked signature
    first_two = [s for s in spans if s.end_time <= tools[1].end_time]
    run = tracker.apply(records_of(first_two), T0).touched.popitem()[1]
    assert (run.errors, run.consecutive_errors, run.repeated_error) == (2, 2, 2)
    assert run.last_error.startswith("pydantic_ai.exceptions.ToolRetryError: try again")
    tracker.apply(records_of([s for s in spans if s not in first_two]), T0)
    assert (run.errors, run.consecutive_errors, run.tool_calls) == (2, 0, 3)
    assert run.terminal_state is TerminalState.COMPLETED


def test_pydantic_ai_usage_limit_is_tool_limit_reached(instrument: Instrument) -> None:
    otel = instrument()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("ping", {"i": _requests(messages)})],
                             usage=RequestUsage(input_tokens=50, output_tokens=10))

    agent: Agent[None, str] = Agent(FunctionModel(model), name="looper")

    @agent.tool_plain
    def ping(i: int) -> str:
        return f"pong {i}"

    with pytest.raises(UsageLimitExceeded):
        agent.run_sync("loop", usage_limits=UsageLimits(request_limit=3))
    run = only_run(_track(otel.take()))
    assert run.iterations == 3
    assert run.tool_calls == 3
    assert run.errors == 0  # the framework stopped it; no span of the agent's work failed
    assert run.terminal_state is TerminalState.TOOL_LIMIT_REACHED
    assert run.terminal_reason == "UsageLimitExceeded"
    assert run.has_final_answer is False


class Population(BaseModel):
    city: str
    population: int


def _lookup_then_output_tool(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if _requests(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": "Paris"})])
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name,
                                             {"city": "Paris", "population": 2100000})])


def _lookup_agent(output_type: Any) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(FunctionModel(_lookup_then_output_tool), name="geo",
                                    output_type=output_type)

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f"{q}: pop 2.1M"

    return agent


def test_pydantic_ai_structured_output_is_an_answer_not_a_tool_call(
        instrument: Instrument) -> None:
    otel = instrument()
    output = _lookup_agent(Population).run_sync("Population of Paris?").output
    assert output == Population(city="Paris", population=2100000)
    run = only_run(_track(otel.take()))
    assert run.tool_calls == 1
    assert run.tools == {"lookup": 1}
    assert run.has_final_answer is True
    assert run.terminal_state is TerminalState.COMPLETED


def population_text(city: str, population: int) -> str:
    """The run output: an output function, run through the ``final_result`` output tool."""
    return f"{city} has {population} people"


def test_pydantic_ai_output_function_span_is_a_final_answer(instrument: Instrument) -> None:
    otel = instrument()
    assert _lookup_agent(population_text).run_sync("Paris?").output == "Paris has 2100000 people"
    spans = otel.take()
    assert any(s.name == "execute_tool final_result" for s in spans)
    children = [s for s in spans if s.parent is not None]
    tracker = RunTracker()
    tracker.apply(records_of(children), T0)  # the run so far, before its agent span arrives
    run = only_run(tracker)
    assert not run.ended
    assert run.tool_calls == 1
    assert "final_result" not in run.tools
    assert run.has_final_answer is True


@pytest.mark.filterwarnings("ignore:Instrumentation format versions")
def test_pydantic_ai_instrumentation_version_2_counts_like_version_5(
        instrument: Instrument) -> None:
    signals = {}
    for version in (2, 5):
        otel = instrument(version)
        _agent_with_tools(FunctionModel(_tools_then_answer)).run_sync("What is it?")
        spans = otel.take()
        names = {s.name for s in spans}
        if version == 2:
            assert {"agent run", "running tool"} <= names
            assert any("tool_arguments" in s.attributes for s in spans)
        else:
            assert {"invoke_agent reader", "execute_tool read"} <= names
        run = only_run(_track(spans))
        signals[version] = {k: v for k, v in run.signals(0.0).items()
                            if k not in ("id", "session", "trace_id", "elapsed_seconds")}
        signals[version]["terminal_state"] = run.terminal_state
    assert signals[2] == signals[5]
    assert signals[5]["tool_calls"] == 3
    assert signals[5]["repeated_tool_call"] == 2
    assert signals[5]["terminal_state"] is TerminalState.COMPLETED


# ---------------------------------------------------------------------------------------------
# Rejections and OTLP/JSON


def test_spans_without_ids_are_rejected_and_counted_others_kept(otel: SpanMaker) -> None:
    for i in range(4):
        otel.span(f"execute_tool t{i}", tool_attrs(f"t{i}"))
    request = encode(otel.take())
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].trace_id = b""
    spans[1].trace_id = b"\0" * 16
    spans[2].span_id = b"\0" * 8
    decoded = records_from(parse_protobuf(request.SerializeToString()))
    assert [r.tool_name for r in decoded.records] == ["t3"]
    assert decoded.rejected == {"invalid_trace_id": 2, "invalid_span_id": 1}
    assert decoded.rejected_count == 3
    assert "rejected 3 span(s)" in decoded.message()


def test_a_time_that_is_none_is_taken_from_the_other_a_span_with_neither_rejected(
        otel: SpanMaker) -> None:
    """A start or end that cannot be a span's time (0, OTLP's "unknown"; microseconds, which
    read as January 1970) is taken from the other; a span with neither is
    refused and counted, the others kept."""
    for i in range(5):
        otel.span(f"execute_tool t{i}", tool_attrs(f"t{i}"))
    request = encode(otel.take())
    spans = request.resource_spans[0].scope_spans[0].spans
    right = [(span.start_time_unix_nano, span.end_time_unix_nano) for span in spans]
    spans[0].start_time_unix_nano = 0
    spans[1].end_time_unix_nano = 1_700_000_000  # seconds, not nanoseconds
    spans[2].start_time_unix_nano = spans[2].end_time_unix_nano = 0
    spans[3].start_time_unix_nano //= 1000
    spans[3].end_time_unix_nano //= 1000
    decoded = records_from(parse_protobuf(request.SerializeToString()))
    assert {r.tool_name: (r.start_ns, r.end_ns) for r in decoded.records} == {
        "t0": (right[0][1], right[0][1]), "t1": (right[1][0], right[1][0]), "t4": right[4]}
    assert decoded.rejected == {"invalid_timestamps": 2}
    assert "span has no valid time: start 0 ns, end 0 ns since the epoch" in decoded.message()


def _otlp_json(request: Any) -> bytes:
    """OTLP/JSON as the spec defines it: protobuf JSON mapping, but hex trace/span ids and
    integer enums."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for field in ("traceId", "spanId", "parentSpanId"):
                    if field in span:
                        span[field] = base64.b64decode(span[field]).hex()
    return json.dumps(document).encode()


def test_otlp_json_with_hex_ids_decodes_like_protobuf(otel: SpanMaker) -> None:
    with otel.agent("invoke_agent j", {"gen_ai.agent.name": "j"}) as root:
        otel.span("chat m", chat_attrs(11, 2), parent=root)
        otel.span("execute_tool t", tool_attrs("t", '{"a": 1}', "ok"), parent=root,
                  exception=ValueError("bad 42"))
    spans = otel.take()
    body = _otlp_json(encode(spans))
    assert json.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] == (
        format(spans[0].context.trace_id, "032x"))
    from_json = records_from(parse_json(body)).records
    from_proto = decode(spans).records
    assert len(from_json) == 3
    assert from_json == from_proto


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b"\xff\xfe"])
def test_invalid_json_raises_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        parse_json(body)


def test_a_json_id_that_is_not_hex_is_no_id() -> None:
    """As a protobuf id of the wrong length: the span is rejected by itself, not the request."""
    body = (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz-not-hex", '
            b'"spanId": "AQIDBAUGBwg=", "parentSpanId": "base64/="}]}]}]}')
    (span,) = parse_json(body).resource_spans[0].scope_spans[0].spans
    assert (span.trace_id, span.span_id, span.parent_span_id) == (b"", b"", b"")
    assert records_from(parse_json(body)).rejected == {"invalid_trace_id": 1}


def test_invalid_protobuf_raises_decode_error() -> None:
    with pytest.raises(DecodeError):
        parse_protobuf(b"\x0a\xff\xff\xff")


# ---------------------------------------------------------------------------------------------
# LangSmith's own OpenTelemetry export (langsmith[otel]) of LangChain runs


def _llm_result(finish: str, text: str = "", tool_calls: list[object] | None = None) -> str:
    message = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages",
                                                      "AIMessage"],
               "kwargs": {"content": text, "type": "ai", "tool_calls": tool_calls or []}}
    return json.dumps({"generations": [[{"text": text, "generation_info": {
        "finish_reason": finish}, "type": "ChatGeneration", "message": message}]],
        "llm_output": {}, "type": "LLMResult"})


def test_langsmith_model_call_finish_reason_is_read_from_its_llm_result(otel: SpanMaker) -> None:
    usage = {"gen_ai.operation.name": "chat", "langsmith.span.kind": "llm",
             "gen_ai.usage.input_tokens": 13, "gen_ai.usage.output_tokens": 9}
    asks = record_of(otel.span("ChatOpenAI", {**usage, "gen_ai.completion": _llm_result(
        "tool_calls", tool_calls=[{"name": "lookup", "args": {}, "type": "tool_call"}])}))
    answers = record_of(otel.span("ChatOpenAI", {**usage, "gen_ai.completion": _llm_result(
        "stop", "a is known.")}))
    assert (asks.kind, asks.finish_reason, asks.requested_tools, asks.final_answer) == (
        SpanKind.LLM, "tool_calls", True, False)
    assert (answers.finish_reason, answers.requested_tools, answers.final_answer) == (
        "stop", False, True)
    # the usage attributes stand; the envelope names none
    assert (answers.input_tokens, answers.output_tokens) == (13, 9)


def test_langsmith_exception_wrapper_gives_the_real_exception(otel: SpanMaker) -> None:
    """LangSmith records every error as ``Exception(run.error)``: the repr of the exception,
    then its traceback (different on every span the exception passed through)."""
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
    wrapped = [record_of(otel.span("lookup", tool, exception=Exception(
        f"RuntimeError('backend unavailable')Traceback (most recent call last):\n{frame}")))
        for frame in ('  File "tool.py"', '  File "graph.py"')]
    assert {(r.error_type, r.error_message) for r in wrapped} == {
        ("RuntimeError", "backend unavailable")}
    assert wrapped[0].exception_id == wrapped[1].exception_id
    limit = record_of(otel.span("graph", {"langsmith.span.kind": "chain"}, exception=Exception(
        "GraphRecursionError('Recursion limit of 6 reached')Traceback (most recent call last):")))
    assert (limit.kind, limit.error_type, limit.limit_stop) == (
        SpanKind.AGENT, "GraphRecursionError", "GraphRecursionError")
    # a plain Exception whose message is no repr stays what it is
    plain = record_of(otel.span("lookup", tool, exception=Exception("call f(x) failed")))
    assert (plain.error_type, plain.error_message) == ("Exception", "call f(x) failed")


def test_langsmith_span_named_after_its_lc_agent_name_is_the_agent(otel: SpanMaker) -> None:
    """create_agent's name is in the metadata of every span of its graph: the chain span named
    after it is the agent (the root, or one a tool invoked: a child run), the graph's steps are
    not; a root chain with no such name (create_react_agent) frames the run, named after it."""
    def chain(name: str, agent: str | None, parent: Any = None) -> Any:
        attrs = {"langsmith.span.kind": "chain", "gen_ai.operation.name": "chain",
                 "langsmith.trace.name": name}
        if agent is not None:
            attrs["langsmith.metadata.lc_agent_name"] = agent
        return otel.open(name, attrs, parent=parent)

    root = chain("lc_manager", "lc_manager")
    tool = otel.open("research", {"gen_ai.operation.name": "execute_tool",
                                  "langsmith.span.kind": "tool", "gen_ai.tool.name": "research",
                                  "langsmith.metadata.lc_agent_name": "lc_manager"}, parent=root)
    nested = chain("lc_researcher", "lc_researcher", tool)
    step = chain("model", "lc_researcher", nested)
    react = chain("lg_researcher", None)
    for span in (step, nested, tool, root, react):
        span.end()
    records = {r.name: r for r in records_of(otel.take())}
    assert {name: (r.kind, r.agent, r.workflow) for name, r in records.items()} == {
        "model": (SpanKind.OTHER, "lc_researcher", False),
        "lc_researcher": (SpanKind.AGENT, "lc_researcher", False),
        "research": (SpanKind.TOOL, "lc_manager", False),
        "lc_manager": (SpanKind.AGENT, "lc_manager", False),
        "lg_researcher": (SpanKind.AGENT, "lg_researcher", True)}


# ---------------------------------------------------------------------------------------------
# Setups first recorded by unseen5: Langfuse's own spans, OpenLLMetry's LangChain.js
# instrumentation, rig


def test_langfuse_flattened_metadata_names_graph_steps_and_the_graph(otel: SpanMaker) -> None:
    """Langfuse flattens a run's metadata into one attribute per key, each JSON-encoded: a
    chain the CallbackHandler made an agent observation because its name says "agent"
    (create_react_agent's node) is a step of its graph by its `langgraph_node`, and a root
    chain of LangGraph's (`ls_integration`) is named after the graph."""
    root = otel.open("lg_researcher", {
        "langfuse.observation.type": "chain",
        "langfuse.observation.metadata.ls_integration": '"langgraph"'})
    node = otel.open("agent", {"langfuse.observation.type": "agent",
                               "langfuse.observation.metadata.langgraph_node": '"agent"'},
                     parent=root)
    named = otel.open("research_agent", {"langfuse.observation.type": "agent"}, parent=root)
    for span in (node, named, root):
        span.end()
    records = {r.name: r for r in records_of(otel.take())}
    assert (records["agent"].kind, records["research_agent"].kind) == (
        SpanKind.OTHER, SpanKind.AGENT)
    assert (records["lg_researcher"].kind, records["lg_researcher"].agent) == (
        SpanKind.AGENT, "lg_researcher")


def test_langchainjs_chains_below_the_root_are_steps_and_tools_named_by_their_result(
        otel: SpanMaker) -> None:
    """OpenLLMetry's LangChain.js instrumentation: every chain a `workflow` span (a step below
    the application's agent span, the root's framing kind at the root); a tool span named after
    the tool's class takes the tool's name from the ToolMessage it returned, whose call id makes
    it a call a model asked for (not the frame of a model loop)."""
    chain = {"traceloop.span.kind": "workflow", "gen_ai.provider.name": "langchain",
             "gen_ai.operation.name": "workflow"}
    root = otel.open("lg_researcher.agent", {"traceloop.span.kind": "agent"})
    step = otel.span("workflow RunnableSequence",
                     {**chain, "traceloop.workflow.name": "RunnableSequence"}, parent=root)
    message = {"lc": 1, "type": "constructor", "kwargs": {
        "status": "success", "content": "value of a", "tool_call_id": "call_1",
        "name": "lookup"}}
    tool = otel.span("execute_tool DynamicStructuredTool", {
        "gen_ai.operation.name": "execute_tool", "traceloop.span.kind": "task",
        "traceloop.entity.name": "DynamicStructuredTool",
        "traceloop.entity.input": json.dumps({"args": ['{"key":"a"}']}),
        "traceloop.entity.output": json.dumps(message)}, parent=root)
    root.end()
    lone = otel.span("workflow CompiledStateGraph", chain)
    del step, tool, lone
    records = {r.name: r for r in records_of(otel.take())}
    assert records["workflow RunnableSequence"].kind is SpanKind.OTHER
    assert (records["workflow CompiledStateGraph"].kind,
            records["workflow CompiledStateGraph"].workflow) == (SpanKind.AGENT, True)
    tool_record = records["execute_tool DynamicStructuredTool"]
    assert (tool_record.kind, tool_record.tool_name, tool_record.unasked) == (
        SpanKind.TOOL, "lookup", False)


def test_a_run_whose_span_told_a_limit_ends_after_the_gap_without_its_root(
        otel: SpanMaker) -> None:
    """A run one of whose spans told a stop at a limit, whose root never comes (OpenLLMetry's
    `withAgent` in JavaScript leaves it open when the invocation raises), ends `loose_run_gap`
    after its last span, at that limit; one that told none waits for `run_end_timeout`."""
    tracker = RunTracker(loose_run_gap=2.0)
    for limited in (True, False):
        root = otel.open("agent", {"traceloop.span.kind": "agent"})
        otel.span("chat m", chat_attrs(), parent=root)
        otel.span("graph", {"traceloop.span.kind": "task"}, parent=root,
                  error="Recursion limit of 8 reached without hitting a stop condition."
                  if limited else None)
        tracker.apply(records_of(otel.take()), T0)  # (the root is never ended)
    tracker.expire(T0 + 3.0)
    ended = list(tracker.ended())
    assert [(run.terminal_state, run.terminal_reason) for run in ended] == [
        (TerminalState.TOOL_LIMIT_REACHED, "GraphRecursionError")]


def test_rig_tool_error_handed_to_the_model_is_a_failed_call(otel: SpanMaker) -> None:
    """rig hands a tool's error to the model as its result text, on a span that ends OK."""
    failed = record_of(otel.span("execute_tool", {
        **tool_attrs("lookup", '{"key":"broken"}'),
        "gen_ai.tool.call.result": "Toolset error: ToolCallError: ToolCallError: backend "
                                   "unavailable for broken"}))
    fine = record_of(otel.span("execute_tool", {
        **tool_attrs("lookup", '{"key":"a"}'),
        "gen_ai.tool.call.result": "no ToolCallError: here"}))
    assert (failed.error, failed.error_message) == (True, "backend unavailable for broken")
    assert fine.error is False
