"""The span processor: stamps each span of a run with the run's ``watchdog.*`` attributes and
tracks the model and tool calls that have started but not ended.

The run travels in the OpenTelemetry context (:data:`RUN_KEY`), so it follows the context
wherever instrumentation propagates it — nested ``async`` tasks, executor threads that copy the
context, sub-agents. ``on_start`` and ``on_end`` are on every span's path, so they do the least
they can (``bench/client_overhead.py`` measures it against the bare SDK): the processor is
fused into the provider's own multi-processor rather than added to it (:func:`install`); a
span outside a run costs one context lookup; a span inside one gets the attributes prepared
when the run started in one dict update, and plumbing is told from calls by four dict lookups
and a look at the first character of its name (``str.startswith`` parses its arguments on each
call: four times the cost). Calls in flight are kept in plain dicts (single operations are atomic
under the GIL), and nothing on this path wakes a thread or touches the network: the reporter
thread looks at the runs every 50 ms. Only model and tool calls (not agent, workflow or
plumbing spans, which are "in flight" for the whole run) count as calls in flight.

Where the package was built with its C extension (``_spanpath.c``) the fused path is that one:
the same work, with this module's tables and functions and the run's counts as C fields of
:class:`~agent_watchdog_client.tally.RunTally`'s base, at ~40 % of the cost (the cost here is this
module's own code, not the SDK's); ``tests/test_client_span_path.py`` holds the two to the
same results span by span.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.sdk.trace import (
    ReadableSpan,
    Span,
    SpanProcessor,
    SynchronousMultiSpanProcessor,
    TracerProvider,
)

from agent_watchdog_client.tally import (
    LIVE_RUNS,
    MAX_UNSYNCED_SPANS,
    OPEN_SPANS,
    RUN_ID_ATTRIBUTE,
    RUN_KEY,
    SPAN_PATH,
    RunTally,
)


def _current_context_getter() -> Callable[[], Mapping[str, object]]:
    """The current context's getter: the runtime's ``ContextVar.get`` itself when it is the
    SDK's default (a third of the cost of ``otel_context.get_value``), else the public call."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    variable = getattr(runtime, "_current_context", None)
    if type(runtime) is ContextVarsRuntimeContext and isinstance(variable, ContextVar):
        return variable.get
    return otel_context.get_current


_current_context = _current_context_getter()
# SpanContext is a tuple (trace_id, span_id, ...): its ``span_id`` property is a Python call
# on 3.11, the index is not (tests/test_client.py holds the SDK to it).
SPAN_ID = 1
MAX_OPEN_CALLS = 100_000  # calls started and not ended, across runs; beyond it they are not tracked

# What a span is, read from the attributes it has when it STARTS (all the conventions the
# sidecar reads set their kind attribute at start; names are the fallback).
# (Semantic Kernel's own names too: it sets them after the span started, so they are read at
# its end.)
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion",
                            "chat.completions", "chat.streaming_completions", "text.completions",
                            "text.streaming_completions", "text_completions"})
TOOL_OPERATIONS = frozenset({"execute_tool"})
AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent", "invoke_workflow"})
OPENINFERENCE_CALLS = {"LLM": False, "TOOL": True}  # kind -> is a tool
OTHER, LLM_CALL, TOOL_CALL, AGENT = 0, 1, 2, 3
# A span with none of these attributes and none of these name prefixes is plumbing (OTHER):
# one C-level set test and one startswith decide it, the common case on the span path.
OPERATION_KEY = "gen_ai.operation.name"
KIND_KEYS = frozenset({OPERATION_KEY, "openinference.span.kind", "traceloop.span.kind",
                       "llm.request.type"})
KIND_NAME_PREFIXES = ("execute_tool ", "running tool", "invoke_agent", "agent run")
KIND_NAME_INITIALS = frozenset(prefix[0] for prefix in KIND_NAME_PREFIXES)
OUTPUT_TOOL_SPANS = ("execute_tool final_result", "running output function")  # answers, not work
CALL_ID = "gen_ai.tool.call.id"  # what the model asked for; a tool span without it may be a frame


