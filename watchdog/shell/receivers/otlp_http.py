"""OTLP/HTTP receiver: ``POST /v1/traces`` in binary protobuf or OTLP/JSON, optionally gzip or
deflate compressed, answered in the encoding of the request.

A request passes these stages in order, and the first that refuses it answers:
a head the HTTP parser reads (400), a path the port serves (404) and POST (405) ->
auth (401) -> media type (415) -> content coding (415) -> a processing slot and an upload slot
(503 + Retry-After) -> body as sent, within ``BODY_READ_TIMEOUT`` (408) and
``max_request_bytes`` (413) -> inflated with the same bound (413, or 400 for corrupt data) ->
decode (400) -> ``service.export`` (503 when the store is behind or cannot be written) -> 200
with ``partial_success`` when spans were rejected; with ``forward_endpoint`` the accepted body
is then queued for the upstream as it came (its bytes and ``Content-Encoding``: not inflated
and compressed again; :mod:`watchdog.shell.receivers.forward`), never awaited. Error
bodies are a ``google.rpc.Status`` in the request's encoding, as OTLP asks.

An upload holds a processing slot only while its body arrives at
``admission.MIN_UPLOAD_RATE`` or faster (one that falls behind gives its slot to a newcomer
at once); a slower one waits in an upload slot
(:class:`~watchdog.shell.receivers.admission.Uploads`: many, bounded per client) and takes a
processing slot again once complete, so slow clients cannot starve the others while fast ones are
bounded as a whole. The body is inflated by :mod:`watchdog.core.spans.codings` (aiohttp's
decompression is off for this server), so a gzip bomb never grows past the limit and
``br``/``zstd`` get the documented 415.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from watchdog.core.spans import codings
from watchdog.core.spans.decode import (
    DecodeError,
    TraceRequest,
    parse_json,
    parse_protobuf,
    request_digest,
    response_json,
    response_protobuf,
)
from watchdog.shell.auth import check_bearer
from watchdog.shell.config import Config
from watchdog.shell.connections import QuietRefusals, QuietRunner, Wrapped, parser_refusal
from watchdog.shell.errors import (
    BadRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    Unauthorized,
    UnsupportedMediaType,
    WatchdogError,
)
from watchdog.shell.metrics import Metrics
from watchdog.shell.receivers.admission import Admission, Slot, Uploads
from watchdog.shell.receivers.consumer import TraceConsumer

if TYPE_CHECKING:
    from watchdog.shell.receivers.forward import Forwarder, Signal

log = logging.getLogger("watchdog.otlp_http")

PROTOCOL = "http"
TRACES_PATH = "/v1/traces"
COMPRESSED = codings.SUPPORTED - codings.IDENTITY
# A body must arrive within this (an OTLP exporter gives up after 10 s anyway); a stalled
# upload holds an upload slot until then, and is answered 408.
BODY_READ_TIMEOUT = 10.0
# An upload keeps its processing slot only while its body arrives at least MIN_UPLOAD_RATE
# fast over each window (and gives it up at once to a newcomer when behind that rate: see
# admission). Slower, it gives the slot back and takes one again when complete.
RATE_WINDOW = 0.25  # seconds
# An OTLP/JSON body longer than this is parsed on a thread of its own: protobuf's JSON parse is
# Python (some 4 s of CPU for 16 MiB), which on the event loop held every other request (a
# sync, a model request's decision, the API) that long. The thread lets the loop run between
# its steps; a shorter body (a batch of spans: tens of KiB) is parsed at its turn.
JSON_ON_THE_LOOP = 256 * 1024
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Codec:
    """One OTLP/HTTP encoding: how requests are parsed and responses written."""

    content_type: str
    parse: Callable[[bytes], TraceRequest]
    response: Callable[[int, str], bytes]
    status: Callable[[WatchdogError], bytes]


def _status_protobuf(error: WatchdogError) -> bytes:
    body: bytes = error.to_status().SerializeToString()
    return body


def _status_json(error: WatchdogError) -> bytes:
    from google.protobuf import json_format

    text: str = json_format.MessageToJson(error.to_status(), indent=None)
    return text.encode()


PROTOBUF = Codec("application/x-protobuf", parse_protobuf, response_protobuf, _status_protobuf)
JSON = Codec("application/json", parse_json, response_json, _status_json)
CODECS = {codec.content_type: codec for codec in (PROTOBUF, JSON)}


class TraceReceiver:
    signal: Signal = "traces"

    def __init__(self, consumer: TraceConsumer, metrics: Metrics, admission: Admission,
                 config: Config, forward: Forwarder | None = None,
                 uploads: Uploads | None = None) -> None:
        self.forward = forward
        self.consumer = consumer
        self.metrics = metrics
        self.admission = admission
        self.uploads = uploads if uploads is not None else Uploads()
        self.max_request_bytes = config.max_request_bytes
        self.oversize = admission.oversize("HTTP", config.max_request_bytes)
        self._expected_auth = config.api_token

    async def handle(self, request: web.Request) -> web.Response:
        codec = CODECS.get(request.content_type, JSON)
        try:
            return await self._export(request)
        except WatchdogError as exc:
            error = exc
        except Exception:  # never a traceback to the client; the log has it
            log.exception("OTLP/HTTP export failed")
            error = WatchdogError("internal error; see the watchdog log")
        response = self._refuse(codec, error)
        if _content_encoding(request) in COMPRESSED and not request.content.is_eof():
            await _answer_and_close(request, response)
        return response

    async def _export(self, request: web.Request) -> web.Response:
        self._authorize(request)
        codec = CODECS.get(request.content_type)
        if codec is None:
            raise UnsupportedMediaType(
                f"unsupported Content-Type {request.content_type!r}: OTLP/HTTP accepts "
                f"{' or '.join(CODECS)}")
        encoding = _content_encoding(request)
        if encoding not in codings.SUPPORTED:
            raise UnsupportedMediaType(
                f"unsupported Content-Encoding {encoding[:64]!r}: accepted are gzip, deflate, "
                f"identity")
        if (request.content_length or 0) > self.max_request_bytes:
            raise self._too_large()
        slot = self.admission.slot()
        slot.take()  # no slot: refused before its body is read
        try:
            with self.uploads.slot(request.remote or "unknown"):
                raw = await self._read_body(request, slot)
            slot.take()  # an upload that gave its slot back needs one again now
            inflated = self._inflate(raw, encoding)
            answer, fresh = await self._consume(codec, inflated.data)
        finally:
            slot.release()
        if fresh and self.forward is not None:  # queued only: the upstream never delays this
            # (as it came, unless in a form a Collector does not read)
            self.forward.offer(self.signal, codings.forwardable(raw, encoding, inflated),
                               codec.content_type, encoding)
        return web.Response(body=answer, content_type=codec.content_type)

    async def _consume(self, codec: Codec, body: bytes) -> tuple[bytes, bool]:
        """The answer's body, and whether the request is new (not an exporter's retry of one
        already applied, which was forwarded then)."""
        try:
            parse = await parse_at_turn(functools.partial(codec.parse, body), codec, len(body))
            decoded = await self.consumer.export_in_slices(parse, PROTOCOL,
                                                           request_digest(body))
        except DecodeError as exc:
            raise BadRequest(str(exc)) from None
        self._count(decoded.outcome())
        return codec.response(decoded.rejected_count, decoded.message()), not decoded.duplicate

    def _count(self, outcome: str) -> None:
        self.metrics.export_request(PROTOCOL, outcome)

    def _authorize(self, request: web.Request) -> None:
        if self._expected_auth is None:
            return
        check_bearer(request.headers.get("Authorization"), self._expected_auth,
                     "the header Authorization:")

    async def _read_body(self, request: web.Request, slot: Slot) -> bytes:
        """The body as sent, at most ``max_request_bytes``, within ``BODY_READ_TIMEOUT``. While
        it arrives slower than ``MIN_UPLOAD_RATE`` (measured over ``RATE_WINDOW``, or at once
        when a newcomer needs the slot) ``slot`` is given back, so a slow client holds no
        processing slot."""
        loop = asyncio.get_running_loop()
        chunks: list[bytes] = []
        size = 0
        window_end = loop.time() + RATE_WINDOW
        slot.start_reading()
        try:
            async with asyncio.timeout(BODY_READ_TIMEOUT):
                while True:
                    if slot.held:
                        try:
                            async with asyncio.timeout_at(window_end):
                                chunk = await request.content.readany()
                        except TimeoutError:
                            chunk = None  # the window ended with nothing more
                    else:
                        chunk = await request.content.readany()
                    if chunk == b"":
                        return b"".join(chunks)
                    if chunk:
                        size += len(chunk)
                        slot.window_bytes += len(chunk)
                        if size > self.max_request_bytes:
                            raise self._too_large()
                        chunks.append(chunk)
                    if slot.held and loop.time() >= window_end:
                        if slot.slow():
                            slot.release()  # too slow to hold a slot; it takes one at the end
                        window_end = loop.time() + RATE_WINDOW
                        slot.new_window()
        except TimeoutError:
            raise RequestTimeout(
                f"the request body did not arrive within {BODY_READ_TIMEOUT:g}s") from None
        except web.RequestPayloadError:  # a broken chunked body
            raise BadRequest("the request body could not be read (broken transfer)") from None
        except ConnectionError:  # the client went away; nobody reads the answer
            raise BadRequest("the connection closed before the request body was complete"
                             ) from None
        finally:
            slot.stop_reading()

    def _inflate(self, raw: bytes, encoding: str) -> codings.Inflated:
        try:
            return codings.decode(raw, encoding, self.max_request_bytes)
        except codings.BodyTooLarge:
            raise self._too_large() from None
        except codings.BadCoding as exc:
            raise BadRequest(f"the request body is not valid {encoding} data "
                             f"(Content-Encoding: {encoding}): {exc}") from None

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"request body exceeds max_request_bytes={self.max_request_bytes} "
                               f"(after decompression); send smaller batches")

    def _refuse(self, codec: Codec, error: WatchdogError) -> web.Response:
        if error.export_outcome is not None:
            self._count(error.export_outcome)
        if isinstance(error, PayloadTooLarge):
            self.oversize.refused(None)
        headers = {}
        if error.retry_after is not None:
            headers["Retry-After"] = str(max(1, round(error.retry_after)))
        if isinstance(error, Unauthorized):
            headers["WWW-Authenticate"] = "Bearer"
        return web.Response(status=error.http_status, body=codec.status(error),
                            content_type=codec.content_type, headers=headers)


async def parse_at_turn(parse: Callable[[], T], codec: Codec, size: int) -> Callable[[], T]:
    """``parse`` as the consumer calls it, at the request's turn; an OTLP/JSON body longer than
    :data:`JSON_ON_THE_LOOP` is parsed first, on a thread (its :class:`DecodeError` raised
    here), and the consumer's call hands over what it made."""
    if codec is not JSON or size <= JSON_ON_THE_LOOP:
        return parse
    parsed = await asyncio.to_thread(parse)
    return lambda: parsed


