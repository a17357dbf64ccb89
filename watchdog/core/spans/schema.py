"""The shape of a convention table entry: where one instrumentation convention or agent
framework puts each fact (:class:`Convention` and its parts), and the :class:`Role` a span can
have. The entries themselves are in :mod:`watchdog.core.spans.instrumentations` and
:mod:`watchdog.core.spans.frameworks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


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
    where: tuple[tuple[Path, str | bool], ...]  # (a JSON true is True, not "true")
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
class StoppedStep:
    """A step span of a framework's tool loop that says whether the loop went on after it
    (``continued``: a flag) and what its model asked for (``output``: JSON, the tool calls a list
    at ``tool_calls``). A step whose model asked for tools after which the loop did not go on
    ended the loop without asking the model about those tools' results: its step limit stopped
    it (``limit``: Mastra's ``maxSteps``/``stopWhen``)."""

    continued: str
    output: str
    tool_calls: Path
    limit: str


@dataclass(frozen=True, slots=True)
class Convention:
    """Where one convention or framework puts each fact. Every field is optional."""

    name: str
    emitted_by: str  # who emits it: for the README
    # the instrumentation scopes that emit it (a scope's name, or its beginning: `logfire` for
    # `logfire.openai_agents`), for an entry whose attribute names are generic words (`name`,
    # `input`) or whose placeholder for hidden content anyone may write (`[REDACTED]`): its
    # span attributes (not its event attributes, `event:attribute`) and its hidden texts are
    # then read on those scopes' spans alone (watchdog.core.spans.scopes); elsewhere an
    # attribute of the same name is the other instrumentation's own. Empty: every span
    scopes: Names = ()
    # -- what a span is
    kinds: Mapping[str, Mapping[str, Role]] = field(default_factory=dict)  # attribute -> value
    root_kinds: Mapping[str, Mapping[str, Role]] = field(default_factory=dict)  # roots only
    span_names: Mapping[str, Role] = field(default_factory=dict)  # exact span name
    span_name_prefixes: tuple[tuple[str, Role], ...] = ()
    # a run whose trace has two roots: the name of a root that is not the run's end (the
    # request that started the run, ended before its work) -> the name of the span whose end is
    # the run's (below the other root)
    second_roots: Mapping[str, str] = field(default_factory=dict)
    # names of agent spans that are one call of a tool loop the application may run itself,
    # a call a step (opencode: one `streamText` a step): such a span beside an earlier one of
    # the same agent (neither inside the other) is the same run's next step, no handoff; and a
    # limit it reads (`limit_states`) stopped the run only if no model call came after it
    loop_call_span_names: Names = _NO_NAMES
    unasked_tools: tuple[UnaskedTool, ...] = ()  # with model calls below: no tool call
    # a span nothing else types is a model call when it carries an attribute of each group (a
    # model's name, its token usage): what an emitter no entry knows reads as loose calls
    model_call_marks: tuple[tuple[str, ...], ...] = ()
    # ... and a tool call when it carries an attribute of each group (a tool's name and its
    # arguments on a step span of an instrumentation's own kind, which no kind map types)
    tool_call_marks: tuple[tuple[str, ...], ...] = ()
    # (attribute, value): a span that records what another span of the trace already carries
    # (an accounting record of a model call beside the call's own span): no model or tool call,
    # whatever model, usage or tool it names (read before the marks above)
    records: tuple[tuple[str, str], ...] = ()
    # a span of agent kind below the trace root that is no agent of its own
    nested_agent_roles: tuple[NestedAgent, ...] = ()
    # span names of such steps when they name no agent (an instrumentation's fallback name)
    nested_step_span_names: Names = _NO_NAMES
    # ... and the endings of such steps' span names (an instrumentation that names a span after
    # the method it traces, ``<class>.<method>``, gives every traced method of an agent object
    # the agent kind: its bookkeeping methods are steps)
    nested_step_span_suffixes: Names = _NO_NAMES
    # -- identity
    agent_name: Names = _NO_NAMES  # on any span
    agent_span_name: Names = _NO_NAMES  # on agent spans only (elsewhere they mean other things)
    agent_span_name_patterns: Names = _NO_NAMES  # regexes on an agent span's name, group "name"
    # regexes matching an `agent_span_name` value in full that names no agent: the name an
    # instrumentation makes up for a span of no named entity (`<class>.<span kind>`)
    agent_span_name_placeholders: Names = _NO_NAMES
    # values of an agent-name attribute, or names of an agent's span, that name no agent: the
    # stand-in an emitter writes for an agent it was given no name for, whoever writes it (the
    # run is named as if none were there: after `service.name`)
    agent_name_placeholders: Names = _NO_NAMES
    # (attribute holding JSON, path to an agent's name in it): the agent a span works for when
    # no attribute names it; and a span named after that agent is the agent's invocation, at
    # the root or nested (an agent run as another agent's tool: a child run)
    agent_name_json: tuple[tuple[str, Path], ...] = ()
    # (attribute holding JSON, path to an agent's name in it), read on a trace's root span only
    # and only when nothing above names its agent: the root's own input or metadata (before
    # the run falls back to `service.name`)
    root_agent_name_json: tuple[tuple[str, Path], ...] = ()
    # (attribute holding JSON, path, value, default name): a trace root whose JSON has that
    # value there is a compiled graph's own invocation, read only when nothing names its agent:
    # the span is named after the graph (LangGraph.js' createReactAgent({name})), but for the
    # framework's default graph name, which names no agent (an empty path: the attribute's own
    # value, where an SDK flattens the metadata into one attribute per key: Langfuse's)
    root_graph_json: tuple[tuple[str, Path, str, str], ...] = ()
    # attributes on a workflow root that list a team's members (AutoGen's group chats): the
    # root is the team's invocation, its members peers, each a child run of it (none its own
    # agent, and none the parent of the next, as a handoff's target is)
    team_members: Names = _NO_NAMES
    # attributes naming, on every span, the agent whose graph runs it (read as agent_name too):
    # a span of no role (or a root workflow) named after that agent is the agent's invocation,
    # at the root or nested (an agent run as another agent's tool: a child run)
    agent_name_invocations: Names = _NO_NAMES
    # (attribute holding JSON, path to a graph node's name in it): a span of agent kind named
    # after the node it runs in is a step of a graph, not an agent of its own (an empty path:
    # the attribute's own value, the node's name in a flattened metadata key)
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
    # (attribute holding JSON, path to the message in it): a failed span's error as the
    # framework reports it in an attribute, read when neither its status description nor an
    # exception event says it (Logfire writes the OpenAI Agents SDK's error dict)
    error_json: tuple[tuple[str, Path], ...] = ()
    # -- tool calls
    tool_name: Names = _NO_NAMES
    tool_name_span_prefixes: Names = _NO_NAMES  # "execute_tool lookup" -> lookup
    tool_name_span_suffixes: Names = _NO_NAMES  # "lookup.__call__" -> lookup
    # names an instrumentation gives a tool span that are the tool's class, not the tool (every
    # LangChain.js tool is a DynamicStructuredTool under OpenLLMetry): the tool's name is then
    # read from ``tool_name_json``, (attribute holding JSON, path to the name in it): its result
    tool_name_placeholders: frozenset[str] = _NO_SET
    tool_name_json: tuple[tuple[str, Path], ...] = ()
    # span names of a framework's step that runs the tool the model call before it asked for
    # and names none (a span of no kind): that tool's execution, named after the call
    tool_run_span_names: Names = _NO_NAMES
    tool_args: Names = _NO_NAMES
    # (keys only the wrapper has, the key holding the arguments): instrumentations that record
    # a call's whole envelope (ids, metadata) instead of its arguments
    tool_args_envelopes: tuple[tuple[frozenset[str], str], ...] = ()
    tool_result: Names = _NO_NAMES
    # a result that says the call failed although its span ended OK
    tool_result_errors: tuple[ErrorResult, ...] = ()
    # (attribute, a text it holds, regex with group "message"): the same, in a result written
    # as the framework's own text (a Python repr): that text looked for first, then the regex
    tool_result_error_texts: tuple[tuple[str, str, str], ...] = ()
    # (attribute true when the call failed although its span ended OK, attribute holding the
    # result as JSON, path to the error message in it)
    tool_error_flags: tuple[tuple[str, str, Path], ...] = ()
    answer_tools: frozenset[str] = _NO_SET  # a tool that delivers the answer, not agent work
    # a tool span with one of these attributes true is a call the agent's client declined to
    # run (refused at its budget or its stop; the model got the refusal as the result): the
    # framework still traced it, but no tool ran — not a tool call
    declined_tool_flags: Names = _NO_NAMES
    # (tool name, its result exactly): a tool the framework adds to end its loop, neither agent
    # work nor the answer (a later step extracts that): DSPy ReAct's `finish`
    # (with its result hidden, content capture off, a tool so named whose span is named after
    # its method, `finish.__call__`, and carries no tool name is the loop's end all the same)
    loop_end_tools: tuple[tuple[str, str], ...] = ()
    answer_tool_prefixes: Names = _NO_NAMES
    # a call of its answer tools ends the agent before the other calls of that answer run:
    # they never do (pydantic-ai's default ``end_strategy="early"``); else (smolagents) the
    # agent runs them, then ends with the answer
    answer_ends_first: bool = False
    # the text an instrumentation writes in place of content it hides (content capture off):
    # a tool's arguments or result, or an agent's output, that is one is read as if the
    # attribute were not there (hidden calls are no repeats of each other; no answer text); a
    # model call's hidden output says the model said something: the answer unless a tool
    # call follows, as for any output that asks for no tool
    hidden_content: frozenset[str] = _NO_SET
    # ... those of them that are also the arguments of a tool that takes none (ADK's `{}`): a
    # call whose result is there, not hidden (its content captured), took none, its arguments
    # its own (a loop of it repeats); one whose result is hidden too hid them (an entry with
    # `scopes`: read on its scopes' spans)
    no_arguments: frozenset[str] = _NO_SET
    # a streamed answer recorded a chunk an output message (each with its text part, as the
    # model's stream gave it: Gemini CLI's `gen_ai.output.messages`): the answer is their texts
    # joined as they are, not a line each (an entry with `scopes`: read on its scopes' spans)
    chunked_answers: bool = False
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
    stopped_steps: tuple[StoppedStep, ...] = ()  # a step that asked for tools and ended the loop
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
    # ... or the whole output, as the framework writes its result: (regex matched at the
    # output's start, limit name)
    limit_answer_patterns: tuple[tuple[str, str], ...] = ()
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
    # the id of the sub-agent a model or tool call ran in, on its spans (Claude Code's
    # `agent_id`): the span such a call hangs from (the caller's tool call that ran it) is the
    # sub-agent's invocation, its subtree a child run of the trace's run (no agent span of
    # the sub-agent's), as the model endpoint makes it of the sub-agent its client names
    subagent_ids: Names = _NO_NAMES
    # OTLP log events whose attributes are a span's content (its trace and span id name it):
    # read as if the span carried them (watchdog.core.spans.logs)
    log_events: Names = _NO_NAMES
    # ``<event>:<attribute>``: that log event names the span its facts are of by this attribute
    # (a call id), which the span carries under the same name, not by its span id (which then
    # names another span: the Codex CLI's, a child of the tool's)
    log_event_keys: Names = _NO_NAMES
    notes: str = ""  # for the README
