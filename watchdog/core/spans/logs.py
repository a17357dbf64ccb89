"""GenAI log events (OTLP logs) joined to the spans they describe.

The newest GenAI conventions move a model call's content off its span: the messages in and out,
the tool calls asked for and the finish reasons travel as a log record
(``gen_ai.client.inference.operation.details``) that carries its span's trace and span id. The
content is read here into the same attributes a span carries (``gen_ai.input.messages``,
``gen_ai.output.messages``, ...), and the span is normalised with them, as if it had carried
them itself: the run reads the same either way.

A log and its span arrive on two export paths, in either order:

* **log first**: its content waits (:meth:`LogJoin.add`) for the span, at most
  ``content_wait_seconds``;
* **span first**: a model-call span without content, from a service whose logs carry GenAI
  events, is held with the rest of its trace (a run's root must not close it before the call
  is read) until its content arrives or ``wait_seconds`` pass (:meth:`LogJoin.expired`); then
  its trace goes on, read with what came;
* **content after its span was applied** (the span came before its service's first log event,
  or its wait was over): every model-call span applied without content is kept
  (:meth:`LogJoin.note`, its encoded bytes, not its request) for ``content_wait_seconds``; when
  its content comes it is handed out once (:attr:`LogJoin.late`), and the span read again with
  it, for its run to read what it lacked (``RunTracker.apply``'s ``late_content``): the run
  ends up read as if the content had come first — its answer, the tools asked for, its
  messages; nothing counted twice.

Everything is bounded: the content and spans held or kept (``max_bytes`` in all, by their
encoded size), the spans and traces held, the spans kept for late content
(``MAX_UNREAD_SPANS``), the services remembered. What overflows goes on at once, read with what
it has; a kept span pushed out (or kept past its wait) gives up its content, which then waits
for a span that never comes and is dropped. This module is pure: "now" is an argument.
protobuf and the OTLP log messages load at the first logs export (or a span held), not with
this module.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from watchdog.core.spans.attributes import (
    ALIASED,
    MESSAGES_DELTA_KEYS,
    MESSAGES_JSON_KEYS,
    OUTPUT_MESSAGES_JSON_KEYS,
    WANTED_ATTRIBUTES,
)
from watchdog.core.spans.combined import ENTRIES, TABLES
from watchdog.core.spans.conventions import Resource, role_of
from watchdog.core.spans.decode import (
    DecodeError,
    any_value,
    hex_ids_to_base64,
    json_document,
    parse_document,
)
from watchdog.core.spans.record import SpanRecord
from watchdog.core.spans.schema import Role
from watchdog.core.spans.values import json_encoded

if TYPE_CHECKING:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

__all__ = [
    "ExportLogsServiceRequest",
    "Held",
    "LogJoin",
    "Unread",
    "logs_response_json",
    "logs_response_protobuf",
    "parse_logs_json",
    "parse_logs_protobuf",
]

# The log events whose attributes are a span's content (the conventions tables name them)
CONTENT_EVENTS = frozenset(TABLES.log_events)
# What a model call's content is: a span with none of these waits for its log (a scoped
# entry's under their own names: what a span carries)
CONTENT_KEYS = frozenset(ALIASED.get(key, key) for key in (
    MESSAGES_JSON_KEYS + OUTPUT_MESSAGES_JSON_KEYS + MESSAGES_DELTA_KEYS))
_LLM = Role.LLM
# The facts a log event may bring, by the role of span it describes (a span of that role waits
# for it)
_ROLE_FIELDS = ((Role.LLM, ("answer_texts", "llm_output", "finish_reasons", "input_messages",
                            "output_messages")),
                (Role.TOOL, ("tool_args", "tool_result")),
                (Role.AGENT, ("answer",)))


def _agent_events() -> dict[str, tuple[Role, frozenset[str], tuple[str, ...]]]:
    """An agent's own log events: those a convention lists in ``log_events`` and names its facts
    in, as ``<event>:<attribute>`` (as a span event's are) -> the role of span each describes,
    the attributes read from it, and the log scopes it is read from (a scoped convention's:
    its scopes; none: any); the other log events listed are GenAI events, their attributes a
    span's own."""
    found: dict[str, tuple[Role, frozenset[str], tuple[str, ...]]] = {}
    for convention in ENTRIES:
        for event in convention.log_events:
            for role, names in _ROLE_FIELDS:
                wanted = frozenset(fact.partition(":")[2] for name in names
                                   for fact in getattr(convention, name)
                                   if fact.partition(":")[0] == event)
                if wanted and event not in found:
                    found[event] = (role, wanted, convention.scopes)
    return found


AGENT_EVENTS: Mapping[str, tuple[Role, frozenset[str], tuple[str, ...]]] = MappingProxyType(
    _agent_events())
# The scopes of the conventions whose own log events bring a tool's or an agent span's facts,
# by the role of span: such a span applied without them is kept for them (LogJoin.note), as a
# model call is for its content (a role's spans of other scopes are not: most carry theirs)
LATE_SCOPES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    role: scopes for role in (Role.TOOL, Role.AGENT)
    if (scopes := tuple(scope for convention in ENTRIES for scope in convention.scopes
                        if any(event in AGENT_EVENTS and AGENT_EVENTS[event][0] is role
                               for event in convention.log_events)))})
