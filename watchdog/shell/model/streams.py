"""The aiohttp relay's half that passes responses on (``model_relay: python``, and the streams
the compiled relay hands it: :mod:`watchdog.shell.model.native`).

A response with nothing to trim comes back byte for byte, a stream chunk by chunk as it
arrives, read on the way (an SSE reader and the API's accumulator) to observe the call; a whole
(not streamed) response is read (bounded by ``MAX_RESPONSE_BYTES``: a larger one passes
unobserved) and trimmed if it asks for more tool calls than are left; a stream whose tool calls
must be trimmed is passed on event by event, and the final request's is held until it ends
(bounded), its answer replaced by a stop note when nothing is left of it. A stream asked for
its usage on the client's behalf (a budget in dollars or tokens) is passed on event by event
too, its usage-only chunk read and left out. With a bound on tool calls, what cannot be read (too
long, or JSON Python cannot judge) is never passed on: a stream is broken off there (so too
one asked for its usage), a whole response raises
:class:`~watchdog.core.model.wire.Unjudged` (a 502). When the response has ended,
:meth:`ModelProxy.observed` books the call.

A response in gzip or deflate (an upstream may compress though asked for identity) is inflated
to be read, in bounded pieces (:class:`Inflater`; a whole one by ``inflate``, bounded by
``MAX_RESPONSE_BYTES``): what the relay does not change goes on as it came, with its
``Content-Encoding``; what it changes (a trimmed whole response, a stream passed event by
event) goes on plain. With a bound, one in a coding it cannot read is never passed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from multidict import CIMultiDictProxy

from watchdog.core.model.chat import usage_only
from watchdog.core.model.responses import restore_echo, restored_event
from watchdog.core.model.steer import Act
from watchdog.core.model.wire import SSEReader, ToolCall, Unjudged, dumps, judged
from watchdog.core.spans.codings import IDENTITY, SUPPORTED, BadCoding, BodyTooLarge, inflate
from watchdog.shell.model.headers import response_headers
from watchdog.shell.model.plans import MAX_RESPONSE_BYTES, Exchange, Held


class ModelProxy(Protocol):
    """What the relay tells the endpoint (:class:`watchdog.shell.model.proxy.ModelProxy`): a
    call steered, the note that replaces an answer emptied by trimming, the call observed."""

    def steered(self, agent: str, action: str) -> None: ...

    def empty_final(self, exchange: Exchange, seen: Any, handed: list[Any],
                    stream: bool) -> bytes | None: ...

    def observed(self, exchange: Exchange, handed: list[Any], seen: Any) -> None: ...

    def hold_response(self, held: Held, size: int) -> bool: ...

    def let_go_response(self, held: Held) -> None: ...


class HeldFull(Exception):
    """A whole response read would take the whole responses held at once past
    ``model_max_held_response_bytes``: it is held no further (``data``: what was read of it;
    the rest is still the response's). One to be judged is not passed on unjudged (a 503)."""

    def __init__(self, data: bytes) -> None:
        super().__init__("past model_max_held_response_bytes")
        self.data = data


log = logging.getLogger("watchdog.model")

PIECE = 64 * 1024  # a compressed stream is inflated this many bytes at a time, at most
GZIP_WBITS = 16 + zlib.MAX_WBITS


async def relay(request: web.Request, upstream: aiohttp.ClientResponse,
                read: bytes | None = None) -> _Relayed:
    """Status, headers and body as they come, chunk by chunk (``read``: what was read of the
    body already); its ``broken``: the upstream failed once it had begun."""
    response = _Relayed(status=upstream.status, reason=upstream.reason,
                        headers=response_headers(upstream.headers, False))
    if upstream.content_length is not None:
        response.content_length = upstream.content_length
    await response.prepare(request)
    # the head, with what came with it
    await response.write(_buffered(upstream) if read is None else read)
    response.broken = await pump(request, upstream, response)
    return response


async def read_upto(upstream: aiohttp.ClientResponse, limit: int,
                    hold: Callable[[int], bool] | None = None) -> tuple[bytes, bool]:
    """The first bytes of the upstream's body, up to ``limit`` and one more, and whether they
    are all of it; with ``hold``, their count is told to it as they come, and when it
    refuses them: :class:`HeldFull`."""
    buffer = bytearray()
    while len(buffer) <= limit:
        chunk = await upstream.content.read(limit + 1 - len(buffer))
        if not chunk:
            return bytes(buffer), True
        buffer += chunk
        if hold is not None and not hold(len(buffer)):
            raise HeldFull(bytes(buffer))
    return bytes(buffer), False

async def pump(request: web.Request, upstream: aiohttp.ClientResponse,
               response: web.StreamResponse) -> bool:
    """The rest of the upstream's body as it comes; an upstream that fails once the answer has
    begun breaks it off there (:func:`_break_off`): True."""
    try:
        async for chunk in _chunks(upstream):
            if upstream.content.at_eof():  # the last bytes: with the end, one write
                await response.write_eof(chunk)
                return False
            await response.write(chunk)
    except UpstreamCut:
        _break_off(request)
        return True
    await response.write_eof()
    return False

async def relay_json(proxy: ModelProxy, request: web.Request, upstream: aiohttp.ClientResponse,
                      exchange: Exchange) -> web.StreamResponse:
    """A whole response: read (bounded; gzip or deflate inflated to be read, bounded alike),
    observed, trimmed if it asks for more tool calls than are left, and then plain JSON (else
    its bytes and headers as they came). With a bound on tool calls, one too long to read, in
    a coding it cannot read or holding JSON it cannot judge raises :class:`Unjudged`: no call
    passes unjudged. So too with an echo to set back (the note went into its
    ``instructions``): what the endpoint added never comes back."""
    keep = exchange.turn.keep
    strict = keep is not None or exchange.echo is not None  # (what it passes must be read)
    if upstream.content_length is not None and upstream.content_length > MAX_RESPONSE_BYTES:
        if strict:
            raise Unjudged("too long to read")
        return _passed(exchange, await relay(request, upstream))
    held = Held()  # (its bytes, until they have been written)
    try:
        return await _relay_held(proxy, request, upstream, exchange, strict, held)
    finally:
        proxy.let_go_response(held)


async def _relay_held(proxy: ModelProxy, request: web.Request, upstream: aiohttp.ClientResponse,
                      exchange: Exchange, strict: bool, held: Held) -> web.StreamResponse:
    """``relay_json``'s whole response, held (``held``) until it has been written: one past
    the whole responses' budget is refused (:class:`HeldFull`) when it must be judged, else
    passed on as it comes, as one too long to read."""
    keep = exchange.turn.keep
    closing = _closing(upstream)
    try:
        data, whole = await read_upto(upstream, MAX_RESPONSE_BYTES,
                                      functools.partial(proxy.hold_response, held))
    except HeldFull as full:  # past the whole responses' budget: passed on as it comes
        if strict:
            raise
        return _passed(exchange, await relay(request, upstream, full.data))
    if whole and _reset(closing):  # its end a reset: broken off (502), as the compiled relay
        raise aiohttp.ClientPayloadError("the connection was reset")
    if not whole:  # no length said: too long to read, passed on as it comes
        if strict:
            raise Unjudged("too long to read")
        return _passed(exchange, await relay(request, upstream, data))
    coding = coding_of(upstream.headers)
    text: bytes | None = data
    if coding not in IDENTITY:
        text, why = None, f"a Content-Encoding it cannot read ({coding[:32]!r})"
        if coding in SUPPORTED:
            try:
                text = inflate(data, coding, MAX_RESPONSE_BYTES)
            except BodyTooLarge:
                why = "too long once inflated"
            except ValueError:
                why = f"not of its Content-Encoding ({coding!r})"
        if text is None and strict:
            raise Unjudged(why)
    body: object = None
    if text is None:
        pass
    elif strict:
        with contextlib.suppress(ValueError):
            body = judged(text)
    else:
        with contextlib.suppress(ValueError, RecursionError):
            body = json.loads(text)
    changed = False
    if isinstance(body, dict):
        wire = exchange.wire
        seen = wire.read_response(body)
        handed = exchange.handed(seen.calls)
        if keep is not None and wire.trim(body, keep, exchange.answer_tool, exchange.offered):
            data, changed = dumps(body), True
            proxy.steered(exchange.agent, "trim")
        if exchange.echo is not None and restore_echo(body, exchange.echo):
            data, changed = dumps(body), True
        if (replaced := proxy.empty_final(exchange, seen, handed, stream=False)) is not None:
            data, changed = replaced, True
        proxy.observed(exchange, handed, seen)
    response = web.Response(status=upstream.status, body=data,
                            headers=response_headers(upstream.headers, changed))
    await response.prepare(request)  # (written here, so its bytes are held until they are)
    await response.write_eof()
    return response


def stop_answer(exchange: Exchange, note: str, stream: bool,
                call: ToolCall | None = None) -> bytes:
    """The answer that replaces a final request's answer (``note``: the stop note of one left
    empty, or the report, :meth:`ModelProxy.empty_final`; ``call``: the agent's finish that
    carries it), on either relay: a stream of it, or a whole one."""
    wire, request = exchange.wire, exchange.request
    if stream:
        return wire.answer_stream(request.model, note, request, time.time(), call)
    return dumps(wire.answer(request.model, note, request, time.time(), call))


def _passed(exchange: Exchange, response: _Relayed) -> _Relayed:
    """A whole response too long to read, passed on unread: one the upstream broke off
    counts as its failure (``Exchange.outcome``), as a shorter one does."""
    exchange.broke = response.broken
    return response


async def relay_stream(proxy: ModelProxy, request: web.Request, upstream: aiohttp.ClientResponse,
                        exchange: Exchange) -> web.StreamResponse:
    """A stream passed on as it arrives, read on the way; with a bound on tool calls it
    is passed event by event, the calls past the bound left out. The final request's is
    held until it ends (bounded): an answer left empty is replaced by a stop note. A gzip or
    deflate stream is inflated to be read (:class:`Inflater`); passed event by event, it goes
    on plain, and one in a coding it cannot read is broken off at once."""
    wire, keep = exchange.wire, exchange.turn.keep
    held: list[bytes] | None = [] if exchange.turn.act is Act.FINAL else None
    held_size = 0
    taken = Held()  # (held's bytes in the whole responses' budget)
    reader, accumulator = SSEReader(), wire.accumulator()
    trimmer = wire.stream_trimmer(keep, exchange.answer_tool, exchange.offered) \
        if keep is not None else None
    hide = exchange.hide_usage  # the usage-only chunk the client did not ask for: left out
    echo = exchange.echo  # the instructions it sent, for those its response echoes
    evented = trimmer is not None or hide or echo is not None
    coding = coding_of(upstream.headers)
    readable = coding in SUPPORTED
    inflater = Inflater(coding) if readable and coding not in IDENTITY else None
    response = _Relayed(status=upstream.status, reason=upstream.reason,
                        headers=response_headers(upstream.headers, evented))
    await response.prepare(request)
    trimmed = False
    cut = evented and not readable  # (a coding it cannot read: no call in it passes unjudged)
    booked = False

    def book() -> None:
        """The call booked, once: at its last event (before the agent has it, so a request it
        sends at once finds the call counted), else when the stream has ended."""
        nonlocal booked
        if booked:
            return
        booked = True
        seen = accumulator.observation
        exchange.answered = seen.complete
        calls = exchange.handed(seen.calls)
        if trimmed or len(calls) < len(seen.calls):
            proxy.steered(exchange.agent, "trim")
        proxy.observed(exchange, calls, seen)

    first = _buffered(upstream) if not evented else b""
    if not first:
        await response.write(b"")  # the head now: it waits for no event
    try:
        async for chunk in _chunks(upstream, first) if not cut else _nothing():
            if not evented:  # as it came, read first: booked at its last event
                held = None
                if readable:
                    try:
                        for piece in ((chunk,) if inflater is None else inflater.feed(chunk)):
                            for event in reader.feed(piece):
                                accumulator.feed(event)
                            if reader.broken:  # an event past its bound: unread from here,
                                readable = False  # not inflated on (a bomb's gigabytes)
                                break
                            if inflater is not None:  # the other requests' turn between
                                await asyncio.sleep(0)  # a bomb's pieces
                    except BadCoding:  # not of its coding: passed on unread from here
                        readable = False
                if accumulator.observation.complete:
                    book()  # before the agent can have the last event
                if upstream.content.at_eof():  # the last bytes: with the end, one write
                    await response.write_eof(chunk)
                else:
                    await response.write(chunk)
                continue
            try:
                for piece in ((chunk,) if inflater is None else inflater.feed(chunk)):
                    if inflater is not None:  # the other requests' turn between a bomb's
                        await asyncio.sleep(0)  # pieces
                    events = reader.feed(piece)
                    for event in events:
                        accumulator.feed(event)
                    if reader.broken:
                        raise Unjudged(f"an event longer than {reader.limit} bytes")
                    parts = []
                    for event in events:
                        if hide and usage_only(event):
                            continue
                        if echo is not None:
                            event = restored_event(event, echo)
                        part = trimmer.rewrite(event) if trimmer is not None else event.raw
                        trimmed = trimmed or part is not event.raw
                        parts.append(part)
                    out = b"".join(parts)
                    if held is not None and held_size + len(out) <= MAX_RESPONSE_BYTES \
                            and proxy.hold_response(taken, held_size + len(out)):
                        held.append(out)
                        held_size += len(out)
                        continue
                    if held:  # too long to hold (or past the whole responses' budget): on
                        await response.write(b"".join(held))  # its way as it is
                    held = None
                    proxy.let_go_response(taken)
                    if accumulator.observation.complete:
                        book()  # its last event: booked before the agent can have it
                    if out:
                        await response.write(out)
            except (Unjudged, BadCoding) as exc:  # the answer ends here: no call in it
                log.warning("model upstream stream cut: %s, with a bound on its tool calls "
                            "or its usage asked", exc)  # passes unjudged
                cut = True
                break
        if held is not None and not cut:
            seen = accumulator.observation
            replaced = proxy.empty_final(exchange, seen, exchange.handed(seen.calls),
                                         stream=True)
            await response.write(b"".join(held) if replaced is None else replaced)
        elif held:
            await response.write(b"".join(held))
        if cut:  # broken off: the client sees its answer cut short, not one that ended
            _break_off(request)
            return response
        if evented and (rest := reader.rest()):
            await response.write(rest)  # a stream cut mid-event: as it came
        await response.write_eof()
    except UpstreamCut:  # what was held, then the answer broken off, as the upstream's was
        if held:
            await response.write(b"".join(held))
        if evented and (rest := reader.rest()):
            await response.write(rest)
        _break_off(request)
    finally:
        proxy.let_go_response(taken)
        book()
    return response


def is_stream(content_type: str) -> bool:
    """Whether a response's ``Content-Type`` says it is a stream (as the relays read it)."""
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


def coding_of(headers: CIMultiDictProxy[str]) -> str:
    """A response's content coding, as the relays compare it (lowercase, "": none)."""
    return headers.get("Content-Encoding", "").strip().lower()


class Inflater:
    """A gzip or deflate body inflated as it comes, to be read: in pieces of at most
    ``PIECE`` bytes, so what it holds at once is bounded however far its bytes inflate (a
    decompression bomb's pieces meet the reader's bounds as an identity body's bytes would);
    :class:`BadCoding` for bytes not of its coding. gzip may come as several members;
    deflate as zlib data or raw (as some servers send it), told by its first two bytes. After
    the data (gzip's last member) only zero bytes may come (``codings.inflate``'s rule)."""

    def __init__(self, coding: str) -> None:
        self.gzip = coding == "gzip"
        self.inflater: Any = None  # (made at its first bytes)
        self.head = b""  # deflate's first byte, until its second comes
        self.ended = False  # the data ended (gzip: a member) and nothing has begun after it
        self.padding = False  # ... and zero bytes followed: only zero bytes may come

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data:
            if self.padding or (self.ended and (not self.gzip or data[0] == 0)):
                if data.strip(b"\0"):
                    coding = "gzip" if self.gzip else "deflate"
                    raise BadCoding(f"bytes past the end of the {coding} data (only zero bytes "
                                    f"may pad it)")
                self.padding = True
                return
            if self.inflater is None:
                wbits = GZIP_WBITS
                if not self.gzip:
                    data, self.head = self.head + data, b""
                    if len(data) < 2:
                        self.head = data
                        return
                    zlib_head = data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
                    wbits = zlib.MAX_WBITS if zlib_head else -zlib.MAX_WBITS
                self.inflater, self.ended = zlib.decompressobj(wbits), False
            inflater = self.inflater
            try:
                while True:
                    out = inflater.decompress(data, PIECE)
                    if out:
                        yield out
                    data = inflater.unconsumed_tail
                    if inflater.eof or not (data or len(out) == PIECE):
                        break
            except zlib.error as exc:
                raise BadCoding(str(exc)) from None
            if not inflater.eof:
                return
            # (gzip: its next member, or padding; deflate: padding)
            data, self.inflater, self.ended = inflater.unused_data, None, True


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # (an async generator that yields nothing)


class UpstreamCut(Exception):
    """The upstream failed once its answer had begun (reset, timed out, cut short)."""


def _break_off(request: web.Request) -> None:
    """The client's connection closed mid-answer, what was written flushed first: it sees the
    answer cut short (an unfinished chunked body, or fewer bytes than its length said), as the
    upstream's was, not an answer that ended."""
    if request.transport is not None:
        request.transport.close()


class _Relayed(web.StreamResponse):
    """A relayed response whose head goes out with the first bytes of its body, in one write
    (``write(b"")`` sends it alone); to an HTTP/1.0 client, one of no length said ends with the
    connection (which is how such a client knows its end)."""

    _send_headers_immediately = False  # aiohttp's own switch (web.Response's default)
    broken = False  # the upstream failed once the answer had begun: it was broken off

    async def prepare(self, request: web.BaseRequest) -> Any:
        if request.version < aiohttp.HttpVersion11 and self.content_length is None:
            self.force_close()
        return await super().prepare(request)


def _buffered(upstream: aiohttp.ClientResponse) -> bytes:
    """The body's bytes that came with the upstream's head (b"": none yet)."""
    try:
        return upstream.content.read_nowait()
    except Exception:  # a failed body: the relay's read meets the failure and ends there
        return b""


async def _chunks(upstream: aiohttp.ClientResponse, first: bytes = b"") -> AsyncIterator[bytes]:
    """The upstream's body as it comes (``first``: what was read of it already);
    :class:`UpstreamCut` if it fails after its answer began."""
    closing = _closing(upstream)
    try:
        if first:
            yield first
        async for chunk in upstream.content.iter_any():
            yield chunk
        if _reset(closing):
            raise aiohttp.ClientPayloadError("the connection was reset")
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError) as exc:
        log.warning("model upstream response cut short: %s", type(exc).__name__)
        raise UpstreamCut from None


def _closing(upstream: aiohttp.ClientResponse) -> asyncio.Future[None] | None:
    """For a body that ends with its connection (no length said, not chunked): the close of
    that connection, which fails if it was reset rather than closed. aiohttp reads either one
    as the body's end; the compiled relay (hyper), and HTTP (RFC 9112 §8: a message closed
    prematurely is incomplete), take a reset for a body broken off. None: another body, or a
    connection closed already."""
    if upstream.content_length is not None \
            or "chunked" in upstream.headers.get("Transfer-Encoding", "").lower():
        return None
    connection = upstream.connection
    protocol = connection.protocol if connection is not None else None
    closing = protocol.closed if protocol is not None else None
    if closing is not None:  # (its failure read here, else by this callback: never unread)
        closing.add_done_callback(lambda done: done.cancelled() or done.exception())
    return closing


def _reset(closing: asyncio.Future[None] | None) -> bool:
    """Whether the connection :func:`_closing` watched was reset, not closed."""
    return closing is not None and closing.done() and not closing.cancelled() \
        and closing.exception() is not None
