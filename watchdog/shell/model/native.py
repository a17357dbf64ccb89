"""The model endpoint served by the compiled relay (``model_relay: native``; DESIGN §12).

Theory of operation
-------------------
The relay (``native/relay``, a Rust extension: ``watchdog.shell.model._relay``) owns the
endpoint's socket, its HTTP/1.1 keep-alive connections, the upstream connection pool (TLS with
the system's CAs, ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` honoured) and the bytes of every
response, on threads of its own that never take the GIL. It reads each request (bounded by
``model_max_body_bytes`` and ``model_max_concurrent``) and queues it; a byte on a socket pair
wakes this event loop, which takes what is queued and answers each request once, at once, with
what :meth:`ModelProxy.plan` decides, exactly as the aiohttp endpoint does:

* an answer of its own (a refusal, an aborted run's final answer): ``respond``;
* a request to send upstream whose response passes as it comes (every request but a run's
  final one): ``forward`` with ``observe``; the relay streams the response back and, when it
  has ended (or was cut short, or the client went away, which drops the upstream request),
  hands back a copy of the upstream's bytes once, read here as the aiohttp relay reads them on
  the way, and the call is booked (below). With a bound on the tool calls it may hand over
  (``keep``: a budget, a wind-down's grace) the relay trims a successful response on the way
  as the aiohttp relay does (``native/relay/src/trim.rs``, the twin of the wire modules'
  ``trim`` and stream trimmers): a stream event by event, a whole response read first. A
  stream's end is told at its last event (``[DONE]``, a Responses end event,
  ``message_stop``), before the agent has it, bound or not (``watch``);
* a request whose answer must be held (the final report, replaced by a stop note when the
  model leaves it empty): ``forward`` to this process's own aiohttp relay on a loopback port,
  under a one-time ticket, which handles it as the aiohttp endpoint does.

Booking a call (reading its response, its record through the core's step with the rules) is
most of this loop's work per request, so it waits until the requests queued with it have been
decided and sent on: the responses that ended are held, and booked together, in one step of
the core, once the requests that came before that moment have been taken. A request that may
continue a call held unbooked (its conversation, its run's trace or ``x-watchdog-run``, tool
results, a continued response: :meth:`ModelBook.may_be_of`) has them all booked before its run
is found, so each request still finds its run's calls counted (the countdown exact).

Nothing here logs a header; the relay never does.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from multidict import CIMultiDict

from watchdog.core.model.book import Caller
from watchdog.core.model.steer import ANSWER_TOOL_PREFIXES, ANSWER_TOOLS, Act
from watchdog.core.model.wire import Request
from watchdog.shell.model.headers import Refused, check_target
from watchdog.shell.model.plans import MAX_RESPONSE_BYTES, Answer, Booked, Plan
from watchdog.shell.model.proxy import CONNECT_TIMEOUT, ModelProxy

log = logging.getLogger("watchdog.model")

TICKET_PATH = "/relay/"


def missing_relay() -> str | None:
    """None when the compiled relay is built, else why it cannot be loaded."""
    try:
        from watchdog.shell.model import _relay  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def built() -> bool:
    """Whether the compiled relay is built (``model_relay`` unset: it serves when it is)."""
    return missing_relay() is None


class NativeEndpoint:
    """The model endpoint on the compiled relay; :class:`ModelProxy` decides and books."""

    def __init__(self, proxy: ModelProxy) -> None:
        self.proxy = proxy
        self.relay: Any = None  # watchdog.shell.model._relay.Relay
        self.pending: dict[int, Plan] = {}  # forwarded requests, until their response ends
        self.tickets: dict[str, Plan] = {}  # plans for the aiohttp relay, until it takes them
        self.ticket_of: dict[int, str] = {}
        self.runner: web.AppRunner | None = None
        self.internal = ""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ended: list[tuple[Plan, int, str, bytes | None, str, float, bool]] = []  # to book
        self.booking = False  # a booking of the ended calls is scheduled
        self.closed = False

    async def start(self, host: str, port: int) -> int:
        """Listens at ``host:port`` (OSError when it cannot); the port bound."""
        from watchdog.shell.model._relay import Relay

        config = self.proxy.config
        await self.proxy.start()
        app = web.Application(client_max_size=config.model_max_body_bytes)
        app.router.add_post(TICKET_PATH + "{ticket}", self._relayed)
        self.runner = runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                             handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.internal = f"http://127.0.0.1:{runner.addresses[0][1]}{TICKET_PATH}"
        self.relay = Relay(host, port, config.model_max_body_bytes, config.model_max_concurrent,
                           CONNECT_TIMEOUT, config.model_upstream_timeout, MAX_RESPONSE_BYTES,
                           answer_tools=sorted(ANSWER_TOOLS),
                           answer_tool_prefixes=list(ANSWER_TOOL_PREFIXES))
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(self.relay.fd, self._drain)
        self.proxy.before_identify = self._before_identify
        return int(self.relay.port)

    async def close(self) -> None:
        if self.relay is not None:
            assert self.loop is not None
            self.closed = True
            self.loop.remove_reader(self.relay.fd)
            self.relay.close()
            self._book_ended()
            self._drain_closed()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        await self.proxy.close()

    def _drain_closed(self) -> None:
        """The relay has stopped: what it held is settled as cancelled."""
        for plan in [*self.pending.values(), *self.tickets.values()]:
            self._finish(plan, 0, "cancelled", None, "", 0.0)
        self.pending.clear()
        self.tickets.clear()
        self.ticket_of.clear()

    # -- events ---------------------------------------------------------------------------------

    def _drain(self) -> None:
        """The queued events in their order: a response's end comes before any request its
        client sent after it (so the next request of a conversation finds the call booked)."""
        for event in self.relay.take():
            kind, number = event[0], event[1]
            try:
                if kind == "request":
                    self._request(number, *event[2:])
                elif kind == "done":
                    self._done(number, *event[2:])
                else:
                    self._upstream_failed(number, event[2], event[3])
            except Exception:  # a bug: the request is answered, the loop goes on
                log.exception("the model endpoint failed on a %s event", kind)
                self.relay.respond(number, 500, [("Content-Type", "application/json")],
                                   b'{"error":{"code":"internal_error","message":'
                                   b'"the model endpoint failed on this request"}}')
        if self.ended and not self.booking:
            assert self.loop is not None
            self.booking = True
            self.loop.call_soon(self._book_soon)

    def _book_soon(self) -> None:
        """The calls that ended are booked, after the requests queued meanwhile."""
        self.booking = False
        if not self.closed:
            self._drain()
        self._book_ended()

    def _before_identify(self, api: str, request: Request, caller: Caller,
                         agent: str | None) -> None:
        if self.ended and self.proxy.book.may_be_of(api, request, caller, agent, [
                plan.exchange.state for plan, *_ in self.ended if plan.exchange is not None]):
            self._book_ended()

    def _book_ended(self) -> None:
        """The calls that ended, read and booked: their records in one step of the core."""
        ended, self.ended = self.ended, []
        calls: list[Booked] = []
        try:
            for plan, status, outcome, body, content_type, seconds, changed in ended:
                try:
                    self._finish(plan, status, outcome, body, content_type, seconds, calls,
                                 changed)
                except Exception:  # a bug: the others are booked all the same
                    log.exception("the model endpoint failed on a done event")
        finally:
            if calls:
                self.proxy.book_calls(calls)
            for plan, *_ in ended:
                if plan.exchange is not None:
                    plan.exchange.settle()

    def _request(self, number: int, method: str, target: str, raw_headers: list[tuple[str, str]],
                 body: bytes | None, refusal: str, in_flight: int) -> None:
        proxy = self.proxy
        headers: CIMultiDict[str] = CIMultiDict(raw_headers)
        wire = proxy.wire_of(method, unquote(target.split("?", 1)[0]))
        try:
            check_target(method, target)
            proxy.check_token(headers)
            if refusal == "overloaded":
                raise proxy.overloaded(in_flight)
            if refusal == "too_large":
                raise proxy.too_large(proxy.config.model_max_body_bytes)
            if refusal or body is None:
                raise Refused(400, "bad_request", "the request body could not be read")
            plan = proxy.plan(wire, method, target, headers, body)
        except Refused as refused:
            plan = proxy.refusal(wire, refused)
        if isinstance(plan, Answer):
            self.relay.respond(number, plan.status, list(plan.headers.items()), plan.body)
            return
        if plan.fast:
            self.pending[number] = plan
            observed = plan.exchange is not None
            if not self.relay.forward(number, plan.method, plan.url, list(plan.headers.items()),
                                      plan.body, observed, api=plan.api, keep=plan.keep,
                                      watch=observed):
                del self.pending[number]  # the client went away meanwhile
                self._finish(plan, 0, "cancelled", None, "", 0.0)
            return
        ticket = secrets.token_urlsafe(24)
        self.tickets[ticket] = plan
        self.ticket_of[number] = ticket
        if not self.relay.forward(number, "POST", self.internal + ticket, [], b"", False, True,
                                  True):
            self._done(number, 0, "cancelled", None, "", 0.0)

    def _done(self, number: int, status: int, outcome: str, body: bytes | None,
              content_type: str, seconds: float, changed: bool = False) -> None:
        ticket = self.ticket_of.pop(number, None)
        if ticket is not None:  # the aiohttp relay's: settled there, unless it never came
            plan = self.tickets.pop(ticket, None)
            if plan is not None:
                self._finish(plan, 0, "cancelled", None, "", 0.0)
            return
        plan = self.pending.pop(number, None)
        if plan is not None:
            self.ended.append((plan, status, outcome, body, content_type, seconds, changed))

    def _finish(self, plan: Plan, status: int, outcome: str, body: bytes | None,
                content_type: str, seconds: float, into: list[Booked] | None = None,
                changed: bool = False) -> None:
        """A forwarded response has ended: observed, counted; without ``into``, its run
        settled (with it, its record goes there and the caller books and settles it);
        ``changed``: the relay trimmed it."""
        proxy, exchange = self.proxy, plan.exchange
        agent = exchange.agent if exchange is not None else None
        try:
            if exchange is not None and 200 <= status < 300:
                proxy.observe_whole(exchange, body or b"", content_type, into, changed)
            if outcome == "cancelled":
                proxy.count(agent, plan.api, "cancelled")
                return
            if outcome == "cut":
                log.warning("model upstream response cut short")
            if proxy.metrics is not None:
                proxy.metrics.model_upstream(plan.api, seconds)
            if exchange is None or not 200 <= status < 300:
                proxy.count(agent, plan.api, "passed" if status < 400 else "upstream_error")
            else:
                proxy.count(agent, plan.api, "passed" if exchange.turn.act is Act.PASS
                             else "steered")
        finally:
            if exchange is not None and into is None:
                exchange.settle()

    def _upstream_failed(self, number: int, kind: str, detail: str) -> None:
        plan = self.pending.pop(number, None)
        if plan is None:
            return
        try:
            answer = self.proxy.upstream_failed(plan, kind, detail)
            self.relay.respond(number, answer.status, list(answer.headers.items()), answer.body)
        finally:
            if plan.exchange is not None:
                plan.exchange.settle()

    # -- the streams changed in flight: the aiohttp relay -------------------------------------

    async def _relayed(self, request: web.Request) -> web.StreamResponse:
        plan = self.tickets.pop(request.match_info["ticket"], None)
        if plan is None:
            raise web.HTTPNotFound()
        try:
            return await self.proxy.forward(request, plan)
        finally:
            if plan.exchange is not None:
                plan.exchange.settle()
