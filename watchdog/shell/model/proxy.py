"""The model endpoint's shell (DESIGN §12): an aiohttp app in front of the configured upstreams.

Theory of operation
-------------------
``POST /v1/chat/completions``, ``/v1/responses`` and ``/v1/messages`` are read (their wire
module), given their run (:class:`~watchdog.core.model.book.ModelBook`), steered
(:func:`~watchdog.core.model.steer.decide`) and forwarded; every other ``/v1/`` path is forwarded as
it came. The upstream is always a configured base URL, never anything the request names: the
request path is appended to it only after it has been checked (no ``..``, no encoded ``/``,
``.`` or ``\\``, no absolute-form target). Headers pass both ways except hop-by-hop ones (RFC
9110 §7.6.1) and the watchdog's own ``x-watchdog-*``, which are read and dropped.

A request with nothing to apply goes upstream byte for byte; a response with nothing to trim
comes back byte for byte, a stream chunk by chunk as it arrives, read on the way (an SSE reader
and the API's accumulator) to observe the call. A stream whose tool calls must be trimmed is
passed on event by event (:mod:`watchdog.shell.model.streams`). When the response has ended,
the call becomes records of its run through the service, as spans do. What a request gets (an
answer, or a plan to send it upstream) is :mod:`watchdog.shell.model.plans`.

Bounded: request bodies (``model_max_body_bytes``, 413; ``model_body_timeout`` to arrive, and
``model_body_min_rate`` over each ``model_body_rate_window``, 408 and the connection closed),
requests in flight
(``model_max_concurrent``, 503 with Retry-After: a place taken once the body is in; the bodies
being read, ``READING_PER_PLACE`` × as many, likewise), the bytes of their bodies held at once
(``model_max_inflight_bytes``: a request whose body as it is read, or, waiting for ``100
Continue``, whose declared length, would take the total past it gets 503 with Retry-After,
unless it is the only one holding any; counted as they come, until the request has ended),
whole responses read for observation (``MAX_RESPONSE_BYTES``: larger ones pass unobserved;
those held at once, ``model_max_held_response_bytes``: past it one to be judged is 503),
SSE events (``MAX_SSE_EVENT_BYTES``). One
client session keeps a keep-alive pool to the upstreams, verifies TLS with the system's CAs and
honours ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` (read once at start: aiohttp's per-request
``trust_env`` lookup cost ~1.7 ms a request). A client that goes away cancels its upstream
request.
Credentials are forwarded to the upstream and nowhere else: nothing here logs a header.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import CIMultiDict, CIMultiDictProxy

from watchdog.core.bounds import id_problem, load_json
from watchdog.core.model.book import (
    Caller,
    EndpointRun,
    ModelBook,
    aside_of,
    asks_again,
    goes_on_from_stop,
    no_json,
    replied_at_once,
    text_stop_answer,
)
from watchdog.core.model.chat import ChatWire
from watchdog.core.model.failure import MAX_REFUSAL_READ, refused
from watchdog.core.model.messages import MessagesWire
from watchdog.core.model.responses import ResponsesWire, echo_of
from watchdog.core.model.steer import (
    Act,
    Counts,
    Turn,
    answer_of,
    closing_call,
    decide,
    finish_call,
)
from watchdog.core.model.wire import (
    ABORT_CODE,
    Observation,
    Request,
    Unjudged,
    Wire,
    abort_text,
    answer_digest,
    dumps,
    read_stream,
    tool_parameters,
    unjudged,
)
from watchdog.core.rules.model import ACTIONS_CODE
from watchdog.core.runs.view import OpenedRun
from watchdog.core.spans.codings import IDENTITY, SUPPORTED, BadCoding, BodyTooLarge, inflate
from watchdog.core.spans.record import KeySource, SpanRecord
from watchdog.shell import logs
from watchdog.shell.config import Config, is_loopback, split_address, url_for_logs
from watchdog.shell.errors import Overloaded, StateUnavailable
from watchdog.shell.model.headers import (
    AGENT_HEADER,
    ANTHROPIC_HINTS,
    Refused,
    agent_allowed,
    budget_from,
    check_agent,
    client_session,
    client_subagent,
    door,
    proxy_for,
    request_headers,
)
from watchdog.shell.model.http1 import EndedEarly, Http1Only
from watchdog.shell.model.plans import (
    JSON,
    REFUSED_USAGE_STATUSES,
    Answer,
    Asking,
    Booked,
    Exchange,
    Held,
    Plan,
    refuses_usage,
)
from watchdog.shell.model.streams import (
    HeldFull,
    is_stream,
    read_upto,
    relay,
    relay_json,
    relay_stream,
    stop_answer,
)
from watchdog.shell.service import WatchdogService
from watchdog.shell.tls import context_for

log = logging.getLogger("watchdog.model")

CONNECT_TIMEOUT = 30.0  # seconds to open a connection to the upstream
RETRY_AFTER = "1"  # seconds, when too many requests are in flight
# request bodies being read at once, per model_max_concurrent place (a body still coming
# holds no place; the compiled relay's READING_PER_PLACE too)
READING_PER_PLACE = 2
MAX_REPORT_LINES = 20  # the run's last steps in an abort answer
MAX_FAILURES_LOGGED = 20  # tracebacks of failed observations logged (then only counted)
# the id of a Responses answer the endpoint gave (ResponsesWire.answer, answer_stream)
STOP_ANSWER_ID = re.compile(rb'"id": ?"(resp_watchdog[0-9a-f]{20})"')


# A request the upstream gave no answer the client could have, by how it failed: the status
# and error code the client gets, the outcome counted (model_requests_total), what happened.
UPSTREAM_FAILURES: dict[str, tuple[int, str, str, str]] = {
    # no head within the timeout
    "timeout": (504, "upstream_timeout", "upstream_timeout", " did not answer within {timeout}"),
    # its head came, then its body stopped
    "stalled": (504, "upstream_timeout", "upstream_timeout",
                " answered, then sent nothing more for {timeout} before its response was "
                "complete"),
    # no connection, one closed before its head, or bytes that are no HTTP response's head
    "unreachable": (502, "upstream_unreachable", "upstream_unreachable",
                    " cannot be reached or gave no HTTP response ({detail})"),
    # its head came, then its body broke off
    "broken": (502, "upstream_broken", "upstream_error",
               " answered, then broke off before its response was complete ({detail})"),
    # a whole response held to be judged, past what the whole responses held at once may take
    # (model_max_held_response_bytes): never passed unjudged; retried, as any 503
    "held_full": (503, "overloaded", "refused",
                  "'s response could not be held to be checked: the model requests in flight "
                  "hold too many bytes of whole responses (model_max_held_response_bytes, "
                  "{held}): retry shortly"),
    # a response too long, or in JSON or a coding it cannot read, to check against the run's
    # tool-call bound: never passed on
    "unjudged": (502, "response_unjudged", "upstream_error",
                 "'s response could not be checked against the run's tool-call budget "
                 "({detail}), so it was not passed on"),
}


def failed_code(status: int) -> str:
    """The reason a run ends with when its agent sent nothing after the upstream's error
    ``status`` (passed on, or a response broken off: 200)."""
    return f"upstream_{status}" if status >= 400 else "upstream_broken"


def note_splicer() -> Callable[[bytes, str], bytes | None] | None:
    """The compiled relay's splice of a note into a Chat Completions body
    (``Relay.splice_note``: ``native/relay/src/note.rs``), None when it is not built."""
    try:
        from watchdog.shell.model._relay import Relay
    except ImportError:
        return None
    splice: Callable[[bytes, str], bytes | None] = Relay.splice_note
    return splice


def gone(exchange: Exchange | None) -> str:
    """How a request whose client went away is counted: cancelled, unless its stream's last
    event had come (it had its answer)."""
    return exchange.outcome if exchange is not None and exchange.answered else "cancelled"


class Handled:
    """A request with the model on this relay (:class:`Asking`): its client's connection (None:
    not one it can tell the end of), and the task that relays its answer."""

    __slots__ = ("protocol", "task")

    def __init__(self, protocol: Http1Only | None, task: asyncio.Task[Any] | None) -> None:
        self.protocol = protocol
        self.task = task

    @property
    def ended(self) -> bool:
        return self.protocol is not None and self.protocol.ended

    def let_go(self) -> None:
        if self.task is not None:
            self.task.cancel()


class ModelProxy:
    def __init__(self, service: WatchdogService, config: Config, observer: Any = None) -> None:
        self.service = service
        self.config = config
        self.metrics = observer  # watchdog.shell.metrics.Metrics (None: not counted)
        self.book = ModelBook(at_once_ns=round(config.model_reply_window * 1e9))
        self.book.stops = service.stop_of
        self.wires: dict[str, Wire] = {"/v1/chat/completions": ChatWire(),
                                       "/v1/responses": ResponsesWire(),
                                       "/v1/messages": MessagesWire()}
        self.openai = config.model_upstream.rstrip("/")
        self.anthropic = config.model_upstream_anthropic.rstrip("/")
        host, _ = split_address("model_address", config.model_address or "127.0.0.1:0")
        self.token = config.api_token if not is_loopback(host) else None
        self.in_flight = 0  # holding a place: their bodies read
        self.reading = 0  # their bodies being read (at most max_reading)
        self.max_reading = READING_PER_PLACE * config.model_max_concurrent
        self.held_bytes = 0  # of the bodies of the requests in flight (model_max_inflight_bytes)
        # of the whole responses held before they are answered (model_max_held_response_bytes)
        self.held_response_bytes = 0
        if observer is not None:  # (the compiled relay's own count instead, where it serves)
            observer.model_bytes_from(lambda: self.held_bytes,
                                      lambda: self.held_response_bytes)
        self.failures = 0  # calls whose observation failed (a bug)
        # the upstream refused stream_options: streams are no longer asked for their usage
        self.usage_unasked = False
        self.session: aiohttp.ClientSession | None = None
        self.proxies: dict[str, tuple[str, str | None] | None] = {}
        # called with each request read, before its run is found: the native endpoint books
        # the calls it holds unbooked that the request may continue (see Booked)
        self.before_identify: Callable[[str, Request, Caller, str | None], None] | None = None
        # the requests with the model, as their relay has them (this one's: Handled; the
        # compiled relay's: native.Forwarded), to let one go whose client sent it again
        # (_let_go_resent)
        self.asking: dict[Exchange, Asking] = {}
        # a note written into a Chat Completions body as a splice of its bytes, as the
        # compiled relay writes the countdown of a request it sends on ahead (None: it is not
        # built; the body is written anew)
        self.splice_note = note_splicer()

    async def start(self) -> None:
        self.proxies = {base: proxy_for(base) for base in (self.openai, self.anthropic)}
        urls = [*self.proxies, *(proxy[0] for proxy in self.proxies.values() if proxy)]
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.config.model_max_concurrent,
                                           keepalive_timeout=60, ssl=await context_for(urls)),
            # the wait for each read, not the whole exchange: a long stream that keeps coming
            # is not cut, a silent upstream is
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT,
                                          sock_read=self.config.model_upstream_timeout),
            trust_env=False, auto_decompress=False, raise_for_status=False)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.model_max_body_bytes,
                              middlewares=[self._no_path])
        # every path, a line break in it too (``.`` matches none: aiohttp's own 404 would answer)
        app.router.add_route("*", "/{tail:(?s:.*)}", self.handle, expect_handler=self._expect)
        app.on_startup.append(lambda _app: self.start())
        app.on_cleanup.append(lambda _app: self.close())
        return app

    @web.middleware
    async def _no_path(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """A target that is no path (``CONNECT host:port``, ``OPTIONS *``) matches no route:
        refused by :meth:`handle` as any target outside /v1/, in the API's error shape. An
        HTTP/0.9 request line (no version, so no headers, no Host) is no HTTP/1.1 request:
        400, as the compiled relay answers it, its connection closed."""
        if request.version < aiohttp.HttpVersion10:
            answer = self.refusal(self.wire_of(request.method, request.path), Refused(
                400, "bad_request", "the request could not be read as HTTP/1.1: its request "
                "line has no HTTP version"), request.headers)
            response = web.Response(status=answer.status, body=answer.body,
                                    headers=answer.headers)
            response.force_close()
            return response
        if not request.raw_path.startswith("/"):
            return await self.handle(request)
        return await handler(request)

    # -- the door -------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        arrived = self.service.now()  # (its head: the compiled relay's time too)
        wire = self.wire_of(request.method, request.path)
        try:
            target, agent = door(request.method, request.raw_path, request.headers,
                                 self.token)
            wire = self.wire_of(request.method, unquote(target.split("?", 1)[0]))
            if self.reading >= self.max_reading:
                raise self.reading_full(self.reading)
            held = Held()
            try:
                # a place is taken once the body is in: a body still coming holds none
                self.reading += 1
                try:
                    body = await self._body(request, held)
                finally:
                    self.reading -= 1
                if self.in_flight >= self.config.model_max_concurrent:
                    raise self.overloaded(self.in_flight)
                self.in_flight += 1
            except BaseException:
                self.held_bytes -= held.bytes
                raise
            try:
                plan = self.plan(wire, request.method, target, request.headers, body, agent,
                                 arrived)
                if isinstance(plan, Answer):
                    return web.Response(status=plan.status, body=plan.body,
                                        headers=plan.headers)
                if plan.exchange is not None:
                    protocol = request.transport.get_protocol() if request.transport else None
                    self.asking[plan.exchange] = Handled(
                        protocol if isinstance(protocol, Http1Only) else None,
                        asyncio.current_task())
                try:
                    return await self.forward(request, plan)
                finally:
                    if plan.exchange is not None:  # the request was the run's until now
                        self.asking.pop(plan.exchange, None)
                        plan.exchange.settle()
            finally:
                self.in_flight -= 1
                self.held_bytes -= held.bytes
        except Refused as refused:
            answer = self.refusal(wire, refused, request.headers)
            response = web.Response(status=answer.status, body=answer.body,
                                    headers=answer.headers)
            if answer.headers.get("Connection") == "close":  # its body was not all read:
                response.force_close()  # the connection ends with the answer, not after
                await response.prepare(request)  # waiting for the rest of it
                await response.write_eof()
                if request.transport is not None:
                    request.transport.close()
            return response

    def wire_of(self, method: str, path: str) -> Wire | None:
        """The API a request speaks (None: another path, passed through); ``path`` decoded."""
        return self.wires.get(path.rstrip("/")) if method == "POST" else None

    def overloaded(self, in_flight: int) -> Refused:
        if self.metrics is not None:
            self.metrics.model_overloaded("model_max_concurrent")
        return Refused(503, "overloaded", f"{in_flight} model requests are in flight "
                       f"(model_max_concurrent): retry shortly", {"Retry-After": RETRY_AFTER})

    def reading_full(self, reading: int) -> Refused:
        """The request bodies being read are ``READING_PER_PLACE`` × ``model_max_concurrent``."""
        if self.metrics is not None:
            self.metrics.model_overloaded("model_max_concurrent")
        return Refused(503, "overloaded", f"{reading} model request bodies are being read "
                       f"({READING_PER_PLACE} × model_max_concurrent): retry shortly",
                       {"Retry-After": RETRY_AFTER})

    def over_budget(self) -> Refused:
        """The request would take the bodies held past ``model_max_inflight_bytes`` (the rest
        of its body is read and dropped, so its client, still sending it, reads the answer)."""
        if self.metrics is not None:
            self.metrics.model_overloaded("model_max_inflight_bytes")
        return Refused(503, "overloaded", f"the model requests in flight hold too many bytes "
                       f"of request bodies to take this one (model_max_inflight_bytes, "
                       f"{self.config.model_max_inflight_bytes}): retry shortly",
                       {"Retry-After": RETRY_AFTER})

    def hold(self, held: Held, size: int) -> None:
        """Counts a request's body as ``size`` bytes (more than it held), or refuses it: past
        ``model_max_inflight_bytes`` with other requests holding some (one alone is taken)."""
        more = size - held.bytes
        if more <= 0:
            return
        if self.held_bytes > held.bytes \
                and self.held_bytes + more > self.config.model_max_inflight_bytes:
            raise self.over_budget()
        self.held_bytes += more
        held.bytes = size

    def hold_response(self, held: Held, size: int) -> bool:
        """Counts a whole response held before it is answered as ``size`` bytes (more than it
        held): False, counting nothing, past ``model_max_held_response_bytes`` with other
        responses holding some (one alone is held)."""
        more = size - held.bytes
        if more <= 0:
            return True
        if self.held_response_bytes > held.bytes and self.held_response_bytes + more \
                > self.config.model_max_held_response_bytes:
            return False
        self.held_response_bytes += more
        held.bytes = size
        return True

    def let_go_response(self, held: Held) -> None:
        """A response's held bytes answered (or dropped)."""
        self.held_response_bytes -= held.bytes
        held.bytes = 0

    @staticmethod
    def too_large(limit: int) -> Refused:
        return Refused(413, "request_too_large", f"the request body is larger than {limit} "
                       f"bytes (model_max_body_bytes)")

    @staticmethod
    def body_late(seconds: float) -> Refused:
        """A body that did not arrive in time: its connection is closed with the answer (the
        rest of the body may still come)."""
        return Refused(408, "request_timeout", f"the request body did not arrive within "
                       f"{seconds:g} s (model_body_timeout)", {"Connection": "close"})

    def body_slow(self) -> Refused:
        """A body that stalled or crawled: fewer than ``model_body_min_rate`` bytes a second
        over a ``model_body_rate_window``; its connection is closed with the answer."""
        return Refused(408, "request_timeout", f"the request body arrived slower than "
                       f"{self.config.model_body_min_rate} bytes/s over "
                       f"{self.config.model_body_rate_window:g} s (model_body_min_rate, "
                       f"model_body_rate_window)", {"Connection": "close"})

    def agent_named(self, headers: CIMultiDict[str] | CIMultiDictProxy[str] | None
                    ) -> str | None:
        """The agent a request names (``x-watchdog-agent``, when it is a name the endpoint
        takes: never one with the token in it), else ``model_agent_name``."""
        named = headers.get(AGENT_HEADER) if headers is not None else None
        return named if named is not None and agent_allowed(named) \
            and (self.token is None or self.token not in named) \
            else self.config.model_agent_name

    def refusal(self, wire: Wire | None, refused: Refused,
                headers: CIMultiDict[str] | CIMultiDictProxy[str] | None = None) -> Answer:
        """A request the endpoint answers itself, counted (under the agent its ``headers``
        name)."""
        self.count(self.agent_named(headers), wire.api if wire is not None else "other",
                   "refused")
        body = (wire or ChatWire()).error(refused.status, refused.code, refused.message)
        return Answer(refused.status, dumps(body), {"Content-Type": "application/json",
                                                    **refused.headers})

    def _upstream_url(self, target: str, headers: CIMultiDict[str] | CIMultiDictProxy[str]
                      ) -> str:
        if target.split("?", 1)[0].rstrip("/") == "/v1/messages" or (
                not target.startswith(("/v1/chat/", "/v1/responses"))
                and any(name in headers for name in ANTHROPIC_HINTS)):
            return self.anthropic + target
        return self.openai + target[len("/v1"):]

    # -- what a request gets: an answer here, or a request to send upstream ------------------

    def plan(self, wire: Wire | None, method: str, target: str,
             given: CIMultiDict[str] | CIMultiDictProxy[str], raw: bytes,
             path_agent: str | None = None, arrived: float | None = None,
             sent: bool = False) -> Answer | Plan:
        """The request read, given its run and steered (``target`` checked already; its path
        named ``path_agent``; ``arrived``: when its head came, on the service's clock, else
        now): what the upstream is sent, or the answer given without it. A
        plan with an exchange holds its run until :meth:`ModelBook.settle` (its relay's, when
        the response has ended). ``sent``: the compiled relay sent the request on already
        (ahead): what it would go upstream as is not made (its headers, a body written anew),
        only what it gets; an abort decided meanwhile gets no answer here (the upstream's
        goes to the agent, and the call is booked as sent); the run's next request gets it."""
        url = self._upstream_url(target, given)
        headers, watchdog = request_headers(given, sent)
        if wire is None:  # other paths: passed through
            return Plan(method, "other", url, headers, raw, None)
        headers["Accept-Encoding"] = "identity"  # the response is read: no compression
        budget = budget_from(watchdog)
        run_header = watchdog.get("x-watchdog-run")
        if run_header is not None and (problem := id_problem(run_header)) is not None:
            raise Refused(400, "bad_request", f"x-watchdog-run {run_header[:64]!r} is not "
                          f"allowed: it {problem}")
        named = watchdog.get(AGENT_HEADER)
        if named is not None:
            check_agent(named)
        else:
            named = path_agent
        coding = headers.get("Content-Encoding", "").strip().lower()
        decoded = b""
        try:
            decoded = self._decoded(raw, coding)
            body = load_json(decoded)
            if not isinstance(body, dict):
                raise ValueError("the body is not a JSON object")
        except ValueError as exc:
            # nothing to read: the upstream's to judge; but JSON a model API may read that
            # this cannot (a run's request, steered or not) is never passed on unjudged
            if run_header is None and budget is None and not unjudged(decoded):
                return Plan(method, wire.api, url, headers, raw, None)
            raise Refused(400, "bad_request", f"the request body cannot be read: {exc}"
                          ) from None
        parsed = wire.read_request(body)
        agent = named or self.config.model_agent_name
        call = self._observe_request(wire, body, parsed, Caller(
            given.get("traceparent"), run_header, agent, client_session(given),
            client_subagent(given)), agent, budget)
        if call is None:  # the state cannot take it: forward unobserved (fail open)
            return Plan(method, wire.api, url, headers, raw, None)
        state, turn, run_key, agent_label = call
        if turn.act is Act.ABORT:
            if sent:  # (the stop its next request gets: the run may have ended meanwhile)
                state.stop = state.stop or self._stop_text(turn, state, run_key)
            else:
                try:
                    return self._abort(wire, parsed, state, turn, run_key, agent_label)
                finally:
                    self.book.settle(state)
        try:  # the request is the run's until its response has ended
            own = body  # (as its client sent it: what follows writes the changes anew)
            if turn.act in (Act.FINAL, Act.WITHDRAW):
                body = wire.withdraw_tools(body, turn.text)
                if turn.act is Act.FINAL:
                    state.final_used, state.final_rule = True, turn.rule
            elif turn.act is Act.NOTE:
                body = wire.add_note(body, turn.text)
            # (to price the call, unless the upstream refused that before)
            asked = wire.ask_usage(body) if turn.usage and not self.usage_unasked else None
            unasked = None
            if sent:  # (what the request gets, not what it would go as)
                unasked = raw if asked is not None else None
            elif turn.act is not Act.PASS or asked is not None:
                if asked is not None:  # (sent instead if the upstream refuses the ask)
                    unasked = raw if turn.act is Act.PASS and coding in IDENTITY \
                        else dumps(body)
                spliced = self._spliced(wire, decoded, turn) if asked is None else None
                raw = spliced if spliced is not None else dumps(body if asked is None
                                                                else asked)
                headers.popall("Content-Encoding", None)  # the new body goes as it is
            if turn.act is not Act.PASS and turn.act is not Act.ABORT:
                self.steered(agent_label, turn.act.value)
                logs.event("model_steered", run=run_key, agent=agent_label, api=wire.api,
                           action=turn.act.value, rule=turn.rule, keep=turn.keep)
            if arrived is None:
                arrived = self.service.now()
            # the model call: not idle while it runs, in flight since its request came
            self.service.model_in_flight(run_key, 1, arrived)
            exchange = Exchange(wire, parsed, state, turn, time.time_ns(), agent_label, run_key,
                                unasked, arrived)
            if wire.api == "responses" and body is not own:
                exchange.echo = echo_of(own, body)
        except BaseException:
            self.book.settle(state)
            raise
        return Plan(method, wire.api, url, headers, raw, exchange)

    def _spliced(self, wire: Wire, decoded: bytes, turn: Turn) -> bytes | None:
        """A Chat Completions request's body with the note of ``turn`` spliced into its bytes
        (the compiled relay's ``splice_note``, which writes it where :meth:`ChatWire.add_note`
        does), when that is all it gets; None: written anew (no note, not built, or a body the
        splice cannot be sure of)."""
        if turn.act is not Act.NOTE or wire.api != "chat" or self.splice_note is None:
            return None
        try:
            return self.splice_note(decoded, turn.text)
        except ValueError:  # (a note Rust cannot take: an unpaired surrogate)
            return None

    def _decoded(self, raw: bytes, coding: str) -> bytes:
        """The request body as the upstream will read it: inflated from gzip or deflate (at
        most ``model_max_body_bytes``); ValueError for a coding it cannot read (it is passed
        on as it came, unread, unless a budget or a run asks for it to be read)."""
        if coding in IDENTITY:
            return raw
        if coding not in SUPPORTED:
            raise ValueError(f"its Content-Encoding {coding[:32]!r} is not one the endpoint "
                             f"reads (gzip, deflate)")
        limit = self.config.model_max_body_bytes
        try:
            return inflate(raw, coding, limit)
        except BodyTooLarge:
            raise ValueError(f"inflated, it is larger than {limit} bytes "
                             f"(model_max_body_bytes)") from None
        except BadCoding as exc:
            raise ValueError(f"it is not valid {coding} data ({exc})") from None

    def _observe_request(self, wire: Wire, body: dict[str, Any], parsed: Any, caller: Caller,
                         agent: str | None, budget: dict[str, float] | None
                         ) -> tuple[EndpointRun, Turn, str, str] | None:
        """The request's run and what it gets. When the state cannot take the run's records
        (:class:`Overloaded`, :class:`StateUnavailable`) the call goes on unrecorded: steered
        by the book's own counts when its run's tool-call budget is known (so no call past it
        is handed over), else forwarded as it came (fail open)."""
        service = self.service
        state: EndpointRun | None = None
        try:
            def ended(key: str) -> bool:
                run = service.model_run(key)
                return run is not None and run.ended

            def resume(session: str) -> str | None:
                active = service.session_context(session)["active_runs"]
                return str(active[-1]) if active else None

            if self.before_identify is not None:
                self.before_identify(wire.api, parsed, caller, agent)
            if self.asking:
                self._let_go_resent(wire.api, parsed, caller, agent)
            state = self.book.identify(wire.api, parsed, caller, agent, ended, resume,
                                       time.time_ns())
            run = self._run_of(state, agent, budget,
                               self.book.tool_records(state, parsed, time.time_ns()))
            calls = max(run.iterations, 1)
            counts = Counts(used=max(run.tool_calls, state.results), handed=state.handed,
                            budget=dict(run.budget), final_used=state.final_used,
                            final_rule=state.final_rule, stop=state.stop,
                            reserved=state.reserved,
                            per_call_usd=run.cost_usd / calls,
                            per_call_tokens=run.total_tokens / calls,
                            # (a run whose spans count its tools: the rules may lag behind)
                            ruled=run.tool_calls if state.traced
                            or state.key_source is KeySource.TRACE else None)
            state.run_key, state.used = run.key, counts.used
            state.tool_limit = run.budget.get("max_tool_calls")
            # (an agent whose requests offer tools acts by the API's tool calls, whatever a
            # pack's glob declares for it: its text answer is its answer, not an action; one
            # whose requests offer none, as its pack says, else as the text template its
            # instructions carry says)
            acting = service.text_acting(run.agent, parsed.instructions) \
                if not parsed.has_tools else None
            state.acts_in_text = acting is not None
            state.acts_in_code = acting is not None and acting.actions == ACTIONS_CODE
            state.action_pattern = acting.action_pattern if acting is not None else None
            finish = service.finish_of(run.agent)
            # (an answer-shaped request's forced function is its answer, whatever the pack's)
            state.answer_tool = parsed.forced or (finish.tool if finish is not None and
                                                  finish.answered_by(tool_parameters(
                                                      body, finish.tool)) else None)
            state.per_conversation = service.per_conversation(run.agent)
            state.work_beside = service.work_beside_answer(run.agent)
            state.action_key = acting.action_key if acting is not None else None
            state.answer_tools = acting.answer_tools if acting is not None else ()
            state.answer_key = acting.answer_key if acting is not None else None
            return state, decide(counts, service.board(run.key), parsed.instructions,
                                 parsed.has_tools, parsed.structured, state.acts_in_text,
                                 aside_of(state, parsed)), \
                run.key, run.agent
        except (Overloaded, StateUnavailable) as exc:
            log.warning("model call not recorded: %s", exc)
            self.unrecorded("request")
            if state is not None:
                steered = self._steer_unrecorded(state, parsed, agent, budget)
                if steered is not None:
                    return steered
        except Exception:  # a bug here must not fail the agent's model call: fail open
            self._failed("request")
        if state is not None:
            self.book.settle(state)
        return None

    def _let_go_resent(self, api: str, parsed: Any, caller: Caller, agent: str | None
                       ) -> None:
        """A request of a run or conversation whose earlier request is still with the model
        though its client ended its side of the connection: that client gave up on it (an
        SDK's timeout, then its retry) and sends again. The earlier request is cancelled here
        and is its run's no more (a half-closed client that waited for its answer sends no
        request of the same conversation meanwhile): the new one is not a twin run, nor
        kept from the tool calls the earlier one held back for itself; an earlier final
        request had no turn (the report goes upstream again, as for one that got no answer)."""
        for exchange, asking in list(self.asking.items()):
            if not asking.ended or exchange.answered or exchange.settled \
                    or not self.book.continues(api, parsed, caller, agent, exchange.state):
                continue
            del self.asking[exchange]
            exchange.settle()
            if exchange.turn.act is Act.FINAL:
                exchange.state.final_used = False
            asking.let_go()
            logs.event("model_request_resent", run=exchange.key, agent=exchange.agent,
                       api=api)

    def _steer_unrecorded(self, state: EndpointRun, parsed: Any, agent: str | None,
                          budget: dict[str, float] | None
                          ) -> tuple[EndpointRun, Turn, str, str] | None:
        """What the request gets from the book's counts alone (the state cannot take its
        records): its tool-call budget (this request's, else its run's as last read, else the
        rule packs' for its agent: a run none of whose requests was recorded) and its run's
        directives; None when it has neither."""
        limit = (budget or {}).get("max_tool_calls", state.tool_limit)
        if limit is None:
            limit = self.service.pack_budget(agent or state.agent).get("max_tool_calls")
        key = state.run_key or state.key
        board = self.service.board(key)
        if limit is None and board is None:
            return None
        counts = Counts(used=max(state.used, state.results), handed=state.handed,
                        budget={} if limit is None else {"max_tool_calls": limit},
                        final_used=state.final_used, final_rule=state.final_rule,
                        stop=state.stop, reserved=state.reserved,
                        # (the rules saw the calls recorded, no more: from COUNTDOWN_FROM left)
                        ruled=state.used)
        return state, decide(counts, board, parsed.instructions, parsed.has_tools,
                             parsed.structured, state.acts_in_text,
                             aside_of(state, parsed)), key, \
            agent or state.agent or "unknown"

    def _run_of(self, state: EndpointRun, agent: str | None, budget: dict[str, float] | None,
                records: list[SpanRecord]) -> OpenedRun:
        """The tracker's run of this call (opened at its first request), after the
        ``records`` of the request (its tool results): a traced one the run its trace's
        spans named, once they have come."""
        service = self.service
        if state.key_source is KeySource.TRACE:
            service.model_records(records)  # (they may name the trace's run)
            key = service.trace_run(state.trace_id) or state.key
            return service.model_open(key, KeySource.TRACE, state.trace_id, agent, None, budget)
        run = service.model_open(state.key, state.key_source, state.trace_id, agent,
                                 state.session, budget, records, state.going_on, state.parent)
        if run.framed:
            state.traced = True  # the client SDK's run: its spans count the tools
        return run

    def _abort(self, wire: Wire, parsed: Any, state: EndpointRun, turn: Turn, key: str,
               agent: str) -> Answer:
        """The upstream is not called: a final answer with the stop note and the run's
        report (or, with ``model_abort: error``, the API's error)."""
        text = state.stop or self._stop_text(turn, state, key)
        state.stop = text
        self.steered(agent, "abort")
        logs.event("model_steered", run=key, agent=agent, api=wire.api, action="abort",
                   rule=turn.rule, mode=self.config.model_abort)
        self.count(agent, wire.api, "aborted")
        if not state.traced:  # (a traced run's spans end it)
            try:
                self.service.model_stopped(key)  # its agent has its last answer
            except (Overloaded, StateUnavailable) as exc:
                log.warning("model run not ended: %s", exc)
            except Exception:
                self._failed("request")
        answer = abort_text(text, parsed.answer_format)
        acting = self.service.acts_in_text(agent)
        if parsed.answer_format is None and acting is not None \
                and acting.stop_answer is not None:
            # (an agent that acts on the answer's text ends by the form its pack gives)
            answer = text_stop_answer(acting.stop_answer, text)
        replied = not state.at_once or replied_at_once(state, time.time_ns())
        if self.config.model_abort == "error" or answer is None or not replied \
                or (goes_on_from_stop(state, parsed) and not asks_again(state, parsed)):
            # (an agent that sent the stop answer on with a prompt after it did not take it as
            # its run's end, a framework's validation retry: the error ends it, its message
            # the note; one that asks its model to go on from it gets it again)
            return Answer(400, dumps(wire.error(400, ABORT_CODE, text)), JSON)
        finish = self.service.finish_of(agent) if parsed.answer_format is None else None
        call = finish_call(finish, text) if finish is not None else None
        if parsed.stream:
            body = wire.answer_stream(parsed.model, answer, parsed, time.time(), call)
            headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        else:
            body, headers = dumps(wire.answer(parsed.model, answer, parsed, time.time(),
                                              call)), JSON
        if text != state.report or answer_digest(text) in state.stop_answers \
                or state.at_once or call is not None:
            # (the model's own report ended its run: what follows it with a new user message
            # is the session's next run, as after any answer; a report that is the stop note
            # in place of its final answer is the endpoint's: given again, under an id anew;
            # the report given again to an agent's own reply to it, or as its finish call, is
            # the stop's: the agent that sends it on gets the error)
            self._stopped(state, wire, parsed, answer, body, text)
        return Answer(200, body, headers)

    def _stopped(self, state: EndpointRun, wire: Wire, request: Request, answer: str,
                 body: bytes, note: str) -> None:
        """The endpoint answered ``state``'s run's ``request`` with ``body``, its stop answer
        ``answer`` (of the stop note ``note``): a request that goes on from it is the stopped
        run's (a conversation the server keeps goes on from the answer by its id:
        Responses). Kept with the run too, so that holds after a restart."""
        named = STOP_ANSWER_ID.search(body) if wire.api == "responses" else None
        self.book.stopped(state, request, answer, named.group(1).decode() if named else None)
        try:
            self.service.model_stop_answered(state.run_key or state.key, note,
                                             state.stop_answers)
        except (Overloaded, StateUnavailable) as exc:
            log.warning("model run's stop not kept: %s", exc)
        except Exception:
            self._failed("request")

    def _stop_text(self, turn: Turn, state: EndpointRun, key: str) -> str:
        if state.report and not state.acts_in_text:  # the final report the model gave: the
            return state.report  # run's result (an agent that acts in text acted on it)
        lines = self.service.recent_lines(key)[-MAX_REPORT_LINES:]
        run = self.service.model_run(key)
        parts = [f"The agent-watchdog stopped this run: {turn.text or 'the run is over'}"]
        if run is not None:
            tools = ", ".join(f"{name} ×{count}"
                              for name, count in list(run.signals["tools"].items())[:20])
            parts.append(f"Progress so far: {run.iterations} model calls, {run.tool_calls} "
                         f"tool calls" + (f" ({tools})" if tools else "") + ".")
        if lines and self.service.acts_in_text(state.agent) is not None:
            lines = tuple(no_json(line) for line in lines)  # (none for it to run)
        if lines:
            parts.append("Last steps:\n" + "\n".join(f"- {line}" for line in lines))
        return "\n\n".join(parts)

    # -- forwarding -----------------------------------------------------------------------------

    async def forward(self, request: web.Request, plan: Plan) -> web.StreamResponse:
        """The request sent upstream and its response passed on. A run's final request that
        got no answer (a rate limit or a server error, which the agent's SDK retries; an
        upstream that failed, or broke its answer off; a client that went away) has not had
        its final turn: the same request sent again goes upstream for the report again, not
        answered with the stop note that follows a final turn."""
        exchange = plan.exchange
        final = exchange is not None and exchange.turn.act is Act.FINAL
        try:
            response = await self._forward(request, plan)
        except BaseException:
            if final:
                assert exchange is not None
                if not exchange.settled:  # (else let go: _let_go_resent said so, and the
                    exchange.state.final_used = False  # request sent again may have had it)
            raise
        if final and exchange is not None and (exchange.broke or not (
                200 <= response.status < 300 or refused(response.status))):
            exchange.state.final_used = False
        return response

    async def _forward(self, request: web.Request, plan: Plan) -> web.StreamResponse:
        session = self.session
        assert session is not None, "ModelProxy.start() first"
        api, url, body, headers, exchange = plan.api, plan.url, plan.body, plan.headers, \
            plan.exchange
        agent = exchange.agent if exchange is not None else None
        started = time.perf_counter()
        answered = False  # the upstream's head came: a failure from here broke its answer
        try:
            proxy = self.proxies.get(self.anthropic if url.startswith(self.anthropic + "/")
                                     else self.openai)

            def send(body: bytes) -> Any:
                return session.request(plan.method, url, data=body or None, headers=headers,
                                       allow_redirects=False, proxy=proxy[0] if proxy else None,
                                       proxy_headers={"Proxy-Authorization": proxy[1]}
                                       if proxy and proxy[1] else None)

            async with send(body) as upstream:
                answered = True
                unasked = exchange.unasked if exchange is not None else None
                if unasked is None or upstream.status not in REFUSED_USAGE_STATUSES:
                    response, outcome = await self._relayed(request, upstream, exchange)
                else:
                    data, whole = await read_upto(upstream, MAX_REFUSAL_READ)
                    if not (whole and refuses_usage(
                            data, upstream.headers.get("Content-Encoding", ""))):
                        response, outcome = await relay(request, upstream, data), \
                            "upstream_error"
                        if exchange is not None and refused(upstream.status):
                            self.observe_refused(exchange, upstream.status, data,
                                                 upstream.headers)
                    else:  # the request as its client sent it: its stream's usage unasked
                        assert exchange is not None
                        exchange.unasked = None
                        self.usage_refused()
                        answered = False
                        async with send(unasked) as again:
                            answered = True
                            response, outcome = await self._relayed(request, again, exchange)
        except Unjudged as exc:  # a bound's response it cannot judge: as the compiled relay
            answer = self.upstream_failed(plan, "unjudged", str(exc))  # answers
            return web.Response(status=answer.status, body=answer.body, headers=answer.headers)
        except HeldFull:
            answer = self.upstream_failed(plan, "held_full", "")
            return web.Response(status=answer.status, body=answer.body, headers=answer.headers)
        except TimeoutError:
            answer = self.upstream_failed(plan, "stalled" if answered else "timeout", "")
            return web.Response(status=answer.status, body=answer.body, headers=answer.headers)
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, OSError,
                aiohttp.ClientResponseError) as exc:
            if request.transport is None or request.transport.is_closing():
                self.count(agent, api, gone(exchange))
                raise asyncio.CancelledError from None
            what: BaseException = exc  # (a head aiohttp could not read: BadStatusLine, ...)
            if isinstance(exc, aiohttp.ClientResponseError) and exc.__cause__ is not None:
                what = exc.__cause__
            answer = self.upstream_failed(plan, "broken" if answered else "unreachable",
                                          type(what).__name__)
            return web.Response(status=answer.status, body=answer.body, headers=answer.headers)
        except asyncio.CancelledError:  # the client went away
            self.count(agent, api, gone(exchange))
            raise
        if self.metrics is not None:
            self.metrics.model_upstream(api, time.perf_counter() - started)
        self.count(agent, api, outcome)
        return response

    async def _relayed(self, request: web.Request, upstream: aiohttp.ClientResponse,
                       exchange: Exchange | None) -> tuple[web.StreamResponse, str]:
        """The upstream's response passed on (observed, trimmed) and its outcome."""
        if exchange is None or not 200 <= upstream.status < 300:
            data = None
            if exchange is not None and refused(upstream.status):
                data, _ = await read_upto(upstream, MAX_REFUSAL_READ)
            passed = await relay(request, upstream, data)
            if data is not None:
                assert exchange is not None
                self.observe_refused(exchange, upstream.status, data, upstream.headers)
            # (an answer the upstream broke off: its failure)
            failed = upstream.status >= 400 or passed.broken
            if failed and exchange is not None:
                self.service.model_failed(exchange.key, failed_code(upstream.status))
            return passed, "upstream_error" if failed else "passed"
        if upstream.content_type == "text/event-stream":
            response = await relay_stream(self, request, upstream, exchange)
        else:
            response = await relay_json(self, request, upstream, exchange)
        return response, exchange.outcome  # (as its answer went: booked by now)

    def usage_refused(self) -> None:
        """The upstream refused a request's ``stream_options`` (it was sent again as its
        client sent it): no later request asks (said once)."""
        if not self.usage_unasked:
            self.usage_unasked = True
            log.warning("the model upstream refuses stream_options: streamed Chat Completions "
                        "calls whose client does not ask for usage go unpriced, with no tokens "
                        "(a budget in dollars or tokens cannot count them), until a restart")

    def upstream_failed(self, plan: Plan, kind: str, detail: str) -> Answer:
        """The answer when the upstream gave none the client could have (``kind``: one of
        :data:`UPSTREAM_FAILURES`; ``detail``: the error's kind, or what could not be read),
        counted; the run has no model call running any more."""
        exchange = plan.exchange
        wire = exchange.wire if exchange is not None else ChatWire()
        agent = exchange.agent if exchange is not None else None
        status, code, outcome, what = UPSTREAM_FAILURES.get(kind,
                                                            UPSTREAM_FAILURES["unreachable"])
        if exchange is not None:
            self.service.model_in_flight(exchange.key, 0)
            self.service.model_failed(exchange.key, code)
        message = "the upstream model API" + what.format(
            timeout=f"{self.config.model_upstream_timeout:g} s (model_upstream_timeout)",
            detail=detail, held=self.config.model_max_held_response_bytes)
        headers = JSON
        if kind == "held_full":
            headers = {**JSON, "Retry-After": RETRY_AFTER}
            if self.metrics is not None:
                self.metrics.model_overloaded("model_max_held_response_bytes")
        if kind != "timeout":
            log.warning("model upstream %s: %s", url_for_logs(plan.url.split("?")[0]),
                        message)
        self.count(agent, plan.api, outcome)
        return Answer(status, dumps(wire.error(status, code, message)), headers)

    def observe_whole(self, exchange: Exchange, data: bytes, content_type: str,
                      into: list[Booked] | None = None, changed: bool = False,
                      seen: Observation | None = None) -> None:
        """A response relayed as it came (``data``: the upstream's bytes; ``changed``: the
        relay trimmed what it passed on), read when it has ended (the compiled relay's):
        observed as :func:`~watchdog.shell.model.streams.relay_stream` and ``relay_json``
        observe what they pass on; with ``into``, its record goes there, for
        :meth:`book_calls`; ``seen``: a stream's observation, read by the relay already."""
        if seen is None and (seen := read_observation(exchange.wire, data, content_type)) is None:
            return
        handed = exchange.handed(seen.calls)
        if changed or len(handed) < len(seen.calls):
            self.steered(exchange.agent, "trim")
        self.observed(exchange, handed, seen, into)

    def observe_refused(self, exchange: Exchange, status: int, data: bytes,
                        headers: Mapping[str, str] | None = None,
                        into: list[Booked] | None = None) -> None:
        """The model API refused the request as bad (:func:`refused`): a failed model call of
        its run (``data``: the start of the refusal's body, as the client got it; read only
        when it came uncompressed), booked as :meth:`observed` books."""
        exchange.release()
        coding = (headers or {}).get("Content-Encoding", "identity").strip().lower()
        try:
            record = self.book.refused_record(exchange.state, exchange.request, status,
                                              data if coding in IDENTITY else b"",
                                              exchange.started_ns, time.time_ns(),
                                              exchange.key)
        except Exception:  # the answer has gone to the agent; the run misses this call
            self._failed("response")
            return
        self._book(Booked(record, exchange.key, 0), into)

    def empty_final(self, exchange: Exchange, seen: Any, handed: list[Any],
                    stream: bool) -> bytes | None:
        """The answer (a stream of it, or a whole one) with the stop note that replaces the
        final request's answer when nothing is left of it (the model asked for tools though
        they were withdrawn, and they were trimmed); the note is then the answer observed,
        and the run's stop answer, as an abort's (:meth:`_stopped`). None: the answer
        stands."""
        if exchange.turn.act is not Act.FINAL or handed or not seen.complete:
            return None
        finish = self.service.finish_of(exchange.agent) \
            if exchange.request.answer_format is None else None
        # (the model's report in the finish call that carries only it, trimmed as the
        # withdrawn tools' calls are: the report it is, as that call)
        said = answer_of([call for call in seen.calls if call.name == exchange.state.answer_tool
                          ][:1], exchange.state.answer_tool) if finish is not None else None
        if said is not None and said.strip():
            note = seen.text = said
        elif seen.text.strip():
            if finish is None:
                return None
            # (an agent that ends its task by a tool call: the report, as that call)
            note = seen.text
        else:
            reason = Turn(Act.ABORT, f"the model asked for tools again instead of its final "
                          f"report ({exchange.turn.rule})")
            note = self._stop_text(reason, exchange.state, exchange.key)
            seen.text = note
        call = finish_call(finish, note) if finish is not None else None
        body = stop_answer(exchange, note, stream, call)
        self._stopped(exchange.state, exchange.wire, exchange.request, note, body, note)
        return body

    def observed(self, exchange: Exchange, handed: list[Any], seen: Any,
                  into: list[Booked] | None = None) -> None:
        """The response has ended: the call becomes a record of its run (with ``into``: the
        record goes there, for :meth:`book_calls`)."""
        state = exchange.state
        exchange.release()  # what it handed over is counted from here
        exchange.broke = seen.broke_off
        if exchange.turn.act is Act.FINAL:
            state.report = seen.text or answer_of(handed, state.answer_tool,
                                                  offered=exchange.offered) or state.report
        aside = aside_of(state, exchange.request)
        try:
            ran = [] if seen.broke_off else \
                self.book.ran_before_answer(state, handed, exchange.started_ns, exchange.offered)
            record = self.book.call_record(state, exchange.request, seen, handed,
                                           exchange.started_ns, time.time_ns(), exchange.key)
        except Exception:  # the answer has gone to the agent; the run misses this call
            self._failed("response")
            return
        # (a response that broke off handed nothing over: no tool of it runs at the agent;
        # an answer the agent acts on runs there as its actions, one per JSON object with an
        # action_key; a side request's run has the action it quotes still running)
        # (nor any beside an answer that ends the agent: run and counted, or never run)
        running = len(state.pending) if aside else 0 if seen.broke_off or ran \
            or closing_call(handed, state.answer_tool, state.work_beside,
                            exchange.offered) is not None \
            else len(handed) + (len(record.asked_tools) if record.acted_on and not handed
                                else 0)
        for tool in ran:  # (the work its answer came after: run, and counted, before it)
            self._book(Booked(tool, exchange.key, 0), into)
        self._book(Booked(record, exchange.key, running, exchange.arrived), into)

    def _book(self, booked: Booked, into: list[Booked] | None) -> None:
        """``booked`` goes to ``into`` (the caller books the lot in one step), else now."""
        if into is not None:
            into.append(booked)
        else:
            self.book_calls([booked])

    def book_calls(self, calls: list[Booked]) -> None:
        """Model calls that have ended, as records of their runs: one step of the core."""
        try:
            self.service.model_records([call.record for call in calls])
            for call in calls:  # the tools it handed over run at the agent until its next
                # request: not idle, in flight since the request that asked the model came
                self.service.model_in_flight(call.key, call.handed, call.since)
        except (Overloaded, StateUnavailable) as exc:
            log.warning("model call not observed: %s", exc)
            self.unrecorded("response", len(calls))
        except Exception:  # the answers have gone to the agents; the runs miss these calls
            self._failed("response")

    def _failed(self, stage: str) -> None:
        """A bug in observing a call: counted (run_failures_total{stage="model_<stage>"}),
        logged with its traceback the first ``MAX_FAILURES_LOGGED`` times."""
        self.failures += 1
        self.service.observer.run_failed("model_" + stage)
        if self.failures <= MAX_FAILURES_LOGGED:
            log.exception("observing a model call (%s) failed; the call went on unobserved",
                          stage)

    # -- bits -----------------------------------------------------------------------------------

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """``Expect: 100-continue``: a request the door refuses (the gateway's token missing
        or wrong: its 401, as without ``Expect``), a body longer than taken, or one that comes
        when every place is taken now (or as many bodies are being read as are taken), is
        refused before it is sent (as the compiled relay does), else the client is told to go
        on. Any other expectation is read as none (RFC 9110 §10.1.1 lets a server answer it
        417; the compiled relay does not), and the header is not passed on."""
        try:
            door(request.method, request.raw_path, request.headers, self.token)
            if self.in_flight >= self.config.model_max_concurrent:
                raise self.overloaded(self.in_flight)
            if self.reading >= self.max_reading:
                raise self.reading_full(self.reading)
            self._length_taken(request)
            size = request.content_length or 0
            if self.held_bytes > 0 and \
                    self.held_bytes + size > self.config.model_max_inflight_bytes:
                raise self.over_budget()
        except Refused as refused:
            answer = self.refusal(self.wire_of(request.method, request.path), refused,
                                  request.headers)
            return web.Response(status=answer.status, body=answer.body, headers=answer.headers)
        if request.version >= aiohttp.HttpVersion11 and request.headers.get(
                "Expect", "").strip().lower() == "100-continue":  # (as aiohttp's own handler)
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # (its body not begun)
        return None

    def _length_taken(self, request: web.Request) -> None:
        limit = self.config.model_max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise Refused(413, "request_too_large", f"the request body is "
                          f"{request.content_length} bytes; the model endpoint takes at most "
                          f"{limit} (model_max_body_bytes)")

    async def _body(self, request: web.Request, held: Held) -> bytes:
        limit = self.config.model_max_body_bytes
        self._length_taken(request)
        data = bytearray()
        content = request.content
        loop = asyncio.get_running_loop()
        window = self.config.model_body_rate_window
        least = self.config.model_body_min_rate * window  # bytes each window must bring
        window_end, window_bytes = loop.time() + window, 0
        try:
            async with asyncio.timeout(self.config.model_body_timeout):
                while True:
                    try:
                        async with asyncio.timeout_at(window_end):
                            chunk = await content.readany()
                    except TimeoutError:  # the window ended with nothing more
                        chunk = None
                    if chunk == b"":
                        break
                    if chunk:
                        data += chunk
                        window_bytes += len(chunk)
                        if len(data) > limit:
                            raise self.too_large(limit)
                        self.hold(held, len(data))  # (as it comes, whatever it declared)
                    if loop.time() >= window_end:
                        if window_bytes < least:
                            raise self.body_slow()
                        window_end, window_bytes = loop.time() + window, 0
        except TimeoutError:
            raise self.body_late(self.config.model_body_timeout) from None
        except EndedEarly:  # its client ended its side of the connection before its end
            raise Refused(400, "bad_request", "the request body could not be read",
                          {"Connection": "close"}) from None
        return bytes(data)

    def count(self, agent: str | None, api: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.model_request(agent or "unknown", api, outcome)

    def unrecorded(self, stage: str, calls: int = 1) -> None:
        if self.metrics is not None:
            for _ in range(calls):
                self.metrics.model_unrecorded(stage)

    def steered(self, agent: str, action: str) -> None:
        if self.metrics is not None:
            self.metrics.model_steered(agent, action)


def read_observation(wire: Wire, data: bytes, content_type: str) -> Observation | None:
    """What a response relayed as it came said (``data``: its bytes, inflated), read as the
    aiohttp relay reads it on the way: a stream by the API's accumulator, a whole response as
    JSON (None: not a JSON object)."""
    if is_stream(content_type):
        accumulator = wire.accumulator()
        read_stream(accumulator, data)
        return accumulator.observation
    body: object = None
    with contextlib.suppress(ValueError, RecursionError):
        body = json.loads(data)
    return wire.read_response(body) if isinstance(body, dict) else None