def _content_encoding(request: web.Request) -> str:
    return request.headers.get("Content-Encoding", "").strip().lower()


async def _answer_and_close(request: web.Request, response: web.Response) -> None:
    """Send ``response``, then drop the connection. Left open, aiohttp would drain the unread
    body (up to 10 s) after the response: for a compressed body refused early, such as a gzip
    bomb, that is megabytes read for nothing."""
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()


_CONTENT_TYPE = re.compile(rb"^content-type:[ \t]*([^;\r\n]*)", re.IGNORECASE | re.MULTILINE)


# What a connection keeps of the bytes it last received, for the Content-Type of a head the
# parser refuses: a head begins a read, and its Content-Type line comes within a header line
# or two (the parser refuses one past 8,190 bytes). At most this much held per connection.
HEAD_BYTES = 16 * 1024


HEAD_END = b"\r\n\r\n"


class _LastBytes(Wrapped):
    """A connection's protocol keeping, of the bytes it received, those since the last head
    began (at most :data:`HEAD_BYTES`), where a head the parser refused is: a head that comes a
    few bytes a read (a slow client, a proxy that cuts it) is kept whole, as one read is.
    ``refused`` counts what the parser refused (``export_requests_total``)."""

    __slots__ = ("last", "refused")

    def __init__(self, handler: asyncio.Protocol, refused: Callable[[str], None]) -> None:
        super().__init__(handler)
        self.last = bytearray()
        self.refused = refused

    def data_received(self, data: bytes) -> None:
        last = self.last
        if len(last) >= HEAD_BYTES or HEAD_END in last:  # (a head ended: a new one may begin)
            last.clear()
        last += data[:HEAD_BYTES - len(last)]
        self.handler.data_received(data)


