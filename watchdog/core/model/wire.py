"""What the three model APIs have in common, as plain values: a request read, a response
observed, an incremental SSE reader, and the :class:`Wire` protocol each API implements.

Sans-IO: bytes and dicts in, values and bytes out. A wire module never re-serialises what it did
not change: the shell forwards the agent's bytes unless an edit returns new ones.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from json.scanner import make_scanner
from typing import Any, Protocol

MAX_SSE_EVENT_BYTES = 4 * 1024 * 1024  # one SSE event (a whole JSON chunk) at most
MAX_TOOL_CALLS_SEEN = 128  # tool calls one response (or results one request) is read for
MAX_ANSWERS_SEEN = 8  # a request's latest model answers kept (Request.answers)
# a conversation the server keeps by its id (Responses ``conversation``): its anchor, the id
# after this (no first user message reads so)
CONVERSATION_ANCHOR = "\0conversation:"
MAX_TEXT_CHARS = 64 * 1024  # answer text kept of one response (the report, the final output)
# Ids of the endpoint's runs, records and calls: random, as the OpenTelemetry SDK's own
# (``getrandbits``, seeded once from the OS), not ``secrets``: each ``os.urandom`` call lets go
# of the GIL on the event loop, and another thread may then hold it for a switch interval.
_ids = random.Random()


def random_hex(bits: int) -> str:
    return f"{_ids.getrandbits(bits):0{bits // 4}x}"


class WireError(ValueError):
    """A request the endpoint must read and cannot (not JSON, not UTF-8, the wrong shape)."""


@dataclass(slots=True)
class ToolCall:
    """A tool call the model asked for."""

    call_id: str
    name: str
    arguments: str


@dataclass(slots=True)
class ToolResult:
    """A tool result the agent sent back, in the request after the call."""

    call_id: str
    content: str
    error: bool = False


@dataclass(slots=True)
class Request:
    """What the endpoint reads of one model request."""

    model: str
    stream: bool
    has_tools: bool
    instructions: str  # the system / developer / instructions text, joined
    anchor: str  # the conversation's first user message (its identity, with the agent)
    messages: int  # items in the conversation (in the request, when the server keeps it)
    last_is_user: bool  # the request carries a new user message (not a tool result)
    # the text of its first user message (its parts' text joined, when it has parts): what a
    # side request quotes
    anchor_text: str = ""
    results: list[ToolResult] = field(default_factory=list)  # since the last model answer
    # the text of the other messages since the last model answer (tool results an agent
    # replays as plain text: "Observation: ...")
    said: list[str] = field(default_factory=list)
    previous_response_id: str | None = None  # Responses API
    # the server keeps the conversation (Responses ``previous_response_id``, ``conversation``):
    # the request sends only the new items, so its length says nothing of the conversation's
    kept: bool = False
    include_usage: bool = False  # chat: stream_options.include_usage
    # the JSON format its answer must follow (``json_schema``, ``json_object``; None: text):
    # chat ``response_format``, Responses ``text.format``, Messages ``output_config.format``
    answer_format: str | None = None
    # its request as a span's is hashed (SpanRecord.input_hash: its last user message, case and
    # spacing ignored); a run's input is its first call's (watchdog.core.cycles)
    input_hash: int | None = None
    # the content of the model's last answer the conversation carries (None: none), as the
    # request sends it: the stop answer an agent goes on from (:func:`answer_digest`)
    last_answer: object = None
    # the content of the conversation's latest model answers, at most MAX_ANSWERS_SEEN, latest
    # last: a request that goes on in a run whose agent acts in text carries its latest answer
    answers: tuple[object, ...] = ()
    # the content of the conversation's first message when it is the model's, before any user
    # message (None: none such): a history compacted to the summary the model wrote, which its
    # agent sends as the model's (:meth:`~watchdog.core.model.book.ModelBook._compacted`)
    opening: object = None
    # Responses: the ``instructions`` as the client sent them (None: none), which an answer of
    # the endpoint's own echoes, as the API's do
    given_instructions: object = None
    # the conventions' final-answer tools it offers (at most MAX_ANSWERS_OFFERED): a call of
    # one it does not offer (a tool the model made up) is work, not its answer
    # (:func:`~watchdog.core.model.steer.answers`)
    answers_offered: tuple[str, ...] = ()
    # the function it forces, the only one it offers (:func:`forced_function`; None: none
    # such): an answer-shaped request, whose call of it is its answer, its arguments in that
    # function's schema (instructor's Mode.TOOLS, a structured output by a tool)
    forced: str | None = None
    # the limit of its own its agent announces in it (its last message or its instructions say
    # so in a framework's words: the conventions' ``limit_prompts``; None: none), as its final
    # request at that limit: :func:`announced_limit`
    limit: str | None = None
    # the ids of the tool calls its last message holds when that is the model's answer, with
    # no results after it (at most MAX_TOOL_CALLS_SEEN): an agent that sends its latest calls
    # back without their results (Inngest AgentKit's own loop): the call it goes on from, so
    # its next request, the same length, is not the request before sent again
    last_calls: tuple[str, ...] = ()

    @property
    def structured(self) -> bool:
        """Its answer must follow a JSON format given as its answer's format (an answer-shaped
        request's is its function's, which its final request is told when the tools are
        withdrawn: :func:`~watchdog.core.model.steer.forced_prompt`)."""
        return self.answer_format is not None and self.forced is None


# the JSON answer formats (chat ``response_format.type``, Responses ``text.format.type``)
STRUCTURED_FORMATS = frozenset(("json_schema", "json_object"))


def can_call(tools: object, choice: object) -> bool:
    """Whether a request's ``tools`` (or legacy ``functions``) can be called under its
    ``choice`` (``tool_choice``, legacy ``function_call``): offered, and not withdrawn
    (``"none"``; Anthropic ``{"type": "none"}``)."""
    return bool(tools) and choice != "none" and not (
        isinstance(choice, dict) and choice.get("type") == "none")


def _tool_specs(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The function tools a request offers, as defined (Chat Completions' ``function``, its
    legacy ``functions``, the Responses API's and Messages' flat definitions)."""
    for key in ("tools", "functions"):
        listed = body.get(key)
        for tool in listed if isinstance(listed, list) else ():
            function = tool.get("function") if isinstance(tool, dict) else None
            spec = function if isinstance(function, dict) else tool
            if isinstance(spec, dict):
                yield spec


