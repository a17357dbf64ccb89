"""Normalise one OTLP span, in any supported convention, into a :class:`SpanRecord`.

Theory of operation
-------------------
This is the engine; what each convention and framework puts where is data, in
:mod:`watchdog.core.spans.instrumentations` (OTel GenAI, OpenInference, OpenLLMetry...) and
:mod:`watchdog.core.spans.frameworks` (pydantic-ai, Hermes, Strands, google-adk, crewai,
smolagents, OpenAI Agents, LangGraph...), combined once at import
(:mod:`watchdog.core.spans.combined`) into ordered attribute names (first present wins), value
maps and name sets. Per span:

1. the role (model call, tool call, agent invocation, agent creation) from the first convention
   that names it; only the attributes some table names are decoded (:func:`select_attributes`);
2. for spans that matter and have events, the few event attributes a table names are folded in
   as ``"<event>:<attribute>"`` facts (Strands puts answers and arguments only there);
3. identity, then the error (status ERROR, typed by ``error.type`` or the exception event, with
   an identity that is the same on every nested span the exception passes through);
4. by role: tool name/arguments/result (an answer tool is an answer, not work; a result that
   says the call failed, on a span that ended OK, is the tool's error); tokens, finish
   reason, answer or tool request (a "stop" whose output asks for tools is no answer; a stream
   without a finish reason whose output ends with text is one); the agent's answer;
5. a limit stop from wherever the framework says it: a limit exception, a status description,
   a finish reason, an explicit attribute or state field, the framework's own "give your final
   answer" request, or a conversation that reached the framework's cap.

Tokens are taken from LLM spans only, which keeps agent-level aggregates (pydantic-ai's
``gen_ai.aggregated_usage.*``, Strands' agent usage) from being counted twice. Large JSON is
parsed only when a fact needs it (a substring test decides first). This module is pure: one
span and its resource in, one record out (or :class:`SpanRejected`).

This module is the dispatch (:func:`normalise`). What each role reads is in
:mod:`~watchdog.core.spans.tool_calls`, :mod:`~watchdog.core.spans.model_calls` and
:mod:`~watchdog.core.spans.agents`; a failure in :mod:`~watchdog.core.spans.failures`; role,
agent, run key and budget in :mod:`~watchdog.core.spans.identity`; the places each fact is looked
for in :mod:`~watchdog.core.spans.attributes`, and how values are read in
:mod:`~watchdog.core.spans.values`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from watchdog.core.bounds import span_times
from watchdog.core.redact import redact
from watchdog.core.spans import native, values  # noqa: F401 (native: the compiled decode on)
from watchdog.core.spans.agents import _fill_agent, _fill_step_answer
from watchdog.core.spans.attributes import (
    AGENT_INVOCATION_KEYS,
    AGENT_ROLE,
    AGENT_SPAN_NAME_PLACEHOLDERS,
    BUDGET_ATTRIBUTES,
    BUDGET_CONSUMED_KEYS,
    CLIENT_RUN_SPAN,
    CREATE_AGENT,
    F_AGENT_NAME,
    F_AGENT_SPAN_NAME,
    F_OUTCOME,
    F_PARENT_RUN,
    F_SESSION,
    F_SUBAGENT,
    F_TOOL_ARGS,
    F_TOOL_RESULT,
    JSON_IDENTITY_KEYS,
    LOOP_CALLS,
    NESTED_STEP_SPAN_NAMES,
    ROLE_KINDS,
    ROOT_AGENT_NAME_JSON,
    ROOT_GRAPH_JSON,
    RUN_ENDS,
    SECOND_ROOTS,
    SPAN_NAME_ROLES,
    SUBAGENT_ID_KEYS,
    TEAM_MEMBER_KEYS,
    TOOL_RUN_SPAN_NAMES,
    WORKFLOW,
)
from watchdog.core.spans.decode import any_value
from watchdog.core.spans.failures import _exception, _fill_error, _wrapped_error
from watchdog.core.spans.identity import (
    Resource,
    _agent_from_span_name,
    _budget,
    _budget_numbers,
    _json_identity,
    _root_agent,
    _root_graph,
    classify,
    named,
    nested_agent_role,
    role_of,
    run_key,
    unasked_tool,
)
from watchdog.core.spans.model_calls import _fill_llm, request_hash
from watchdog.core.spans.outcome import (
    LIMIT_EXCEPTIONS,
    STOPPED_STEPS,
    phrase_limit,
    short_type,
    status_limit,
    stopped_step,
)
from watchdog.core.spans.record import AGENT, KEY_WATCHDOG, LLM, OTHER, TOOL, SpanRecord
from watchdog.core.spans.scopes import UNSCOPED, ScopeView, view_of, with_aliases
from watchdog.core.spans.tool_calls import _fill_tool, result_call_id, tool_call_id
from watchdog.core.spans.values import (
    MAX_NAME_CHARS,
    Firsts,
    FirstValues,
    canonical_arguments,
    json_encoded,
    select_attributes,
    stable_hash,
)

STATUS_CODE_ERROR = 2


class SpanRejected(ValueError):
    """A span that cannot be used; ``reason`` is the bounded metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _event_facts(events: Any, reads: Mapping[str, frozenset[str]]) -> dict[str, object] | None:
    """The attributes of the span's events ``reads`` names (its scope's view's: a scoped
    entry's event facts are read on its scopes' spans alone), as ``"<event>:<attribute>"``
    facts (the first event of a name that carries an attribute wins)."""
    facts: dict[str, object] | None = None
    for event in events:
        wanted = reads.get(event.name)
        if wanted is None:
            continue
        for kv in event.attributes:
            if kv.key in wanted:
                key = event.name + ":" + kv.key
                if facts is None:
                    facts = {}
                if key not in facts:
                    value = kv.value
                    text = value.string_value
                    facts[key] = (json_encoded(text, False) if text[0] == '"' else text) \
                        if text else any_value(value)
    return facts


