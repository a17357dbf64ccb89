"""OTLP/HTTP receiver: ``POST /v1/traces`` in binary protobuf or OTLP/JSON, optionally gzip or
deflate compressed, answered in the encoding of the request.

A request passes these stages in order, and the first that refuses it answers:
auth (401) -> media type (415) -> content coding (415) -> admission (503 + Retry-After) ->
body, bounded after decompression (413; 408 if the upload stalls) -> decode (400) ->
``service.export`` (503 when the store is behind) -> 200 with ``partial_success`` when spans
were rejected; with ``forward_endpoint`` the accepted body is then queued for the upstream
(:mod:`watchdog.ingest.forward`), never awaited. Error bodies are a ``google.rpc.Status`` in
the request's encoding, as OTLP asks.

aiohttp inflates the body itself in bounded steps and stops reading once ``client_max_size``
(``max_request_bytes``) is passed, so a gzip bomb never grows in memory past about twice the
limit; a compressed body refused before its end also drops the connection, so the rest is
never inflated (see :func:`_answer_and_close`). Admission is taken before the body is read: a
slow upload holds a slot, which is what the read timeout bounds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from google.protobuf import json_format

from watchdog.auth import check_bearer
from watchdog.config import Config
from watchdog.errors import (
    BadRequest,
    PayloadTooLarge,
    RequestTimeout,
    Unauthorized,
    UnsupportedMediaType,
    WatchdogError,
)
from watchdog.ingest.admission import Admission
from watchdog.ingest.decode import (
    DecodeError,
    ExportTraceServiceRequest,
    parse_json,
    parse_protobuf,
    request_digest,
    response_json,
    response_protobuf,
)
from watchdog.ingest.forward import Forwarder, Signal
from watchdog.metrics import Metrics
from watchdog.service import WatchdogService

log = logging.getLogger("watchdog.otlp_http")

PROTOCOL = "http"
TRACES_PATH = "/v1/traces"
# Content codings aiohttp inflates itself (br and zstd need optional packages).
SUPPORTED_ENCODINGS = frozenset({"", "identity", "gzip", "deflate"})
COMPRESSED = frozenset({"gzip", "deflate"})
# A stalled upload holds an admission slot; past this it is dropped with 408.
BODY_READ_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Codec:
    """One OTLP/HTTP encoding: how requests are parsed and responses written."""

    content_type: str
    parse: Callable[[bytes], ExportTraceServiceRequest]
    response: Callable[[int, str], bytes]
    status: Callable[[WatchdogError], bytes]


def _status_protobuf(error: WatchdogError) -> bytes:
    body: bytes = error.to_status().SerializeToString()
    return body


def _status_json(error: WatchdogError) -> bytes:
    text: str = json_format.MessageToJson(error.to_status(), indent=None)
    return text.encode()


PROTOBUF = Codec("application/x-protobuf", parse_protobuf, response_protobuf, _status_protobuf)
JSON = Codec("application/json", parse_json, response_json, _status_json)
CODECS = {codec.content_type: codec for codec in (PROTOBUF, JSON)}


class TraceReceiver:
    signal: Signal = "traces"

    def __init__(self, service: WatchdogService, metrics: Metrics, admission: Admission,
                 config: Config, forward: Forwarder | None = None) -> None:
        self.forward = forward
        self.service = service
        self.metrics = metrics
        self.admission = admission
        self.max_request_bytes = config.max_request_bytes
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
        if encoding not in SUPPORTED_ENCODINGS:
            raise UnsupportedMediaType(
                f"unsupported Content-Encoding {encoding!r}: accepted are gzip, deflate, identity")
        if encoding in ("", "identity") and (request.content_length or 0) > self.max_request_bytes:
            raise self._too_large()
        with self.admission:
            body = await self._read_body(request, encoding)
            answer, fresh = await self._consume(codec, body)
        if fresh and self.forward is not None:  # queued only: the upstream never delays this
            self.forward.offer(self.signal, body, codec.content_type, encoding)
        return web.Response(body=answer, content_type=codec.content_type)

    async def _consume(self, codec: Codec, body: bytes) -> tuple[bytes, bool]:
        """The answer's body, and whether the request is new (not an exporter's retry of one
        already applied, which was forwarded then)."""
        try:
            export_request = codec.parse(body)
        except DecodeError as exc:
            raise BadRequest(str(exc)) from None
        digest = request_digest(body)
        decoded = await self.service.export_in_slices(export_request, PROTOCOL, digest)
        self._count(decoded.outcome())
        return codec.response(decoded.rejected_count, decoded.message()), not decoded.duplicate

    def _count(self, outcome: str) -> None:
        self.metrics.export_request(PROTOCOL, outcome)

    def _authorize(self, request: web.Request) -> None:
        if self._expected_auth is None:
            return
        check_bearer(request.headers.get("Authorization"), self._expected_auth,
                     "the header Authorization:")

    async def _read_body(self, request: web.Request, encoding: str) -> bytes:
        try:
            async with asyncio.timeout(BODY_READ_TIMEOUT):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise self._too_large() from None
        except TimeoutError:
            raise RequestTimeout(
                f"the request body did not arrive within {BODY_READ_TIMEOUT:g}s") from None
        except web.RequestPayloadError:  # corrupt gzip/deflate data, a broken chunked body
            if encoding in COMPRESSED:
                raise BadRequest(f"the request body is not valid {encoding} data "
                                 f"(Content-Encoding: {encoding})") from None
            raise BadRequest("the request body could not be read (broken transfer)") from None

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"request body exceeds max_request_bytes={self.max_request_bytes} "
                               f"(after decompression); send smaller batches")

    def _refuse(self, codec: Codec, error: WatchdogError) -> web.Response:
        if error.export_outcome is not None:
            self._count(error.export_outcome)
        headers = {}
        if error.retry_after is not None:
            headers["Retry-After"] = str(max(1, round(error.retry_after)))
        if isinstance(error, Unauthorized):
            headers["WWW-Authenticate"] = "Bearer"
        return web.Response(status=error.http_status, body=codec.status(error),
                            content_type=codec.content_type, headers=headers)


def _content_encoding(request: web.Request) -> str:
    return request.headers.get("Content-Encoding", "").strip().lower()


async def _answer_and_close(request: web.Request, response: web.Response) -> None:
    """Send ``response``, then drop the connection. Left open, aiohttp would drain the unread
    body for up to 10 s after the response, inflating it on the event loop thread: a gzip
    bomb past the limit would stall every other request meanwhile, and a corrupt one would be
    logged as an unhandled error."""
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()


def create_app(service: WatchdogService, metrics: Metrics, admission: Admission,
               config: Config, forward: Forwarder | None = None) -> web.Application:
    receiver = TraceReceiver(service, metrics, admission, config, forward)
    app = web.Application(client_max_size=config.max_request_bytes)
    app.router.add_post(TRACES_PATH, receiver.handle)
    return app