def offered_names(body: dict[str, Any]) -> Iterator[object]:
    """The names of the function tools a request offers (as sent: not all of them text)."""
    return (spec.get("name") for spec in _tool_specs(body))


def tool_parameters(body: dict[str, Any], name: str) -> frozenset[str] | None:
    """The names of the parameters a request offers its function tool ``name`` with (Chat
    Completions' ``function.parameters``, its legacy ``functions``, the Responses API's flat
    ``parameters``, Messages' ``input_schema``; a schema with no properties: none), or None
    when it offers no tool of that name."""
    for spec in _tool_specs(body):
        if spec.get("name") != name:
            continue
        schema = spec.get("parameters", spec.get("input_schema"))
        properties = schema.get("properties") if isinstance(schema, dict) else None
        return frozenset(properties) if isinstance(properties, dict) else frozenset()
    return None


# the answer format of an answer-shaped request (:func:`forced_function`): its answer is a call
# of the function it forces, its arguments the JSON that function's schema gives
FORCED_FORMAT = "json_schema"


def forced_function(body: dict[str, Any]) -> str | None:
    """The function a request forces and offers alone (None: none such): its choice names one
    function (Chat Completions ``tool_choice`` ``{"type": "function", "function": {"name"}}``,
    legacy ``function_call`` ``{"name"}``; Responses ``{"type": "function", "name"}``;
    Messages ``{"type": "tool", "name"}``) and it offers no other. Such a request asks for an
    answer in that function's shape (a structured output, instructor's default): the call is
    the answer, its arguments what the program reads, and no result of it comes back as a
    tool's."""
    for key, choice_key in (("tools", "tool_choice"), ("functions", "function_call")):
        choice = body.get(choice_key)
        if not isinstance(choice, dict):
            continue
        if choice_key == "tool_choice" and choice.get("type") not in ("function", "tool"):
            continue
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else choice.get("name")
        specs = body.get(key)
        if not isinstance(name, str) or not name or not isinstance(specs, list) \
                or len(specs) != 1:
            continue
        spec = specs[0]
        inner = spec.get("function") if isinstance(spec, dict) else None
        spec = inner if isinstance(inner, dict) else spec
        if isinstance(spec, dict) and spec.get("name") == name:
            return name
    return None


