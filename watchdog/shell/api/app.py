"""The control API (DESIGN §7): runs, their reports and heartbeats, as JSON over HTTP.

Handlers are thin: they parse and validate the request, call the watchdog through the narrow
:class:`Watchdog` protocol (its commands, and :class:`RunReads` for the runs' views and logs;
:class:`~watchdog.shell.service.WatchdogService` implements it) and shape the answer. Two
middlewares wrap every route. The outer one is the only place a failure becomes a response: a
:class:`WatchdogError` keeps its code and status, an aiohttp HTTP error (unknown route, wrong
method, body too large) is reshaped to the same ``{"error": {"code", "message"}}`` form, and
anything unexpected is logged and answered with a generic 500 (never a traceback).
The inner one checks the Bearer token when ``api_token`` is set.

The routes come by resource, one module each in this package (``runs``, ``sessions``,
``directives``, ``rules``); what they share is :mod:`watchdog.shell.api.http`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, cast

from aiohttp import http_exceptions, web
from aiohttp.web_protocol import RequestHandler

from watchdog.core.bounds import id_problem
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.shown import shown
from watchdog.shell.api.directives import DirectiveRoutes
from watchdog.shell.api.http import MAX_BODY_BYTES, Handler, error_response
from watchdog.shell.api.interface import Watchdog
from watchdog.shell.api.rules import RuleRoutes
from watchdog.shell.api.runs import RunRoutes
from watchdog.shell.api.sessions import SessionRoutes
from watchdog.shell.auth import check_bearer
from watchdog.shell.config import Config
from watchdog.shell.connections import Wrapped, close_if_silent, parser_refusal
from watchdog.shell.directives.outbox import Outbox
from watchdog.shell.errors import BadRequest, RequestTimeout, Unauthorized, WatchdogError
from watchdog.shell.priority import Priority

log = logging.getLogger("watchdog.shell.api")

# A run or session id in a route: any characters but "/" (aiohttp's default also refuses
# "{" and "}", which ids may hold); a "/" in an id is sent as %2F.
RUNS = "/v1/runs/{id:[^/]+}"
SESSIONS = "/v1/sessions/{id:[^/]+}"

# aiohttp's own HTTP errors (routing, body size) by status -> our error code.
_HTTP_ERROR_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found",
                     405: "method_not_allowed", 413: "payload_too_large",
                     415: "unsupported_media_type"}
# Paths another listener of the sidecar serves, asked of the API's port: where they are
ELSEWHERE = {
    **dict.fromkeys(("/metrics", "/healthz", "/readyz"),
                    "metrics and health are served on metrics_address (default 0.0.0.0:9464)"),
    **dict.fromkeys(("/v1/traces", "/v1/logs", "/v1/metrics"),
                    "OTLP/HTTP is received on otlp_http_address (default 127.0.0.1:4318)")}


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
        response = error_response(exc.http_status, exc.code, exc.message, headers)
        if isinstance(exc, RequestTimeout):  # its body stalled: close, rather than aiohttp
            response.force_close()           # waiting up to 10 s more for the rest of it
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
        code = _HTTP_ERROR_CODES.get(exc.status, f"http_{exc.status}")
        message = exc.reason
        if exc.status == 404:
            message = f"no such endpoint: {request.method} {request.path}"
            if request.path in ELSEWHERE:
                message += f" on the control API: {ELSEWHERE[request.path]}"
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
            raise BadRequest(f"{what} {shown(raw)} is not allowed: it {problem}")
    return await handler(request)


QUERY_PARAMS = web.AppKey("query_params", dict)  # route -> the query parameters it takes


@web.middleware
async def query_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every query parameter a route does not take, or one given twice, is refused (400) rather
    than ignored: a filter or cursor that does nothing would answer something else than asked."""
    allowed = request.app[QUERY_PARAMS].get(request.match_info.route)
    if allowed is not None:
        takes = ("it takes " + ", ".join(allowed)) if allowed else "it takes none"
        for name in request.query:
            if name not in allowed:
                resource = request.match_info.route.resource
                where = resource.canonical if resource is not None else request.path
                raise BadRequest(f"query parameter {shown(name)} is not allowed on "
                                 f"{request.method} {where}: {takes}")
            if len(request.query.getall(name)) > 1:
                raise BadRequest(f"query parameter {shown(name)} is given more than once: "
                                 f"give it once")
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
        handler = super().__call__()
        handler.__class__ = _JsonErrors
        return _Arrivals(handler, self.priority)


