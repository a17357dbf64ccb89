"""The control API (DESIGN §7): runs, their reports and heartbeats, as JSON over HTTP.

Handlers are thin: they parse and validate the request, call the watchdog through the narrow
:class:`Watchdog` protocol (its commands, and :class:`RunReads` for the runs' views and logs;
:class:`~watchdog.shell.service.WatchdogService` implements it) and shape the answer. Two
middlewares wrap every route. The outer one is the only place a failure becomes a response: a
:class:`WatchdogError` keeps its code and status, an aiohttp HTTP error (unknown route, wrong
method, body too large) is reshaped to the same ``{"error": {"code", "message"}}`` form, and
anything unexpected is logged and answered with a generic 500 (never a traceback).
The inner one checks the Bearer token when ``api_token`` is set.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from aiohttp import web

from watchdog.core.bounds import (
    MAX_BUDGET,
    MAX_EPOCH_SECONDS,
    MAX_IN_FLIGHT,
    MAX_MESSAGES,
    MIN_EPOCH_SECONDS,
    budget_limit,
    id_problem,
    is_number,
    load_json,
    plain_number,
)
from watchdog.core.directives.model import Directive
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.report import build_report, render_markdown
from watchdog.core.runs.view import RunView, run_summary
from watchdog.core.sessions import Checkpoint, CheckpointError, check_session_id
from watchdog.core.spans import codings
from watchdog.core.spans.decode import DecodeError, ExportTraceServiceRequest, parse_protobuf
from watchdog.core.sync import CLIENT_STOPS, SYNC_DIRECTIVE_WAIT, sync_answer
from watchdog.shell import logs
from watchdog.shell.auth import check_bearer
from watchdog.shell.config import Config
from watchdog.shell.directives.hub import StreamEnded, SubscriberOverflow, Subscription
from watchdog.shell.directives.outbox import Outbox
from watchdog.shell.errors import (
    BadRequest,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    UnsupportedMediaType,
    WatchdogError,
)
from watchdog.shell.priority import Priority, hand_over
from watchdog.shell.state.queries import MAX_LIST_LIMIT

log = logging.getLogger("watchdog.shell.api")

MAX_BODY_BYTES = 1024 * 1024  # control requests are tiny; anything bigger is a mistake
DEFAULT_LIST_LIMIT = 100
RUN_STATES = ("active", "ended")
MARKDOWN = "text/markdown"
JSON = "application/json"
MAX_POLL_WAIT = 60.0  # seconds a long-poll may hold (proxies commonly cut idle requests at 60 s+)
MAX_POLL_BATCH = 100  # directives per long-poll answer; more come on the next poll
SSE_WRITE_TIMEOUT = 10.0  # seconds a stream write may wait for a client that does not read
SSE_RETRY_MS = 1000  # the reconnection delay EventSource clients are told to use
MAX_SEQ = 2**63 - 1
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}  # the last: nginx must not buffer the stream

# A run or session id in a route: any characters but "/" (aiohttp's default also refuses
# "{" and "}", which ids may hold); a "/" in an id is sent as %2F.
RUNS = "/v1/runs/{id:[^/]+}"
SESSIONS = "/v1/sessions/{id:[^/]+}"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# aiohttp's own HTTP errors (routing, body size) by status -> our error code.
_HTTP_ERROR_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found",
                     405: "method_not_allowed", 413: "payload_too_large",
                     415: "unsupported_media_type"}


# Every JSON answer: ``Infinity``/``NaN`` are not JSON, so a non-finite float that got past
# validation is a bug to see (a 500 and a log line), not an answer clients cannot parse.
_dumps = functools.partial(json.dumps, allow_nan=False)


def json_response(data: object, status: int = 200,
                  headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(data, status=status, headers=headers, dumps=_dumps)


def error_response(status: int, code: str, message: str,
                   headers: dict[str, str] | None = None) -> web.Response:
    return json_response({"error": {"code": code, "message": message}}, status=status,
                         headers=headers)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except WatchdogError as exc:
        headers: dict[str, str] = {}
        if exc.retry_after is not None:
            headers["Retry-After"] = str(max(1, round(exc.retry_after)))
        if isinstance(exc, Unauthorized):
            headers["WWW-Authenticate"] = 'Bearer realm="agent-watchdog"'
        return error_response(exc.http_status, exc.code, exc.message, headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
        code = _HTTP_ERROR_CODES.get(exc.status, f"http_{exc.status}")
        message = exc.reason
        if exc.status == 404:
            message = f"no such endpoint: {request.method} {request.path}"
        elif exc.status == 405:
            message = f"method {request.method} is not allowed on {request.path}"
        elif exc.status == 413:
            message = f"request body larger than {MAX_BODY_BYTES} bytes"
        return error_response(exc.status, code, message, headers)
    except Exception:
        log.exception("control API: %s %s failed", request.method, request.path)
        return error_response(500, "internal", "internal error; the watchdog log has details")


@web.middleware
async def ids_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The id rule (:mod:`watchdog.core.bounds`) for every ``{id}`` in a route, as at ingest."""
    raw = request.match_info.get("id")
    if raw is not None:
        problem = id_problem(raw)
        if problem is not None:
            what = "session id" if request.path.startswith("/v1/sessions/") else "run id"
            raise BadRequest(f"{what} {_shown(raw)} is not allowed: it {problem}")
    return await handler(request)


