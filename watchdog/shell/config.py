"""Configuration: frozen, validated at load, from a YAML file, ``WATCHDOG_<KEY>`` env vars and
``--<key>`` flags (later sources win).

Every field has a named default; :func:`load` refuses unknown keys and bad values with a message
that names the key, the value and what is allowed, so a typo in a Helm value fails the pod at
start instead of silently running on a default.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import ipaddress
import os
import re
import reprlib
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from watchdog.core.durations import DURATION_HELP, DurationError, parse_seconds
from watchdog.core.runs.view import trace_url_problem
from watchdog.shell.errors import ConfigError

DEFAULT_OTLP_GRPC_ADDRESS = "127.0.0.1:4317"
OFF = "off"  # otlp_grpc_address: no gRPC receiver (grpcio is then never loaded)
DEFAULT_OTLP_HTTP_ADDRESS = "127.0.0.1:4318"
DEFAULT_API_ADDRESS = "127.0.0.1:9477"
DEFAULT_METRICS_ADDRESS = "0.0.0.0:9464"
DEFAULT_STATE_DIR = "state"  # relative to the working directory
DEFAULT_RUN_END_TIMEOUT = 900.0  # 15 min without a span: the run is abandoned
# A run of loose model calls (an agent that emits no span for the invocation) that has not
# answered ends after this long without a call (DESIGN §3; see RunTracker).
DEFAULT_LOOSE_RUN_GAP = 120.0
DEFAULT_MAX_RUNS = 10_000
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024  # OTLP's usual 16 MiB, after decompression
# A token that others on the network could guess: 16 random hex characters are 64 bits.
MIN_API_TOKEN_CHARS = 16
DEFAULT_MAX_PENDING_REQUESTS = 64  # export requests being decoded/applied at once
DEFAULT_STATE_FLUSH_INTERVAL = 1.0  # seconds between snapshots of changed runs
DEFAULT_ACTIVITY_LOG_SIZE = 200
# seconds a model-call span from a service that sends GenAI log events waits for its content
# (the span pipeline's own default, watchdog.core.spans.logs.WAIT_SECONDS, which loads with the
# first export: tests/test_footprint.py checks they agree)
DEFAULT_LOG_CONTENT_WAIT = 2.0
MAX_LOG_CONTENT_WAIT = 600.0  # its run's end waits with it
# The longest of every other time key: far beyond any real wait, and within what the timers it
# goes to take (a thread's wait and the compiled relay's timeouts refuse some 3e11 years, and
# a float refuses a duration of 400 digits).
MAX_SECONDS = 365 * 86400.0  # 1y
# A person reads an answer before asking again: a reply within minutes of one that ended a run
# is taken for the agent's own
MAX_MODEL_REPLY_WINDOW = 600.0
SECONDS_MAXIMUMS = {"log_content_wait": MAX_LOG_CONTENT_WAIT,
                    "model_shutdown_grace": 3600.0,
                    "model_reply_window": MAX_MODEL_REPLY_WINDOW,
                    "model_body_rate_window": 600.0}
DEFAULT_FLEET_WINDOW = 300.0  # seconds a tool's failures count towards fleet.failing_tools
# ended runs kept in the store, each with its activity log: some 4.6 KB a short run, 36 KB one
# of 100 calls (docs/limits.md: Disk)
DEFAULT_STATE_MAX_ENDED_RUNS = 100_000
DEFAULT_EVAL_INTERVAL = 1.0  # seconds between evaluations of time-based rules (idle, elapsed)
DEFAULT_RULES_WATCH_INTERVAL = 2.0  # seconds between checks of the rule files for changes
DEFAULT_MAX_FORWARD_QUEUE_REQUESTS = 1000  # export requests; the Collector's queue_size default
# The model endpoint (DESIGN §12): off unless model_address is set.
DEFAULT_MODEL_UPSTREAM = "https://api.openai.com/v1"
DEFAULT_MODEL_UPSTREAM_ANTHROPIC = "https://api.anthropic.com"
MODEL_ABORTS = ("answer", "error")  # an aborted run's next request: a final answer, or a 400
MODEL_RELAYS = ("native", "python")  # the compiled relay, or the aiohttp one
DEFAULT_MODEL_MAX_BODY_BYTES = 16 * 1024 * 1024  # a request body; long histories with images
DEFAULT_MODEL_MAX_CONCURRENT = 256  # requests in flight through the endpoint at once
# request bodies' bytes held at once by the requests in flight: at peak a request costs some 4 to
# 5 times its body (parsed, steered, relayed), so 64 MiB of bodies fit a 512 MiB container
DEFAULT_MODEL_MAX_INFLIGHT_BYTES = 64 * 1024 * 1024
DEFAULT_MODEL_UPSTREAM_TIMEOUT = 600.0  # seconds for one upstream call (a long reasoning call)
# seconds a request's body may take to arrive once its head has (a slow client's 16 MiB on a
# slow link; a stalled one holds a model_max_concurrent slot no longer)
DEFAULT_MODEL_BODY_TIMEOUT = 60.0
# bytes a second a request's body must keep arriving at, judged over each window of
# DEFAULT_MODEL_BODY_RATE_WINDOW seconds from its head (nginx's client_body_timeout, Apache's
# MinRate): a body that stalls or crawls is 408 within a window or two, so slow clients hold no
# body being read and no bytes of the budget for model_body_timeout. 16 KiB/s is far below any
# agent's link and still costs 512 slow clients 8 MiB/s to keep the bodies being read full; a
# window of 5 s rides out a TCP retransmission or two
DEFAULT_MODEL_BODY_MIN_RATE = 16 * 1024
DEFAULT_MODEL_BODY_RATE_WINDOW = 5.0
# the bytes of whole upstream responses the model requests in flight hold at once (read to be
# observed or steered before they are answered; each at most MAX_RESPONSE_BYTES): one alone is
# always held, so a response of 64 MiB passes whatever the budget
DEFAULT_MODEL_MAX_HELD_RESPONSE_BYTES = 64 * 1024 * 1024
# seconds the model requests in flight at a SIGTERM get to finish (none is taken meanwhile), well
# inside a Kubernetes pod's default terminationGracePeriodSeconds (30 s), which also covers the
# state's last flush
DEFAULT_MODEL_SHUTDOWN_GRACE = 20.0
# seconds after the answer that ended a run at its budget or a stop within which a new user
# message that drops that answer is the agent's own reply to it, still that run's (no person
# reads a report and asks again this fast): watchdog.core.model.book.follows_at_once
DEFAULT_MODEL_REPLY_WINDOW = 5.0
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
# The largest value of each integer key: far above any real need, and within what the code and
# its stores hold (the rule engine keeps per-run state for at most 100 000 runs; SQLite's
# integers are 64-bit).
INT_MAXIMUMS = {
    "max_runs": 100_000,
    "max_request_bytes": 1 << 30,  # 1 GiB
    "max_pending_requests": 4096,
    "activity_log_size": 10_000,
    "forward_queue_size": 1_000_000,
    "model_max_body_bytes": 1 << 30,
    "model_max_concurrent": 10_000,
    "model_max_inflight_bytes": 1 << 40,
    "model_body_min_rate": 1 << 30,
    "model_max_held_response_bytes": 1 << 40,
    "state_max_ended_runs": 10_000_000,  # stored, not held: the disk bounds it (docs/limits.md)
}
ENV_PREFIX = "WATCHDOG_"
MEMORY_STATE_DIR = ":memory:"


@dataclass(frozen=True, slots=True)
class Config:
    otlp_grpc_address: str = DEFAULT_OTLP_GRPC_ADDRESS
    otlp_http_address: str = DEFAULT_OTLP_HTTP_ADDRESS
    api_address: str = DEFAULT_API_ADDRESS
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    rules: tuple[str, ...] = ()  # files or directories, loaded after the shipped default pack
    default_rules: bool = True  # load the shipped default pack first
    state_dir: str = DEFAULT_STATE_DIR  # ":memory:" keeps nothing across restarts
    # the ended runs the store keeps, the newest, and as many directives of ended runs
    state_max_ended_runs: int = DEFAULT_STATE_MAX_ENDED_RUNS
    api_token: str | None = field(default=None, repr=False)
    webhooks: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)  # holds secrets
    run_end_timeout: float = DEFAULT_RUN_END_TIMEOUT
    loose_run_gap: float = DEFAULT_LOOSE_RUN_GAP
    max_runs: int = DEFAULT_MAX_RUNS
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS
    state_flush_interval: float = DEFAULT_STATE_FLUSH_INTERVAL
    activity_log_size: int = DEFAULT_ACTIVITY_LOG_SIZE
    eval_interval: float = DEFAULT_EVAL_INTERVAL
    fleet_window: float = DEFAULT_FLEET_WINDOW
    log_content_wait: float = DEFAULT_LOG_CONTENT_WAIT
    # a run's link into the tracing UI: a URL with {trace_id} (and {span_id}, its root span)
    trace_url: str | None = None
    rules_watch_interval: float = DEFAULT_RULES_WATCH_INTERVAL  # 0 disables the file watch
    log_level: str = "info"
    log_format: str = "text"  # text | json (one JSON object per line; decisions as events)
    insecure: bool = False  # allow non-loopback binds without api_token
    # OTLP protobuf requests read by the compiled decode where it is built (docs/performance.md);
    # false: by the Python one (protobuf's parser), the reference
    native: bool = True
    # Pass-through (DESIGN §2): an OTLP/HTTP base URL everything received is forwarded to.
    forward_endpoint: str | None = field(default=None, repr=False)  # may hold a password
    forward_headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets
    forward_queue_size: int = DEFAULT_MAX_FORWARD_QUEUE_REQUESTS
    # The model endpoint (DESIGN §12)
    model_address: str | None = None  # host:port; None: the endpoint is off
    model_upstream: str = DEFAULT_MODEL_UPSTREAM  # OpenAI-compatible base URL
    model_upstream_anthropic: str = DEFAULT_MODEL_UPSTREAM_ANTHROPIC
    model_agent_name: str | None = None  # the agent name of a call nothing else names
    model_abort: str = "answer"  # answer | error
    model_relay: str | None = None  # native (compiled) | python; None: native where built
    model_max_body_bytes: int = DEFAULT_MODEL_MAX_BODY_BYTES
    model_max_concurrent: int = DEFAULT_MODEL_MAX_CONCURRENT
    model_max_inflight_bytes: int = DEFAULT_MODEL_MAX_INFLIGHT_BYTES
    model_upstream_timeout: float = DEFAULT_MODEL_UPSTREAM_TIMEOUT
    model_body_timeout: float = DEFAULT_MODEL_BODY_TIMEOUT
    model_body_min_rate: int = DEFAULT_MODEL_BODY_MIN_RATE  # bytes/s, over each window
    model_body_rate_window: float = DEFAULT_MODEL_BODY_RATE_WINDOW
    model_max_held_response_bytes: int = DEFAULT_MODEL_MAX_HELD_RESPONSE_BYTES
    model_shutdown_grace: float = DEFAULT_MODEL_SHUTDOWN_GRACE  # 0: requests cut at once
    model_reply_window: float = DEFAULT_MODEL_REPLY_WINDOW

    def validate(self) -> Config:
        """Every bad value at once, in one :class:`ConfigError` (see :func:`raise_problems`)."""
        raise_problems(self.problems())
        return self

    def problems(self, given: Mapping[str, object] | None = None) -> list[str]:
        """What is wrong with the values, one message per key (key, value, what is allowed);
        ``given``: the values as they were written (``11m``, not ``660.0``), to show them."""
        problems: list[str] = []
        check = functools.partial(_checked, problems)
        given = given or {}

        def require(ok: bool, key: str, allowed: str) -> None:
            check(_require, ok, key, given.get(key, getattr(self, key)), allowed)

        addresses = {name: getattr(self, name) for name in
                     ("otlp_grpc_address", "otlp_http_address", "api_address", "metrics_address")}
        if self.otlp_grpc_address == OFF:
            del addresses["otlp_grpc_address"]
        if self.model_address is not None:
            addresses["model_address"] = self.model_address
        good_addresses = {name: address for name, address in addresses.items()
                          if check(split_address, name, address)}
        problems += _shared_ports(good_addresses)
        for key, allowed in SECONDS_ALLOWED.items():
            seconds = getattr(self, key)
            least_ok = seconds >= 0 if key in AT_LEAST_ZERO else seconds > 0
            require(least_ok and seconds <= SECONDS_MAXIMUMS.get(key, MAX_SECONDS), key, allowed)
        if self.trace_url is not None and (problem := trace_url_problem(self.trace_url)):
            problems.append(f"trace_url={self.trace_url!r} is not allowed: {problem}; e.g. "
                            f"https://grafana.example/explore?traceId={{trace_id}}")
        for name, most in INT_MAXIMUMS.items():
            require(1 <= getattr(self, name) <= most, name, f"an integer from 1 to {most}")
        # (an empty one, an unset shell variable's, would put the state files in the working
        # directory itself)
        check(_require, self.state_dir.strip() != "", "state_dir", self.state_dir,
              f"a directory (relative to the working directory, e.g. {DEFAULT_STATE_DIR}), or "
              f"{MEMORY_STATE_DIR} to keep nothing")
        check(_require, self.log_level in LOG_LEVELS, "log_level", self.log_level,
              "one of " + ", ".join(LOG_LEVELS))
        check(_require, self.log_format in LOG_FORMATS, "log_format", self.log_format,
              "one of " + ", ".join(LOG_FORMATS))
        problems += webhook_problems(self.webhooks)
        problems += self._model_problems(given)
        forward_ok = check(validate_forward, self.forward_endpoint, self.forward_headers)
        if (forward_ok and self.forward_endpoint is not None
                and "otlp_http_address" in good_addresses and _same_listener(
                    self.forward_endpoint, split_address("otlp_http_address",
                                                         self.otlp_http_address))):
            problems.append(
                f"forward_endpoint={url_for_logs(self.forward_endpoint)!r} is this watchdog's "
                f"own otlp_http_address: everything would go round in a loop; set the address "
                f"of your Collector or OTLP backend")
        exposed = [(name, address) for name, address in good_addresses.items()
                   if name in self._guarded_listeners()
                   and not is_loopback(split_address(name, address)[0])]
        if exposed and not self.api_token and not self.insecure:
            name, address = exposed[0]
            problems.append(f"{name}={address!r} binds a non-loopback address without "
                            f"api_token: set WATCHDOG_API_TOKEN (Bearer auth) or pass --insecure")
        if exposed and self.api_token and len(self.api_token) < MIN_API_TOKEN_CHARS:
            name, address = exposed[0]
            problems.append(f"api_token is {len(self.api_token)} characters: a token guarding a "
                            f"non-loopback bind ({name}={address!r}) needs at least "
                            f"{MIN_API_TOKEN_CHARS} (e.g. openssl rand -hex 32)")
        return problems

    def _guarded_listeners(self) -> tuple[str, ...]:
        """The listeners a non-loopback bind of needs ``api_token`` (or ``insecure``)."""
        names = ("otlp_grpc_address", "otlp_http_address", "api_address")
        return (*names, "model_address") if self.model_address is not None else names

    def _model_problems(self, given: Mapping[str, object]) -> list[str]:
        """The model endpoint's keys (``model_address`` is checked with the other addresses)."""
        problems: list[str] = []
        name = self.model_agent_name
        for test, args in (
                (validate_upstream, ("model_upstream", self.model_upstream)),
                (validate_upstream, ("model_upstream_anthropic", self.model_upstream_anthropic,
                                     True)),
                (_require, (self.model_abort in MODEL_ABORTS, "model_abort", self.model_abort,
                            "one of " + ", ".join(MODEL_ABORTS))),
                (_require, (self.model_relay is None or self.model_relay in MODEL_RELAYS,
                            "model_relay", self.model_relay, "one of " + ", ".join(MODEL_RELAYS))),
                (_require, (name is None or (0 < len(name) <= 200 and name.isprintable()),
                            "model_agent_name", name, "a printable name of 1-200 characters"))):
            _checked(problems, test, *args)
        return problems