LATE_SCOPE_PREFIXES = tuple(scope for scopes in LATE_SCOPES.values() for scope in scopes)
# The agent events that name their facts' span by an attribute (a call id) the span carries,
# not by its span id (the conventions' ``log_event_keys``): event -> that attribute; and each
# such attribute -> the role of span and the scopes whose spans it names (the event's)
EVENT_KEYS: Mapping[str, str] = MappingProxyType({
    event: attribute for convention in ENTRIES for fact in convention.log_event_keys
    for event, _, attribute in (fact.partition(":"),) if event in AGENT_EVENTS})
KEY_ATTRIBUTES: Mapping[str, tuple[Role, tuple[str, ...]]] = MappingProxyType({
    attribute: (AGENT_EVENTS[event][0], AGENT_EVENTS[event][2])
    for event, attribute in EVENT_KEYS.items()})
_KEY_SCOPES = tuple(scope for _, scopes in KEY_ATTRIBUTES.values() for scope in scopes)
MAX_KEY_CHARS = 256  # of a call id naming a span
_LLM_ONLY = frozenset({_LLM})


def _family(event: str) -> frozenset[Role]:
    """The roles of span the log events of ``event``'s convention describe (an agent that sends
    one sends the others: its spans of all those roles wait once one came); a GenAI event's, a
    model call's."""
    if event not in AGENT_EVENTS:
        return _LLM_ONLY
    return frozenset(AGENT_EVENTS[name][0] for convention in ENTRIES
                     if event in convention.log_events
                     for name in convention.log_events if name in AGENT_EVENTS)


# The roles of span a service that sent each log event has waiting for such events, and the
# facts that, on a span of a role, are what such an event would bring (it waits for none then)
EVENT_ROLES: Mapping[str, frozenset[Role]] = MappingProxyType(
    {name: _family(name) for name in CONTENT_EVENTS})
AWAITED_KEYS: Mapping[Role, frozenset[str]] = MappingProxyType({
    role: frozenset(event + ":" + attribute for event, (of, wanted, _) in AGENT_EVENTS.items()
                    if of is role for attribute in wanted)
    | (CONTENT_KEYS if role is _LLM else frozenset())
    for role, _ in _ROLE_FIELDS})

WAIT_SECONDS = 2.0  # how long a span waits for its content (its run's end waits with it)
# how long content waits for its span: longer, as it delays nothing (its bytes are bounded), and
# the OpenTelemetry SDK batches spans for up to 5 s but log records for 1 s
CONTENT_WAIT_SECONDS = 10.0
MAX_BYTES = 32 * 1024 * 1024  # content and spans held, by encoded size
MAX_HELD_TRACES = 1024
MAX_HELD_SPANS = 16 * 1024
MAX_SERVICES = 1024  # services remembered as sending GenAI log events
# model calls applied without content, kept for content_wait_seconds in case it comes late
MAX_UNREAD_SPANS = 4096
# How a log event's content was read (LogJoin.content_counts): with its span (the log came
# first, or the span waited for it); late, into a run that had read its span without it; or
# not at all, dropped (no span came for it within its wait, or the bounds pushed it out)
WITH_SPAN, LATE, DROPPED = "with_span", "late", "dropped"
CONTENT_OUTCOMES = (WITH_SPAN, LATE, DROPPED)