def classify_start(name: str, attributes: Mapping[str, Any] | None) -> int:
    if attributes:
        get = attributes.get
        operation = get("gen_ai.operation.name")
        if operation is not None:
            if operation in LLM_OPERATIONS:
                return LLM_CALL
            if operation in TOOL_OPERATIONS:
                return TOOL_CALL
            if operation in AGENT_OPERATIONS:
                return AGENT
        oi_kind = get("openinference.span.kind")
        if oi_kind is not None:
            oi_kind = str(oi_kind).upper()
            if oi_kind == "LLM":
                return LLM_CALL
            if oi_kind == "TOOL":
                return TOOL_CALL
            if oi_kind == "AGENT":
                return AGENT
        traceloop = get("traceloop.span.kind")
        if traceloop == "tool":
            return TOOL_CALL
        if traceloop in ("agent", "workflow"):
            return AGENT
        if get("llm.request.type") in ("chat", "completion"):
            return LLM_CALL
    if name.startswith(("execute_tool ", "running tool:")) or name == "running tool":
        return TOOL_CALL
    if name.startswith(("invoke_agent", "agent run")):
        return AGENT
    return OTHER


def _writable(span: Span, extra: int) -> dict[str, Any] | None:
    """The span's attributes as the plain ``dict`` inside the SDK's ``BoundedAttributes``, when
    ``extra`` more fit; else None (the public path must be taken).

    The SDK's public path validates and locks per attribute (~0.5 µs each; a run stamps up to
    eight on a call span), and reading back through its ``Mapping`` costs a raised ``KeyError``
    per absent key. Our values are plain strings and numbers the SDK would accept as they are,
    so they are written into that dict directly.
    """
    try:
        bounded: Any = span._attributes
        plain = bounded._dict
        room = bounded.maxlen
        frozen = bounded._immutable
    except AttributeError:
        return None
    if type(plain) is dict and not frozen and (room is None or len(plain) + extra <= room):
        return plain
    return None


def _stamp(span: Span, attributes: dict[str, Any]) -> Mapping[str, Any] | None:
    """``span.set_attributes(attributes)``, and the span's attributes."""
    plain = _writable(span, len(attributes))
    if plain is not None:
        plain.update(attributes)
        return plain
    span.set_attributes(attributes)
    return span.attributes


class _Unchained:
    """No processors to run before this one (it was added to the provider's as usual)."""

    _span_processors: tuple[SpanProcessor, ...] = ()


_UNCHAINED = _Unchained()