def validate_upstream(key: str, url: object, anthropic: bool = False) -> None:
    """A model upstream: an http(s) base URL with a host, no credentials, query or fragment
    (the request's path is appended to it); Anthropic's without ``/v1`` (the request's
    ``/v1/messages`` is). The message never shows a password."""
    shown = url_for_logs(url) if isinstance(url, str) else url
    try:
        parsed = urlsplit(url) if isinstance(url, str) else None
        ok = parsed is not None and parsed.scheme in ("http", "https") \
            and bool(parsed.hostname)
        if parsed is not None:
            parsed.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:  # a bad port, an unclosed IPv6 bracket
        parsed, ok = None, False
    if not ok or parsed is None:
        raise ConfigError(f"{key}={shown!r} is not allowed: expected an http:// or https:// "
                          f"base URL with a host (e.g. https://api.openai.com/v1)")
    if parsed.username is not None or parsed.query or parsed.fragment:
        raise ConfigError(f"{key}={shown!r} is not allowed: expected a base URL without "
                          f"user:password@, ?query or #fragment (the agent's own headers carry "
                          f"its credentials)")
    if anthropic and parsed.path.rstrip("/").endswith("/v1"):
        raise ConfigError(f"{key}={shown!r} is not allowed: expected the base URL without /v1, "
                          f"as ANTHROPIC_BASE_URL is given (e.g. https://api.anthropic.com): "
                          f"the request's /v1/messages is added to it")