def __getattr__(name: str) -> Any:
    """``ExportLogsServiceRequest``, loaded when first asked for."""
    if name == "ExportLogsServiceRequest":
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

        return logs_service_pb2.ExportLogsServiceRequest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parse_logs_protobuf(body: bytes) -> ExportLogsServiceRequest:
    from google.protobuf.message import DecodeError as ProtoDecodeError
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    request = ExportLogsServiceRequest()
    try:
        request.ParseFromString(body)
    except ProtoDecodeError as exc:
        raise DecodeError(f"invalid OTLP logs protobuf payload: {exc}") from None
    return request


def parse_logs_json(body: bytes) -> ExportLogsServiceRequest:
    """OTLP/JSON logs: as :func:`~watchdog.core.spans.decode.parse_json` reads traces (hex
    trace and span ids, strict UTF-8)."""
    document = json_document(body)
    try:
        for resource_logs in document.get("resourceLogs") or document.get("resource_logs") or ():
            for scope_logs in resource_logs.get("scopeLogs") or resource_logs.get(
                    "scope_logs") or ():
                for record in scope_logs.get("logRecords") or scope_logs.get(
                        "log_records") or ():
                    hex_ids_to_base64(record)
    except (AttributeError, TypeError):
        raise DecodeError("invalid OTLP/JSON payload: unexpected structure") from None
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    return parse_document(document, ExportLogsServiceRequest())


def logs_response_protobuf(rejected: int, message: str) -> bytes:
    if not rejected and not message:
        return b""  # the empty message
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    response = ExportLogsServiceResponse()
    response.partial_success.rejected_log_records = rejected
    response.partial_success.error_message = message
    body: bytes = response.SerializeToString()
    return body


def logs_response_json(rejected: int, message: str) -> bytes:
    if not rejected and not message:
        return b"{}"
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    response = ExportLogsServiceResponse()
    response.partial_success.rejected_log_records = rejected
    response.partial_success.error_message = message
    text: str = json_format.MessageToJson(response, indent=None)
    return text.encode()


def _event_name(record: Any) -> str:
    """A log record's event name: the field, or its ``event.name`` attribute when the field is
    empty (older SDKs) or names no event read here (the Codex CLI's holds a source location,
    ``event otel/src/tool_result.rs:54``)."""
    name = str(record.event_name)
    if name in CONTENT_EVENTS:
        return name
    for kv in record.attributes:
        if kv.key == "event.name":
            return str(kv.value.string_value)
    return name


def call_key(value: object) -> bytes:
    """What a span named by a call id (:data:`EVENT_KEYS`) is joined by, in place of its span
    id (never 8 bytes long: no span id's)."""
    return b"call:" + str(value)[:MAX_KEY_CHARS].encode()


def _record_key(record: Any, attribute: str) -> bytes | None:
    for kv in record.attributes:
        if kv.key == attribute:
            value = kv.value.string_value
            return call_key(value) if value else None
    return None


def content_of(record: Any, name: str = "") -> dict[str, object]:
    """The attributes of a GenAI log event a span's reading wants, as a span would carry them;
    of an agent's own event (:data:`AGENT_EVENTS`), those the conventions name, as
    ``<event>:<attribute>`` facts."""
    facts: dict[str, object] = {}
    own = AGENT_EVENTS.get(name)
    wanted = own[1] if own is not None else None
    for kv in record.attributes:
        if wanted is not None:
            if kv.key in wanted:
                value = kv.value
                text = value.string_value
                facts[name + ":" + kv.key] = text if text else any_value(value)
        elif kv.key in WANTED_ATTRIBUTES:
            text = kv.value.string_value
            facts[kv.key] = (json_encoded(text, False) if text[0] == '"' else text) if text \
                else any_value(kv.value)
    return facts