class _JsonErrors(RequestHandler):
    """aiohttp's connection handler, its own refusals (a request it cannot parse: a line or
    header over its limits, a malformed request line) answered in the API's error shape, never
    echoing the client's raw bytes; a connection that sends no request is closed
    (:func:`~watchdog.shell.connections.close_if_silent`)."""

    __slots__ = ()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        close_if_silent(self)

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status == 500:
            return super().handle_error(request, status, exc, message)
        if request.writer.output_size > 0:  # (as aiohttp's: nothing more can be said)
            raise ConnectionError("a response is already under way")
        if isinstance(exc, http_exceptions.LineTooLong):
            text = (f"the request line or a header is longer than this server reads "
                    f"({exc.args[1]} bytes): shorten the URL or the header")
        elif isinstance(exc, http_exceptions.BadHttpMessage):
            text = f"malformed HTTP request: {parser_refusal(exc)}"  # (never its bytes)
        else:
            try:
                text = HTTPStatus(status).phrase
            except ValueError:
                text = f"HTTP status {status}"
        # one warning line, as watchdog.shell.logs makes of the other listeners' refusals
        self.logger.warning("bad HTTP request from %s: %s", request.remote, text)
        response = error_response(status, _HTTP_ERROR_CODES.get(status, f"http_{status}"),
                                  text)
        response.force_close()
        return response


class _Arrivals(Wrapped):
    """One control API connection: aiohttp's request handler, told nothing new; the priority
    gate told when a request's first bytes come in — once per request, so a client trickling
    bytes holds bulk work back for one pause at most (``priority.MAX_PAUSE``), not forever."""

    __slots__ = ("priority", "waiting")

    def __init__(self, handler: asyncio.Protocol, priority: Priority) -> None:
        super().__init__(handler)
        self.priority = priority
        self.waiting = False  # bytes in, their request not yet dispatched

    def data_received(self, data: bytes) -> None:
        if not self.waiting:
            self.waiting = True
            self.priority.arrived()
        self.handler.data_received(data)


def auth_middleware(token: str) -> Callable[[web.Request, Handler],
                                            Awaitable[web.StreamResponse]]:
    @web.middleware
    async def check_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        check_bearer(request.headers.get("Authorization"), token, "the header Authorization:")
        return await handler(request)

    return check_token


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
    middlewares.append(query_middleware)
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    params: dict[web.AbstractRoute, tuple[str, ...]] = {}
    app[QUERY_PARAMS] = params

    def add(method: str, path: str, handler: Handler, *allowed: str) -> None:
        route = app.router.add_get(path, handler) if method == "GET" else \
            app.router.add_route(method, path, handler)  # (a GET answers HEAD too, unchecked)
        params[route] = allowed

    runs = RunRoutes(service, config.max_request_bytes, directives)
    add("GET", "/v1/runs", runs.list_runs, "state", "agent", "session", "limit", "after")
    add("GET", RUNS, runs.get_run)
    add("GET", RUNS + "/report", runs.report)
    add("POST", RUNS + "/heartbeat", runs.heartbeat)
    add("POST", RUNS + "/sync", runs.sync, "after", "stop")
    sessions = SessionRoutes(service)
    add("POST", SESSIONS + "/checkpoints", sessions.checkpoint)
    add("GET", SESSIONS + "/context", sessions.context)
    if directives is not None:
        routes = DirectiveRoutes(directives)
        add("GET", RUNS + "/directives", routes.poll, "after", "wait", "limit")
        add("GET", RUNS + "/directives/stream", routes.run_stream, "after")
        add("POST", RUNS + "/ack", routes.ack)
        add("GET", "/v1/directives/stream", routes.all_stream, "after")
    if rules is not None:
        rule_routes = RuleRoutes(rules, reload)
        add("GET", "/v1/rules", rule_routes.list_rules)
        add("POST", "/-/reload", rule_routes.reload)
    return app