UNKNOWN_KEY = "unknown configuration key"
# What each time key accepts (every float key is one), said whether the value is no duration
# at all or one out of range.
SECONDS_ALLOWED = {
    "run_end_timeout": "a positive number of seconds or a duration, at most 1y (e.g. 900 or 15m)",
    "loose_run_gap": "a positive number of seconds or a duration, at most 1y (e.g. 120 or 2m)",
    "state_flush_interval": "a positive number of seconds or a duration, at most 1y (e.g. 1 or "
                            "500ms)",
    "eval_interval": "a positive number of seconds or a duration, at most 1y (e.g. 1 or 500ms)",
    "fleet_window": "a positive number of seconds or a duration, at most 1y (e.g. 300 or 5m)",
    "log_content_wait": "a positive number of seconds or a duration, at most 10m (e.g. 2 or 5s)",
    "rules_watch_interval": "a number of seconds >= 0 or a duration, at most 1y (e.g. 2 or 2s; "
                            "0 disables watching the rule files)",
    "model_upstream_timeout": "a positive number of seconds or a duration, at most 1y (e.g. 600 "
                              "or 10m)",
    "model_body_timeout": "a positive number of seconds or a duration, at most 1y (e.g. 60 or "
                          "1m)",
    "model_body_rate_window": "a positive number of seconds or a duration, at most 10m (e.g. 5 "
                              "or 5s)",
    "model_shutdown_grace": "a number of seconds >= 0 or a duration, at most 1h (e.g. 20 or "
                            "20s; 0 cuts the requests in flight at once)",
    "model_reply_window": "a positive number of seconds or a duration, at most 10m (e.g. 5 or "
                          "5s)",
}
AT_LEAST_ZERO = ("rules_watch_interval", "model_shutdown_grace")  # the time keys 0 may take


