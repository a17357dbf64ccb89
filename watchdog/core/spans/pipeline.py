"""From a decoded export request to span records: the one loop every receiver shares.

Resource attributes are decoded once per resource, not once per span. Unusable spans are
counted per reason and reported back through OTLP ``partial_success``; they never fail the
whole request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter

from watchdog.core.bounds import MAX_ID_CHARS, id_problem
from watchdog.core.spans import values
from watchdog.core.spans.conventions import Resource, SpanRejected, normalise, normalised
from watchdog.core.spans.decode import TraceRequest, attributes
from watchdog.core.spans.logs import (
    CONTENT_KEYS,
    LATE_SCOPE_PREFIXES,
    Held,
    LogJoin,
    merged,
)
from watchdog.core.spans.record import (
    AGENT,
    DUPLICATE_SPAN_ID,
    LLM,
    TOOL,
    SpanRecord,
    copy_mark,
    duplicate_message,
)
from watchdog.core.spans.values import select_attributes, selected


@dataclass(slots=True)
class Decoded:
    records: list[SpanRecord] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)  # reason -> spans
    first_error: str = ""
    duplicate: bool = False  # a retry of a request already applied: acknowledged, not counted

    @property
    def rejected_count(self) -> int:
        return sum(self.rejected.values())

    def outcome(self) -> str:
        """The receivers' ``export_requests_total{outcome}`` label for a decoded request."""
        if self.duplicate:
            return "duplicate"
        return "partial" if self.rejected else "ok"

    def message(self) -> str:
        if not self.rejected:
            return ""
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.rejected.items()))
        return f"rejected {self.rejected_count} span(s) ({reasons}); first: {self.first_error}"


def _checked(record: SpanRecord) -> SpanRecord:
    """The id rule (:mod:`watchdog.core.bounds`), the same the API routes apply: a run that could
    not be asked for by its id is refused at the door, not stored."""
    # (printable text has no control character or lone surrogate: the common case, in C, and
    # no tuples made for it; the loop below says what is wrong)
    key, session, parent = record.run_key, record.session, record.parent_run
    if key.isprintable() and 0 < len(key) <= MAX_ID_CHARS \
            and (session is None or (session.isprintable() and 0 < len(session) <= MAX_ID_CHARS)) \
            and (parent is None or (parent.isprintable() and 0 < len(parent) <= MAX_ID_CHARS)):
        return record
    for reason, what, value in (("invalid_run_id", "run id", key),
                                ("invalid_session_id", "session id", session),
                                ("invalid_run_id", "parent run id", parent)):
        if value is not None and not (value.isprintable() and 0 < len(value) <= MAX_ID_CHARS) \
                and (problem := id_problem(value)) is not None:
            raise SpanRejected(reason, f"{what} {value[:64]!r} is not allowed: it {problem}")
    return record


def records_from(request: TraceRequest) -> Decoded:
    """Every span of ``request`` as a record (or a counted rejection)."""
    return next(slices_of(request, None), Decoded())