def _head(span: Any) -> tuple[str, str, str | None, str, int, int]:
    """(trace id, span id, parent span id or None, name, start ns, end ns) of a usable span;
    :class:`SpanRejected` says why one is not (the compiled decode's ``Span.head`` reads the
    same, or None where this says why not)."""
    raw_trace, raw_span = span.trace_id, span.span_id
    if len(raw_trace) != 16 or raw_trace == b"\0" * 16:
        raise SpanRejected("invalid_trace_id", "span has no valid 16-byte trace_id")
    if len(raw_span) != 8 or raw_span == b"\0" * 8:
        raise SpanRejected("invalid_span_id", "span has no valid 8-byte span_id")
    raw_parent = span.parent_span_id
    parent = raw_parent.hex() if len(raw_parent) == 8 and raw_parent != b"\0" * 8 else None
    times = span_times(span.start_time_unix_nano, span.end_time_unix_nano)
    if times is None:
        raise SpanRejected("invalid_timestamps",
                           f"span has no valid time: start {span.start_time_unix_nano} ns, end "
                           f"{span.end_time_unix_nano} ns since the epoch (nanoseconds from 2000 "
                           f"on; other units?)")
    return raw_trace.hex(), raw_span.hex(), parent, span.name[:MAX_NAME_CHARS], *times