def _checked(problems: list[str], test: Callable[..., object], *args: Any) -> bool:
    """``test(*args)``; the :class:`ConfigError` it raises is added to ``problems`` (False)."""
    try:
        test(*args)
    except ConfigError as exc:
        problems.append(exc.message)
        return False
    return True


def raise_problems(problems: list[str]) -> None:
    """One :class:`ConfigError` for every problem found: a single problem as its own message,
    several as ``N configuration problems: (1) ...; (2) ...`` (one line, for stderr and logs)."""
    if not problems:
        return
    if len(problems) == 1:
        raise ConfigError(problems[0])
    raise ConfigError(f"{len(problems)} configuration problems: " + "; ".join(
        f"({index}) {problem}" for index, problem in enumerate(problems, 1)))


_SHOWN = reprlib.Repr()  # a value in a message: bounded, whatever YAML made of it
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict = 2, 4, 4, 4
_SHOWN.maxstring = _SHOWN.maxother = 120


def shown(value: object) -> str:
    """``repr(value)`` at most some 200 characters: a YAML alias nested in aliases is a
    structure of billions of items, whose whole repr would be gigabytes."""
    return _SHOWN.repr(value)


def _require(ok: bool, key: str, value: object, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={shown(value)} is not allowed: expected {allowed}")


# -- webhooks (DESIGN §6): each a mapping of WEBHOOK_KEYS ------------------------------------

def token_problem(value: str) -> str | None:
    """What is wrong with a configured token once the whitespace around it is dropped: empty,
    or whitespace or a control character inside (it could never be sent in a header)."""
    token = value.strip()
    if not token:
        return (f"it is empty{' (only whitespace)' if value else ''}; set the token, or unset "
                f"api_token")
    if any(char.isspace() or unicodedata.category(char) == "Cc" for char in token):
        return ("it holds whitespace or a control character inside; a token is one word of "
                "printable characters (e.g. openssl rand -hex 32)")
    return None


WEBHOOK_KEYS = ("url", "secret", "name", "actions", "agents")
WEBHOOK_ACTIONS = ("notify", "wind_down", "abort")  # watchdog.core.rules.decision.Action values
WEBHOOK_SECRET_PREFIX = "whsec_"  # Standard Webhooks: whsec_<base64 of the key bytes>
MIN_WEBHOOK_SECRET_BYTES = 16
_WEBHOOK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def webhook_problems(hooks: object) -> list[str]:
    """What is wrong with each webhook, every problem of every entry: ``url`` (http/https),
    ``secret`` (``whsec_<base64>`` or a string of at least 16 characters), optional ``name``,
    ``actions`` (a list of actions) and ``agents`` (a list of globs). Messages name the key
    (``webhooks[1].url``) and never echo a secret."""
    if not isinstance(hooks, (list, tuple)):
        return [f"webhooks={shown(hooks)} is not allowed: expected a list of "
                f"{{url: ..., secret: ...}} mappings"]
    problems: list[str] = []
    check = functools.partial(_checked, problems)
    names: dict[str, int] = {}
    for index, hook in enumerate(hooks):
        where = f"webhooks[{index}]"
        if not isinstance(hook, Mapping):
            problems.append(f"{where}={shown(hook)} is not allowed: expected a mapping with "
                            f"keys " + ", ".join(WEBHOOK_KEYS))
            continue
        problems += [f"{where}: unknown key {key!r}; allowed: " + ", ".join(WEBHOOK_KEYS)
                     for key in sorted(str(key) for key in hook if key not in WEBHOOK_KEYS)]
        url = hook.get("url")
        try:
            parsed = urlsplit(url) if isinstance(url, str) else None
        except ValueError:  # e.g. an unclosed IPv6 bracket
            parsed = None
        check(_require, parsed is not None and parsed.scheme in ("http", "https")
              and bool(parsed.hostname) and _port_ok(parsed), f"{where}.url", url,
              "an http:// or https:// URL with a host (and a port from 1 to 65535)")
        check(_check_secret, f"{where}.secret", hook.get("secret"))
        for key, allowed in (("actions", WEBHOOK_ACTIONS), ("agents", None)):
            if key not in hook:
                continue
            values = hook[key]
            listed = isinstance(values, (list, tuple)) and bool(values) \
                and all(isinstance(v, str) and v for v in values)
            check(_require, listed, f"{where}.{key}", values, "a non-empty list of " + (
                "actions: " + ", ".join(allowed) if allowed else "agent name globs"))
            if listed and allowed is not None:
                for value in values:
                    check(_require, value in allowed, f"{where}.{key}", value,
                          "one of " + ", ".join(allowed))
        if "name" in hook:
            check(_require, isinstance(hook["name"], str)
                  and bool(_WEBHOOK_NAME.match(hook["name"])), f"{where}.name",
                  hook.get("name"), "letters, digits, '.', '_' or '-' (at most 64 characters)")
        name = webhook_name(hook)
        if name in names:
            problems.append(f"{where}: webhook name {name!r} is already used by "
                            f"webhooks[{names[name]}]; give each webhook its own name")
        names[name] = index
    return problems


def _port_ok(parsed: SplitResult) -> bool:
    """Whether a URL's port, if it has one, is a port: urlsplit keeps "99999" or "x" until
    ``.port`` is read (and raises then)."""
    try:
        return parsed.port != 0
    except ValueError:
        return False


def _check_secret(key: str, secret: object) -> None:
    allowed = (f"'{WEBHOOK_SECRET_PREFIX}<base64>' (Standard Webhooks) or a string of at least "
               f"{MIN_WEBHOOK_SECRET_BYTES} characters")
    if not isinstance(secret, str):
        shown = "(missing)" if secret is None else "(not a string)"
        raise ConfigError(f"{key} {shown} is not allowed: expected {allowed}")
    if secret.startswith(WEBHOOK_SECRET_PREFIX):
        try:
            key_bytes = base64.b64decode(secret[len(WEBHOOK_SECRET_PREFIX):], validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{key} (hidden) is not allowed: the part after "
                              f"{WEBHOOK_SECRET_PREFIX!r} is not valid base64") from None
        if len(key_bytes) < MIN_WEBHOOK_SECRET_BYTES:
            raise ConfigError(f"{key} (hidden) is not allowed: it decodes to {len(key_bytes)} "
                              f"bytes; expected at least {MIN_WEBHOOK_SECRET_BYTES}")
    elif len(secret) < MIN_WEBHOOK_SECRET_BYTES:
        raise ConfigError(f"{key} (hidden, {len(secret)} characters) is not allowed: "
                          f"expected {allowed}")


# -- pass-through (DESIGN §2) ------------------------------------------------------------------

SIGNAL_PATHS = ("/v1/traces", "/v1/metrics", "/v1/logs")  # appended to forward_endpoint
# Set by the forwarder for each request; a configured value would corrupt what is sent.
FORWARDER_HEADERS = frozenset({"content-type", "content-encoding", "content-length", "host",
                               "transfer-encoding", "connection"})
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token
_HEADER_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # controls but HTAB


def yaml_problem(exc: Exception) -> str:
    """PyYAML's error in one line: where (line, column) and what is wrong."""
    mark = getattr(exc, "problem_mark", None)
    problem = " ".join(str(getattr(exc, "problem", None) or "invalid YAML").split())
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"invalid YAML at {where}{problem}" if where else f"invalid YAML: {problem}"


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` of a configuration's YAML, but a mapping that gives a key twice is
    invalid YAML, as the YAML spec says (PyYAML would take the last one and drop the first
    without a word: a second ``rules:`` or ``webhooks:`` in a file). Raises ``yaml.YAMLError``,
    the second key's place in it."""
    import yaml
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    from watchdog.core.rules.yamldoc import BoundedLoader  # (nesting bounded: no RecursionError)

    root = yaml.compose(text, Loader=BoundedLoader)
    pending = [] if root is None else [root]
    walked: set[int] = set()  # (aliases share nodes: each is walked once)
    while pending:
        node = pending.pop()
        if id(node) in walked:
            continue
        walked.add(id(node))
        if isinstance(node, SequenceNode):
            pending.extend(node.value)
        elif isinstance(node, MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                pending.append(value)
                if not isinstance(key, ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue  # (a merge key's mapping gives way to the keys beside it)
                line = first.get((key.tag, key.value))
                if line is not None:
                    raise yaml.MarkedYAMLError(
                        problem=f"the key {key.value!r} is given twice (first on line {line})",
                        problem_mark=key.start_mark)
                first[(key.tag, key.value)] = key.start_mark.line + 1
    return yaml.load(text, Loader=BoundedLoader)


def url_for_logs(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``."""
    if "@" not in url:  # (no user info: shown as given, even if it does not parse)
        return url
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an unparsable URL)"
    netloc = f"{parts.username}:***@{parts.hostname or ''}{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def validate_forward(endpoint: str | None, headers: Mapping[str, str]) -> None:
    """``forward_endpoint``: an http(s) base URL (the signal paths are appended);
    ``forward_headers``: header names and values for every forwarded request. Messages never
    show a header value or a password."""
    if endpoint is not None:
        shown = url_for_logs(endpoint)
        try:
            parsed = urlsplit(endpoint)
            ok = parsed.scheme in ("http", "https") and bool(parsed.hostname)
            parsed.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"forward_endpoint={shown!r} is not allowed: expected an OTLP/HTTP "
                              f"base URL like http://otel-collector:4318")
        if parsed.query or parsed.fragment:
            raise ConfigError(f"forward_endpoint={shown!r} is not allowed: expected a base URL "
                              f"without ?query or #fragment")
        if parsed.path.rstrip("/").endswith(SIGNAL_PATHS):
            raise ConfigError(f"forward_endpoint={shown!r} is not allowed: expected the base URL "
                              f"(e.g. http://otel-collector:4318); {', '.join(SIGNAL_PATHS)} "
                              f"are appended per signal")
    if not isinstance(headers, Mapping):
        raise ConfigError("forward_headers is not allowed: expected a mapping of header names "
                          "to values")
    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.match(name):
            raise ConfigError(f"forward_headers: header name {name!r} is not allowed: expected "
                              f"letters, digits and !#$%&'*+.^_`|~-")
        if name.lower() in FORWARDER_HEADERS:
            raise ConfigError(f"forward_headers: header {name!r} is not allowed: the forwarder "
                              f"sets it for each request")
        if not isinstance(value, str) or _HEADER_VALUE_FORBIDDEN.search(value):
            raise ConfigError(f"forward_headers[{name}] (hidden) is not allowed: expected a "
                              f"string without control characters or line breaks")
    if headers and endpoint is None:
        raise ConfigError("forward_headers is set but forward_endpoint is not: set "
                          "forward_endpoint (e.g. http://otel-collector:4318) or remove the "
                          "headers")


def _same_listener(url: str, address: tuple[str, int]) -> bool:
    """Whether ``url`` reaches the listener bound to ``address`` on this host."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host, bound_port = address
    if port != bound_port or bound_port == 0:
        return False
    target = parts.hostname or ""
    return target == host or (is_loopback(target)
                              and (is_loopback(host) or host in ("0.0.0.0", "::", "")))


def parse_headers(key: str, text: str) -> dict[str, str]:
    """``name=value,name2=value2`` with percent-encoded values, as OTEL_EXPORTER_OTLP_HEADERS
    (the W3C baggage format the OTLP exporters read)."""
    headers: dict[str, str] = {}
    for index, pair in enumerate(part for part in text.split(",") if part.strip()):
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{key}: entry {index + 1} is not allowed: expected name=value "
                              f"pairs separated by commas (values percent-encoded), as in "
                              f"OTEL_EXPORTER_OTLP_HEADERS")
        headers[name.strip()] = unquote(value.strip())
    return headers


def webhook_name(hook: Mapping[str, Any]) -> str:
    """The webhook's stable identity in the persisted delivery outbox: its ``name``, else a
    digest of its URL (the URL itself may hold a token and is not stored)."""
    name = hook.get("name")
    if isinstance(name, str) and name:
        return name
    url = hook.get("url")
    return "hook-" + hashlib.sha256((url if isinstance(url, str) else "").encode()
                                    ).hexdigest()[:12]


def _clash(one: str, other: str) -> bool:
    """Whether listeners on hosts ``one`` and ``other`` and one port cannot both bind: the
    same host, or a wildcard that covers the other (``0.0.0.0`` the IPv4 hosts, ``::`` every
    host: Linux binds it dual-stack); ``localhost`` is 127.0.0.1."""
    one, other = (("127.0.0.1" if host == "localhost" else host) for host in (one, other))
    if one == other or "" in (one, other) or "::" in (one, other):
        return True
    return ("0.0.0.0" in (one, other)) and ":" not in one + other


def _shared_ports(addresses: Mapping[str, str]) -> list[str]:
    """Two of the sidecar's own listeners on one port (a fixed one: 0 is any free port)."""
    problems: list[str] = []
    seen: list[tuple[str, str, int]] = []
    for name, address in addresses.items():
        host, port = split_address(name, address)
        other = next((earlier for earlier, earlier_host, earlier_port in seen
                      if port and port == earlier_port and _clash(host, earlier_host)), None)
        if other is not None:
            problems.append(f"{name}={address!r} is the port of {other} too: give each "
                            f"listener a port of its own")
        else:
            seen.append((name, host, port))
    return problems


def split_address(key: str, address: str) -> tuple[str, int]:
    host, sep, port = str(address).rpartition(":")
    host = host.strip("[]")
    if (not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535
            or any(char.isspace() for char in host)):
        off = f", or {OFF} for no gRPC receiver" if key == "otlp_grpc_address" else ""
        raise ConfigError(f"{key}={shown(address)} is not allowed: expected host:port "
                          f"(e.g. 127.0.0.1:9477, port 0-65535){off}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _coerce(key: str, value: Any, kind: str) -> Any:
    """Turn a YAML/env/flag value into the field's type, or say what was expected."""
    if kind == "str":
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}={shown(value)} is not allowed: expected a string")
    if kind == "str | None":
        return None if value in (None, "") else _coerce(key, value, "str")
    scalar = isinstance(value, (str, int, float))
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if scalar and str(value).lower() in ("1", "true", "yes", "on"):
            return True
        if scalar and str(value).lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}={shown(value)} is not allowed: expected true or false")
    if kind == "int":
        try:
            if isinstance(value, bool) or not scalar:
                raise ValueError
            return int(str(value))
        except ValueError:
            raise ConfigError(f"{key}={shown(value)} is not allowed: expected an integer") from None
    if kind == "float":
        try:  # every float key is a time: seconds, or a duration in the shared grammar
            if not scalar:
                raise DurationError("a number of seconds or a duration (e.g. 90, 1m30s)")
            return parse_seconds(value)
        except DurationError as exc:
            allowed = SECONDS_ALLOWED.get(key)
            expected = (f"{allowed}; {DURATION_HELP}" + (f"; {exc.hint}" if exc.hint else "")
                        if allowed else str(exc))
            raise ConfigError(f"{key}={shown(value)} is not allowed: expected "
                              f"{expected}") from None
    if kind == "tuple[str, ...]":
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{key}={shown(value)} is not allowed: expected a list of paths")
    if kind == "tuple[Mapping[str, Any], ...]":
        if isinstance(value, str):
            import yaml  # (only a config file or WATCHDOG_WEBHOOKS is YAML)

            try:
                value = load_yaml(value) if value.strip() else []
            except yaml.YAMLError as exc:
                problem = " ".join(str(getattr(exc, "problem", None) or "invalid YAML").split())
                raise ConfigError(f"{key} is not allowed: {problem}; expected a YAML list of "
                                  f"webhooks") from None
        if isinstance(value, list):
            return tuple(value)
        raise ConfigError(f"{key}={shown(value)} is not allowed: expected a list of webhooks")
    if kind == "Mapping[str, str]":
        if isinstance(value, str):
            return parse_headers(key, value)
        if isinstance(value, Mapping):
            return {name: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                    else v for name, v in value.items()}
        raise ConfigError(f"{key} is not allowed: expected a mapping of names to values, or "
                          f"name=value,name2=value2")
    raise ConfigError(f"{key}: unsupported type {kind}")  # pragma: no cover - a coding error