def slices_of(request: TraceRequest, size: int | None,
              join: LogJoin | None = None, now: float = 0.0) -> Iterator[Decoded]:
    """The request's records in the order their spans ended (:func:`_in_end_order`), ``size``
    at a time (None: all at once; a trace is not cut unless it is longer than
    ``MAX_TRACE_SLICE``: :func:`_slice_end`), so the shell can apply a large request in slices
    and serve other requests in between. Every span is normalised before the first is
    applied (the order needs them all); meanwhile a part with no records (the spans rejected
    so far counted in it) comes every ``size`` spans: a turn for the shell.

    With ``join``, a span is read with the content its GenAI log event brought, and a model
    call whose content is still to come holds its trace back in the join
    (:mod:`watchdog.core.spans.logs`), or, applied without content, is kept there for its
    content to be read late (:func:`late_content`); traces the join's bounds pushed out come
    along."""
    decoded = Decoded()
    records: list[SpanRecord] = []
    models: dict[str, SpanRecord] = {}  # the request's model calls by span id, for _pair
    inner: dict[str, SpanRecord] = {}  # ... and by parent span id
    count = 0
    held = False
    native_span = values.NATIVE_SPAN  # (the compiled decode's: values.read, inline per span)
    for resource_spans in request.resource_spans:
        resource = Resource.of(attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                try:
                    attrs, firsts = span.read() if type(span) is native_span \
                        else (select_attributes(span.attributes), None)
                    if join is not None:
                        trace_id = span.trace_id
                        key = join.span_key(span.span_id, span.name, attrs, scope)
                        content = join.content(trace_id, key)
                        if content is not None:
                            attrs, firsts = merged(attrs, content), None
                        waits = content is None and join.awaits(span.name, attrs, resource)
                        if len(trace_id) == 16 and (waits or join.holding(trace_id)):
                            join.hold(span, resource, scope, now, waits, content, key)
                            held = True
                            continue
                    record = _checked(normalised(span, attrs, resource, firsts, scope))
                    if record.kind is LLM:
                        record.scope = scope
                        _pair(record, models, inner)
                        if join is not None and content is None \
                                and attrs.keys().isdisjoint(CONTENT_KEYS):
                            join.note(span, record, resource, scope, now)
                    elif join is not None and content is None \
                            and scope.startswith(LATE_SCOPE_PREFIXES) \
                            and join.kept_late(record.kind, scope, attrs):
                        join.note(span, record, resource, scope, now, key)
                    records.append(record)
                except SpanRejected as exc:
                    decoded.rejected[exc.reason] += 1
                    if not decoded.first_error:
                        decoded.first_error = str(exc)
                count += 1
                if size is not None and count >= size:
                    yield decoded
                    decoded, count = Decoded(), 0
    if join is not None:
        if held:  # a trace held from this request on: what was read of it before waits too
            kept = [record for record in records if not _kept(join, record)]
            records = kept
        if join.overflow:
            spilled, join.overflow = join.overflow, []
            records.extend(_read_held(spilled, join, decoded, now))
    records = _first_of_each_id(records, decoded)
    ordered = _in_end_order(records)
    if models:
        _pair_responses(ordered)
    if size is None:
        decoded.records = ordered
        yield decoded
        return
    start = 0
    while start < len(ordered):
        end = _slice_end(ordered, start, size)
        decoded.records = ordered[start:end]
        yield decoded
        decoded = Decoded()
        start = end
    if decoded.rejected:
        yield decoded


def _slice_end(ordered: list[SpanRecord], start: int, size: int) -> int:
    """Where the slice of ``ordered`` from ``start`` ends: after ``size`` records, and on to
    the end of the trace they end in, so a trace of the request is applied in one step (as in
    a request of its own: the tracker reads a trace cut in two otherwise when a span comes
    after its agent span in end order and holds a nested agent, ADK's model call that hands a
    sub-agent its task), unless it runs past ``MAX_TRACE_SLICE`` records."""
    end = min(start + size, len(ordered))
    limit = min(start + max(size, MAX_TRACE_SLICE), len(ordered))
    while end < limit and ordered[end].trace_id == ordered[end - 1].trace_id:
        end += 1
    return end


def _first_of_each_id(records: list[SpanRecord], decoded: Decoded) -> list[SpanRecord]:
    """``records`` with one span of each (trace, span) id: the first in the request. A copy of
    it later in the request (the same name and times) is dropped as the copy it is; another
    span with its id is rejected (``duplicate_span_id``), as one with an id applied by an
    earlier request is (:class:`watchdog.core.sync.RecentSpans`)."""
    firsts = {record.trace_id + record.span_id: record for record in reversed(records)}
    if len(firsts) == len(records):  # the common case: every id once
        return records
    kept: list[SpanRecord] = []
    for record in records:
        first = firsts[record.trace_id + record.span_id]
        if first is record:
            kept.append(record)
        elif copy_mark(first) != copy_mark(record):
            decoded.rejected[DUPLICATE_SPAN_ID] += 1
            if not decoded.first_error:
                decoded.first_error = duplicate_message(record)
    return kept


def _kept(join: LogJoin, record: SpanRecord) -> bool:
    trace_id = bytes.fromhex(record.trace_id)
    if join.holding(trace_id):
        join.keep_record(trace_id, record)
        return True
    return False


def released(traces: list[Held], join: LogJoin, now: float) -> Decoded:
    """Held traces (their content came, or their wait is over) read and in end order, for
    the shell to apply as it applies a request."""
    decoded = Decoded()
    decoded.records = _in_end_order(_read_held(traces, join, decoded, now))
    _pair_responses(decoded.records)
    return decoded


def late_content(join: LogJoin) -> list[tuple[SpanRecord, SpanRecord]]:
    """The model calls applied without content whose content came since (taken from
    ``join``), each with its span read again with that content, for the core to fold in
    (:meth:`Core.apply <watchdog.core.step.Core.apply>`)."""
    if not join.late:
        return []
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    late, join.late = join.late, []
    pairs: list[tuple[SpanRecord, SpanRecord]] = []
    for unread, content in late:
        span = Span.FromString(unread.span)
        try:
            reread = normalise(span, merged(selected(span), content), unread.resource,
                               scope=unread.scope)
        except SpanRejected:  # (it was read once: it is not refused now)
            continue
        pairs.append((unread.record, reread))
    return pairs


def _read_held(traces: list[Held], join: LogJoin, decoded: Decoded,
               now: float) -> list[SpanRecord]:
    records: list[SpanRecord] = []
    models: dict[str, SpanRecord] = {}
    inner: dict[str, SpanRecord] = {}
    for held in traces:
        for item in held.items:
            if isinstance(item, SpanRecord):
                records.append(item)
                continue
            span, resource, scope, content = item
            attrs = selected(span)
            key = join.span_key(span.span_id, span.name, attrs, scope)
            if content is None:
                content = held.content.get(key) or join.content(span.trace_id, key)
            if content is not None:
                attrs = merged(attrs, content)
            try:
                record = _checked(normalise(span, attrs, resource, scope=scope))
            except SpanRejected as exc:
                decoded.rejected[exc.reason] += 1
                if not decoded.first_error:
                    decoded.first_error = str(exc)
                continue
            if record.kind is LLM:
                record.scope = scope
                _pair(record, models, inner)
                if content is None and attrs.keys().isdisjoint(CONTENT_KEYS):
                    join.note(span, record, resource, scope, now)  # (its content may come yet)
            elif content is None and join.kept_late(record.kind, scope, attrs):
                join.note(span, record, resource, scope, now, key)
            records.append(record)
    return records


def _closes_trace(record: SpanRecord) -> bool:
    """A trace root that closes its run (:attr:`SpanRecord.ends_run`): one that is no model or
    tool call (those may be loose calls, grouped in order), or a tool call no model asked for
    (a function that ran the model loop itself, Semantic Kernel's prompt functions), and no
    second root (``Convention.second_roots``); or the span a convention says ends its run."""
    if record.ends_its_run:
        return True
    return record.parent_span_id is None and not record.second_root and (
        record.unasked or not (record.kind is LLM or record.kind is TOOL))


def _in_end_order(records: list[SpanRecord]) -> list[SpanRecord]:
    """``records`` with each trace's spans in the order they ended, its root that closes the
    run after every other span of the trace in the request (a root may end before a span
    below it: an async child, a streamed answer); at equal times, as the request had them. Each
    trace stays in one piece (the shell applies a request in slices: a run's spans together is
    fewer runs evaluated per slice), the traces in the order their last spans ended (a
    home-grown loop's model and tool calls, a trace each, form one run in the order they
    ended, not scope by scope).

    That is the order an exporter sending each span as it ends sends a trace, and the one the
    tracker reads right. The order a request holds is no order at all: an SDK exporter groups a
    batch's spans by resource and scope (so one framework's root may come before the model call
    that answered, another scope's), and a Collector merges requests and cuts them anywhere.
    The unasked tool calls learn here whether a model call ran inside them (the whole request
    is known)."""
    traces: dict[str, list[SpanRecord]] = {}
    unasked = False
    for record in records:
        trace = traces.get(record.trace_id)
        if trace is None:
            traces[record.trace_id] = [record]
        else:
            trace.append(record)
        unasked = unasked or record.unasked
    if unasked:
        _models_below(records)
    if len(traces) == len(records):
        return sorted(records, key=END_NS)  # a span per trace (loose calls)
    ended: list[tuple[int, int, list[SpanRecord]]] = []  # (last end, position, the trace)
    for position, trace in enumerate(traces.values()):
        if len(trace) > 1:
            trace.sort(key=END_NS)  # stable, and C-level: most traces come in order
            last = trace[-1]
            if not _closes_trace(last):
                trace.sort(key=_closes_trace)  # (stable: a closing root after the rest)
        else:
            last = trace[0]
        ended.append((last.end_ns, position, trace))
    ended.sort()  # (never compares two traces: the positions differ)
    ordered: list[SpanRecord] = []
    for _, _, trace in ended:
        ordered.extend(trace)
    return ordered


END_NS = attrgetter("end_ns")
# the records of one trace a slice of a request (slices_of) may grow to, to hold it whole
MAX_TRACE_SLICE = 128


def _pair(record: SpanRecord, models: dict[str, SpanRecord],
          inner: dict[str, SpanRecord]) -> None:
    """A model call traced twice (one span inside the other: a framework's and its client
    library's), both in one request: the one that comes second learns the first's usage
    (:attr:`SpanRecord.twin_tokens`) and counts no iteration. A request groups spans by scope,
    so a batch's outer spans may all come before its inner ones, or after. Two that name
    different responses are two calls (LiteLLM's callback copies a call's attributes onto the
    span around the next one)."""
    parent = record.parent_span_id
    twin = models.get(parent) if parent is not None else None
    if twin is None:
        twin = inner.get(record.span_id)
    if twin is not None and not (record.response_id and twin.response_id
                                 and record.response_id != twin.response_id):
        _share_model(record, twin)
        if twin.parent_span_id is None and twin.twin_tokens is None:
            # the outer one a trace's root: it counts none (a root that frames a loop is no
            # model call once its other calls are seen, whichever half came first)
            twin.twin_tokens = (record.input_tokens, record.output_tokens)
        else:
            record.twin_tokens = (twin.input_tokens, twin.output_tokens)
            return
    models[record.span_id] = record
    if parent is not None:
        inner[parent] = record


def _pair_responses(ordered: list[SpanRecord]) -> None:
    """A model call traced twice with one response id (a client SDK's own span and an
    instrumentation's, each a trace of its own: two scopes), both in one request: the one that
    ends second
    learns the first's usage and counts no iteration — in end order, as they are applied, so
    that the one that counts is the one a loose run may end with (its twin, after it, is
    then no call of a next run). The two halves of one call come from one service and overlap
    in time: a response id seen again from another service, or at another time, is another
    call (a Collector merges many agents' spans into one request, and some model servers
    number their responses from a small range: Ollama's ``chatcmpl-0`` … ``chatcmpl-999``)."""
    responses: dict[tuple[str, str | None], SpanRecord] = {}
    for record in ordered:
        response_id = record.response_id
        if response_id is None or record.kind is not LLM:
            continue
        key = (response_id, record.service)
        twin = responses.get(key)
        if twin is None or twin.scope == record.scope \
                or twin.end_ns < record.start_ns or record.end_ns < twin.start_ns:
            responses[key] = record  # (one scope, or apart in time: another call)
        elif record.twin_tokens is None and twin.twin_tokens is None:
            record.twin_tokens = (twin.input_tokens, twin.output_tokens)
            _share_model(record, twin)


def _share_model(one: SpanRecord, other: SpanRecord) -> None:
    """Two halves of one call: the model (and provider) one of them names is the other's too,
    so each is priced as the call it is (watchdog.core.runs.pricing)."""
    if one.model is None:
        one.model, one.provider = other.model, one.provider or other.provider
    elif other.model is None:
        other.model, other.provider = one.model, other.provider or one.provider


def _models_below(records: list[SpanRecord]) -> None:
    """Tell the unasked tool calls inside which a model call of their trace ran (started after
    it, ended before it did) in this request (``models_below`` True), or an agent did (False: a
    sub-agent called as a tool is a tool call); the tracker looks at the runs for the rest.
    (A home-grown loop may give no tool span a call id: each is compared with its trace's model
    calls and agent spans only.)"""
    unasked: dict[str, list[SpanRecord]] = {}
    for record in records:
        if record.unasked:
            unasked.setdefault(record.trace_id, []).append(record)
    if not unasked:
        return
    for record in records:
        kind = record.kind
        if (kind is LLM or (kind is AGENT and not record.workflow)) \
                and (tools := unasked.get(record.trace_id)) is not None:
            for tool in tools:
                if record.end_ns > tool.end_ns:
                    continue
                if kind is AGENT:
                    if tool.start_ns <= record.start_ns:
                        tool.models_below = False
                elif tool.start_ns < record.start_ns and tool.models_below is None:
                    tool.models_below = True