def normalise(span: Any, attrs: Mapping[str, object], resource: Resource,
              firsts: FirstValues | None = None, scope: str = "") -> SpanRecord:
    """One OTLP ``Span`` (with its decoded attributes and its resource) as a record; ``firsts``
    the first-present facts of those attributes where the compiled decode resolved them;
    ``scope``: the name of its instrumentation scope (what the conventions with ``scopes``
    read it by: :mod:`watchdog.core.spans.scopes`)."""
    view = view_of(scope) if scope else UNSCOPED
    if view.aliases:
        aliased = with_aliases(attrs, view)
        if aliased is not attrs:  # (the compiled decode resolved its facts without them)
            attrs, firsts = aliased, None
    if firsts is None:
        firsts = Firsts(attrs)
    head = span.head() if type(span) is values.NATIVE_SPAN else None  # (set once loaded)
    trace_id, span_id, parent, name, start_ns, end_ns = head or _head(span)
    key, source = run_key(trace_id, attrs, resource, firsts)
    role = role_of(name, attrs, parent is None)
    step = False  # a span of agent kind that is a step or a tool call: the name it has is not
    if role is AGENT_ROLE and parent is not None:  # the run's agent (a node's, a handoff's)
        role = nested_agent_role(name, attrs)
        step = role is not AGENT_ROLE
    elif role is WORKFLOW and parent is not None \
            and (nested := nested_agent_role(name, attrs)) is not AGENT_ROLE:
        role, step = nested, True  # a framing kind below the root that a convention says is a
        # step (OpenLLMetry's JS LangChain instrumentation: every chain a workflow)
    json_agent = None
    for json_key in JSON_IDENTITY_KEYS:
        if json_key in attrs:
            role, json_agent = _json_identity(name, attrs, role)
            break
    if role is None or role is WORKFLOW:
        for invocation_key in AGENT_INVOCATION_KEYS:
            invoked = attrs.get(invocation_key)
            if invoked is not None:
                if invoked == name:  # the agent itself, not one of its graph's steps
                    role = AGENT_ROLE
                break
    kind = ROLE_KINDS[role]
    # Positional: keyword arguments cost a dataclass __init__ twice as much, once per span.
    record = SpanRecord(key, source, trace_id, span_id, parent, name, kind, start_ns, end_ns)
    if source is KEY_WATCHDOG and name.startswith(CLIENT_RUN_SPAN):
        record.run_frame = True
    if name in RUN_ENDS:
        record.ends_its_run = True
    elif parent is None and name in SECOND_ROOTS:
        record.second_root = True
    if kind is AGENT and name in LOOP_CALLS:
        record.loop_call = True
    if role is CREATE_AGENT:
        record.creates_agent = True
    elif role is WORKFLOW:
        record.workflow = True
        if parent is None and TEAM_MEMBER_KEYS and any(key in attrs for key in TEAM_MEMBER_KEYS):
            record.team = True
    elif role is None and parent is not None and ROOT_GRAPH_JSON \
            and _root_graph(name, attrs) is not None:
        record.graph = True  # a graph's span, or a step's: the tracker tells by where it ran

    agent = (None if step else named(firsts[F_AGENT_NAME])) or resource.agent \
        or json_agent
    if agent is None and kind is AGENT:
        agent = firsts[F_AGENT_SPAN_NAME]
        if agent is not None and AGENT_SPAN_NAME_PLACEHOLDERS is not None \
                and AGENT_SPAN_NAME_PLACEHOLDERS.fullmatch(agent):
            agent = None  # the instrumentation's own name for the span: "FunctionAgent.workflow"
        if agent is None and role is AGENT_ROLE and name not in SPAN_NAME_ROLES:
            # (a convention's own fixed span name, "haystack.agent.run", names no agent)
            # (a workflow's span name is the code that frames the run, "FunctionAgent.run"
            # in LlamaIndex: not an agent's name)
            agent = _agent_from_span_name(name)
    if agent is None and parent is None and ROOT_AGENT_NAME_JSON:
        agent = _root_agent(attrs)
    if agent is None and parent is None and ROOT_GRAPH_JSON:
        agent = _root_graph(name, attrs)
    if agent:
        record.agent = agent[:MAX_NAME_CHARS]
    record.service = resource.service
    record.instance = resource.instance
    session = firsts[F_SESSION] or resource.session
    if session:
        record.session = session  # (refused whole when too long, as a run id is)
    record.parent_run = firsts[F_PARENT_RUN] or resource.parent_run
    if SUBAGENT_ID_KEYS and (kind is LLM or kind is TOOL) and parent is not None:
        subagent = firsts[F_SUBAGENT]
        if subagent:
            record.subagent = subagent[:MAX_NAME_CHARS]
    if resource.announces_budget or not BUDGET_ATTRIBUTES.isdisjoint(attrs):
        record.budget = _budget(attrs, resource)
        record.budget_used = _budget_numbers(attrs, resource, BUDGET_CONSUMED_KEYS)
    _fill_role(record, span, attrs, firsts, view)
    return record


def _fill_role(record: SpanRecord, span: Any, attrs: Mapping[str, object],
               firsts: FirstValues, view: ScopeView) -> None:
    """The record's failure or limit stop (from the span's status and events), and what its
    role reads (``view``: its scope's, the texts that are hidden content on the span and the
    facts read from its events): the second half of :func:`normalise`, on the record its
    dispatch made."""
    status = span.status
    events = span.events  # (read once: the compiled decode's is a call each time)
    if status.code == STATUS_CODE_ERROR or (events and _wrapped_error(events)):
        # (an exporter that records only errors, in its wrapper, failed the span whatever its
        # status says: LangSmith's background workers can apply a later update to a span after
        # the one carrying the error, and the SDK lets that update's OK win)
        _fill_error(record, attrs, events, status.message)
    elif status.message:
        record.limit_stop = status_limit(status.message)
    elif events:
        # an exception recorded on a span whose status says no failure (LiteLLM's callback
        # sets the span around a call OK, and the SDK keeps an OK status): no error, but a stop
        # at a limit it names (by its type or in its message) is that limit
        exc_type, exc_message = _exception(events)
        if exc_type is not None and short_type(exc_type) in LIMIT_EXCEPTIONS:
            record.limit_stop = short_type(exc_type)
        elif exc_message:
            record.limit_stop = phrase_limit(exc_message)
    _fill_facts(record, span, attrs, firsts, view, events)


