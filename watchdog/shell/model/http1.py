"""The model endpoint speaks HTTP/1.1 (an ``h2c`` upgrade offer is answered in HTTP/1.1). A
client that starts with HTTP/2's connection preface instead (prior knowledge) is told so in its
own protocol (RFC 9113 §3.4, §7): the server's SETTINGS, then GOAWAY with ``HTTP_1_1_REQUIRED``
and a line saying why, after which the connection closes. The compiled relay answers with the
same bytes (``native/relay/src/lib.rs``).

A client may end its side of the connection once it has sent its request (RFC 9112 §9.6,
``shutdown(SHUT_WR)``): the requests it sent are answered, then the connection closes; a body
its end cut short fails to be read (a 400, as on the compiled relay). aiohttp would close the
connection at once (its handler's ``eof_received``), and cancel the request's handler.

aiohttp's own refusals, of what it cannot read as an HTTP/1.1 request (a malformed request line
or header, a line past its limits) or of a request whose handler failed, answer in the model
API's error shape, as the endpoint's other refusals do (:class:`_ModelRequests`), not in plain
text."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from watchdog.core.model.chat import ChatWire
from watchdog.core.model.messages import MessagesWire
from watchdog.core.model.wire import dumps
from watchdog.shell.connections import QuietRefusals, QuietRunner, Wrapped, parser_refusal

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_WHY = b"this endpoint speaks HTTP/1.1: send the request without HTTP/2 prior knowledge"
# SETTINGS (type 4, none set), then GOAWAY (type 7): last stream 0, error HTTP_1_1_REQUIRED (0xd)
H2_REFUSAL = (bytes(3) + b"\x04\x00" + bytes(4)
              + (8 + len(_WHY)).to_bytes(3, "big") + b"\x07\x00" + bytes(4)
              + bytes(4) + (0xD).to_bytes(4, "big") + _WHY)
LINGER = 1.0  # seconds the refused client gets to close first (its bytes are read, unused)


class EndedEarly(ConnectionResetError):
    """What reading a request's body meets when its client ended its side of the connection
    before the body's end."""


# aiohttp's refusals by status: their code in the API's error shape
_CODES = {400: "bad_request", 413: "request_too_large", 414: "uri_too_long",
          431: "request_header_fields_too_large", 500: "internal_error"}


class _ModelRequests(QuietRefusals):
    """aiohttp's request handler whose own refusals answer in the model API's error shape."""

    __slots__ = ()

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # logged (raises if one began)
        if status >= 500:
            said = "the model endpoint failed on this request"
        else:
            said = f"the request could not be read as HTTP/1.1: {parser_refusal(exc)}"
        code = _CODES.get(status, "bad_request" if status < 500 else "internal_error")
        path = request.path.rstrip("/") if status >= 500 else ""  # (else it has none)
        wire = MessagesWire() if path.endswith("/v1/messages") else ChatWire()
        response = web.Response(status=status, body=dumps(wire.error(status, code, said)),
                                content_type="application/json")
        response.force_close()
        return response


class Http1Runner(QuietRunner):
    """aiohttp's runner whose connections refuse HTTP/2 prior knowledge as HTTP/2 does, and
    what its parser refuses in the model API's error shape; one that sends no request head
    within ``first_request_bound`` seconds, if that is shorter than every HTTP port's bound,
    is closed then (the compiled relay's bound)."""

    handler = _ModelRequests

    def __init__(self, app: web.Application, *, first_request_bound: float,
                 **options: Any) -> None:
        super().__init__(app, **options)
        self.handler = cast(type[_ModelRequests], type(
            "_ModelRequestsBound", (_ModelRequests,),
            {"__slots__": (), "first_request_bound": first_request_bound}))

    def wrap(self, handler: RequestHandler) -> asyncio.Protocol:
        return Http1Only(handler)


class Http1Only(Wrapped):
    """One connection: aiohttp's request handler, unless its first bytes are HTTP/2's
    preface: then refused, what the client still sends read and dropped, and closed when the
    client ends or after ``LINGER`` seconds (the handler is told when the connection is lost)."""

    __slots__ = ("ended", "first", "payload", "refused", "transport")

    def __init__(self, handler: asyncio.Protocol) -> None:
        super().__init__(handler)
        self.transport: asyncio.Transport | None = None
        self.first = True
        self.refused = False
        self.payload: Any = None  # the body of the last request read (a StreamReader)
        # the client ended its side while a request was in progress: it has either half-closed
        # (it waits for the answer) or gone (an SDK's timeout); the endpoint lets the request
        # go when the client sends it, or its run's next request, again (ModelProxy)
        self.ended = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.first:
            self.first = False
            if data.startswith(H2_PREFACE[:4]) and H2_PREFACE.startswith(data[:len(H2_PREFACE)]):
                self.refused = True
                transport = self.transport
                assert transport is not None
                transport.write(H2_REFUSAL)
                if transport.can_write_eof():
                    transport.write_eof()
                asyncio.get_running_loop().call_later(LINGER, transport.close)
        if not self.refused:
            messages = cast(Any, self.handler)._messages  # (the requests read, not yet taken)
            read = len(messages)
            self.handler.data_received(data)
            if len(messages) > read:
                self.payload = messages[-1][1]

    def eof_received(self) -> bool | None:
        if self.refused:
            return False  # the transport closes
        handler: Any = self.handler  # (aiohttp's RequestHandler: what it holds, read here)
        # (a request taken and not yet answered: between the two, the handler's loop waits
        # for nothing; once it has answered all, it waits for the next request)
        busy = handler._messages or handler._request_in_progress or (
            handler._waiter is None and handler._request_count > 0)
        if not busy:
            return self.handler.eof_received()  # idle (or amid a head): the transport closes
        # the client ended its side after its request: answered, then the connection closes
        self.ended = True
        handler.close()
        if self.payload is not None and not self.payload.is_eof():  # a body its end cut short
            self.payload.set_exception(EndedEarly(
                "the client ended its side of the connection before the request's end"))
        return True  # its side stays open for the answer