class WatchdogSpanProcessor(SpanProcessor):
    """Installed by :meth:`agent_watchdog_client.Watchdog.instrument` (see :func:`install`); all
    instances share the calls in flight, of every run of every
    :class:`~agent_watchdog_client.Watchdog` in the process.

    ``chain`` is the provider's own multi-processor when this one is fused into it: its
    processors (the exporter's) run first, in the same call.
    """

    def __init__(self, chain: SynchronousMultiSpanProcessor | None = None) -> None:
        self._chain: SynchronousMultiSpanProcessor | _Unchained = chain or _UNCHAINED
        self._open = OPEN_SPANS
        self.untracked_calls = 0  # calls not tracked because MAX_OPEN_CALLS were open

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        for processor in self._chain._span_processors:
            processor.on_start(span, parent_context=parent_context)
        # The run: from the parent context the SDK was given, else the current one.
        if parent_context is None:
            run: RunTally | None = _current_context().get(RUN_KEY)  # type: ignore[assignment]
        else:
            run = parent_context.get(RUN_KEY)  # type: ignore[assignment]
            if run is None:
                run = _current_context().get(RUN_KEY)  # type: ignore[assignment]
        if run is None:
            return
        name = span._name
        stamp = run.span_attributes
        unasked = False
        # _writable(span, len(stamp)), inlined: this is the path of every span of a run.
        try:
            bounded: Any = span._attributes
            plain = bounded._dict
            room = bounded.maxlen
            frozen = bounded._immutable
        except AttributeError:
            plain = None
        if plain is not None and not frozen and (room is None
                                                 or len(plain) + len(stamp) <= room):
            # Every span of the run gets all of the run's attributes, plumbing included: some
            # instrumentations only say what a span is after it started (openai-v2's chat
            # spans), and adapters stamp passing marks (hermes.summary_request) through them.
            # classify_start(name, plain), with its common cases first: plumbing (none of
            # KIND_KEYS — four lookups, cheaper here than KIND_KEYS.isdisjoint's iterator —
            # and no KIND_NAME_PREFIXES), then gen_ai calls.
            if "gen_ai.operation.name" in plain:
                plain.update(stamp)
                operation = plain["gen_ai.operation.name"]
                if operation in LLM_OPERATIONS:
                    kind = LLM_CALL
                elif operation in TOOL_OPERATIONS:
                    kind = TOOL_CALL
                    unasked = CALL_ID not in plain
                else:
                    kind = classify_start(name, plain)
            elif ("openinference.span.kind" not in plain and "traceloop.span.kind" not in plain
                  and "llm.request.type" not in plain):
                plain.update(stamp)
                # name.startswith(KIND_NAME_PREFIXES), behind a test of its first character
                # that most names fail at a quarter of the cost.
                if not (name and name[0] in KIND_NAME_INITIALS
                        and name.startswith(KIND_NAME_PREFIXES)):
                    return
                kind = classify_start(name, plain)
            else:
                plain.update(stamp)
                kind = classify_start(name, plain)
        else:
            kind = classify_start(name, _stamp(span, stamp))
        if kind is OTHER:
            return
        span_id: int = span._context[SPAN_ID]  # type: ignore[index,assignment]
        open_spans = self._open
        if len(open_spans) >= MAX_OPEN_CALLS:
            self.untracked_calls += 1
            return
        # Single dict operations: atomic under the GIL.
        if kind is LLM_CALL:
            run.model_spans += 1
            open_spans[span_id] = (run, span._start_time or 0, False)
        elif kind is TOOL_CALL:
            counted: bool | int = not name.startswith(OUTPUT_TOOL_SPANS)
            if counted:
                run.tool_spans += 1
                if unasked:  # counted when it ends, if no model call started meanwhile
                    counted = run.model_spans
            open_spans[span_id] = (run, span._start_time or 0, counted)
        else:
            open_spans[span_id] = (run, None, False)
            run.agent_started(span_id, span)
            return
        run.changed = True

    def on_end(self, span: ReadableSpan) -> None:
        for processor in self._chain._span_processors:
            processor.on_end(span)
        open_spans = self._open
        if open_spans:
            context: Any = span._context
            if context is None:
                return
            span_id: int = context[SPAN_ID]
            entry = open_spans.pop(span_id, None)
            if entry is not None:
                run, started, counted_tool = entry
                if started is None:
                    run.agent_ended(span_id)
                    return
                if counted_tool is True:
                    run.tools_ended += 1
                elif counted_tool is not False:
                    # A tool call no model asked for (no call id), counted if no model call
                    # started while it ran; else it is a function running the model loop
                    # itself (Semantic Kernel's prompt functions): that loop's frame.
                    if run.model_spans == counted_tool:
                        run.tools_ended += 1
                    else:
                        run.tool_spans -= 1
                if run.keep_spans:
                    unsynced = run.unsynced
                    if len(unsynced) == MAX_UNSYNCED_SPANS:
                        run.unsynced_dropped += 1
                    unsynced.append(span)
                run.ended_calls += 1
                run.changed = True
                return
        if LIVE_RUNS:
            # A span of a run that was not a call when it started may be one now that it ends
            # (instrumentation that sets every attribute at the end); plumbing stays plumbing.
            bounded: Any = span._attributes
            try:
                attributes: Any = bounded._dict
            except AttributeError:
                attributes = bounded
            if not attributes or (
                    "gen_ai.operation.name" not in attributes
                    and "openinference.span.kind" not in attributes
                    and "traceloop.span.kind" not in attributes
                    and "llm.request.type" not in attributes
                    and not ((name := span._name) and name[0] in KIND_NAME_INITIALS
                             and name.startswith(KIND_NAME_PREFIXES))):
                return
            self._classified_at_end(span, attributes)

    @staticmethod
    def _classified_at_end(span: ReadableSpan, attributes: Mapping[str, Any]) -> None:
        """A span of a run, not a call when it started, that has a kind now that it ends."""
        name = span._name
        run_id = attributes.get(RUN_ID_ATTRIBUTE)
        run = LIVE_RUNS.get(run_id) if isinstance(run_id, str) else None
        if run is None:
            return
        kind = classify_start(name, attributes)
        if kind is TOOL_CALL:
            if name.startswith(OUTPUT_TOOL_SPANS):
                return
            run.tool_spans += 1
            run.tools_ended += 1
        elif kind is LLM_CALL:
            run.model_spans += 1
        else:
            return
        if run.keep_spans:
            if len(run.unsynced) == MAX_UNSYNCED_SPANS:
                run.unsynced_dropped += 1
            run.unsynced.append(span)
        run.ended_calls += 1
        run.changed = True

    def shutdown(self) -> None:
        self._open.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