FIELD_TYPES: dict[str, str] = {f.name: str(f.type) for f in fields(Config)}


# WATCHDOG_* variables that are not configuration keys, so the sidecar leaves them alone:
# WATCHDOG_URL tells the client SDK and the CLI where the control API is (an agent container
# and its sidecar often share one env block), and Kubernetes injects "service links" into every
# pod of a namespace for each Service in it (S_SERVICE_HOST, S_SERVICE_PORT[_NAME], S_PORT,
# S_PORT_9477_TCP[_PROTO|_PORT|_ADDR], S the name upper-cased, "-" as "_"): those of a Service
# named "watchdog", and of any whose name begins "watchdog-" (the gateway's own,
# watchdog-agent-watchdog, which its pods and every pod beside it get), known by their
# S_SERVICE_HOST.
NOT_CONFIG_ENV = ("WATCHDOG_URL",)
_SERVICE_LINK_ENV = re.compile(r"^WATCHDOG_(?:SERVICE_(?:HOST|PORT)(?:_\w+)?|PORT(?:_\w+)?)$")
_SERVICE_HOST = "_SERVICE_HOST"


def service_links(names: Iterable[str]) -> set[str]:
    """The ``WATCHDOG_*`` variables among ``names`` that are Kubernetes service links: those of
    a Service ``S`` whose ``S_SERVICE_HOST`` is there too (a variable of that shape alone, such
    as ``WATCHDOG_API_PORT``, is no link: it is refused as a misspelt key)."""
    names = [name for name in names if name.startswith(ENV_PREFIX)]
    services = [name.removesuffix(_SERVICE_HOST) for name in names
                if name.endswith(_SERVICE_HOST)]
    return {name for name in names if _SERVICE_LINK_ENV.match(name) or any(
        name == service + _SERVICE_HOST or name.startswith((service + "_SERVICE_PORT",
                                                             service + "_PORT"))
        for service in services)}


