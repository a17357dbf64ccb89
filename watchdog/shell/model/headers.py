"""The model endpoint's HTTP edges: which request targets it serves, which headers pass each
way (RFC 9110 §7.6.1: hop-by-hop ones never; the watchdog's own ``x-watchdog-*`` read, not
sent), the budgets those headers announce, and the environment's proxy for an upstream."""

from __future__ import annotations

import base64
import hmac
import math
import os
import re
import urllib.request
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

from multidict import CIMultiDict, CIMultiDictProxy

from watchdog.core.bounds import id_problem

# RFC 9110 §7.6.1, and what the proxy sets itself
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                        "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"})
REQUEST_SET = frozenset({"host", "content-length", "expect"})
WATCHDOG_PREFIX = "x-watchdog-"
TOKEN_HEADER = "x-watchdog-token"  # the api_token, when the endpoint binds beyond loopback
# ... or the first segments of the path, for an agent that can set only its base URL:
# OPENAI_BASE_URL=http://watchdog:9478/token/<api_token>/v1
TOKEN_PATH = "/token/"
AGENT_HEADER = "x-watchdog-agent"  # the agent's name, when nothing of the run names it
# ... or the path's segments after the token's, for an agent that can set only its base URL:
# OPENAI_BASE_URL=http://watchdog:9478/token/<api_token>/agent/<name>/v1 (an empty name: none)
AGENT_PATH = "/agent/"
MAX_AGENT_CHARS = 200  # as model_agent_name
# x-watchdog-budget-<name>: the budget key, the largest value allowed, whether an integer
BUDGET_HEADERS: dict[str, tuple[str, float, bool]] = {
    "x-watchdog-budget-tool-calls": ("max_tool_calls", 1_000_000, True),
    "x-watchdog-budget-iterations": ("max_iterations", 1_000_000, True),
    "x-watchdog-budget-seconds": ("max_seconds", 30 * 86_400, False),
    "x-watchdog-budget-cost-usd": ("max_cost_usd", 1_000_000, False),
}
# Request headers in which a client names its own session, on each of its requests (the first
# one a request carries counts): its endpoint runs are that session's runs, the session its own
# spans name (``session.id``), so its conversations share session rules and memory, and a run
# watched by its spans and steered here meet in one session. Data, as the conventions are: a
# client that names its session in a header of its own is a line here (and in the compiled
# relay's ``SESSION_HEADERS``, native/relay/src/admit.rs, which sends such a request to Python)
SESSION_HEADERS = (
    "x-claude-code-session-id",  # Claude Code (its spans' session.id; a sub-agent's requests too)
    "x-session-id",  # generic
)
# Request headers in which a client names the sub-agent a request is of, within its session
# (a request that names none is of the session's caller: its main conversation). A sub-agent's
# run is a child run of its caller's (``parent_run``), as a nested agent's is in a trace: its
# own budget, its calls not its caller's. Data, as SESSION_HEADERS (and in the compiled relay's
# ``SUBAGENT_HEADERS``, native/relay/src/admit.rs, which sends such a request to Python)
SUBAGENT_HEADERS = (
    "x-claude-code-agent-id",  # Claude Code (its spans' agent_id; its main conversation: none)
)
_COUNT = re.compile(r"[0-9]{1,32}", re.ASCII)  # a budget header's count
_DECIMAL = re.compile(r"(?=[0-9.]{1,32}$)(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
_BAD_PATH = re.compile(r"(?:%2e|%2f|%5c|\\|/\.\.?(?:/|$)|//)", re.IGNORECASE)
_SAFE_PATH = re.compile(r"^/v1(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*/?$")
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9._~!$&'()*+,;=:@%-]*$")
ANTHROPIC_HINTS = ("anthropic-version", "x-api-key")


class Refused(Exception):
    """A request the endpoint answers itself: status, code and a message for the agent."""

    def __init__(self, status: int, code: str, message: str,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = dict(headers or {})


def door(method: str, target: str, headers: CIMultiDict[str] | CIMultiDictProxy[str],
         token: str | None) -> tuple[str, str | None]:
    """The request's target once it may come in, and the agent its path names (None: none).
    The target is under /v1/ (:func:`check_target`) and, when the endpoint has a token (it
    binds beyond loopback), comes with it: the ``x-watchdog-token`` header, or the path's
    first segments, ``/token/<token>/``. Then ``/agent/<name>/`` may name the agent as the
    ``x-watchdog-agent`` header does. Both are taken off (for an agent that can set only its
    base URL); anything else is refused, the token never echoed."""
    given: str | None = headers.get(TOKEN_HEADER)
    if target.startswith(TOKEN_PATH):
        segment, slash, rest = target[len(TOKEN_PATH):].partition("/")
        given, target = unquote(segment), "/" + rest if slash else "/"
    named: str | None = None
    if target.startswith(AGENT_PATH):
        named, slash, rest = target[len(AGENT_PATH):].partition("/")
        target = "/" + rest if slash else "/"
    try:
        check_target(method, target)
        if token is not None and not hmac.compare_digest(
                (given or "").encode("utf-8", "replace"), token.encode("utf-8")):
            raise Refused(401, "unauthorized", f"missing or wrong {TOKEN_HEADER} header (or "
                          f"{TOKEN_PATH}<token>/ path): the model endpoint binds beyond "
                          "loopback")
    except Refused as refused:
        if TOKEN_PATH in target.split("?", 1)[0]:  # (a base URL put together out of order)
            refused.message += (f" ({TOKEN_PATH}<token>/ goes first in the path, before "
                                f"{AGENT_PATH}<name>/ and /v1/)")
        raise
    if token is not None and token in unquote(target):  # (sent on, in the upstream's logs)
        raise Refused(400, "bad_request", "the token is in the request's path or query past "
                      "where the endpoint takes it off, so it would go on to the upstream: "
                      f"send it once, first in the path ({TOKEN_PATH}<token>/, before "
                      f"{AGENT_PATH}<name>/ and /v1/) or as the {TOKEN_HEADER} header")
    if token is not None:
        names_it(token, named, headers)
    return target, None if named is None else path_agent(named)


def names_it(token: str, segment: str | None,
             headers: CIMultiDict[str] | CIMultiDictProxy[str]) -> None:
    """Refused when ``token`` is in what names the request's agent, run, session or sub-agent
    (the path's ``/agent/<name>/`` ``segment``, the ``x-watchdog-*`` headers but the token's,
    :data:`SESSION_HEADERS`, :data:`SUBAGENT_HEADERS`): a name goes into the runs the API
    lists, the metrics' labels and the logs (a confused environment's token pasted there).
    Never echoed."""
    where = f"the path's agent name ({AGENT_PATH}<name>/)" \
        if segment is not None and token in unquote(segment) else None
    for name, value in headers.items() if where is None else ():
        name = name.lower()
        if token in value and name != TOKEN_HEADER and (
                name.startswith(WATCHDOG_PREFIX) or name in SESSION_HEADERS
                or name in SUBAGENT_HEADERS):
            where = f"the {name} header"
            break
    if where is not None:
        raise Refused(400, "bad_request", f"the token is in {where}: a name the endpoint "
                      "keeps (the runs the API lists, the metrics' labels, the logs); name "
                      f"it otherwise, and send the token only first in the path "
                      f"({TOKEN_PATH}<token>/) or as the {TOKEN_HEADER} header")


def path_agent(segment: str) -> str | None:
    """The agent an ``/agent/<name>/`` segment names (percent-encoded UTF-8), checked as the
    header is; an empty one names none (the chart's pod label, when the pod has none)."""
    if not segment:
        return None
    try:
        name = unquote(segment, errors="strict") if _SAFE_SEGMENT.match(segment) else None
    except UnicodeDecodeError:
        name = None
    if name is None or name in (".", "..") or "/" in name or "\\" in name:
        raise Refused(400, "bad_request", f"the path's agent name {segment[:64]!r} is not "
                      f"allowed: give a printable name of 1-{MAX_AGENT_CHARS} characters, "
                      f"percent-encoded, with no / or \\ (or the {AGENT_HEADER} header)")
    check_agent(name, "the path's agent name")
    return name


def agent_allowed(name: str) -> bool:
    """Whether an agent's name as a request gives it is one the endpoint takes: printable, 1
    to MAX_AGENT_CHARS characters."""
    return 0 < len(name) <= MAX_AGENT_CHARS and name.isprintable()


def check_agent(name: str, what: str = AGENT_HEADER) -> None:
    """An agent's name as a request gives it (:func:`agent_allowed`), else Refused."""
    if not agent_allowed(name):
        raise Refused(400, "bad_request", f"{what} {name[:64]!r} is not allowed: give a "
                      f"printable name of 1-{MAX_AGENT_CHARS} characters")


def check_target(method: str, target: str) -> None:
    """Only an origin-form path under /v1/, with nothing that could climb out of it."""
    if method == "CONNECT":
        raise Refused(400, "bad_request", "CONNECT is not served: this is a model API "
                      "endpoint, not an open proxy")
    raw = target.split("?", 1)[0]
    if not raw.startswith("/") or _BAD_PATH.search(raw) or not _SAFE_PATH.match(raw):
        raise Refused(404, "not_found", "not found: the model endpoint serves the paths "
                      "under /v1/ (chat/completions, responses, messages and the rest of "
                      "the API passed through)")


def request_headers(headers: CIMultiDict[str] | CIMultiDictProxy[str], sent: bool = False
                    ) -> tuple[CIMultiDict[str], dict[str, str]]:
    """The headers to send upstream, and the watchdog's own (read, not sent); ``sent``: the
    request went upstream already (the compiled relay sent it on), so of the headers to send
    only its ``Content-Encoding`` (how its body is read)."""
    named = {part.strip().lower() for value in headers.getall("Connection", ())
             for part in value.split(",")}
    out: list[tuple[str, str]] = []
    watchdog: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower.startswith(WATCHDOG_PREFIX):
            # (bytes that are no UTF-8, which aiohttp keeps as lone surrogates: replaced, as
            # the compiled relay reads them, so no such text reaches a run, a label or a file)
            text = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            if watchdog.setdefault(lower, text) != text and lower != TOKEN_HEADER:
                # two budgets (a client's default headers and its environment's): the last
                # one was taken, 50 tool calls over 1 — which was meant is the agent's to say
                raise Refused(400, "bad_request", f"{lower} is given twice, "
                              f"{watchdog[lower][:64]!r} and {text[:64]!r}: send it once")
        elif (not sent or lower == "content-encoding") and lower not in HOP_BY_HOP \
                and lower not in REQUEST_SET and lower not in named:
            out.append((name, value))
    return CIMultiDict(out), watchdog


def response_headers(headers: CIMultiDictProxy[str], plain: bool) -> CIMultiDict[str]:
    """The upstream's response headers to pass on: not hop-by-hop, and not the length (aiohttp
    sets it, or the body is chunked); with ``plain``, not the ``Content-Encoding`` either (the
    body goes on inflated, as the relay read and changed it)."""
    named = {part.strip().lower() for value in headers.getall("Connection", ())
             for part in value.split(",")}
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        lower = name.lower()
        if lower in HOP_BY_HOP or lower in named or lower in ("date", "server") or (
                lower == "content-length"):
            continue
        if plain and lower == "content-encoding":
            continue
        out.add(name, value)
    return out


def proxy_for(base: str, env: Mapping[str, str] | None = None
              ) -> tuple[str, str | None] | None:
    """The HTTP proxy the environment names for ``base`` (``HTTPS_PROXY`` for https, else
    ``HTTP_PROXY``; none for a host ``NO_PROXY`` lists), and its ``Proxy-Authorization``
    (from its user:password, taken out of the URL)."""
    proxies = {key.lower().removesuffix("_proxy"): value for key, value in (
        env if env is not None else os.environ).items()
        if key.lower().endswith("_proxy") and value}
    parts = urlsplit(base)
    if parts.hostname is None or urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]
            parts.hostname, proxies):
        return None
    proxy = proxies.get(parts.scheme)
    if not proxy:
        return None
    proxied = urlsplit(proxy if "://" in proxy else "http://" + proxy)
    auth = None
    if proxied.username:
        pair = f"{unquote(proxied.username)}:{unquote(proxied.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    netloc = proxied.hostname or ""
    if proxied.port:
        netloc += f":{proxied.port}"
    return urlunsplit((proxied.scheme, netloc, proxied.path, "", "")), auth


