"""What each instrumentation convention and agent framework puts where: one table per entry.

Theory of operation
-------------------
Agents reach us through instrumentation that names the same facts differently (OTel GenAI,
OpenInference, OpenLLMetry) and through frameworks that add their own places on top (Strands'
span events, ADK's ``finish_reasons``, crewai's ``graph.node.id``, Hermes' exit reason...). Each
of them is one :class:`Convention` below: data only. :mod:`watchdog.core.spans.conventions` (the
engine) reads :data:`TABLES`, the entries combined once at import: attribute names in order of
precedence (entries earlier in :data:`CONVENTIONS` win), value maps and name sets merged.

Facts carried by span events are named ``"<event name>:<attribute>"`` (e.g.
``"gen_ai.choice:finish_reason"``) and listed among the attribute names, after the attributes
themselves: the engine folds the few wanted event attributes into the span's attributes, only
for spans whose attributes lack the fact. Supporting the next framework is an entry here plus a test
on a recording of what it really emits — not another ``if`` in the engine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class Role(StrEnum):
    """What a span is, as a convention labels it."""

    LLM = "llm"  # a model call: one iteration
    TOOL = "tool"  # a tool execution
    AGENT = "agent"  # an agent invocation: a run (or a child run)
    # frames an invocation (a workflow, a root chain) rather than being an agent: the agent
    # span below it, if any, is the run's own, not a child run
    WORKFLOW = "workflow"
    CREATE_AGENT = "create_agent"  # creates or configures an agent without running it: no run


Names = tuple[str, ...]
_NO_NAMES: Names = ()
_NO_SET: frozenset[str] = frozenset()
Path = tuple[str | int, ...]  # keys into a JSON object (indexes into a list), outermost first


@dataclass(frozen=True, slots=True)
class ErrorResult:
    """A tool result that says its call failed on a span that ended OK (the framework caught
    the tool's exception and handed its text to the model as the result).

    ``attribute`` holds the result as JSON; it is such a failure when every ``(path, value)`` of
    ``where`` holds in it (a status field, not a word in the text: a result that merely mentions
    an error is no failure); the message is at ``message`` (a string, or a list of text parts).
    """

    attribute: str
    where: tuple[tuple[Path, str], ...]
    message: Path
    error_type: str = "tool_error"  # the result names no exception type


@dataclass(frozen=True, slots=True)
class UnaskedTool:
    """A tool span no model asked for: of the tool kind ``attribute`` = ``value``, and carrying
    none of ``call_ids`` (the id of the model's tool call: pydantic-ai, google-adk, Strands,
    Semantic Kernel and Hermes' plugin put it on every tool call a model asked for).

    Such a span with model calls below it is code invoking a function that runs the model loop
    itself (Semantic Kernel's ``kernel.invoke_prompt``: a prompt function with auto function
    calling), not a tool call: at the root of a trace that names no run it is the invocation;
    inside a run (the client SDK's, a web request's trace) the frame of that run's model loop.
    A tool span that lost its context is a root too, but was asked for by a model (it has a call
    id, or no model call below it): it stays a tool call.
    """

    attribute: str
    value: str
    call_ids: Names


@dataclass(frozen=True, slots=True)
class NestedAgent:
    """A span of agent kind below the trace root that is no agent of its own, when every
    ``(attribute, value)`` of ``where`` holds (value None: present with any value): a step of
    the run it is in (``role`` None: a graph node, a turn) or a tool call (``Role.TOOL``: a
    handoff, the model's transfer call). The agent name it carries is not the run's."""

    where: tuple[tuple[str, str | None], ...]
    role: Role | None = None


@dataclass(frozen=True, slots=True)
class OutputEnvelope:
    """A model call's output as a framework serialises its own message objects: JSON in
    ``attribute``, the messages the list at ``messages``; in each message, its finish reason at
    ``finish_reason`` and its token usage at ``input_tokens``/``output_tokens`` (Haystack:
    ``{"replies": [{"meta": {"finish_reason": …, "usage": {…}}, "content": […]}]}``). Read
    only for a model call whose attributes name no finish reason and no usage."""

    attribute: str
    messages: Path
    finish_reason: Path
    input_tokens: Path = ()
    output_tokens: Path = ()
    model: Path = ()  # the model that answered, in a message


@dataclass(frozen=True, slots=True)
class StepCap:
    """An agent span that names its cap on steps (``cap``) and the steps it took (``steps``):
    a run that took the cap's worth was stopped by it (``limit``: its name) — unless the
    framework's own exit reason is recorded (``exit_reason``, an attribute whose presence means
    the limit is read from it by a ``limit_states`` rule): then that decides (a model that
    answered in the last step allowed was not stopped by the cap)."""

    steps: str
    cap: str
    limit: str
    exit_reason: str = ""


@dataclass(frozen=True, slots=True)
class Convention:
    """Where one convention or framework puts each fact. Every field is optional."""

    name: str
    emitted_by: str  # who emits it: for the README
    # -- what a span is
    kinds: Mapping[str, Mapping[str, Role]] = field(default_factory=dict)  # attribute -> value
    root_kinds: Mapping[str, Mapping[str, Role]] = field(default_factory=dict)  # roots only
    span_names: Mapping[str, Role] = field(default_factory=dict)  # exact span name
    span_name_prefixes: tuple[tuple[str, Role], ...] = ()
    unasked_tools: tuple[UnaskedTool, ...] = ()  # with model calls below: no tool call
    # a span of agent kind below the trace root that is no agent of its own
    nested_agent_roles: tuple[NestedAgent, ...] = ()
    # span names of such steps when they name no agent (an instrumentation's fallback name)
    nested_step_span_names: Names = _NO_NAMES
    # -- identity
    agent_name: Names = _NO_NAMES  # on any span
    agent_span_name: Names = _NO_NAMES  # on agent spans only (elsewhere they mean other things)
    agent_span_name_patterns: Names = _NO_NAMES  # regexes on an agent span's name, group "name"
    # (attribute holding JSON, path to an agent's name in it): the agent a span works for when
    # no attribute names it; and a span named after that agent is the agent's invocation, at
    # the root or nested (an agent run as another agent's tool: a child run)
    agent_name_json: tuple[tuple[str, Path], ...] = ()
    # (attribute holding JSON, path to an agent's name in it), read on a trace's root span only
    # and only when nothing above names its agent: the root's own input or metadata (before
    # the run falls back to `service.name`)
    root_agent_name_json: tuple[tuple[str, Path], ...] = ()
    # attributes naming, on every span, the agent whose graph runs it (read as agent_name too):
    # a span of no role (or a root workflow) named after that agent is the agent's invocation,
    # at the root or nested (an agent run as another agent's tool: a child run)
    agent_name_invocations: Names = _NO_NAMES
    # (attribute holding JSON, path to a graph node's name in it): a span of agent kind named
    # after the node it runs in is a step of a graph, not an agent of its own
    graph_node_json: tuple[tuple[str, Path], ...] = ()
    session: Names = _NO_NAMES
    # a model call's response id: two model-call spans with one id are the same call traced
    # twice (a client SDK's own span and an instrumentation's, neither inside the other)
    response_id: Names = _NO_NAMES
    # -- errors
    # (exception type, regex with groups "type" and "message"): an exporter that records every
    # error, and only errors, as this generic exception type, the real exception's repr (and
    # maybe a traceback) as its message; the groups give the real type and message. Such an
    # exception fails its span whatever the span's status says
    wrapped_exceptions: tuple[tuple[str, str], ...] = ()
    # -- tool calls
    tool_name: Names = _NO_NAMES
    tool_name_span_prefixes: Names = _NO_NAMES  # "execute_tool lookup" -> lookup
    tool_name_span_suffixes: Names = _NO_NAMES  # "lookup.__call__" -> lookup
    tool_args: Names = _NO_NAMES
    # (keys only the wrapper has, the key holding the arguments): instrumentations that record
    # a call's whole envelope (ids, metadata) instead of its arguments
    tool_args_envelopes: tuple[tuple[frozenset[str], str], ...] = ()
    tool_result: Names = _NO_NAMES
    # a result that says the call failed although its span ended OK
    tool_result_errors: tuple[ErrorResult, ...] = ()
    # (attribute, the text it ends with, regex with group "message"): the same, in a result
    # written as the framework's own text (a Python repr): the end tested first, then the regex
    tool_result_error_texts: tuple[tuple[str, str, str], ...] = ()
    # (attribute true when the call failed although its span ended OK, attribute holding the
    # result as JSON, path to the error message in it)
    tool_error_flags: tuple[tuple[str, str, Path], ...] = ()
    answer_tools: frozenset[str] = _NO_SET  # a tool that delivers the answer, not agent work
    # (tool name, its result exactly): a tool the framework adds to end its loop, neither agent
    # work nor the answer (a later step extracts that): DSPy ReAct's `finish`
    # (with its result hidden, content capture off, a tool so named whose span is named after
    # its method, `finish.__call__`, and carries no tool name is the loop's end all the same)
    loop_end_tools: tuple[tuple[str, str], ...] = ()
    answer_tool_prefixes: Names = _NO_NAMES
    # the text an instrumentation writes in place of content it hides (content capture off):
    # a tool's arguments or result, or an agent's output, that is one is read as if the
    # attribute were not there (hidden calls are no repeats of each other; no answer text); a
    # model call's hidden output says the model said something: the answer unless a tool
    # call follows, as for any output that asks for no tool
    hidden_content: frozenset[str] = _NO_SET
    # -- model calls and answers
    # model-call spans named `<anything><suffix>` are model calls whatever they record: a model
    # object's traced helpers (LlamaIndex's `_prepare_chat_with_tools`) are none when they
    # carry only their input, but with content hidden DSPy's `LM.__call__` carries no more
    # than its hidden input and output either (no messages, finish reason or usage)
    llm_span_suffixes: Names = _NO_NAMES
    answer: Names = _NO_NAMES  # an agent span's output
    llm_output: Names = _NO_NAMES  # a model call's output text (read when it gives no reason)
    # a model call's answer text where it is written apart from its output messages (flattened
    # completions): with its outputs, the run's answer text when no span of the agent has one
    answer_texts: Names = _NO_NAMES
    llm_input: Names = _NO_NAMES  # a model call's raw request, ending with its last message
    finish_reasons: Names = _NO_NAMES
    input_messages: Names = _NO_NAMES  # JSON message lists
    output_messages: Names = _NO_NAMES  # JSON message lists, with finish_reason per message
    output_envelopes: tuple[OutputEnvelope, ...] = ()  # a framework's own message objects
    flat_input_prefixes: Names = _NO_NAMES  # llm.input_messages.{i}.*: count = highest i + 1
    flat_output_prefixes: Names = _NO_NAMES
    input_tokens: Names = _NO_NAMES
    output_tokens: Names = _NO_NAMES
    total_tokens: Names = _NO_NAMES  # when only a total is given (counted as input)
    # (attribute holding JSON, path to input tokens, path to output tokens): a usage object
    usage_json: tuple[tuple[str, Path, Path], ...] = ()
    # what a model call is priced by (DESIGN §13): the model that answered, else the one asked
    # for; the provider (a hint: a name the price data does not know is ignored)
    response_model: Names = _NO_NAMES
    request_model: Names = _NO_NAMES
    provider: Names = _NO_NAMES
    answer_finish_reasons: frozenset[str] = _NO_SET  # lower case
    tool_finish_reasons: frozenset[str] = _NO_SET  # the model asked for tools
    # -- how a run was stopped at a limit
    limit_finish_reasons: frozenset[str] = _NO_SET  # lower case
    limit_exceptions: frozenset[str] = _NO_SET  # unqualified class names
    limit_status: tuple[tuple[str, str], ...] = ()  # (status description regex, limit name)
    # (regex, limit name): a limit told only in words, searched for in a failed span's status
    # description and exception message and in the `limit_error_json` places
    limit_phrases: tuple[tuple[str, str], ...] = ()
    # (attribute holding JSON, path to an error in it): an error a span reports in its output
    limit_error_json: tuple[tuple[str, Path], ...] = ()
    limit_attributes: Names = _NO_NAMES  # the value is the limit's name
    limit_states: tuple[tuple[str, str, str], ...] = ()  # (attribute, value regex, limit name)
    step_caps: tuple[StepCap, ...] = ()  # an agent span that counts its steps against a cap
    # An agent span that names its cap on steps, whose framework, at the cap, asks the model once
    # more for an answer from the agent span itself, outside the step spans every other model
    # call runs in: (the cap's attribute, limit name). A run whose last model call hangs
    # directly from such an agent span was stopped by the cap (read when the agent span ends).
    cap_requests: tuple[tuple[str, str], ...] = ()
    # (span name of a run's root, limit name): a framework whose loop ends only by its own
    # loop-end tool (`loop_end_tools`) or at its cap, silently: a run framed by such a root whose
    # output is hidden (content capture off: the trajectory `limit_states` reads is gone), in
    # which tools ran but no loop-end tool did, was stopped by the cap (DSPy ReAct's max_iters)
    loop_caps: tuple[tuple[str, str], ...] = ()
    # Attributes marking an agent span that ends OK only with its answer (crewai's task
    # execution): its output hidden (content capture off) is still the answer, its text unknown
    hidden_answers: Names = _NO_NAMES
    # The framework's own request for a last answer at its limit, in the last input message of
    # a model call: (text it contains, limit name).
    limit_prompts: tuple[tuple[str, str], ...] = ()
    # ... or in the first (system) message: (text it contains, limit name)
    limit_system_prompts: tuple[tuple[str, str], ...] = ()
    # The framework's own text in place of an answer when its limit ended the loop without
    # one, in the last message of an agent span's output: (text it contains, limit name).
    limit_answers: tuple[tuple[str, str], ...] = ()
    # -- frameworks that report their model calls only on the agent span
    # (agent span attribute, a key only this framework's JSON has): a JSON object whose
    # "messages" list is the conversation the agent had
    conversation_outputs: tuple[tuple[str, str], ...] = ()
    # (attribute holding JSON, path to the framework's cap on model calls, limit name): reached
    # when the conversation shows that many model calls
    call_limits: tuple[tuple[str, tuple[str, ...], str], ...] = ()
    # -- what an agent reports of itself
    # (attribute, budget key): a budget the agent reports on a span (its limit), read as an
    # announced one (``watchdog.budget.*``): the run gets a countdown without an announcement
    budget_limits: tuple[tuple[str, str], ...] = ()
    # (attribute, budget key): how much of that budget the agent says it has used; the run's
    # remaining budget counts the larger of that and what the watchdog counted
    budget_consumed: tuple[tuple[str, str], ...] = ()
    turn_counts: Names = _NO_NAMES  # an agent span's count of its turns (model calls)
    reported_cost: Names = _NO_NAMES  # a model call's cost in USD, as the agent reports it
    cache_read_tokens: Names = _NO_NAMES  # input tokens served from a provider's cache
    cache_write_tokens: Names = _NO_NAMES  # input tokens written to a provider's cache
    # a model call's new input messages only (the rest were sent before): counted onto the
    # run's conversation rather than taken as its length
    input_messages_delta: Names = _NO_NAMES
    # the agent a tool call hands the run to (a transfer): the span's name may end with it
    transfer_targets: Names = _NO_NAMES
    caller_names: Names = _NO_NAMES  # the agent or workflow that invoked an agent span's agent
    # OTLP log events whose attributes are a span's content (its trace and span id name it):
    # read as if the span carried them (watchdog.core.spans.logs)
    log_events: Names = _NO_NAMES
    notes: str = ""  # for the README


# What no span carries the model endpoint still sees: the requests and responses themselves.
ON_NO_SPAN = (" (what no span carries, the [model endpoint](model-endpoint.md) sees in the "
              "requests and responses themselves)")

# The answer/tool-request finish reasons every provider family uses (OpenAI, Anthropic, Bedrock,
# Gemini). "length"/"max_tokens" is neither: a truncated response is not the run's answer, and
# not a limit stop of the run either (the loop may go on); the run ends no_response if it was
# the last word.
ANSWER_FINISH = frozenset({"stop", "end_turn", "complete", "completed", "eos", "stop_sequence"})
TOOL_FINISH = frozenset({"tool_calls", "tool_call", "tool_use", "function_call"})

GENAI = Convention(
    name="OTel GenAI",
    emitted_by="OTel GenAI semantic conventions (openai-v2, pydantic-ai, Strands, ADK, ...)",
    kinds={"gen_ai.operation.name": {
        "chat": Role.LLM, "text_completion": Role.LLM, "generate_content": Role.LLM,
        "completion": Role.LLM, "execute_tool": Role.TOOL, "invoke_agent": Role.AGENT,
        "invoke_workflow": Role.WORKFLOW, "create_agent": Role.CREATE_AGENT}},
    # (a span's name is `<operation> <entity>`: OpenLIT's LangGraph workflow span that ended in
    # an error has only its name left to say what it is)
    span_name_prefixes=(("execute_tool ", Role.TOOL), ("invoke_agent", Role.AGENT),
                        ("invoke_workflow", Role.WORKFLOW)),
    # Semantic Kernel's kernel.invoke_prompt: the prompt function's execute_tool frames the run
    unasked_tools=(UnaskedTool("gen_ai.operation.name", "execute_tool",
                               ("gen_ai.tool.call.id",)),),
    agent_name=("gen_ai.agent.name",),
    agent_span_name=("gen_ai.workflow.name",),
    session=("gen_ai.conversation.id",),
    response_id=("gen_ai.response.id",),
    tool_name=("gen_ai.tool.name",),
    tool_name_span_prefixes=("execute_tool ",),
    tool_args=("gen_ai.tool.call.arguments",),
    tool_result=("gen_ai.tool.call.result",),
    answer=("gen_ai.output.messages",),
    finish_reasons=("gen_ai.response.finish_reasons",),
    input_messages=("gen_ai.input.messages",),
    output_messages=("gen_ai.output.messages",),
    input_tokens=("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
    output_tokens=("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
    total_tokens=("gen_ai.usage.total_tokens",),
    response_model=("gen_ai.response.model",),
    request_model=("gen_ai.request.model",),
    provider=("gen_ai.provider.name", "gen_ai.system"),
    answer_finish_reasons=ANSWER_FINISH,
    tool_finish_reasons=TOOL_FINISH,
    notes="`error.type`, status ERROR and `exception` events for errors; a tool call no "
          "model asked for (Semantic Kernel's `kernel.invoke_prompt`) with a model call inside "
          "is no tool call: at a trace root the invocation, its result the answer if its model "
          "calls say nothing; inside a run the frame of its model loop",
)

# The newest GenAI conventions, in their own repository (open-telemetry/semantic-conventions-
# genai): read in docs/gen-ai/non-normative/examples-agent-interactions.md (the execute_tool
# transfer span: `gen_ai.transfer.target.name`, `gen_ai.transfer.mode`; `gen_ai.caller.name` /
# `.type` on an invoke_agent CLIENT span) and model/gen-ai/registry.yaml (usage, messages; its
# `cache_creation` is `cache_write` in the newer text and its emitters); the budget, turn,
# cost and end-reason attributes are the proposals the repository's issues and pull requests
# name (#425/#439 budgets, #390 `gen_ai.agent.invocation.end_reason`), not yet in its registry.
GENAI_NEWEST = Convention(
    name="OTel GenAI (newest)",
    emitted_by="the GenAI conventions' newest attributes (semantic-conventions-genai): agent "
               "budgets, turn count, cost, end reason, messages delta, caller and transfer",
    kinds={"gen_ai.operation.name": {"handle_conversation_turn": Role.WORKFLOW}},
    # a framework's entry point (the `gen_ai.invocation.internal` span): it frames the
    # invocation, the agent span below it (if any) is the run's own
    span_name_prefixes=(("handle_conversation_turn", Role.WORKFLOW),),
    budget_limits=(("gen_ai.agent.iteration_budget.limit", "max_iterations"),
                   ("gen_ai.agent.iteration_budget", "max_iterations"),
                   ("gen_ai.agent.token_budget.limit", "max_tokens"),
                   ("gen_ai.agent.token_budget", "max_tokens")),
    budget_consumed=(("gen_ai.agent.iteration_budget.consumed", "max_iterations"),
                     ("gen_ai.agent.token_budget.consumed", "max_tokens")),
    turn_counts=("gen_ai.agent.turn.count",),
    reported_cost=("gen_ai.usage.cost.total", "gen_ai.usage.cost"),
    cache_read_tokens=("gen_ai.usage.cache_read.input_tokens",),
    cache_write_tokens=("gen_ai.usage.cache_write.input_tokens",
                        "gen_ai.usage.cache_creation.input_tokens"),
    input_messages_delta=("gen_ai.input.messages_delta",),
    transfer_targets=("gen_ai.transfer.target.name",),
    caller_names=("gen_ai.caller.name",),
    # a model call's content as a log record (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_
    # CONTENT=event_only`): the messages in and out, the finish reasons
    log_events=("gen_ai.client.inference.operation.details",),
    # how the invocation ended, as the agent says: a limit it reached is that limit
    limit_states=(
        ("gen_ai.agent.invocation.end_reason",
         r"(?i)(?:max_turns|turns?_limit|turns?_exceeded)\b", "max_turns"),
        ("gen_ai.agent.invocation.end_reason",
         r"(?i)(?:max_iterations|iterations?_(?:limit|budget|exceeded))\w*", "max_iterations"),
        ("gen_ai.agent.invocation.end_reason",
         r"(?i)(?:max_tool_calls|tool_(?:call_)?limit)\w*", "max_tool_calls"),
        ("gen_ai.agent.invocation.end_reason",
         r"(?i)(?:max_tokens|token_(?:limit|budget))\w*", "max_tokens"),
        ("gen_ai.agent.invocation.end_reason", r"(?i)budget_(?:exhausted|exceeded)\b",
         "budget"),
    ),
    notes="a budget the agent reports (`gen_ai.agent.iteration_budget.*`, `token_budget.*`) "
          "is the run's, as if announced; `gen_ai.agent.turn.count` its iterations when no "
          "model-call span says; `gen_ai.agent.invocation.end_reason` naming a limit ends the "
          "run `tool_limit_reached`; `gen_ai.usage.cost.*` is kept as the call's reported "
          "cost; the `execute_tool` transfer span is a tool call naming the agent it hands "
          "to; `handle_conversation_turn` frames the invocation",
)

OPENINFERENCE = Convention(
    name="OpenInference",
    emitted_by="Arize OpenInference instrumentations (OpenAI Agents, smolagents, crewai, "
               "LangChain, ADK, ...)",
    kinds={"openinference.span.kind": {"LLM": Role.LLM, "TOOL": Role.TOOL, "AGENT": Role.AGENT,
                                       "llm": Role.LLM, "tool": Role.TOOL, "agent": Role.AGENT}},
    root_kinds={"openinference.span.kind": {"CHAIN": Role.WORKFLOW, "chain": Role.WORKFLOW}},
    agent_name=("agent.name",),
    session=("session.id",),
    tool_name=("tool.name",),
    tool_args=("input.value",),
    tool_result=("output.value",),
    # OPENINFERENCE_HIDE_INPUTS / _OUTPUTS (TraceConfig.hide_inputs / hide_outputs): the values
    # become "__REDACTED__"; the flattened messages are dropped
    hidden_content=frozenset({"__REDACTED__"}),
    answer=("output.value",),
    llm_output=("output.value",),
    llm_input=("input.value",),
    finish_reasons=("llm.finish_reason",),
    flat_input_prefixes=("llm.input_messages.",),
    flat_output_prefixes=("llm.output_messages.",),
    input_tokens=("llm.token_count.prompt",),
    output_tokens=("llm.token_count.completion",),
    total_tokens=("llm.token_count.total",),
    response_model=("llm.model_name",),
    provider=("llm.provider",),
    cache_read_tokens=("llm.token_count.prompt_details.cache_read",),
    cache_write_tokens=("llm.token_count.prompt_details.cache_write",),
    reported_cost=("llm.cost.total",),
    answer_texts=("llm.output_messages.0.message.content",),
    notes="a root CHAIN span (LangChain/LangGraph, ADK `invocation`) is the invocation",
)

OPENLLMETRY = Convention(
    name="OpenLLMetry",
    emitted_by="Traceloop OpenLLMetry (opentelemetry-instrumentation-langchain, -openai, ...)",
    kinds={"traceloop.span.kind": {"tool": Role.TOOL, "agent": Role.AGENT,
                                   "workflow": Role.WORKFLOW,
                                   # OpenAI Agents: the model's transfer_to_<agent> call
                                   "handoff": Role.TOOL},
           # embedding and rerank calls set llm.request.type too: they are not iterations
           "llm.request.type": {"chat": Role.LLM, "completion": Role.LLM}},
    # LangChain/LangGraph: the agent whose graph ran the span, on every span of it
    agent_name=("traceloop.association.properties.lc_agent_name",),
    agent_span_name=("traceloop.entity.name",),
    tool_name=("traceloop.entity.name",),
    tool_args=("traceloop.entity.input",),
    tool_args_envelopes=((frozenset({"input_str", "inputs"}), "inputs"),),  # LangChain tools
    tool_result=("traceloop.entity.output",),
    answer=("traceloop.entity.output",),
    finish_reasons=("gen_ai.completion.0.finish_reason", "llm.response.finish_reason"),
    flat_input_prefixes=("gen_ai.prompt.",),
    flat_output_prefixes=("gen_ai.completion.",),
    answer_texts=("gen_ai.completion.0.content",),
    input_tokens=("llm.usage.prompt_tokens",),
    output_tokens=("llm.usage.completion_tokens",),
    total_tokens=("llm.usage.total_tokens",),
    cache_read_tokens=("gen_ai.usage.cache_read_input_tokens",),
    cache_write_tokens=("gen_ai.usage.cache_creation_input_tokens",),
)

PYDANTIC_AI = Convention(
    name="pydantic-ai",
    emitted_by="pydantic-ai (GenAI, plus its own names)",
    span_names={"agent run": Role.AGENT, "running tool": Role.TOOL},
    span_name_prefixes=(("running tool", Role.TOOL), ("agent run", Role.AGENT)),
    agent_name=("agent_name",),
    tool_name=("tool_name",),
    tool_name_span_prefixes=("running tool: ", "running tool "),
    tool_args=("tool_arguments",),
    tool_result=("tool_response",),
    answer_tools=frozenset({"final_result"}),
    answer_tool_prefixes=("final_result_",),
    answer=("final_result",),
    input_messages=("pydantic_ai.all_messages",),
    limit_exceptions=frozenset({"UsageLimitExceeded"}),
    notes="`gen_ai.aggregated_usage.*` on the agent span is never counted (the model calls "
          "carry it)",
)

WATCHDOG = Convention(
    name="watchdog client SDK",
    emitted_by="agent_watchdog_client and its adapters",
    agent_name=("watchdog.agent.name",),
    session=("watchdog.session.id",),
    limit_attributes=("watchdog.limit_reached",),
    limit_exceptions=frozenset({"ToolLimitReached"}),
)

HERMES = Convention(
    name="hermes-agent",
    emitted_by="grafana-agento11y-hermes plugin (sigil SDK); agent_watchdog_client.adapters.hermes",
    kinds={"gen_ai.operation.name": {"generateText": Role.LLM, "streamText": Role.LLM}},
    limit_states=(("hermes.turn_exit_reason", r"max_iterations_reached\b", "max_iterations"),
                  ("hermes.turn_exit_reason", r"budget_exhausted\b", "max_iterations")),
    limit_prompts=(("You've reached the maximum number of tool-calling iterations allowed",
                    "max_iterations"),),
    notes="no span for a turn: one trace per model call; the exit reason only via the adapter",
)

STRANDS = Convention(
    name="strands-agents",
    emitted_by="Strands' native tracer (default and `gen_ai_latest_experimental` formats)",
    tool_args=("gen_ai.tool.message:content",),
    tool_result=("gen_ai.choice:message",),
    answer=("gen_ai.choice:message",
            "gen_ai.client.inference.operation.details:gen_ai.output.messages"),
    llm_output=("gen_ai.choice:message",),
    finish_reasons=("gen_ai.choice:finish_reason",),
    output_messages=("gen_ai.client.inference.operation.details:gen_ai.output.messages",),
    input_messages=("gen_ai.client.inference.operation.details:gen_ai.input.messages",),
    # limits={"turns"|"total_tokens"|"output_tokens": n} stop the agent loop (no exception)
    limit_finish_reasons=frozenset({"limit_turns", "limit_total_tokens", "limit_output_tokens"}),
    # `gen_ai_unredacted_attributes=<list>` in OTEL_SEMCONV_STABILITY_OPT_IN: every sensitive
    # attribute (and event attribute) not listed is "[REDACTED]"
    hidden_content=frozenset({"[REDACTED]"}),
    notes="default format: answers, finish reasons and tool arguments only in span events; "
          "latest format with redaction on: the finish reasons only inside the redacted "
          "`gen_ai.output.messages`: a run stopped by `limits` reads unanswered, not "
          "`tool_limit_reached` (a known gap)",
)

SEMANTIC_KERNEL = Convention(
    name="Semantic Kernel",
    emitted_by="Semantic Kernel's model diagnostics (Python; GenAI, with its own operation names)",
    # up to 1.37 every model call had an SK name; since 1.38 chat is GenAI's "chat" and text
    # completions are "text_completions" (read for any emitter: kinds are merged by attribute)
    kinds={"gen_ai.operation.name": {
        "chat.completions": Role.LLM, "chat.streaming_completions": Role.LLM,
        "text.completions": Role.LLM, "text.streaming_completions": Role.LLM,
        "text_completions": Role.LLM}},
    # one reason per choice, joined by commas, each the str() of SK's FinishReason enum
    finish_reasons=("gen_ai.response.finish_reason",),
    answer_finish_reasons=frozenset({"finishreason.stop"}),
    tool_finish_reasons=frozenset({"finishreason.tool_calls", "finishreason.function_call"}),
    notes="messages and answers of model calls only in log records, never on spans; the "
          "auto-invoke cap (`maximum_auto_invoke_attempts`) leaves no trace" + ON_NO_SPAN,
)

GOOGLE_ADK = Convention(
    name="google-adk",
    emitted_by="ADK's native tracer (GenAI), optionally with OpenInference",
    limit_exceptions=frozenset({"LlmCallsLimitExceededError"}),
    notes="every `generate_content` says `finish_reasons=['stop']`, tool requests included: "
          "a model call followed by a tool call is not the answer",
)

CREWAI = Convention(
    name="crewai",
    emitted_by="openinference-instrumentation-crewai or OpenLLMetry's "
               "opentelemetry-instrumentation-crewai",
    agent_span_name=("graph.node.id",),
    limit_prompts=(("Now it's time you MUST give your absolute best final answer", "max_iter"),),
    conversation_outputs=(("output.value", "expected_output"),),  # TaskOutput
    call_limits=(("input.value", ("agent", "max_iter"), "max_iter"),),
    # OpenInference's `<role>._execute_core` returns the TaskOutput: it ends OK only with one
    hidden_answers=("task_key",),
    notes="no model-call spans unless the OpenAI client is instrumented too; OpenLLMetry's "
          "instrumentation emits no tool span at all (workflow, task and agent spans, each "
          "`invoke_agent`, are one run): tool calls and tool errors are not seen (a known gap); "
          "OpenInference with content hidden: `max_iter` is not seen (a capped run reads "
          "`completed`), nor, without the OpenAI instrumentation, any model call (known gaps)",
)

SMOLAGENTS = Convention(
    name="smolagents",
    emitted_by="openinference-instrumentation-smolagents",
    agent_span_name_patterns=(r"^(?P<name>.+)\.run$",),  # "<agent name>.run"
    tool_args_envelopes=((frozenset({"args", "kwargs", "sanitize_inputs_outputs"}), "kwargs"),),
    answer_tools=frozenset({"final_answer"}),
    limit_exceptions=frozenset({"AgentMaxStepsError"}),
    # at max_steps smolagents asks the model for an answer with its own system prompt
    limit_system_prompts=(("An agent tried to answer a user query but it got stuck and failed",
                           "max_steps"),),
    # ... from the agent span (`provide_final_answer`), every other model call in a `Step N`
    # span (planning calls too come before a step): what says it with content capture off
    cap_requests=(("smolagents.max_steps", "max_steps"),),
    notes="`max_steps` raises nothing: only the final request for an answer shows it (the only "
          "model call outside a `Step N` span)",
)

OPENAI_AGENTS = Convention(
    name="OpenAI Agents SDK",
    emitted_by="openinference-instrumentation-openai-agents, OpenLLMetry's "
               "opentelemetry-instrumentation-openai-agents or OpenLIT",
    limit_exceptions=frozenset({"MaxTurnsExceeded"}),
    # OpenInference writes the SDK's span error message; OpenLLMetry the repr of the whole
    # error dict (`{'message': 'Max turns exceeded', 'data': {'max_turns': 3}}`)
    limit_status=((r"^(?:\{'message': ')?Max turns exceeded\b", "MaxTurnsExceeded"),),
    notes="the limit is only in the nested agent span's status description; the root ends OK; "
          "OpenLLMetry hangs every agent span from the workflow root, never from the tool "
          "span that ran it: an agent used as a tool (`as_tool`) is told by its times (it ran "
          "inside its caller's tool call); its handoff span is a tool call",
)

LANGGRAPH = Convention(
    name="LangChain / LangGraph",
    emitted_by="OpenLLMetry (opentelemetry-instrumentation-langchain), OpenInference or OpenLIT",
    # A tool whose handle_tool_error catches its ToolException returns a ToolMessage with
    # status "error" (the exception's text as content); its span ends OK. Each tracer writes
    # that ToolMessage as the span's output, in its own shape:
    tool_result_errors=(
        # OpenInference: output.value = {"type": "tool", "data": {"content": …, "status": …}}
        ErrorResult("output.value", ((("type",), "tool"), (("data", "status"), "error")),
                    ("data", "content")),
        # OpenLLMetry: traceloop.entity.output = {"output": {"lc": 1, "type": "constructor",
        # "id": [… "ToolMessage"], "kwargs": {"content": …, "type": "tool", "status": …}}, …}
        ErrorResult("traceloop.entity.output",
                    ((("output", "kwargs", "type"), "tool"),
                     (("output", "kwargs", "status"), "error")),
                    ("output", "kwargs", "content")),
    ),
    # OpenLIT: gen_ai.tool.call.result = the ToolMessage's repr, ending with its status
    tool_result_error_texts=(
        ("gen_ai.tool.call.result", " status='error'",
         r"(?s)^content=(?P<q>['\"])(?P<message>.*)(?P=q) name=.* status='error'$"),),
    # OpenInference writes the runnable's metadata as JSON: create_agent(name=…) puts the
    # agent's name in every span's metadata (its graph span is named after it), and LangGraph
    # the node each span runs in — create_react_agent's model node is "agent", which
    # OpenInference gives the AGENT kind although it is one step of the graph.
    agent_name_json=(("metadata", ("lc_agent_name",)),),
    graph_node_json=(("metadata", ("langgraph_node",)),),
    limit_exceptions=frozenset({"GraphRecursionError"}),
    limit_status=((r"^Recursion limit of \d+ reached", "GraphRecursionError"),),
    notes="a tool error the tool handles itself (`handle_tool_error`) is only in its result: "
          "a ToolMessage with status `error` on a span that ends OK",
)

LANGSMITH = Convention(
    name="LangSmith OpenTelemetry",
    emitted_by="LangSmith's own OpenTelemetry export (`langsmith[otel]`, `LANGSMITH_OTEL_ENABLED`"
               ", `LANGSMITH_OTEL_ONLY`) of LangChain/LangGraph runs",
    # every LangChain run is a span: `langsmith.span.kind` chain/llm/tool (GenAI's operation
    # names chat and execute_tool type the model and tool calls); the root chain is the
    # invocation (create_agent's and create_react_agent's graph, named after the agent)
    root_kinds={"langsmith.span.kind": {"chain": Role.WORKFLOW}},
    # create_agent(name=…) puts the agent's name in the metadata of every run of its graph
    agent_name=("langsmith.metadata.lc_agent_name",),
    agent_name_invocations=("langsmith.metadata.lc_agent_name",),
    agent_span_name=("langsmith.trace.name",),  # the run's name: the graph's name at the root
    # the run's inputs and outputs as JSON
    tool_args=("gen_ai.prompt",),
    tool_result=("gen_ai.completion",),
    answer=("gen_ai.completion",),
    # a handled tool error (handle_tool_error): {"output": {ToolMessage, "status": "error"}}
    tool_result_errors=(ErrorResult("gen_ai.completion",
                                    ((("output", "type"), "tool"),
                                     (("output", "status"), "error")),
                                    ("output", "content")),),
    # a model call's output is LangChain's LLMResult: the finish reason per generation
    output_envelopes=(OutputEnvelope("gen_ai.completion", ("generations", 0),
                                     ("generation_info", "finish_reason")),),
    # every error is recorded as `Exception(run.error)`: the exception's repr, then its traceback
    wrapped_exceptions=(("Exception", r"(?s)^(?P<type>[A-Za-z_][\w.]*)\((?P<message>.*?)\)"
                                      r"(?:Traceback \(most recent call last\)|$)"),),
    notes="no finish-reason or agent attribute: the finish reason is read from the model "
          "call's LLMResult (`gen_ai.completion`), the agent from `lc_agent_name` metadata "
          "(create_agent) or the root span's name (create_react_agent); errors are "
          "`exception` events of type `Exception` whose message is the real exception's repr "
          "and traceback: the type is read from the repr, and such an event fails its span even "
          "when a later update left the span OK; a create_react_agent run inside "
          "another's tool names no agent in its metadata: no child run (a known gap)",
)

AUTOGEN = Convention(
    name="AutoGen AgentChat",
    emitted_by="autogen-core's own GenAI spans; model calls by opentelemetry-instrumentation-"
               "openai-v2",
    notes="`execute_tool` spans carry no arguments or result; `max_tool_iterations` ends the "
          "loop on no span (no answer: `no_response`)" + ON_NO_SPAN
          + "; a team run inside no span of the "
          "application's is one trace per runtime message, tied by span links only, which are "
          "not followed: one run per turn (run the team inside a span of your own, as "
          "AutoGen's tracing guide does)",
)

AGNO = Convention(
    name="Agno",
    emitted_by="openinference-instrumentation-agno",
    # tool_call_limit runs no call past the cap: Agno answers it with a tool message of its own
    # and asks the model again (tools still offered), which then answers
    limit_prompts=(("Tool call limit reached. Tool call ", "tool_call_limit"),),
    notes="`tool_call_limit` raises nothing and ends no loop: a call past it gets Agno's "
          "\"Tool call limit reached…\" as its result (no tool span) and the model is asked "
          "again, so the limit shows only in the input of the model call after it (a model that "
          "keeps asking is refused again and again: the run ends when it answers); a team "
          "member's agent span hangs from the team's agent span, not from "
          "`delegate_task_to_member`; a tool's exception leaves only its message (the status "
          "description): its type is `error`; with content hidden (OpenInference's "
          "`OPENINFERENCE_HIDE_*`) that input is too: a run refused at `tool_call_limit` reads "
          "`completed` (a known gap)",
)

LLAMAINDEX = Convention(
    name="LlamaIndex",
    emitted_by="openinference-instrumentation-llama-index (FunctionAgent, AgentWorkflow)",
    # run(max_iterations=n) with the default early_stopping_method="force" raises the generic
    # WorkflowRuntimeError: only its message names the limit
    limit_status=((r"^(?:[\w.]+: )?Max iterations of \d+ reached!", "max_iterations"),),
    # ... and with early_stopping_method="generate" appends a system message of its own and
    # asks the model once more
    limit_prompts=(("You have reached the maximum number of iterations (", "max_iterations"),),
    notes="no span names the agent (only the repr of LlamaIndex's workflow events does): the "
          "run's agent is `service.name`; an `AgentWorkflow` is one run, its agents' steps "
          "flat below the workflow span and a handoff a tool call (`handoff`): no child run "
          "per agent; every traced method of the LLM object is an LLM span: those with their "
          "input but no messages, finish reason or usage are no model call; LlamaIndex's "
          "native `llama-index-observability-otel` names no span kind (only its spans' names "
          "and LlamaIndex event names say what a span is): nothing is read from it, no run; "
          # a known gap (tests/frameworks/test_llamaindex.py, limit_generate_nocontent): the
          # limit_prompts entry above reads a message that content hiding removes
          "with content hidden (`OPENINFERENCE_HIDE_*`) the `generate` cap is not seen: its "
          "system message is in the hidden input (a capped run reads `completed`, a known gap)",
)

DSPY = Convention(
    name="DSPy",
    emitted_by="openinference-instrumentation-dspy (`dspy.ReAct`), optionally with "
               "openinference-instrumentation-litellm",
    # ReAct offers the model a tool of its own, `finish` (no arguments, returns "Completed."),
    # to end its loop; the answer comes after it, from ReAct's extract step (a model call)
    # (its result is JSON-encoded, '"Completed."': read decoded, like every such value)
    loop_end_tools=(("finish", "Completed."),),
    # a tool span has no `tool.name`: it is named after the tool's method
    tool_name_span_suffixes=(".__call__", ".acall"),
    # the model call is `LM.__call__`/`LM.acall` (`<the LM's class>.…`): with content hidden it
    # records only its model name and its hidden input and output, yet it called the model
    llm_span_suffixes=(".__call__", ".acall"),
    # max_iters ends the loop silently and the extract step answers all the same: only the
    # trajectory in ReAct's output (the root CHAIN's `output.value`) shows that no step finished
    limit_states=(("output.value",
                   r'(?s)\{"trajectory": \{"thought_0": (?!.*"tool_name_\d+": "finish")',
                   "max_iters"),),
    # ... and with content hidden, from a run whose tools ran but never `finish`
    loop_caps=(("ReAct.forward", "max_iters"), ("ReAct.aforward", "max_iters")),
    notes="no AGENT span: the root `ReAct.forward` CHAIN is the invocation and no span names "
          "the agent (its name is `service.name`); the answer is the root's output (the whole "
          "`Prediction`, trajectory included); `max_iters` is read from a root trajectory "
          "without `finish` (a loop ended early for another reason — no valid tool named, "
          "context window exceeded — reads the same; a ReAct inside a program of the "
          "application's is not looked at); a ReAct run inside another's tool is a CHAIN "
          "below a TOOL span: no child run, its calls are the outer run's; a model call traced "
          "by both DSPy's `LM.__call__` and LiteLLM's `completion` counts once; without "
          "LiteLLM's instrumentation the model calls carry no token counts; with content "
          "hidden (`OPENINFERENCE_HIDE_*`) `LM.__call__` carries only its hidden input and "
          "output (still a model call), `finish` its hidden result (still the loop's end); "
          "the trajectory is hidden: `max_iters` is read from a run whose tools ran but never "
          "`finish` (with the same caveats)",
)

AGENT_FRAMEWORK = Convention(
    name="Microsoft Agent Framework",
    emitted_by="agent-framework-core's own GenAI spans (`agent_framework.observability`)",
    # max_iterations / max_function_calls / max_duration_seconds of the chat client's
    # function_invocation_configuration: one last model call with tool_choice="none"; when it
    # still asks for a tool (or says nothing) the framework answers with this text instead
    limit_answers=(("Function invocation limit reached before a final answer could be produced",
                    "function_invocation_limit"),),
    notes="`gen_ai.response.finish_reasons` is JSON text (`'[\"stop\"]'`), read as the list; "
          "the function-calling caps (`max_iterations`, `max_function_calls`, "
          "`max_duration_seconds`) end the loop with one more model call with "
          "`tool_choice=\"none\"`, on no span: a model that then answers leaves a run like any "
          "answered one (`completed`: a known gap); only the framework's stand-in text, when "
          "the model still asks for a tool, shows the limit (hidden with sensitive data off, "
          "the framework's default: such a run reads `no_response`, a known gap)" + ON_NO_SPAN
          + "; a workflow "
          "(`workflow.run`, no GenAI operation) is one run named after its first agent, each "
          "later agent a child run of it",
)

HAYSTACK = Convention(
    name="Haystack",
    emitted_by="Haystack's own tracer (`haystack.tracing`; the OpenTelemetryTracer of "
               "`opentelemetry-haystack` in 3.x), or openinference-instrumentation-haystack",
    span_names={"haystack.agent.run": Role.AGENT, "haystack.agent.step.llm": Role.LLM,
                "haystack.agent.step.tool": Role.TOOL},
    tool_name=("haystack.tool.name",),
    # content tracing only (HAYSTACK_CONTENT_TRACING_ENABLED=true), as are the model outputs
    tool_args=("haystack.agent.step.tool.input",),
    tool_result=("haystack.agent.step.tool.output",),
    # raise_on_tool_invocation_failure=False (the default): the error text goes to the model
    tool_error_flags=(("haystack.tool.error", "haystack.agent.step.tool.output", ("error",)),),
    llm_output=("haystack.agent.step.llm.output",),
    output_envelopes=(OutputEnvelope("haystack.agent.step.llm.output", ("replies",),
                                     ("meta", "finish_reason"),
                                     ("meta", "usage", "prompt_tokens"),
                                     ("meta", "usage", "completion_tokens"),
                                     ("meta", "model")),),
    # max_agent_steps raises nothing: the agent's result says why it stopped (content
    # tracing), its span how many steps it took of how many allowed
    limit_states=(("haystack.agent.output", r'(?s).*"exit_reason": "max_agent_steps"',
                   "max_agent_steps"),
                  # OpenInference: the Agent's CHAIN span, its result as JSON of reprs
                  ("output.value", r'(?s)\{"messages": .*"exit_reason": "max_agent_steps"',
                   "max_agent_steps")),
    step_caps=(StepCap("haystack.agent.steps_taken", "haystack.agent.max_steps",
                       "max_agent_steps", exit_reason="haystack.agent.output"),),
    notes="`max_agent_steps` raises nothing and asks for no last answer; without content "
          "tracing (Haystack's default) the model calls carry nothing: no run reads as "
          "answered (`no_response`), and a model that answers in the cap's last step reads as "
          "stopped by it" + ON_NO_SPAN
          + "; no span names the agent (its name is `service.name`); the model "
          "calls' input is a Python repr (no message count); openinference-instrumentation-"
          "haystack makes the Agent a CHAIN and its model calls LLM spans but gives its tools "
          "no span: no tool calls, no tool failures",
)

OPENLIT = Convention(
    name="OpenLIT",
    emitted_by="OpenLIT (`openlit.init()`: GenAI spans for the OpenAI Agents SDK, LangChain, "
               "LangGraph, the OpenAI client, ...)",
    nested_agent_roles=(
        # OpenAI Agents: a handoff is `invoke_agent <to agent>` naming the agent it came from
        NestedAgent((("gen_ai.agent.source", None),), Role.TOOL),
        # LangGraph: every graph node runs in an `invoke_agent <node>` span (the graph is the
        # `invoke_workflow <agent>` root); LangChain: any chain whose name says "agent" (the
        # model node "agent" of create_react_agent) is `invoke_agent <chain>`. OpenLIT's spans
        # carry `gen_ai.application_name` (OpenLLMetry's agent spans say "langgraph" too)
        NestedAgent((("gen_ai.provider.name", "langgraph"), ("gen_ai.application_name", None))),
        NestedAgent((("gen_ai.provider.name", "langchain"), ("gen_ai.application_name", None))),
    ),
    # OpenAI Agents: the SDK's task and turn spans, which OpenLIT gives the agent operation
    nested_step_span_names=("invoke_agent",),
    notes="every span is GenAI: spans of agent kind that are no agent are read as steps (the "
          "OpenAI Agents SDK's task and turn spans, bare `invoke_agent`; LangGraph's graph "
          "nodes and LangChain's chains named \"agent\"), a handoff (`gen_ai.agent.source`) as "
          "a tool call; a LangGraph agent invoked inside a tool gets no span of its own: its "
          "model and tool calls are its caller's (a known gap)",
)

ANTHROPIC_SDK = Convention(
    name="Anthropic SDK",
    emitted_by="the Anthropic Python SDK's own spans (`anthropic.messages.create`, on by default "
               "once a tracer provider is set)",
    # OTel GenAI's operation name and usage; the stop reason only here (no output messages)
    finish_reasons=("anthropic.message.stop_reason",),
    notes="beside OpenLLMetry's span of the same call (a trace of its own) paired by "
          "`gen_ai.response.id` and counted once; inside OpenInference's, its twin",
)

def _limit_phrase(limit: str) -> str:
    """A stop at a limit told in words: "Max turns (3) exceeded", "Reached the maximum number
    of iterations (5)", "stopped due to the turn limit" (case-insensitive)."""
    said = r"(?:exceeded|reached|hit)"
    return (rf"(?i)\b(?:{limit})\b[^.\n]{{0,40}}?\b{said}\b"
            rf"|\b(?:{said}|stopped (?:due to|at|after))\b[^.\n]{{0,24}}?\b(?:{limit})\b")


GENERIC_LIMITS = Convention(
    name="other limits",
    emitted_by="common names and words for a stop at a limit, and where agents name "
               "themselves in their own input or metadata",
    limit_exceptions=frozenset({"MaxIterationsExceeded", "RecursionLimitExceeded"}),
    # a framework that raises a generic exception (or none: an error in its output) and says
    # in its message that it stopped at its cap on turns, iterations or steps
    limit_phrases=(
        (_limit_phrase(r"max(?:imum)?[ _](?:number[ _]of[ _])?turns?|turns? limit"),
         "max_turns"),
        (_limit_phrase(r"max(?:imum)?[ _](?:number[ _]of[ _])?(?:iterations?|iters?)"
                       r"|iterations? limit"), "max_iterations"),
        (_limit_phrase(r"max(?:imum)?[ _](?:number[ _]of[ _])?steps?|steps? limit"),
         "max_steps"),
    ),
    limit_error_json=(("gen_ai.framework.error.message", ()), ("output.value", ("error",)),
                      ("mlflow.spanOutputs", ("error",)),
                      ("traceloop.entity.output", ("error",))),
    # a root span whose input or metadata names the agent it runs (a hand-written loop's own
    # span, a framework that names its agent nowhere else)
    root_agent_name_json=(("metadata", ("agent_name",)), ("input.value", ("agent_name",)),
                          ("input.value", ("agent", "name")), ("input.value", ("name",)),
                          ("mlflow.spanInputs", ("agent_name",)),
                          ("mlflow.spanInputs", ("agent", "name")),
                          ("mlflow.spanInputs", ("name",))),
    notes="a limit told only in words (\"Max turns (3) exceeded\", \"Reached the maximum "
          "number of iterations\") in a failed span's status description or exception "
          "message, or in an `error` its output reports, is that limit, not an error",
)

MLFLOW = Convention(
    name="MLflow Tracing",
    emitted_by="MLflow Tracing (`@mlflow.trace`, `mlflow.<flavour>.autolog()`) exported over "
               "OTLP",
    # every attribute value is JSON-encoded (a type arrives as "\"TOOL\"", a count as "12"):
    # read decoded like any other
    kinds={"mlflow.spanType": {"LLM": Role.LLM, "CHAT_MODEL": Role.LLM, "TOOL": Role.TOOL,
                               "AGENT": Role.AGENT}},
    root_kinds={"mlflow.spanType": {"CHAIN": Role.WORKFLOW}},
    agent_span_name=("mlflow.spanFunctionName",),  # the traced function's name
    tool_args=("mlflow.spanInputs",),
    tool_result=("mlflow.spanOutputs",),
    answer=("mlflow.spanOutputs",),
    llm_output=("mlflow.spanOutputs",),
    llm_input=("mlflow.spanInputs",),
    input_messages=("mlflow.spanInputs",),
    # the OpenAI flavour's output is the ChatCompletion itself
    output_envelopes=(OutputEnvelope("mlflow.spanOutputs", ("choices",), ("finish_reason",)),),
    usage_json=(("mlflow.chat.tokenUsage", ("input_tokens",), ("output_tokens",)),),
    request_model=("mlflow.llm.model",),
    notes="only `mlflow.*` attributes, each value JSON-encoded; a tool is a `TOOL` span named "
          "after its function; a hand-written loop's own span (`@mlflow.trace`) is no agent "
          "span: its answer is its last model call's",
)

# Order is precedence: the first entry naming a fact wins when a span carries several.
CONVENTIONS: tuple[Convention, ...] = (
    WATCHDOG, GENAI, GENAI_NEWEST, OPENINFERENCE, OPENLLMETRY, PYDANTIC_AI, HERMES, STRANDS,
    SEMANTIC_KERNEL, GOOGLE_ADK, CREWAI, SMOLAGENTS, OPENAI_AGENTS, LANGGRAPH, LANGSMITH,
    GENERIC_LIMITS, AUTOGEN, AGNO, LLAMAINDEX, DSPY, AGENT_FRAMEWORK, HAYSTACK, OPENLIT,
    ANTHROPIC_SDK, MLFLOW,
)


def _names(attribute: str) -> Names:
    seen: dict[str, None] = {}
    events: dict[str, None] = {}
    for convention in CONVENTIONS:
        for name in getattr(convention, attribute):
            (events if ":" in name else seen)[name] = None
    return tuple(seen) + tuple(events)  # span attributes before event attributes


def _union(attribute: str) -> frozenset[str]:
    merged: set[str] = set()
    for convention in CONVENTIONS:
        merged |= getattr(convention, attribute)
    return frozenset(merged)


def _kind_maps(attribute: str) -> tuple[tuple[str, Mapping[str, Role]], ...]:
    merged: dict[str, dict[str, Role]] = {}
    for convention in CONVENTIONS:
        for key, values in getattr(convention, attribute).items():
            merged.setdefault(key, {}).update(values)
    return tuple((key, MappingProxyType(values)) for key, values in merged.items())


@dataclass(frozen=True, slots=True)
class Tables:
    """Every convention combined, in the shape the engine reads per span."""

    kinds: tuple[tuple[str, Mapping[str, Role]], ...]
    root_kinds: tuple[tuple[str, Mapping[str, Role]], ...]
    span_names: Mapping[str, Role]
    span_name_prefixes: tuple[tuple[str, Role], ...]
    unasked_tools: tuple[UnaskedTool, ...]
    nested_agent_roles: tuple[NestedAgent, ...]
    nested_step_span_names: frozenset[str]
    agent_name: Names
    agent_span_name: Names
    agent_span_name_patterns: tuple[re.Pattern[str], ...]
    agent_name_json: tuple[tuple[str, Path], ...]
    root_agent_name_json: tuple[tuple[str, Path], ...]
    agent_name_invocations: Names
    graph_node_json: tuple[tuple[str, Path], ...]
    wrapped_exceptions: Mapping[str, re.Pattern[str]]
    session: Names
    response_id: Names
    tool_name: Names
    tool_name_span_prefixes: Names
    tool_name_span_suffixes: Names
    tool_args: Names
    tool_args_envelopes: tuple[tuple[frozenset[str], str], ...]
    tool_result: Names
    tool_result_errors: tuple[ErrorResult, ...]
    tool_result_error_texts: tuple[tuple[str, str, re.Pattern[str]], ...]
    tool_error_flags: tuple[tuple[str, str, Path], ...]
    answer_tools: frozenset[str]
    answer_tool_prefixes: Names
    hidden_content: frozenset[str]
    loop_end_tools: Mapping[str, str]
    llm_span_suffixes: Names
    answer: Names
    llm_output: Names
    answer_texts: Names
    llm_input: Names
    finish_reasons: Names
    input_messages: Names
    output_messages: Names
    output_envelopes: tuple[OutputEnvelope, ...]
    flat_input_prefixes: Names
    flat_output_prefixes: Names
    input_tokens: Names
    output_tokens: Names
    total_tokens: Names
    usage_json: tuple[tuple[str, Path, Path], ...]
    response_model: Names
    request_model: Names
    provider: Names
    answer_finish_reasons: frozenset[str]
    tool_finish_reasons: frozenset[str]
    limit_finish_reasons: frozenset[str]
    limit_exceptions: frozenset[str]
    limit_status: tuple[tuple[re.Pattern[str], str], ...]
    limit_phrases: tuple[tuple[re.Pattern[str], str], ...]
    limit_error_json: tuple[tuple[str, Path], ...]
    limit_attributes: Names
    limit_states: tuple[tuple[str, re.Pattern[str], str], ...]
    step_caps: tuple[StepCap, ...]
    cap_requests: tuple[tuple[str, str], ...]
    loop_caps: Mapping[str, str]
    hidden_answers: Names
    limit_prompts: tuple[tuple[str, str], ...]
    limit_system_prompts: tuple[tuple[str, str], ...]
    limit_answers: tuple[tuple[str, str], ...]
    conversation_outputs: tuple[tuple[str, str], ...]
    call_limits: tuple[tuple[str, tuple[str, ...], str], ...]
    budget_limits: tuple[tuple[str, str], ...]
    budget_consumed: tuple[tuple[str, str], ...]
    turn_counts: Names
    reported_cost: Names
    cache_read_tokens: Names
    cache_write_tokens: Names
    input_messages_delta: Names
    transfer_targets: Names
    caller_names: Names
    log_events: Names

    @property
    def events(self) -> Mapping[str, frozenset[str]]:
        """Event name -> the attributes read from such events."""
        wanted: dict[str, set[str]] = {}
        for names in (self.tool_args, self.tool_result, self.answer, self.llm_output,
                      self.finish_reasons, self.input_messages, self.output_messages):
            for name in names:
                event, sep, attribute = name.partition(":")
                if sep:
                    wanted.setdefault(event, set()).add(attribute)
        return {event: frozenset(attributes) for event, attributes in wanted.items()}


def combine() -> Tables:
    return Tables(
        kinds=_kind_maps("kinds"),
        root_kinds=_kind_maps("root_kinds"),
        span_names=MappingProxyType({name: role for convention in CONVENTIONS
                                     for name, role in convention.span_names.items()}),
        span_name_prefixes=tuple(pair for convention in CONVENTIONS
                                 for pair in convention.span_name_prefixes),
        unasked_tools=tuple(rule for convention in CONVENTIONS
                            for rule in convention.unasked_tools),
        nested_agent_roles=tuple(rule for convention in CONVENTIONS
                                 for rule in convention.nested_agent_roles),
        nested_step_span_names=frozenset(_names("nested_step_span_names")),
        agent_name=_names("agent_name"),
        agent_span_name=_names("agent_span_name"),
        agent_span_name_patterns=tuple(re.compile(pattern) for convention in CONVENTIONS
                                       for pattern in convention.agent_span_name_patterns),
        agent_name_json=tuple(pair for convention in CONVENTIONS
                              for pair in convention.agent_name_json),
        root_agent_name_json=tuple(pair for convention in CONVENTIONS
                                   for pair in convention.root_agent_name_json),
        agent_name_invocations=_names("agent_name_invocations"),
        graph_node_json=tuple(pair for convention in CONVENTIONS
                              for pair in convention.graph_node_json),
        wrapped_exceptions=MappingProxyType({
            exc_type: re.compile(pattern) for convention in CONVENTIONS
            for exc_type, pattern in convention.wrapped_exceptions}),
        session=_names("session"),
        response_id=_names("response_id"),
        tool_name=_names("tool_name"),
        tool_name_span_prefixes=_names("tool_name_span_prefixes"),
        tool_name_span_suffixes=_names("tool_name_span_suffixes"),
        tool_args=_names("tool_args"),
        tool_args_envelopes=tuple(pair for convention in CONVENTIONS
                                  for pair in convention.tool_args_envelopes),
        tool_result=_names("tool_result"),
        tool_result_errors=tuple(entry for convention in CONVENTIONS
                                 for entry in convention.tool_result_errors),
        tool_result_error_texts=tuple((attribute, end, re.compile(pattern))
                                      for convention in CONVENTIONS
                                      for attribute, end, pattern
                                      in convention.tool_result_error_texts),
        tool_error_flags=tuple(entry for convention in CONVENTIONS
                               for entry in convention.tool_error_flags),
        answer_tools=_union("answer_tools"),
        loop_end_tools=MappingProxyType({name: result for convention in CONVENTIONS
                                         for name, result in convention.loop_end_tools}),
        answer_tool_prefixes=_names("answer_tool_prefixes"),
        hidden_content=_union("hidden_content"),
        llm_span_suffixes=_names("llm_span_suffixes"),
        answer=_names("answer"),
        llm_output=_names("llm_output"),
        answer_texts=_names("answer_texts"),
        llm_input=_names("llm_input"),
        finish_reasons=_names("finish_reasons"),
        input_messages=_names("input_messages"),
        output_messages=_names("output_messages"),
        output_envelopes=tuple(entry for convention in CONVENTIONS
                               for entry in convention.output_envelopes),
        flat_input_prefixes=_names("flat_input_prefixes"),
        flat_output_prefixes=_names("flat_output_prefixes"),
        input_tokens=_names("input_tokens"),
        output_tokens=_names("output_tokens"),
        total_tokens=_names("total_tokens"),
        usage_json=tuple(entry for convention in CONVENTIONS for entry in convention.usage_json),
        response_model=_names("response_model"),
        request_model=_names("request_model"),
        provider=_names("provider"),
        answer_finish_reasons=_union("answer_finish_reasons"),
        tool_finish_reasons=_union("tool_finish_reasons"),
        limit_finish_reasons=_union("limit_finish_reasons"),
        limit_exceptions=_union("limit_exceptions"),
        limit_status=tuple((re.compile(pattern), limit) for convention in CONVENTIONS
                           for pattern, limit in convention.limit_status),
        limit_phrases=tuple((re.compile(pattern), limit) for convention in CONVENTIONS
                            for pattern, limit in convention.limit_phrases),
        limit_error_json=tuple(pair for convention in CONVENTIONS
                               for pair in convention.limit_error_json),
        limit_attributes=_names("limit_attributes"),
        limit_states=tuple((attribute, re.compile(pattern), limit)
                           for convention in CONVENTIONS
                           for attribute, pattern, limit in convention.limit_states),
        step_caps=tuple(entry for convention in CONVENTIONS for entry in convention.step_caps),
        cap_requests=tuple(pair for convention in CONVENTIONS
                           for pair in convention.cap_requests),
        loop_caps=MappingProxyType({name: limit for convention in CONVENTIONS
                                    for name, limit in convention.loop_caps}),
        hidden_answers=_names("hidden_answers"),
        limit_prompts=tuple(pair for convention in CONVENTIONS
                            for pair in convention.limit_prompts),
        limit_system_prompts=tuple(pair for convention in CONVENTIONS
                                   for pair in convention.limit_system_prompts),
        limit_answers=tuple(pair for convention in CONVENTIONS
                            for pair in convention.limit_answers),
        conversation_outputs=tuple(pair for convention in CONVENTIONS
                                   for pair in convention.conversation_outputs),
        call_limits=tuple(entry for convention in CONVENTIONS
                          for entry in convention.call_limits),
        budget_limits=tuple(pair for convention in CONVENTIONS
                            for pair in convention.budget_limits),
        budget_consumed=tuple(pair for convention in CONVENTIONS
                              for pair in convention.budget_consumed),
        turn_counts=_names("turn_counts"),
        reported_cost=_names("reported_cost"),
        cache_read_tokens=_names("cache_read_tokens"),
        cache_write_tokens=_names("cache_write_tokens"),
        input_messages_delta=_names("input_messages_delta"),
        transfer_targets=_names("transfer_targets"),
        caller_names=_names("caller_names"),
        log_events=_names("log_events"),
    )


TABLES = combine()