def announced_limit(last: object, instructions: str) -> str | None:
    """The limit of its own an agent announces in a request (``last``: its last message or
    input item): the conventions' words of a framework that asks its model for the answer at
    its limit (:func:`watchdog.core.spans.outcome.announced_limit`)."""
    from watchdog.core.spans.outcome import announced_limit as announced

    return announced(text_of(last.get("content")) if isinstance(last, dict) else
                     last if isinstance(last, str) else "", instructions)


def json_format(answer_format: object) -> str | None:
    """The JSON format a request's answer format asks for (a schema, or any JSON object), or
    None (text)."""
    if isinstance(answer_format, dict):
        kind = answer_format.get("type")
        if isinstance(kind, str) and kind in STRUCTURED_FORMATS:
            return kind
    return None


ABORT_CODE = "watchdog_aborted"  # an abort's error code, and its answer's in a JSON object


def abort_text(note: str, answer_format: str | None) -> str | None:
    """An aborted run's answer (its stop note) as the request's answer format asks: the note
    itself for text; a JSON object carrying it for ``json_object`` (an object the run's
    final report already is stays as it is); for a schema, None: no object of the agent's
    schema honestly carries a stop note (it has only the agent's fields), so the abort is
    answered as an error instead, which every client surfaces with its message."""
    if answer_format is None:
        return note
    try:
        given = json.loads(note)
    except (ValueError, RecursionError):
        given = None
    if isinstance(given, dict):  # the model's own report, in the format it was asked in
        return note
    if answer_format == "json_object":
        return json.dumps({"code": ABORT_CODE, "message": note}, ensure_ascii=False)
    return None


@dataclass(slots=True)
class Observation:
    """What one model response said."""

    response_id: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0  # cached input tokens read (part of input_tokens)
    cache_write_tokens: int = 0  # ... and written
    model: str | None = None  # the model that answered, as the response names it
    finish_reason: str | None = None
    calls: list[ToolCall] = field(default_factory=list)
    text: str = ""
    complete: bool = False  # the response (or the stream) ended as its API ends one
    # it passed on a ``data:`` line that is not JSON: a client's SDK raises on it, so the
    # agent never read this answer (:func:`unreadable`)
    unreadable: bool = False

    @property
    def broke_off(self) -> bool:
        """It ended before its API's end and said no finish reason: the upstream closed it or
        sent an error event mid-way, or the client went away."""
        return not self.complete and self.finish_reason is None


# What the compiled relay read of a stream (``Relay.observed``, its ``done`` event): the fields
# of an Observation in their order, its calls as (call_id, name, arguments)
ObservedFields = tuple[str | None, int, int, int, int, str | None, str | None,
                       list[tuple[str, str, str]], str, bool, bool]


def observation_of(fields: ObservedFields) -> Observation:
    """The :class:`Observation` the compiled relay read (as :func:`read_stream` reads)."""
    (response_id, input_tokens, output_tokens, cache_read, cache_write, model, finish, calls,
     text, complete, unreadable) = fields
    return Observation(response_id, input_tokens, output_tokens, cache_read, cache_write, model,
                       finish, [ToolCall(*call) for call in calls], text, complete, unreadable)


def dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def text_of(content: object) -> str:
    """The text in a message's content: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
                elif isinstance(part.get("content"), (str, list)):
                    parts.append(text_of(part["content"]))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


def answer_digest(content: object) -> str | None:
    """The digest of an answer's text (a message's content, or the text itself), its spacing
    ignored (a client may strip or re-wrap what it stores); None: no text."""
    words = text_of(content).split()
    if not words:
        return None
    return hashlib.sha256(" ".join(words).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def anchor_of(content: object) -> str:
    """A conversation's identity from its first user message (any JSON value), its parts'
    prompt-caching markers (``cache_control``) aside: a client moves them to its latest
    message at each request (pi, on Messages), so the first message carries one at the first
    request only."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        content = [{key: value for key, value in part.items() if key != "cache_control"}
                   if isinstance(part, dict) else part for part in content]
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def token(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return min(value, 10_000_000)


def clipped(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS]


@dataclass(slots=True)
class Event:
    """One SSE event: its bytes as received (terminator included), its ``event:`` name and
    its ``data:`` (joined lines; None if it has none)."""

    raw: bytes
    name: str | None
    data: str | None


class SSEReader:
    """Splits a byte stream into SSE events as chunks arrive (a chunk may hold part of an
    event, or several). Bounded: an event longer than ``MAX_SSE_EVENT_BYTES`` stops the
    reading (:attr:`broken`); the shell forwards the bytes as they come, or, with a bound on
    the response's tool calls, ends the answer there.

    Cheap on the common stream: while no ``\\r`` has come, an event ends only at ``\\n\\n``
    (one ``bytes.find`` per event, none over the rest of the buffer for separators that never
    come), and a one-line ``data:`` event is cut out of its bytes without splitting lines."""

    def __init__(self, limit: int = MAX_SSE_EVENT_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._cr = False  # a carriage return has come: every separator is looked for
        self.broken = False

    def feed(self, chunk: bytes) -> list[Event]:
        if self.broken:
            return []
        buffer = self._buffer
        search = max(len(buffer) - 3, 0)  # a blank line may straddle the chunks
        if not buffer and chunk.endswith(b"\n\n") and not self._cr and b"\r" not in chunk \
                and chunk.find(b"\n\n") == len(chunk) - 2 and len(chunk) <= self.limit:
            return [_parse_event(chunk)]  # the usual chunk: one whole event
        buffer += chunk
        if not self._cr and b"\r" in chunk:
            self._cr = True
        events: list[Event] = []
        start = 0
        while True:
            if self._cr:
                end, size = _event_end(buffer, max(start, search))
            else:
                end, size = buffer.find(b"\n\n", max(start, search)), 2
            if end < 0:
                break
            events.append(_parse_event(bytes(buffer[start:end + size])))
            start = end + size
        if start:
            del buffer[:start]
        if len(buffer) > self.limit:
            self.broken = True
            buffer.clear()
        return events

    def rest(self) -> bytes:
        """What arrived after the last complete event (a stream cut short)."""
        return bytes(self._buffer)


def _event_end(buffer: bytearray, start: int) -> tuple[int, int]:
    """Where the first blank line at or after ``start`` begins, and its length."""
    best, size = -1, 0
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        at = buffer.find(sep, start)
        if at >= 0 and (best < 0 or at < best):
            best, size = at, len(sep)
    return best, size


_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # SSE's line ends (not str.splitlines's others)


def _parse_event(raw: bytes) -> Event:
    if raw.startswith(b"data:") and raw.find(b"\n") == len(raw) - 2 and b"\r" not in raw:
        only = raw[6:-2] if raw.startswith(b"data: ") else raw[5:-2]  # one data line
        return Event(raw, None, only.decode("utf-8", "replace"))
    name: str | None = None
    data: list[str] = []
    text = raw.decode("utf-8", "replace")
    for line in _LINE_BREAK.split(text):
        if not line or line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "data":
            data.append(value)
        elif key == "event":
            name = value
    return Event(raw, name, "\n".join(data) if data else None)


def sse(data: object, name: str | None = None) -> bytes:
    """One SSE event of JSON ``data`` (or a literal string)."""
    body = data.encode() if isinstance(data, str) else dumps(data)
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + body + b"\n\n"


def closed_up(index: int, dropped: set[int]) -> int:
    """The index an item keeps once the ``dropped`` ones before it are left out: what is
    passed on stays numbered 0, 1, 2, … (clients' stream accumulators index by it)."""
    return index - sum(1 for gone in dropped if gone < index)


def json_data(event: Event) -> dict[str, Any] | None:
    """An event's data as a JSON object (None: none, ``[DONE]``, or not an object)."""
    if event.data is None or event.data == "[DONE]":
        return None
    try:
        value = json.loads(event.data)
    except (ValueError, RecursionError):  # (nesting deeper than the parser goes)
        return None
    return value if isinstance(value, dict) else None


def unreadable(event: Event) -> bool:
    """Whether ``event`` has data no client reads: neither ``[DONE]`` nor JSON (what
    :func:`json_data` gave None for)."""
    if event.data is None or event.data == "[DONE]":
        return False
    try:
        json.loads(event.data)
    except RecursionError:  # (JSON nested deeper than Python parses: some client may read it)
        return False
    except ValueError:
        return True
    return False


class Unjudged(Exception):
    """JSON a client may read that Python's parser does not: nested deeper than it goes, or an
    integer longer than it converts (``sys.get_int_max_str_digits``). What holds it cannot be
    judged, so a response bound to a number of tool calls ends there rather than pass it."""


def judged(text: str | bytes) -> object:
    """``json.loads(text)``: ValueError for JSON no client reads either; :class:`Unjudged` for
    JSON some may read and Python cannot judge."""
    try:
        return json.loads(text)
    except RecursionError:
        raise Unjudged("nested too deeply") from None
    except ValueError:
        digits = sys.get_int_max_str_digits()
        if digits and re.search(rb"\d{%d}" % (digits + 1), text if isinstance(text, bytes)
                                else text.encode("utf-8", "surrogatepass")):
            raise Unjudged(f"an integer of more than {digits} digits") from None
        raise


def unjudged(text: str | bytes) -> bool:
    """Whether ``text`` is JSON a client may read that Python's parser cannot judge."""
    try:
        judged(text)
    except Unjudged:
        return True
    except ValueError:
        return False
    return False


def judged_data(event: Event) -> dict[str, Any] | None:
    """:func:`json_data` for a trimmer: :class:`Unjudged` for an event it cannot judge."""
    if event.data is None or event.data == "[DONE]":
        return None
    try:
        value = judged(event.data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def plain_content(data: str | None) -> str | None:
    """The text of a chat completion chunk that carries nothing else an observation reads
    (one choice, the first, whose delta is only its ``content``; no tool calls, usage or
    finish reason), cut out without parsing the chunk; None: the chunk is to be read whole. A
    quoted key inside a JSON string has its quotes escaped, so the keys counted here are the
    chunk's (the rest of a chunk is not checked: one cut short after its delta still gives
    its text)."""
    if data is None or data.count('"delta"') != 1 or data.count('"choices"') != 1 \
            or '"tool_calls"' in data:
        return None
    for key in ('"finish_reason"', '"usage"'):
        count = data.count(key)
        if count > 1 or (count == 1 and key + ":null" not in data):
            return None
    count = data.count('"index"')  # (another choice's text is no part of the first's)
    if count > 1 or (count == 1 and '"index":0,' not in data and '"index":0}' not in data):
        return None
    at = data.find(_PLAIN_DELTA)
    if at < 0 or data.find('"choices":[', 0, at) < 0:
        return None
    try:  # the string from its opening quote: the C scanner, nothing else parsed
        text, end = _DECODER.raw_decode(data, at + len(_PLAIN_DELTA) - 1)
    except ValueError:
        return None
    return text if isinstance(text, str) and data.startswith("}", end) else None


_PLAIN_DELTA = '"delta":{"content":"'
_DECODER = json.JSONDecoder()
# one JSON value at an index: (value, its end); typeshed types its argument wrongly
_SCAN: Callable[[str, int], tuple[Any, int]] = make_scanner(_DECODER)  # type: ignore[arg-type]


class Accumulator(Protocol):
    """Reads a streamed response event by event; :attr:`observation` grows as it goes."""

    observation: Observation

    def feed(self, event: Event) -> None: ...

    def feed_object(self, data: dict[str, Any]) -> None:
        """An event whose data is this JSON object (what :meth:`feed` reads of one)."""


def read_stream(accumulator: Accumulator, data: bytes) -> None:
    """A whole stream that has ended, fed to ``accumulator`` as :class:`SSEReader` feeds it
    when it is handed all of it at once, with less work: an event that is one ``data:`` line of
    a JSON object (after an ``event:`` line or none: no accumulator reads the name) is parsed by
    one call of the C parser, no :class:`Event` made; any other is read as the reader reads
    it."""
    if b"\r" in data:  # other line ends: the reader's own splitting
        for event in SSEReader().feed(data):
            accumulator.feed(event)
        return
    parts = data.split(b"\n\n")
    parts.pop()  # after the last blank line: an event cut short, never read
    for part in parts:
        at = part.find(b"\ndata: {") + 1 if part.startswith(b"event:") else 0
        if part.startswith(b"data: {", at) and part.find(b"\n", at) < 0 \
                and b"data:" not in part[:at]:
            try:
                text = part[at + 6:].decode("utf-8")
                value, end = _SCAN(text, 0)
                if end != len(text):  # more after the object: as json.loads judges it
                    value = json.loads(text)
            except (ValueError, StopIteration, RecursionError):
                value = None
            if isinstance(value, dict):
                accumulator.feed_object(value)
                continue
        if part:
            accumulator.feed(_parse_event(part + b"\n\n"))


class StreamTrimmer(Protocol):
    """Rewrites a streamed response event by event so it hands over at most ``keep`` tool
    calls: returns the bytes to send for ``event`` (b"" to drop it)."""

    def rewrite(self, event: Event) -> bytes: ...


class Wire(Protocol):
    """One model API's wire format (chat completions, responses, messages)."""

    api: str

    def read_request(self, body: dict[str, Any]) -> Request: ...

    def add_note(self, body: dict[str, Any], note: str) -> dict[str, Any]: ...

    def withdraw_tools(self, body: dict[str, Any], prompt: str) -> dict[str, Any]: ...

    def ask_usage(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The request asking for its stream's usage (to price the call), when the API
        reports it only when asked and the request does not (None: nothing to ask)."""

    def read_response(self, body: dict[str, Any]) -> Observation: ...

    def accumulator(self) -> Accumulator: ...

    # (``answer_tool``: the request's own answer, kept and not counted as ``keep``'s,
    # :func:`~watchdog.core.model.steer.answers`)
    def trim(self, body: dict[str, Any], keep: int, answer_tool: str | None = None,
             offered: Container[str] | None = None) -> bool: ...

    def stream_trimmer(self, keep: int, answer_tool: str | None = None,
                       offered: Container[str] | None = None) -> StreamTrimmer: ...

    # (the endpoint's own answer: ``text``, and ``call`` when its agent ends its task by a
    # tool call, its rule pack's ``finish:``)
    def answer(self, model: str, text: str, request: Request, now: float,
               call: ToolCall | None = None) -> dict[str, Any]: ...

    def answer_stream(self, model: str, text: str, request: Request, now: float,
                      call: ToolCall | None = None) -> bytes: ...

    def error(self, status: int, code: str, message: str) -> dict[str, Any]: ...


def append_text(existing: str, note: str) -> str:
    return f"{existing}\n\n{note}" if existing else note


# the conventions' request_hash once loaded (at the first model request, not with the endpoint:
# an import statement at each request cost ~2 % of deciding it)
_conventions_hash: Callable[[object], int | None] | None = None


def request_hash(value: object) -> int | None:
    """The conventions' hash of the request a model call was given
    (:func:`watchdog.core.spans.model_calls.request_hash`)."""
    global _conventions_hash
    if _conventions_hash is None:
        from watchdog.core.spans.conventions import request_hash as conventions_hash

        _conventions_hash = conventions_hash
    return _conventions_hash(value)