def budget_from(watchdog: Mapping[str, str]) -> dict[str, float] | None:
    """The budget the request's ``x-watchdog-budget-*`` headers announce (None: none)."""
    budget: dict[str, float] = {}
    for header, (key, largest, integer) in BUDGET_HEADERS.items():
        text = watchdog.get(header)
        if text is None:
            continue
        # (ASCII digits alone, not what float() takes: a sign, an exponent, spaces, "inf",
        # "1_000" or any script's digits)
        ok = (_COUNT if integer else _DECIMAL).fullmatch(text) is not None
        value = float(text) if ok else math.nan
        if not (ok and value <= largest):
            kind = "an integer in ASCII digits" if integer \
                else "a number in ASCII digits, with a decimal point or not,"
            raise Refused(400, "bad_request", f"{header}={text[:64]!r} is not allowed: "
                          f"expected {kind} from 0 to {largest:.0f}")  # (not 1e+06)
        budget[key] = value
    return budget or None


def client_session(headers: CIMultiDict[str] | CIMultiDictProxy[str]) -> str | None:
    """The session the client names in its request's headers (:data:`SESSION_HEADERS`, the
    first one it carries), if it is a valid session id (as a span's ``session.id`` must be:
    :func:`~watchdog.core.bounds.id_problem`); else None (the endpoint keys the session by the
    conversation, as for a request that names none)."""
    return _first_id(headers, SESSION_HEADERS)


def client_subagent(headers: CIMultiDict[str] | CIMultiDictProxy[str]) -> str | None:
    """The sub-agent the client names in its request's headers (:data:`SUBAGENT_HEADERS`, the
    first one it carries), if it is a valid id; else None (the session's caller)."""
    return _first_id(headers, SUBAGENT_HEADERS)


def _first_id(headers: CIMultiDict[str] | CIMultiDictProxy[str], names: tuple[str, ...]
              ) -> str | None:
    for name in names:
        value = headers.get(name)
        if value is not None:
            value = value.strip(" \t").encode("utf-8", "surrogateescape").decode(
                "utf-8", "replace")
            return value if id_problem(value) is None else None
    return None