@dataclass(slots=True)
class Held:
    """A trace held for its model calls' content: its spans as they came (raw spans to read
    once the content is there, records already read), which span ids still wait, and until
    when."""

    deadline: float
    # (Span, Resource, scope, its content or None) or a SpanRecord
    items: list[Any] = field(default_factory=list)
    waiting: set[bytes] = field(default_factory=set)  # span ids (or call keys) awaited
    content: dict[bytes, dict[str, object]] = field(default_factory=dict)  # ... what came
    size: int = 0


@dataclass(slots=True)
class Unread:
    """A model call applied without its content: its record (folded into its run), its span
    as encoded bytes (to read again with the content), its resource and scope, and until
    when its content may come."""

    record: SpanRecord
    span: bytes
    resource: Resource
    scope: str
    until: float


class LogJoin:
    """The buffer where GenAI log events and the spans they describe meet (bounded)."""

    def __init__(self, wait_seconds: float = WAIT_SECONDS, max_bytes: int = MAX_BYTES,
                 max_held_traces: int = MAX_HELD_TRACES,
                 max_held_spans: int = MAX_HELD_SPANS,
                 content_wait_seconds: float = CONTENT_WAIT_SECONDS) -> None:
        self.wait_seconds = wait_seconds
        self.content_wait_seconds = max(content_wait_seconds, wait_seconds)
        self.max_bytes = max_bytes
        self.max_held_traces = max_held_traces
        self.max_held_spans = max_held_spans
        # (trace id + span id) -> (content, its size, until when it waits)
        self._content: OrderedDict[bytes, tuple[dict[str, object], int, float]] = OrderedDict()
        self._held: OrderedDict[bytes, Held] = OrderedDict()  # trace id -> held trace
        # service -> the roles of span its log events describe
        self._services: OrderedDict[str, frozenset[Role]] = OrderedDict()
        self._bytes = 0
        self._held_spans = 0
        self.overflow: list[Held] = []  # held traces pushed out by the bounds: go on now
        # (trace id + span id) -> a model call applied without content, oldest first
        self._unread: OrderedDict[bytes, Unread] = OrderedDict()
        # content come for a model call applied without it, to be read (taken by the shell)
        self.late: list[tuple[Unread, dict[str, object]]] = []
        self.events = 0  # GenAI log events read
        # their content read with its span, late (its span had been applied without it), or
        # dropped (content_counts)
        self.with_span = 0
        self.late_content = 0
        self.dropped = 0
        self.unread_given_up = 0  # model calls no longer kept for their content (wait, bound)

    # -- the log side --------------------------------------------------------------------------

    def add(self, request: ExportLogsServiceRequest, now: float) -> list[Held]:
        """Read ``request``'s GenAI log events; returns the held traces whose content is now
        all there, and those the content pushed out of the bounds (to be read, with what they
        have, and applied)."""
        ready: list[Held] = []
        for resource_logs in request.resource_logs:
            service: str | None = None
            for kv in resource_logs.resource.attributes:
                if kv.key == "service.name":
                    service = kv.value.string_value
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    name = _event_name(record)
                    if name not in CONTENT_EVENTS:
                        continue
                    own = AGENT_EVENTS.get(name)
                    if own is not None and own[2] \
                            and not scope_logs.scope.name.startswith(own[2]):
                        continue  # (another scope's event of that name)
                    self.events += 1
                    if service is not None:
                        self._remember(service, EVENT_ROLES[name])
                    trace_id, span_id = bytes(record.trace_id), bytes(record.span_id)
                    keyed = EVENT_KEYS.get(name) if EVENT_KEYS else None
                    if keyed is not None:  # (the span it names is another)
                        span_id = _record_key(record, keyed) or b""
                    elif len(span_id) != 8 or not any(span_id):
                        continue  # no span to join it to
                    if len(trace_id) != 16 or not span_id:
                        continue
                    facts = content_of(record, name)
                    if facts:
                        held = self._content_arrived(trace_id, span_id, facts,
                                                     record.ByteSize(), now)
                        if held is not None:
                            ready.append(held)
        if self.overflow:
            ready += self.overflow
            self.overflow = []
        return ready

    def _remember(self, service: str, family: frozenset[Role]) -> None:
        key = service[:200]
        roles = self._services.get(key)
        if roles is None or not family <= roles:
            self._services[key] = (roles or frozenset()) | family
        self._services.move_to_end(key)
        while len(self._services) > MAX_SERVICES:
            self._services.popitem(last=False)

    def _content_arrived(self, trace_id: bytes, span_id: bytes, facts: dict[str, object],
                         size: int, now: float) -> Held | None:
        key = trace_id + span_id
        held = self._held.get(trace_id)
        if held is not None and span_id in held.waiting:  # its span waits in its trace
            self.with_span += 1
            held.waiting.discard(span_id)
            held.content[span_id] = facts
            held.size += size
            self._bytes += size
            if not held.waiting:
                return self._release(trace_id)
            self._bound()
            return None
        if self._unread:
            unread = self._unread.pop(key, None)
            if unread is not None:  # its span was applied without it: read it late
                self._bytes -= len(unread.span)
                self.late.append((unread, facts))
                self.late_content += 1
                return None
        if key in self._content:
            return None  # (a second event for one span: the first one's content is read)
        self._content[key] = (facts, size, now + self.content_wait_seconds)
        self._bytes += size
        self._bound()
        return None

    # -- the span side -------------------------------------------------------------------------

    @staticmethod
    def span_key(span_id: bytes, name: str, attrs: Mapping[str, object], scope: str) -> bytes:
        """What a span's log events name it by: its span id, or, a span of a scope and role
        whose events name it by a call id it carries (:data:`KEY_ATTRIBUTES`), that id's key."""
        if _KEY_SCOPES and scope.startswith(_KEY_SCOPES):
            for attribute, (role, scopes) in KEY_ATTRIBUTES.items():
                value = attrs.get(attribute)
                if value is not None and value != "" and scope.startswith(scopes) \
                        and role_of(name, attrs) is role:
                    return call_key(value)
        return bytes(span_id)

    def content(self, trace_id: bytes, span_id: bytes) -> dict[str, object] | None:
        """The content a log brought for this span (taken: read once)."""
        if not self._content:
            return None
        found = self._content.pop(trace_id + span_id, None)
        if found is None:
            return None
        self._bytes -= found[1]
        self.with_span += 1
        return found[0]

    def content_counts(self) -> dict[str, int]:
        """How many log events' content was read with its span, late, or dropped
        (:data:`CONTENT_OUTCOMES`), since the start."""
        return {WITH_SPAN: self.with_span, LATE: self.late_content, DROPPED: self.dropped}

    def note(self, span: Any, record: SpanRecord, resource: Resource, scope: str,
             now: float, key: bytes | None = None) -> None:
        """Keep model call ``span``, applied without content (``record``), for its content,
        should a log event bring it within ``content_wait_seconds`` (or a tool or agent span
        for its facts, :meth:`kept_late`)."""
        key = bytes(span.trace_id) + (bytes(span.span_id) if key is None else key)
        if key in self._unread:  # (the span again, a retry: its first record is the applied one)
            return
        data: bytes = span.SerializeToString()
        self._unread[key] = Unread(record, data, resource, scope,
                                   now + self.content_wait_seconds)
        self._bytes += len(data)
        if len(self._unread) > MAX_UNREAD_SPANS or self._bytes > self.max_bytes:
            self._bound()

    @staticmethod
    def kept_late(kind: str, scope: str, attrs: Mapping[str, object]) -> bool:
        """Whether a tool or agent span (``kind``) applied without the facts an agent's own log
        events bring is kept for them (:meth:`note`): one of a scope whose events bring them
        (:data:`LATE_SCOPES`)."""
        scopes = LATE_SCOPES.get(kind)
        return scopes is not None and scope.startswith(scopes) \
            and AWAITED_KEYS[Role(kind)].isdisjoint(attrs)

    def holding(self, trace_id: bytes) -> bool:
        return trace_id in self._held

    def awaits(self, name: str, attrs: Mapping[str, object], resource: Resource) -> bool:
        """Whether a span (no content of its own found) waits for its log: a model call with
        no content, from a service whose logs carry GenAI events; a span of the role an
        agent's own log events describe (:data:`EVENT_ROLES`), from a service that sends them,
        without their facts."""
        if not self._services or resource.service is None:
            return False
        roles = self._services.get(resource.service)
        if roles is None:
            return False
        role = role_of(name, attrs)
        return role is not None and role in roles and AWAITED_KEYS[role].isdisjoint(attrs)

    def hold(self, span: Any, resource: Resource, scope: str, now: float,
             waits: bool, content: dict[str, object] | None = None,
             key: bytes | None = None) -> None:
        """Keep ``span`` with its trace (held from now on if it was not), waiting for its
        content if ``waits`` (``content``: what its log already brought)."""
        trace_id = bytes(span.trace_id)
        held = self._held.get(trace_id)
        if held is None:
            held = self._held[trace_id] = Held(now + self.wait_seconds)
        from opentelemetry.proto.trace.v1.trace_pb2 import Span

        copy = Span()  # (the request it came in is not kept alive for it)
        if isinstance(span, Span):
            copy.CopyFrom(span)
        else:  # the compiled decode's: its bytes as they came
            copy.ParseFromString(span.SerializeToString())
        size = copy.ByteSize()
        held.items.append((copy, resource, scope, content))
        held.size += size
        self._bytes += size
        self._held_spans += 1
        if waits:
            held.waiting.add(bytes(span.span_id) if key is None else key)
        self._bound()

    def keep_record(self, trace_id: bytes, record: Any) -> None:
        """A record of a held trace, read before the trace was held (earlier in its request)."""
        held = self._held.get(trace_id)
        if held is not None:
            held.items.append(record)
            if self._unread:  # (not applied yet: it is read with the content that comes)
                unread = self._unread.pop(trace_id + bytes.fromhex(record.span_id), None)
                if unread is not None:
                    self._bytes -= len(unread.span)

    def expired(self, now: float) -> list[Held]:
        """The held traces whose wait is over, and content no span came for dropped."""
        while self._content:
            key, (_, size, until) = next(iter(self._content.items()))
            if until > now:
                break
            del self._content[key]
            self._bytes -= size
            self.dropped += 1
        unread = self._unread
        while unread:
            key, oldest = next(iter(unread.items()))
            if oldest.until > now:
                break
            del unread[key]
            self._bytes -= len(oldest.span)
            self.unread_given_up += 1
        due = [trace_id for trace_id, held in self._held.items() if held.deadline <= now]
        return [self._release(trace_id) for trace_id in due]

    @property
    def held_traces(self) -> int:
        return len(self._held)

    def _release(self, trace_id: bytes) -> Held:
        held = self._held.pop(trace_id)
        self._bytes -= held.size
        self._held_spans -= sum(1 for item in held.items if isinstance(item, tuple))
        return held

    @property
    def unread_spans(self) -> int:
        """Model calls applied without content, kept for it."""
        return len(self._unread)

    def _bound(self) -> None:
        """Within the bounds: the oldest content is dropped first, then the oldest model calls
        kept for their late content are given up, then the oldest held traces go on
        (:attr:`overflow`), read with what they have."""
        while self._bytes > self.max_bytes and self._content:
            _, (_, size, _) = self._content.popitem(last=False)
            self._bytes -= size
            self.dropped += 1
        unread = self._unread
        while unread and (self._bytes > self.max_bytes or len(unread) > MAX_UNREAD_SPANS):
            _, oldest = unread.popitem(last=False)
            self._bytes -= len(oldest.span)
            self.unread_given_up += 1
        while self._held and (self._bytes > self.max_bytes
                              or len(self._held) > self.max_held_traces
                              or self._held_spans > self.max_held_spans):
            self.overflow.append(self._release(next(iter(self._held))))


def merged(attrs: Mapping[str, object], content: Mapping[str, object]) -> dict[str, object]:
    """A span's attributes with its log's content where the span has none of its own."""
    return {**content, **attrs}


def held_items(traces: Iterable[Held]) -> list[Any]:
    return [item for held in traces for item in held.items]