def dispatch_middleware(priority: Priority) -> Callable[[web.Request, Handler],
                                                      Awaitable[web.StreamResponse]]:
    @web.middleware
    async def dispatched(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        connection = transport.get_protocol() if transport is not None else None
        if isinstance(connection, _Arrivals):
            connection.waiting = False  # its next bytes are the next request's
        priority.dispatched()
        try:
            return await handler(request)
        finally:
            if isinstance(connection, _Arrivals):
                connection.waiting = False  # bytes read while it ran were its body

    return dispatched


class ApiRunner(web.AppRunner):
    """The control API's runner: its connections tell :class:`~watchdog.shell.priority.Priority`
    when bytes arrive, so bulk work steps aside for a sync from its first byte on, not from
    the loop turn its handler starts in."""

    def __init__(self, app: web.Application, priority: Priority, **kwargs: Any) -> None:
        # Bodies are read as sent and inflated by request_body (codings.inflate): aiohttp's
        # own decompression raised on a body that is not the gzip its header says (a 500).
        super().__init__(app, auto_decompress=False, **kwargs)
        self.priority = priority

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()  # aiohttp builds it (Application._make_handler)
        server.__class__ = _ArrivalServer
        cast(_ArrivalServer, server).priority = self.priority
        return server


class _ArrivalServer(web.Server):
    priority: Priority

    def __call__(self) -> Any:  # the protocol factory of every accepted connection
        return _Arrivals(super().__call__(), self.priority)


class _Arrivals(asyncio.Protocol):
    """One control API connection: aiohttp's request handler, told nothing new; the priority
    gate told when a request's first bytes come in — once per request, so a client trickling
    bytes holds bulk work back for one pause at most (``priority.MAX_PAUSE``), not forever."""

    __slots__ = ("handler", "priority", "waiting")

    def __init__(self, handler: asyncio.Protocol, priority: Priority) -> None:
        self.handler = handler
        self.priority = priority
        self.waiting = False  # bytes in, their request not yet dispatched

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.waiting:
            self.waiting = True
            self.priority.arrived()
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()


def auth_middleware(token: str) -> Callable[[web.Request, Handler],
                                            Awaitable[web.StreamResponse]]:
    @web.middleware
    async def check_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        check_bearer(request.headers.get("Authorization"), token, "the header Authorization:")
        return await handler(request)

    return check_token


class RunReads(Protocol):
    """What the API reads about runs (:class:`watchdog.shell.state.queries.RunQueries`): views and
    logs."""

    async def list_runs(self, state: str | None = None, agent: str | None = None,
                        limit: int = 100) -> list[dict[str, Any]]: ...
    async def run_detail(self, key: str) -> dict[str, Any]: ...
    async def find_run(self, key: str) -> RunView: ...
    async def activity(self, key: str) -> list[ActivityEntry]: ...
    async def child_runs(self, key: str) -> list[RunView]: ...
    @property
    def trace_url(self) -> str | None: ...  # the config's template of a run's trace link


class Watchdog(Protocol):
    """What the API asks of the watchdog (:class:`watchdog.shell.service.WatchdogService`)."""

    @property
    def queries(self) -> RunReads: ...
    @property
    def priority(self) -> Priority: ...
    def now(self) -> float: ...
    def view(self, key: str) -> RunView | None: ...
    def heartbeat(self, key: str, messages: int, in_flight: int | None = None,
                  oldest_call_started: float | None = None,
                  announce: dict[str, Any] | None = None) -> RunView: ...
    def sync(self, key: str, request: ExportTraceServiceRequest, stop: str | None = None
             ) -> tuple[RunView | None, int]: ...
    async def checkpoint(self, session_id: str, checkpoint: Checkpoint) -> dict[str, Any]: ...
    def session_context(self, session_id: str) -> dict[str, Any]: ...


class RunRoutes:
    """``/v1/runs`` and everything under one run."""

    def __init__(self, service: Watchdog, max_request_bytes: int,
                 directives: Outbox | None = None) -> None:
        self.max_request_bytes = max_request_bytes
        self.service = service
        self.directives = directives

    async def list_runs(self, request: web.Request) -> web.Response:
        query = request.query
        state = query.get("state") or None
        if state is not None and state not in RUN_STATES:
            raise BadRequest(f"state={state!r} is not allowed: expected one of "
                             + ", ".join(RUN_STATES))
        agent = query.get("agent") or None
        limit = _int_param(query.get("limit"), "limit", DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT)
        runs = await self.service.queries.list_runs(state=state, agent=agent, limit=limit)
        return json_response({"runs": runs})

    async def get_run(self, request: web.Request) -> web.Response:
        key = request.match_info["id"]
        detail = await self.service.queries.run_detail(key)
        if self.directives is not None:
            detail["directives"] = await self.directives.run_directives(key)
        return json_response(detail)

    async def report(self, request: web.Request) -> web.Response:
        key = request.match_info["id"]
        service = self.service
        queries = service.queries
        run = await queries.find_run(key)
        activity = await queries.activity(key)
        children = await queries.child_runs(key)
        report = build_report(run, activity, children=children,
                              trace_url=queries.trace_url)
        if _wants_json(request.headers.get("Accept", "")):
            return json_response(report)
        return web.Response(text=render_markdown(report), content_type=MARKDOWN,
                            charset="utf-8")

    async def heartbeat(self, request: web.Request) -> web.Response:
        beat = parse_heartbeat(await _json_object(request))
        run = self.service.heartbeat(request.match_info["id"], beat.messages, beat.in_flight,
                                     beat.oldest_call_started, beat.announce)
        return json_response({**run_summary(run, self.service.queries.trace_url),
                              "messages": run.messages,
                              "in_flight": run.in_flight})

    async def sync(self, request: web.Request) -> web.Response:
        """``POST /v1/runs/{id}/sync?after=SEQ`` with the run's newly ended spans (an OTLP
        protobuf export body, possibly empty): answered once they are applied and the
        directives they caused are stored (:mod:`watchdog.core.sync`)."""
        run_id = request.match_info["id"]
        after = _int_param(request.query.get("after"), "after", 0, 0, MAX_SEQ)
        stop = request.query.get("stop") or None
        if stop is not None and stop not in CLIENT_STOPS:
            raise BadRequest(f"stop={stop!r} is not allowed: expected one of "
                             + ", ".join(sorted(CLIENT_STOPS)))
        body = await request_body(request, self.max_request_bytes, "max_request_bytes")
        try:
            export = parse_protobuf(body)
        except DecodeError as exc:
            raise BadRequest(str(exc)) from None
        service = self.service
        with service.priority.sync():  # bulk ingest waits until the answer is on the wire
            run, applied = service.sync(run_id, export, stop)
            directives = [] if self.directives is None else \
                await self.directives.directives_after(run_id, after, SYNC_DIRECTIVE_WAIT)
            if run is not None:  # as it is now, the directives stored
                run = service.view(run_id) or run
            response = json_response(sync_answer(
                run, run_id, applied, [d.to_json() for d in directives],
                directives[-1].seq if directives else after))
            try:
                await response.prepare(request)
                await response.write_eof()
            except ConnectionError:  # the agent hung up: aiohttp logs it as it would have
                return response
        hand_over()  # the agent was woken on this CPU to read it (watchdog.shell.priority)
        return response


@dataclass(frozen=True, slots=True)
class Heartbeat:
    messages: int
    in_flight: int | None
    oldest_call_started: float | None
    announce: dict[str, Any] | None


def parse_heartbeat(body: dict[str, Any]) -> Heartbeat:
    """A ``POST /v1/runs/{id}/heartbeat`` body; raises :class:`BadRequest` naming the field."""
    messages = body.get("messages", 0)
    if not isinstance(messages, int) or not _is_int_in(messages, 0, MAX_MESSAGES):
        raise BadRequest(f"messages={_shown(messages)} is not allowed: expected an integer "
                         f"from 0 to {MAX_MESSAGES} (the conversation length)")
    in_flight = body.get("in_flight")
    if in_flight is not None and not _is_int_in(in_flight, 0, MAX_IN_FLIGHT):
        raise BadRequest(f"in_flight={_shown(in_flight)} is not allowed: expected an integer "
                         f"from 0 to {MAX_IN_FLIGHT} (calls started and not ended)")
    oldest = body.get("oldest_call_started")
    if oldest is not None and not (is_number(oldest)
                                   and MIN_EPOCH_SECONDS <= oldest <= MAX_EPOCH_SECONDS):
        raise BadRequest(f"oldest_call_started={_shown(oldest)} is not allowed: expected "
                         f"epoch seconds from {MIN_EPOCH_SECONDS} (2000) to "
                         f"{MAX_EPOCH_SECONDS:g}")
    return Heartbeat(messages, in_flight, float(oldest) if oldest is not None else None,
                     _announcement(body.get("announce")))

async def request_body(request: web.Request, limit: int = MAX_BODY_BYTES,
                       setting: str | None = None) -> bytes:
    """A control request's body, inflated from its ``Content-Encoding`` (gzip or deflate, as
    the OTLP receivers accept), at most ``limit`` bytes as sent and once inflated (``setting``:
    the configuration that sets the limit, named in the refusal)."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in codings.SUPPORTED:
        raise UnsupportedMediaType(f"unsupported Content-Encoding {encoding!r}: send the body "
                                   f"as it is, or as gzip or deflate")
    limit_text = f"{setting}={limit}" if setting else f"{limit} bytes"
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body larger than {limit_text}")
        chunks.append(chunk)
    try:
        return codings.inflate(b"".join(chunks), encoding, limit)
    except codings.BodyTooLarge:
        raise PayloadTooLarge(f"request body larger than {limit_text} (after decompression)"
                              ) from None
    except codings.BadCoding as exc:
        raise BadRequest(f"the request body is not valid {encoding} data "
                         f"(Content-Encoding: {encoding}): {exc}") from None


ANNOUNCE_KEYS = {"agent": str, "session": str, "parent_run": str, "budget": dict}
ID_KEYS = frozenset({"session", "parent_run"})  # follow the id rule (watchdog.core.bounds)


def _is_int_in(value: object, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def _shown(value: object) -> str:
    """A client's value in an error message: its repr, cut (it may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _announcement(value: object) -> dict[str, Any] | None:
    """The heartbeat's optional ``announce`` object: who the run is, before its spans arrive."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("announce must be an object with agent, session, parent_run, budget")
    announce: dict[str, Any] = {}
    for key, item in value.items():
        expected = ANNOUNCE_KEYS.get(key)
        if expected is None:
            raise BadRequest(f"announce.{key} is not allowed: expected one of "
                             + ", ".join(sorted(ANNOUNCE_KEYS)))
        if item is None:
            continue
        if not isinstance(item, expected):
            raise BadRequest(f"announce.{key}={_shown(item)} is not allowed: expected a "
                             f"{expected.__name__}")
        if key in ID_KEYS:
            problem = id_problem(item)
            if problem is not None:
                raise BadRequest(f"announce.{key}={_shown(item)} is not allowed: it {problem}")
        announce[key] = item
    budget = announce.get("budget")
    if budget is not None:
        allowed = {"max_tool_calls", "max_iterations", "max_seconds", "max_tokens"}
        limits: dict[str, float] = {}
        for key, raw in budget.items():
            limit = budget_limit(raw)
            if key not in allowed or limit is None:
                raise BadRequest(f"announce.budget.{key[:64]}={_shown(raw)} is not allowed: "
                                 f"expected {', '.join(sorted(allowed))} with numbers from 0 "
                                 f"to {MAX_BUDGET:g}")
            limits[key] = limit
        announce["budget"] = limits
    return announce


class SessionRoutes:
    """``/v1/sessions/{id}``: checkpoints in, the context for the next run out (DESIGN §7)."""

    def __init__(self, service: Watchdog) -> None:
        self.service = service

    async def checkpoint(self, request: web.Request) -> web.Response:
        """``POST /v1/sessions/{id}/checkpoints {"remaining", "state", "failed_approaches",
        "run_id"}``: answered once the checkpoint is stored, with the session's context."""
        body = await _json_object(request)
        try:
            session_id = check_session_id(request.match_info["id"])
            checkpoint = Checkpoint.parse(body, self.service.now())
        except CheckpointError as exc:
            raise BadRequest(str(exc)) from None
        return json_response(await self.service.checkpoint(session_id, checkpoint))

    async def context(self, request: web.Request) -> web.Response:
        """``GET /v1/sessions/{id}/context``: facts (verbatim), failed approaches, zero-progress
        state and note. An unknown session answers an empty context, not 404."""
        try:
            session_id = check_session_id(request.match_info["id"])
        except CheckpointError as exc:
            raise BadRequest(str(exc)) from None
        return json_response(self.service.session_context(session_id))


class DirectiveRoutes:
    """Long-poll, Server-Sent Events and acks (DESIGN §6, §7).

    A run that is not known (yet) is not an error here: an agent may start polling before its
    first span has reached the watchdog, so the request waits like any other.
    """

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.hub = outbox.hub
        self.metrics = outbox.metrics

    async def poll(self, request: web.Request) -> web.Response:
        """``GET /v1/runs/{id}/directives?after=SEQ&wait=S``: directives with ``seq > after``,
        waiting up to ``wait`` seconds for the first one. ``last_seq`` is the ``after`` to send
        next time."""
        run_id = request.match_info["id"]
        after = _int_param(request.query.get("after"), "after", 0, 0, MAX_SEQ)
        wait = _float_param(request.query.get("wait"), "wait", 0.0, 0.0, MAX_POLL_WAIT)
        limit = _int_param(request.query.get("limit"), "limit", MAX_POLL_BATCH, 1,
                           MAX_POLL_BATCH)
        directives = await self.hub.wait_for_run(run_id, after, wait, limit)
        if directives:
            last_seq = directives[-1].seq
        else:  # never past a directive not yet seen; back to the store's if the client is ahead
            last_seq = min(after, await self.hub.latest_seq(run_id))
        for directive in directives:
            self.metrics.directive_delivered(directive.action, "longpoll", "sent")
            logs.directive_sent(directive, "longpoll")
        return json_response({"directives": [d.to_json() for d in directives],
                              "last_seq": last_seq})

    async def run_stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/runs/{id}/directives/stream``: SSE, ``id:`` = seq; from the run's first
        directive unless ``Last-Event-ID`` or ``?after=`` say where to resume."""
        after = self._resume_point(request)
        return await self._stream(request, request.match_info["id"], after or 0)

    async def all_stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/directives/stream``: SSE for every run, ``id:`` = global seq; live only
        unless ``Last-Event-ID`` or ``?after=`` (``after=0``: all that is stored) say more."""
        after = self._resume_point(request)
        if after is None:
            after = await self.hub.latest_global_seq()
        return await self._stream(request, None, after)

    async def ack(self, request: web.Request) -> web.Response:
        """``POST /v1/runs/{id}/ack {"seq": n}``: the agent has applied directives up to ``n``
        — its process put them into a model request it made, or stopped the run at them (what
        the client SDK sends, with every adapter). A directive's ``acked`` is ``seq <= n``."""
        seq = parse_ack(await _json_object(request))
        run_id = request.match_info["id"]
        acked = await self.outbox.ack(run_id, seq)
        logs.event("directive_acked", run=run_id, seq=seq, acked_seq=acked)
        return json_response({"run_id": run_id, "acked_seq": acked})

    @staticmethod
    def _resume_point(request: web.Request) -> int | None:
        last_event_id = request.headers.get("Last-Event-ID", "").strip()
        if last_event_id:  # a reconnecting EventSource: it wins over the URL's ?after=
            return _int_param(last_event_id, "Last-Event-ID", 0, 0, MAX_SEQ)
        raw = request.query.get("after")
        return None if raw in (None, "") else _int_param(raw, "after", 0, 0, MAX_SEQ)

    async def _stream(self, request: web.Request, run_id: str | None, after: int
                      ) -> web.StreamResponse:
        subscription = self.hub.subscribe(run_id, after)  # may refuse: 503 before any byte
        response = web.StreamResponse(headers=SSE_HEADERS)
        try:
            await response.prepare(request)
            await self._write(request, response, f"retry: {SSE_RETRY_MS}\n\n".encode())
            await self._pump(request, response, subscription)
        except SubscriberOverflow:  # counted by the hub; the client resumes from Last-Event-ID
            await self._hang_up(request, response)
        except (StreamEnded, ConnectionError, TimeoutError):
            pass  # shutdown, or the client went away or stopped reading
        finally:
            subscription.close()
        return response

    async def _pump(self, request: web.Request, response: web.StreamResponse,
                    subscription: Subscription) -> None:
        heartbeat = self.hub.heartbeat
        while True:
            directive = await subscription.get(timeout=heartbeat)
            if directive is None:
                await self._write(request, response, b": keep-alive\n\n")
                continue
            await self._write(request, response, _sse_event(subscription.number(directive),
                                                             directive))
            self.metrics.directive_delivered(directive.action, "sse", "sent")
            logs.directive_sent(directive, "sse")

    @staticmethod
    async def _hang_up(request: web.Request, response: web.StreamResponse) -> None:
        """End the stream cleanly if the client still reads, else drop the connection."""
        try:
            await asyncio.wait_for(response.write_eof(), SSE_WRITE_TIMEOUT)
        except (TimeoutError, ConnectionError):
            if request.transport is not None:
                request.transport.abort()

    @staticmethod
    async def _write(request: web.Request, response: web.StreamResponse, data: bytes) -> None:
        try:
            await asyncio.wait_for(response.write(data), SSE_WRITE_TIMEOUT)
        except TimeoutError:
            if request.transport is not None:  # a client that stopped reading: hang up
                request.transport.abort()
            raise


def parse_ack(body: dict[str, Any]) -> int:
    """The ``seq`` of a ``POST /v1/runs/{id}/ack`` body; raises :class:`BadRequest`."""
    seq = body.get("seq")
    if not isinstance(seq, int) or not _is_int_in(seq, 0, MAX_SEQ):
        raise BadRequest(f"seq={_shown(seq)} is not allowed: expected an integer from 0 to "
                         f"{MAX_SEQ} (the seq of the last directive the agent has seen)")
    return seq


def _sse_event(event_id: int, directive: Directive) -> bytes:
    data = json.dumps(directive.to_json(), separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return f"id: {event_id}\nevent: directive\ndata: {data}\n\n".encode()


def _float_param(raw: str | None, name: str, default: float, low: float, high: float) -> float:
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # NaN fails too
        raise BadRequest(f"{name}={raw!r} is not allowed: expected seconds from {low:g} to "
                         f"{high:g}")
    return value


def _int_param(raw: str | None, name: str, default: int, low: int, high: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise BadRequest(f"{name}={raw!r} is not allowed: expected an integer from {low} to {high}")
    return value


async def _json_object(request: web.Request) -> dict[str, Any]:
    return json_object(await request_body(request))


def json_object(raw: bytes) -> dict[str, Any]:
    """A control request body: a JSON object (empty body: ``{}``), or :class:`BadRequest`."""
    if not raw.strip():
        return {}
    try:
        body = load_json(raw)
    except ValueError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _wants_json(accept: str) -> bool:
    """Content negotiation between Markdown (the default) and JSON, honouring q-values."""
    best_json = best_markdown = -1.0
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        media = media.lower()
        if media == JSON:
            best_json = max(best_json, quality)
        elif media in (MARKDOWN, "text/*", "text/plain"):
            best_markdown = max(best_markdown, quality)
    return best_json > 0 and best_json > best_markdown


class RuleRoutes:
    """``GET /v1/rules`` and ``POST /-/reload`` (Prometheus' name for the same thing)."""

    def __init__(self, engine: RuleEngine,
                 reload: Callable[[], Awaitable[tuple[bool, str]]] | None) -> None:
        self.engine = engine
        self._reload = reload

    async def list_rules(self, request: web.Request) -> web.Response:
        ruleset = self.engine.ruleset
        return json_response({
            "rules": ruleset.describe(),
            "budgets": [{"agents": list(b.agents),
                         **{key: plain_number(value) for key, value in b.limits.items()}}
                        for b in ruleset.budgets],
            "sources": [source.path for source in ruleset.sources],
        })

    async def reload(self, request: web.Request) -> web.Response:
        if self._reload is None:
            raise NotFound("rule reload is not available here")
        ok, message = await self._reload()
        if not ok:
            return error_response(422, "rules_invalid", message)
        return json_response({"status": "reloaded", "message": message})


def create_app(service: Watchdog, config: Config, *,
               directives: Outbox | None = None, rules: RuleEngine | None = None,
               reload: Callable[[], Awaitable[tuple[bool, str]]] | None = None
               ) -> web.Application:
    """The control API; ``directives`` adds the directive routes (and fills the run detail's
    ``directives``), ``rules`` the rule listing and ``reload`` the reload endpoint."""
    middlewares: list[Any] = [dispatch_middleware(service.priority), errors_middleware]
    if config.api_token:
        middlewares.append(auth_middleware(config.api_token))
    middlewares.append(ids_middleware)
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    runs = RunRoutes(service, config.max_request_bytes, directives)
    app.router.add_get("/v1/runs", runs.list_runs)
    app.router.add_get(RUNS, runs.get_run)
    app.router.add_get(RUNS + "/report", runs.report)
    app.router.add_post(RUNS + "/heartbeat", runs.heartbeat)
    app.router.add_post(RUNS + "/sync", runs.sync)
    sessions = SessionRoutes(service)
    app.router.add_post(SESSIONS + "/checkpoints", sessions.checkpoint)
    app.router.add_get(SESSIONS + "/context", sessions.context)
    if directives is not None:
        routes = DirectiveRoutes(directives)
        app.router.add_get(RUNS + "/directives", routes.poll)
        app.router.add_get(RUNS + "/directives/stream", routes.run_stream)
        app.router.add_post(RUNS + "/ack", routes.ack)
        app.router.add_get("/v1/directives/stream", routes.all_stream)
    if rules is not None:
        rule_routes = RuleRoutes(rules, reload)
        app.router.add_get("/v1/rules", rule_routes.list_rules)
        app.router.add_post("/-/reload", rule_routes.reload)
    return app