PROCESSOR = WatchdogSpanProcessor()


def _own_method(processor: SynchronousMultiSpanProcessor, name: str) -> bool:
    """Whether ``processor.name`` is its class's method (not replaced on the instance), asked
    without ``vars(processor)``: reading an instance's ``__dict__`` gives its attributes a dict
    of their own, and the interpreter then looks up the SDK's every call of the processor's
    methods (``on_start``, ``_on_ending``, ``on_end``) the slow way: ~900 more instructions a
    span, half a percent of a bare SDK span."""
    method = getattr(processor, name, None)
    return (getattr(method, "__self__", None) is processor
            and getattr(method, "__func__", None) is getattr(SynchronousMultiSpanProcessor, name))


def _fused(chain: SynchronousMultiSpanProcessor) -> WatchdogSpanProcessor | Any:
    """The span path fused into ``chain``: the C one when it was built (``_spanpath.c``: the
    same work as :class:`WatchdogSpanProcessor`, with this module's tables and functions), else
    the Python one."""
    if SPAN_PATH is not None:
        return SPAN_PATH.SpanPath(chain, sys.modules[__name__])
    return WatchdogSpanProcessor(chain=chain)


def install(provider: TracerProvider) -> None:
    """Put the processor on ``provider``'s span path (once per provider: the caller keeps
    count).

    On the SDK's own :class:`SynchronousMultiSpanProcessor` (what ``TracerProvider()`` makes)
    it is *fused*: the multi-processor's ``on_start`` and ``on_end`` become a processor's that
    runs the provider's processors, then its own work, in the one call the span makes. Added
    as one more processor, the SDK's dispatch to it (three more calls per span, ~0.25 µs) would
    cost as much as its own work on a plumbing span. Any other active processor (the SDK's
    concurrent one, a user's own): added with ``add_span_processor`` as usual.
    """
    active = getattr(provider, "_active_span_processor", None)
    if (type(active) is SynchronousMultiSpanProcessor
            and isinstance(getattr(active, "_span_processors", None), tuple)
            and _own_method(active, "on_start") and _own_method(active, "on_end")):
        fused = _fused(active)
        active.on_start = fused.on_start  # type: ignore[method-assign]
        active.on_end = fused.on_end  # type: ignore[method-assign]
        return
    provider.add_span_processor(PROCESSOR)