def _closest(word: str, choices: Iterable[str]) -> str | None:
    import difflib  # (only a misspelling needs it)

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    return close[0] if close else None


def env_keys(env: Mapping[str, str], problems: list[str] | None = None) -> dict[str, str]:
    """The configuration in ``WATCHDOG_<KEY>`` variables; any other ``WATCHDOG_*`` variable
    (a typo such as ``WATCHDOG_RUN_END_TIMOUT``) is refused rather than silently ignored:
    added to ``problems`` if given, else raised."""
    values: dict[str, str] = {}
    links = service_links(env)
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in NOT_CONFIG_ENV:
            continue
        key = name[len(ENV_PREFIX):].lower()
        if key in FIELD_TYPES:
            values[key] = value
        elif name not in links:
            close = _closest(key, FIELD_TYPES)
            hint = f"did you mean {ENV_PREFIX}{close.upper()}? " if close else ""
            message = (f"unknown environment variable {name}: {hint}"
                       f"WATCHDOG_<KEY> sets a configuration key (docs/configuration.md); fix "
                       f"the name or unset it")
            if problems is None:
                raise ConfigError(message)
            problems.append(message)
    return values


def _apply(config: Config, values: Mapping[str, Any], source: str,
           problems: list[str], given: dict[str, object]) -> Config:
    """``config`` with the good ``values``; each bad one is added to ``problems``, each good
    one to ``given`` as it was written."""
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key not in FIELD_TYPES:
            close = _closest(str(key), FIELD_TYPES)
            problems.append(f"{UNKNOWN_KEY} {key!r} in {source}"
                            + (f"; did you mean {close}?" if close else ""))
            continue
        if key == "otlp_grpc_address" and value is False:  # YAML reads a bare off as false
            value = OFF
        if key.endswith("_address") and isinstance(value, str):
            value = value.strip()  # (a value read from a file, or quoted with a space)
        if key == "api_token" and isinstance(value, str):
            # A token from a file (a Kubernetes Secret, $(cat token)) ends with a newline that
            # is no part of it; whitespace around it is dropped, any inside is refused.
            problem = token_problem(value)
            if problem is not None:
                problems.append(f"api_token (hidden) from {source} is not allowed: {problem}")
                continue
            value = value.strip()
        try:
            changes[key] = _coerce(key, value, FIELD_TYPES[key])
        except ConfigError as exc:
            problems.append(exc.message)
        else:
            if FIELD_TYPES[key] in ("int", "float"):  # (only those are shown converted)
                given[key] = value
    return replace(config, **changes)


