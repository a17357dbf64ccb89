"""The control API (DESIGN §7): runs, their reports and heartbeats, as JSON over HTTP.

Handlers are thin: they parse and validate the request, call :class:`WatchdogService` and shape
the answer. Two middlewares wrap every route. The outer one is the only place a failure becomes
a response: a :class:`WatchdogError` keeps its code and status, an aiohttp HTTP error (unknown
route, wrong method, body too large) is reshaped to the same ``{"error": {"code", "message"}}``
form, and anything unexpected is logged and answered with a generic 500 (never a traceback).
The inner one checks the Bearer token when ``api_token`` is set.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from watchdog.auth import check_bearer
from watchdog.config import Config
from watchdog.errors import BadRequest, Unauthorized, WatchdogError
from watchdog.runs.report import build_report, render_markdown
from watchdog.runs.view import run_summary
from watchdog.service import MAX_LIST_LIMIT, WatchdogService

log = logging.getLogger("watchdog.api")

MAX_BODY_BYTES = 1024 * 1024  # control requests are tiny; anything bigger is a mistake
DEFAULT_LIST_LIMIT = 100
RUN_STATES = ("active", "ended")
MARKDOWN = "text/markdown"
JSON = "application/json"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# aiohttp's own HTTP errors (routing, body size) by status -> our error code.
_HTTP_ERROR_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found",
                     405: "method_not_allowed", 413: "payload_too_large",
                     415: "unsupported_media_type"}


def error_response(status: int, code: str, message: str,
                   headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status,
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


def auth_middleware(token: str) -> Callable[[web.Request, Handler],
                                            Awaitable[web.StreamResponse]]:
    @web.middleware
    async def check_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        check_bearer(request.headers.get("Authorization"), token, "the header Authorization:")
        return await handler(request)

    return check_token


class RunRoutes:
    """``/v1/runs`` and everything under one run."""

    def __init__(self, service: WatchdogService) -> None:
        self.service = service

    async def list_runs(self, request: web.Request) -> web.Response:
        query = request.query
        state = query.get("state") or None
        if state is not None and state not in RUN_STATES:
            raise BadRequest(f"state={state!r} is not allowed: expected one of "
                             + ", ".join(RUN_STATES))
        agent = query.get("agent") or None
        limit = _int_param(query.get("limit"), "limit", DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT)
        runs = self.service.list_runs(state=state, agent=agent, limit=limit)
        return web.json_response({"runs": runs})

    async def get_run(self, request: web.Request) -> web.Response:
        return web.json_response(self.service.run_detail(request.match_info["id"]))

    async def report(self, request: web.Request) -> web.Response:
        key = request.match_info["id"]
        service = self.service
        run = service.find_run(key)
        report = build_report(run, service.activity(key), service.clock.now())
        if _wants_json(request.headers.get("Accept", "")):
            return web.json_response(report)
        return web.Response(text=render_markdown(report), content_type=MARKDOWN,
                            charset="utf-8")

    async def heartbeat(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        messages = body.get("messages", 0)
        if isinstance(messages, bool) or not isinstance(messages, int) or messages < 0:
            raise BadRequest(f"messages={messages!r} is not allowed: expected an integer >= 0 "
                             f"(the conversation length)")
        run = self.service.heartbeat(request.match_info["id"], messages)
        return web.json_response({**run_summary(run, self.service.clock.now()),
                                  "messages": run.messages})


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
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
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


def create_app(service: WatchdogService, config: Config) -> web.Application:
    middlewares: list[Any] = [errors_middleware]
    if config.api_token:
        middlewares.append(auth_middleware(config.api_token))
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    runs = RunRoutes(service)
    app.router.add_get("/v1/runs", runs.list_runs)
    app.router.add_get("/v1/runs/{id}", runs.get_run)
    app.router.add_get("/v1/runs/{id}/report", runs.report)
    app.router.add_post("/v1/runs/{id}/heartbeat", runs.heartbeat)
    return app
