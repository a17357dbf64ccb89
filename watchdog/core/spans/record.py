"""The compact, convention-free record of one ended span.

Every convention (OTel GenAI, OpenInference, OpenLLMetry, pydantic-ai) is normalised into this
one shape by :mod:`watchdog.core.spans.conventions`; everything downstream reads only these fields.
It is created once per span on the hot path, hence ``slots``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

# The instrumentation scope of the records the model endpoint makes of the calls it relays:
# another than any agent's span has
ENDPOINT_SCOPE = "watchdog.model"


class SpanKind(StrEnum):
    """What a span means for a run."""

    LLM = "llm"
    TOOL = "tool"
    AGENT = "agent"
    OTHER = "other"


class KeySource(StrEnum):
    """Where the run key came from (DESIGN §3), in order of precedence."""

    WATCHDOG = "watchdog"  # watchdog.run.id, set by the client SDK
    AGENT_CALL = "agent_call"  # gen_ai.agent.call.id (pydantic-ai)
    TRACE = "trace"  # trace:<32 hex>


# The members again as plain module names, for the hot path: on Python 3.11 ``SpanKind.TOOL`` is
# an attribute lookup through the enum metaclass (~50 ns), a global ~8 ns, and a span meets some
# twenty kind and key-source tests on its way in.
LLM, TOOL, AGENT, OTHER = SpanKind.LLM, SpanKind.TOOL, SpanKind.AGENT, SpanKind.OTHER
KEY_WATCHDOG, KEY_AGENT_CALL, KEY_TRACE = KeySource.WATCHDOG, KeySource.AGENT_CALL, KeySource.TRACE

BUDGET_KEYS = ("max_tool_calls", "max_iterations", "max_seconds", "max_tokens", "max_cost_usd")
WHOLE_BUDGET_KEYS = frozenset({"max_tool_calls", "max_iterations", "max_tokens"})  # counts
# An output that says nothing (an agent span's output attribute with no messages in it).
EMPTY_OUTPUTS = frozenset({"[]", "{}", "null", '""'})
MAX_ASKED_TOOLS = 16  # tool calls one model call's record keeps (SpanRecord.asked_tools)


@dataclass(slots=True)
class SpanRecord:
    """One ended span, reduced to what signals need. Strings are already bounded and redacted."""

    run_key: str
    key_source: KeySource
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: SpanKind
    start_ns: int
    end_ns: int
    agent: str | None = None
    service: str | None = None  # resource service.name: the agent name of last resort
    instance: str | None = None  # which process of the service (Resource.instance)
    session: str | None = None
    parent_run: str | None = None
    tool_name: str | None = None
    args_hash: int | None = None  # canonical (sorted-key JSON) arguments, 64-bit
    args_brief: str | None = None
    # A model call's request: its last user message, case and spacing ignored, 64-bit (the
    # run's first model call's is the run's input: cycles across agents compare it)
    input_hash: int | None = None
    # the model call's input as its span carries it: hashed into input_hash only when the call
    # is the earliest of its run (most calls are not: see watchdog.core.runs.counts)
    prompt: object = None
    result_hash: int | None = None
    result_brief: str | None = None
    error: bool = False
    error_type: str | None = None
    error_message: str | None = None
    error_signature: int | None = None  # type + masked message, 64-bit
    input_tokens: int = 0
    output_tokens: int = 0
    messages: int = 0  # conversation length seen on this span; 0 = unknown
    finish_reason: str | None = None
    final_answer: bool = False
    final_output: str | None = None  # brief of the final answer, when the span carries one
    budget: dict[str, float] | None = None  # watchdog.budget.* announced by the agent
    # Set by the tracker: a model or tool call that is a whole trace of its own (no span for the
    # invocation), grouped with the calls before it into one run (see RunTracker).
    loose: bool = False
    # An agent-kind span that frames a workflow (invoke_workflow, an OpenLLMetry workflow, an
    # OpenInference root CHAIN) rather than an agent: the agent below it is the run's own.
    workflow: bool = False
    # A workflow root that lists a team's members: the team's invocation, its members peers
    team: bool = False
    # A nested span of no kind carrying a compiled graph's metadata (LangGraph's): directly
    # below a tool call, with model calls below it, it is a graph run as that tool's sub-agent
    graph: bool = False
    # How the run ended, as this span tells it (watchdog.core.spans.frameworks lists the places).
    limit_stop: str | None = None  # a framework limit stopped the run: its name
    # An agent span whose framework, at its cap, asks the model for an answer from the agent
    # span itself (smolagents): the cap's name; the run's last model call says if it did
    cap_request: str | None = None
    # A run's root whose framework ends its loop by its own tool or at its cap, its output
    # hidden (DSPy's ReAct): the cap's name; the run says if the loop-end tool ran
    loop_cap: str | None = None
    loop_end: bool = False  # the framework's own tool to end its loop ran (DSPy's `finish`)
    requested_tools: bool = False  # a model call whose response asked for tools (no answer)
    creates_agent: bool = False  # creates/configures an agent without running it: not a run
    model_calls: int = 0  # model calls an agent span reports having made (crewai without
    # model-call spans); 0 = not reported
    exception_id: int | None = None  # type + exact message, 64-bit: one exception seen on
    # several nested spans (a tool, its agent, the workflow) has one id
    # A tool call no model asked for (no call id): with model calls below it, the tracker makes
    # it the invocation (:meth:`as_invocation`) at the root of a trace that names no run, else
    # the frame of its run's model loop (:meth:`as_frame`). ``models_below``, as its request
    # tells (the pipeline looks, holding it to the end): True, a model call of its trace ran
    # inside it; False, an agent did (a sub-agent called as a tool); None, neither.
    unasked: bool = False
    models_below: bool | None = None
    # The client SDK's own span of a run it frames (``watchdog.run <agent>``): it ends the run.
    run_frame: bool = False
    # A root of a run's trace that is not its end (Convention.second_roots: the request that
    # started the run, ended before its work), and the span whose end is the run's instead
    second_root: bool = False
    ends_its_run: bool = False
    # An agent span that is one call of a loop its application may run itself, a call a step
    # (Convention.loop_call_span_names): a sibling of the same agent is the same run's next step
    loop_call: bool = False
    # A model or tool call that names the sub-agent it ran in (Convention.subagent_ids): the
    # span it hangs from is that sub-agent's invocation (the tracker splits it out)
    subagent: str | None = None
    # A model call whose twin (the same call traced by a second instrumentation, one span
    # inside the other) came before it in its request: the twin's (input, output) tokens.
    twin_tokens: tuple[int, int] | None = None
    # A model call's response id (``gen_ai.response.id``): the same id on two model-call spans
    # is one call traced twice (a client SDK's own span and an instrumentation's)
    response_id: str | None = None
    # The instrumentation scope of a model call with a response id: twins are two
    # instrumentations' spans; one scope's spans with one id are as many calls (a model server
    # may give every response the same id)
    scope: str = ""  # (ENDPOINT_SCOPE: a record the model endpoint made of what it relayed)
    # A model endpoint's record of an answer whose text the agent acts on (an agent whose
    # actions are in its answers' text, a rule pack's ``actions: text``): the run's answer so
    # far, but the run goes on at the agent's next request; it ends ``loose_run_gap`` after
    # its last call when none comes
    acted_on: bool = False
    # The tool calls a model call's output asked for, as (tool name, call id or ""), at most
    # MAX_ASKED_TOOLS: a span after it named after one of them (or carrying its id) is that
    # tool's execution, whatever attributes it carries
    asked_tools: tuple[tuple[str, str], ...] = ()
    # The id of the model's tool call a tool span, or a span of no kind, says it executes (an
    # attribute, or its input JSON): it answers that call, and no other when ids are known
    tool_call_id: str | None = None
    # Set by the tracker: a span of no kind taken as the tool an asked tool call names
    named_tool: bool = False
    # A span of no kind that is a framework's step running the tool the model call before it
    # asked for, naming none (Convention.tool_run_span_names)
    runs_asked: bool = False
    # What the agent reports of itself (the newest GenAI conventions): a model call's cost in
    # USD (finite, >= 0; None: not reported), and its input tokens read from or written to a
    # provider's cache (part of input_tokens)
    reported_cost_usd: float | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # how much of its budget the agent says it used, by budget key (BUDGET_KEYS)
    budget_used: dict[str, float] | None = None
    # a model call's new input messages only (gen_ai.input.messages_delta): the run's
    # conversation grows by these and the answer
    messages_delta: int = 0
    # a tool call that hands the run to another agent (a transfer): that agent's name
    handoff_to: str | None = None
    # the agent or workflow that invoked this agent span's agent (gen_ai.caller.name)
    caller: str | None = None
    # What a model call is priced by (DESIGN §13): its model (response, else request) and
    # provider; set by the core's step (watchdog.core.runs.pricing): its price in USD (None:
    # unpriced), and for a call paired with its twin in its request (twin_tokens), the twin's
    model: str | None = None
    provider: str | None = None
    cost_usd: float | None = None
    twin_cost_usd: float | None = None
    # A record the model endpoint made of a call whose ``traceparent`` named a run at its
    # request: it is that run's (``run_key``), whatever run the trace names when the response
    # ends, and says nothing of which run its trace is (the tracker learns no alias from it)
    pinned: bool = False

    def take_content(self, reread: SpanRecord) -> None:
        """This model call's content, read late (:data:`CONTENT_FIELDS`; a tool call's
        arguments and result, :data:`TOOL_CONTENT_FIELDS`): ``reread`` is its span read again
        with the content a log event brought after the span was applied
        (:mod:`watchdog.core.spans.logs`)."""
        for name in TOOL_CONTENT_FIELDS if self.kind is TOOL else CONTENT_FIELDS:
            setattr(self, name, getattr(reread, name))

    def as_invocation(self) -> None:
        """This unasked tool call is code invoking a function that runs the model loop itself
        (Semantic Kernel's ``kernel.invoke_prompt``): it frames the run, as a workflow root
        does, and what the function returned is the run's answer if nothing better says so
        (:meth:`RunState.apply <watchdog.core.runs.run.RunState.apply>` decides)."""
        self.kind = AGENT
        self.workflow = True
        result = self.result_brief
        if not self.error and result is not None and result.strip() \
                and result.strip() not in EMPTY_OUTPUTS:
            self.final_answer = True
            self.final_output = result

    def as_frame(self) -> None:
        """This unasked tool call ran the model loop of a run named otherwise (the client SDK's
        run around ``kernel.invoke_prompt``, a web request's trace): it is no tool call, and
        the model calls below it say how the run went."""
        self.kind = OTHER
        self.tool_name = None  # its failure is its model loop's, already counted

    def to_dict(self) -> dict[str, Any]:
        """The record in JSON-able values (the tracker's retained records, kept over a clean
        restart: :meth:`RunTracker.state <watchdog.core.runs.tracker.RunTracker.state>`)."""
        data = {name: getattr(self, name) for name in _FIELDS}
        data["kind"], data["key_source"] = self.kind.value, self.key_source.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpanRecord:
        """The record :meth:`to_dict` gave (fields it does not name keep their defaults);
        raises KeyError, TypeError or ValueError for one it did not."""
        known = {name: data[name] for name in _FIELDS if name in data}
        known["kind"], known["key_source"] = SpanKind(data["kind"]), KeySource(data["key_source"])
        for name, kinds in _CHECKED:  # what every run's fold reads: a damaged file stops here
            if not isinstance(known[name], kinds) or isinstance(known[name], bool):
                raise TypeError(f"{name}: {type(known[name]).__name__}")
        if known.get("twin_tokens") is not None:
            input_tokens, output_tokens = known["twin_tokens"]
            known["twin_tokens"] = (int(input_tokens), int(output_tokens))
        return cls(**known)

    @property
    def ends_run(self) -> bool:
        """Whether this span closes its run.

        An agent span closes the run it identifies; a trace-keyed run closes only with the trace
        root, because nested agents in one trace share that key.
        """
        if self.loose:  # a run of loose calls ends with its answer (or after a gap)
            return self.final_answer and not self.acted_on
        if self.run_frame or self.ends_its_run:
            return True
        if self.parent_span_id is None:
            return not self.second_root
        return self.kind is AGENT and self.key_source is not KEY_TRACE


DUPLICATE_SPAN_ID = "duplicate_span_id"  # the rejection of a second, different span of an id


def copy_mark(record: SpanRecord) -> int:
    """What tells a span's copy (an exporter's retry, a re-sent batch: the same name and
    times) from another span given the same trace and span id."""
    return hash((record.name, record.start_ns, record.end_ns))


def duplicate_message(record: SpanRecord) -> str:
    """Why ``record`` is dropped: its (trace, span) id is another span's, applied first."""
    return (f"span {record.span_id} of trace {record.trace_id} ({record.name[:64]!r}) dropped: "
            f"another span with its id (another name or time) came first and is kept")


_FIELDS = tuple(field.name for field in fields(SpanRecord))
# What a model call's record reads from its content (its messages in and out: _fill_llm in
# watchdog.core.spans.model_calls), all a GenAI log event can add to a span read without it
CONTENT_FIELDS = ("finish_reason", "final_answer", "requested_tools", "final_output",
                  "asked_tools", "messages", "messages_delta", "prompt", "limit_stop")
TOOL_CONTENT_FIELDS = ("args_hash", "args_brief", "result_hash", "result_brief")
_CHECKED = (("run_key", str), ("trace_id", str), ("span_id", str), ("name", str),
            ("parent_span_id", (str, type(None))), ("start_ns", int), ("end_ns", int),
            ("input_tokens", int), ("output_tokens", int))