def load(path: str | None = None, env: Mapping[str, str] | None = None,
         flags: Mapping[str, Any] | None = None) -> Config:
    """Defaults, then the YAML file, then ``WATCHDOG_*`` env vars, then flags; validated."""
    config = Config()
    problems: list[str] = []
    given: dict[str, object] = {}
    if path:
        import yaml

        try:
            document = load_yaml(Path(path).read_text("utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config file {path}: not UTF-8 text (byte {exc.start}); save "
                              f"it as UTF-8") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path}: {yaml_problem(exc)}") from None
        if not isinstance(document, dict):
            raise ConfigError(f"config file {path}: the top level must be a mapping of keys")
        config = _apply(config, document, path, problems, given)
    env = os.environ if env is None else env
    config = _apply(config, env_keys(env, problems), "environment", problems, given)
    config = _apply(config, {k: v for k, v in (flags or {}).items() if v is not None}, "flags",
                    problems, given)
    problems += config.problems(given)
    first = next((index for index, problem in enumerate(problems)
                  if problem.startswith(UNKNOWN_KEY)), None)
    if first is not None:  # the keys there are, said once: with the first unknown one
        problems[first] += (" " if problems[first].endswith("?") else "; ") \
            + "allowed: " + ", ".join(sorted(FIELD_TYPES))
    raise_problems(problems)
    return config