def _fill_facts(record: SpanRecord, span: Any, attrs: Mapping[str, object],
                firsts: FirstValues, view: ScopeView, events: Any = ()) -> None:
    """What the record's role reads (and the facts its span's ``events`` add, those its scope's
    ``view`` reads)."""
    name, kind, hidden, reads = record.name, record.kind, view.hidden, view.events
    if kind is TOOL:
        if events and firsts[F_TOOL_ARGS] is None:
            attrs, firsts = _with_events(attrs, events, firsts, reads)
        _fill_tool(record, name, attrs, firsts, hidden)
        if record.kind is TOOL:
            # (a result that names the model's call it answers was asked for: LangChain.js'
            # ToolMessage under OpenLLMetry, whose span carries no call id)
            record.unasked = unasked_tool(attrs) and result_call_id(firsts[F_TOOL_RESULT]) is None
            record.tool_call_id = tool_call_id(attrs)
    elif kind is OTHER:  # maybe a tool traced by hand: which asked call it runs, if it says
        record.tool_call_id = tool_call_id(attrs)
        if STOPPED_STEPS and record.limit_stop is None and not record.error:
            # a loop's step (no kind) that asked for tools and ended the loop: the step
            # limit's stop
            record.limit_stop = stopped_step(attrs)
        if name in TOOL_RUN_SPAN_NAMES:
            record.runs_asked = True
        if name in NESTED_STEP_SPAN_NAMES and not record.error:
            # a span of agent kind read as a step of its run (it names no agent): the answer
            # it carries (an attribute, or only an event) is its run's
            _fill_step_answer(record, _with_events(attrs, events, firsts, reads)[0]
                              if events else attrs, hidden)
    elif kind is LLM:
        if events and firsts[F_OUTCOME] is None:
            attrs, firsts = _with_events(attrs, events, firsts, reads)
        _fill_llm(record, attrs, firsts, span, hidden, view.chunked)
    elif kind is AGENT:
        if events:
            attrs, firsts = _with_events(attrs, events, firsts, reads)
        _fill_agent(record, attrs, firsts, hidden)


def normalised(span: Any, attrs: Mapping[str, object], resource: Resource,
               firsts: FirstValues | None = None, scope: str = "") -> SpanRecord:
    """:func:`normalise`, by the compiled normalise (``native/otlp/src/normalise.rs``) where it
    is sure of the span: a model, tool or agent call of a known convention, of a scope no scoped
    convention reads, its record made there (and its failure, a tool call's facts, a model
    call's that asked for tools or stopped at a limit, where they are table reads), the rest
    filled here (:func:`_fill_role`, or :func:`_fill_facts` where its status was read there)."""
    normaliser = values.compiled_normaliser
    if normaliser is not None and type(firsts) is tuple and type(span) is values.NATIVE_SPAN \
            and (not scope or view_of(scope) is UNSCOPED):
        made = span.record(attrs, firsts, resource, normaliser)
        if made is not None:
            record: SpanRecord = made[0]
            left = made[1]
            if resource.instance is not None:  # (the compiled normalise does not set it)
                record.instance = resource.instance
            if left == 1:  # (its status read, its span without events)
                _fill_facts(record, span, attrs, firsts, UNSCOPED)
            elif left == 3:  # (... with events)
                _fill_facts(record, span, attrs, firsts, UNSCOPED, span.events)
            elif left:
                _fill_role(record, span, attrs, firsts, UNSCOPED)
            return record
    return normalise(span, attrs, resource, firsts, scope)


def _with_events(attrs: Mapping[str, object], events: Any, firsts: FirstValues,
                 reads: Mapping[str, frozenset[str]]) -> tuple[Mapping[str, object], FirstValues]:
    """The attributes plus the facts some frameworks put only in span events (read only when
    the attributes lack them: most spans never pay for their events), and their first-present
    facts."""
    facts = _event_facts(events, reads)
    if facts is None:
        return attrs, firsts
    merged = {**attrs, **facts}
    return merged, Firsts(merged)


__all__ = ["Resource", "SpanRejected", "canonical_arguments", "classify", "normalise",
           "normalised", "redact", "request_hash", "role_of", "run_key", "select_attributes",
           "short_type", "stable_hash", "unasked_tool"]
