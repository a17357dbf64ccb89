"""What every control API route shares: JSON answers and the error shape, request bodies (at
most so many bytes, as sent and once inflated), query parameters, the client's values shown in
errors, and the negotiation between a Markdown and a JSON answer.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from watchdog.core.bounds import load_json
from watchdog.core.shown import shown
from watchdog.core.spans import codings
from watchdog.shell.errors import (
    BadRequest,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
)

MAX_BODY_BYTES = 1024 * 1024  # control requests are tiny; anything bigger is a mistake
# A request body must arrive within this (as the OTLP/HTTP receiver's): a client that declares
# a body and stalls is answered 408 instead of holding its connection and handler for ever.
BODY_READ_TIMEOUT = 10.0
MARKDOWN = "text/markdown"
JSON = "application/json"
MAX_SEQ = 2**63 - 1
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

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


async def request_body(request: web.Request, limit: int = MAX_BODY_BYTES,
                       setting: str | None = None) -> bytes:
    """A control request's body, inflated from its ``Content-Encoding`` (gzip or deflate, as
    the OTLP receivers accept), at most ``limit`` bytes as sent and once inflated (``setting``:
    the configuration that sets the limit, named in the refusal). A declared
    ``Content-Length`` over the limit is refused before any byte is read; the body must arrive
    within ``BODY_READ_TIMEOUT`` (:class:`RequestTimeout`, 408)."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in codings.SUPPORTED:
        raise UnsupportedMediaType(f"unsupported Content-Encoding {shown(encoding)}: send the body "
                                   f"as it is, or as gzip or deflate")
    limit_text = f"{setting}={limit}" if setting else f"{limit} bytes"
    if (request.content_length or 0) > limit:
        raise PayloadTooLarge(f"request body of {request.content_length} bytes (Content-Length) "
                              f"is larger than {limit_text}")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_READ_TIMEOUT):
            while chunk := await request.content.read(64 * 1024):
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(f"request body larger than {limit_text}")
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(f"the request body did not arrive within {BODY_READ_TIMEOUT:g} s"
                             ) from None
    try:
        return codings.inflate(b"".join(chunks), encoding, limit)
    except codings.BodyTooLarge:
        raise PayloadTooLarge(f"request body larger than {limit_text} (after decompression)"
                              ) from None
    except codings.BadCoding as exc:
        raise BadRequest(f"the request body is not valid {encoding} data "
                         f"(Content-Encoding: {encoding}): {exc}") from None


def _is_int_in(value: object, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def _float_param(raw: str | None, name: str, default: float, low: float, high: float) -> float:
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # NaN fails too
        raise BadRequest(f"{name}={shown(raw)} is not allowed: expected seconds from {low:g} to "
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
        raise BadRequest(f"{name}={shown(raw)} is not allowed: expected an integer from {low} "
                         f"to {high}")
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


MAX_IGNORED_NAMES = 16  # unknown fields an answer names (each at most MAX_IGNORED_CHARS)
MAX_IGNORED_CHARS = 64


def ignored_fields(body: dict[str, Any], known: frozenset[str]) -> list[str]:
    """The fields of a heartbeat's or an ack's body the sidecar does not read, named in its
    answer (``ignored``): taken, not refused, so a client newer than the sidecar still works, and
    told, so a misspelt field is not lost in silence. At most :data:`MAX_IGNORED_NAMES` names,
    in order, each cut to :data:`MAX_IGNORED_CHARS` characters."""
    if known.issuperset(body):
        return []
    names = sorted(name for name in body if name not in known)
    return [name[:MAX_IGNORED_CHARS] for name in names[:MAX_IGNORED_NAMES]]


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