class _StatusRefusals(QuietRefusals):
    __slots__ = ()

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # (logs it, or raises: sent already)
        protocol = self.transport.get_protocol() if self.transport is not None else None
        found = _CONTENT_TYPE.search(protocol.last) if isinstance(protocol, _LastBytes) else None
        codec = CODECS.get(found.group(1).strip().lower().decode("latin-1"), JSON) if found \
            else JSON
        error = (BadRequest(f"malformed HTTP request: {parser_refusal(exc)}") if status < 500
                 else WatchdogError("internal error; see the watchdog log"))
        if isinstance(protocol, _LastBytes):
            protocol.refused(error.export_outcome or "internal_error")
        response = web.Response(status=status, body=codec.status(error),
                                content_type=codec.content_type)
        response.force_close()
        return response


def _answered_as_otlp(metrics: Metrics) -> Any:
    """The port's middleware: a path it does not serve (404) and a method a path does not take
    (405) are answered as every other refusal here, a ``Status`` in the request's encoding
    (OTLP: the body of every 4xx and 5xx is one; JSON for a type it does not know), and
    counted (``export_requests_total``: ``not_found``, ``method_not_allowed``)."""

    @web.middleware
    async def answer(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except web.HTTPNotFound:
            error: WatchdogError = NotFound(
                f"no OTLP/HTTP endpoint at {request.path[:200]!r}: traces are sent to "
                f"POST {TRACES_PATH}, logs to POST /v1/logs (metrics: only passed on, with "
                f"forward_endpoint set)")
            outcome, headers = "not_found", {}
        except web.HTTPMethodNotAllowed as exc:
            error = MethodNotAllowed(f"{request.method[:16]} is not allowed on "
                                     f"{request.path[:200]!r}: OTLP/HTTP exports are POST")
            outcome, headers = "method_not_allowed", {"Allow": exc.headers.get("Allow", "")}
        metrics.export_request(PROTOCOL, outcome)
        codec = CODECS.get(request.content_type, JSON)
        return web.Response(status=error.http_status, body=codec.status(error),
                            content_type=codec.content_type, headers=headers)

    return answer


def create_app(consumer: TraceConsumer, metrics: Metrics, admission: Admission,
               config: Config, forward: Forwarder | None = None) -> web.Application:
    receiver = TraceReceiver(consumer, metrics, admission, config, forward)
    app = web.Application(client_max_size=config.max_request_bytes,
                          middlewares=[_answered_as_otlp(metrics)])
    app.router.add_post(TRACES_PATH, receiver.handle)
    return app


class Runner(QuietRunner):
    """This port's runner. A request head the HTTP parser refuses is answered as every other
    refusal here: a ``Status`` in the request's encoding (OTLP: the body of every 4xx and 5xx
    is one), read from the ``Content-Type`` line among the bytes the refusal came in; JSON
    when there is none, as :meth:`TraceReceiver.handle` answers a type it does not know. The
    body is read as sent (inflated by ``codings.inflate``)."""

    handler = _StatusRefusals

    def __init__(self, app: web.Application, metrics: Metrics | None = None,
                 **options: Any) -> None:
        super().__init__(app, auto_decompress=False, **options)
        self.metrics = metrics

    def refused(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.export_request(PROTOCOL, outcome)

    def wrap(self, handler: RequestHandler) -> asyncio.Protocol:
        return _LastBytes(handler, self.refused)
