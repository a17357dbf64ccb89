"""The open-files limit (``RLIMIT_NOFILE``, ``ulimit -n``) that ``watchdog serve`` needs,
checked before it starts: below it the start failed wherever the next file happened to be
opened (an import's traceback, a listener "cannot listen", "unable to open database file").

The soft limit is raised towards what the configuration needs when the hard limit allows it
(as Go's runtime and most servers do); a limit too low to start is one line naming it."""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from watchdog.shell.config import Config

# What a started sidecar holds, everything on (its listeners, the two state stores' database,
# WAL and shared-memory files, the event loop's, the gRPC server's, the compiled relay's): 29
# measured once started, 36 after a first gRPC export; with room for the files imports and the
# rule packs open on the way, and a few connections.
START_FILES = 64
# Per model_max_concurrent place: its request holds two (the agent's connection and the
# upstream's), and the bodies being read, 2 a place (proxy.READING_PER_PLACE), one each.
FILES_PER_MODEL_REQUEST = 4
# How often a listener that cannot accept (out of files) is logged: asyncio retries it every
# second, and logged each time with its traceback it wrote tens of megabytes a minute.
ACCEPT_FAILURE_LOG_INTERVAL = 60.0
ACCEPT_FAILURE = "socket.accept() out of system resource"  # asyncio's message for it

log = logging.getLogger("watchdog")

# The control API's waiting clients, a connection each: its directive streams (SSE) and
# long-polls at once (the hub's bounds; fitted to the limit by ``waiting_clients``).
MAX_STREAMS = 1_000
MAX_WAITERS = 10_000


@dataclass(frozen=True, slots=True)
class OpenFiles:
    limit: int  # the soft limit now (raised, when it could be)
    hard: int  # the hard limit (resource.RLIM_INFINITY: none)
    needed: int  # what the configuration needs: START_FILES and a file per connection
    streams: int  # the directive streams the control API holds at once within ``limit``
    waiters: int  # and its long-polls


def needed(config: Config) -> int:
    """Open files for what ``config`` lets in at once: the OTLP exports being read, the control
    API's waiting clients and, with the model endpoint, its requests."""
    return _others(config) + MAX_STREAMS + MAX_WAITERS


def _others(config: Config) -> int:
    model = config.model_max_concurrent * FILES_PER_MODEL_REQUEST if config.model_address else 0
    return START_FILES + config.max_pending_requests + model


def waiting_clients(config: Config, limit: int) -> tuple[int, int]:
    """The directive streams and long-polls the control API holds at once within ``limit``
    open files: all of them when it is enough, else the room the rest leaves, half each (at
    least one each) — past them a client is answered 503, where a connection past the limit
    would stop every listener accepting (exports, model requests and the API's alike)."""
    if limit == resource.RLIM_INFINITY or limit >= needed(config):
        return MAX_STREAMS, MAX_WAITERS
    room = max(limit - _others(config), 2)
    streams = min(MAX_STREAMS, room // 2)
    return streams, room - streams


def raise_limit(config: Config) -> OpenFiles:
    """The soft limit raised to what ``config`` needs, as far as the hard limit allows."""
    want = needed(config)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want and (hard == resource.RLIM_INFINITY
                                                           or hard > soft):
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # (a container's seccomp, a kernel's nr_open)
            pass
    return OpenFiles(soft, hard, want, *waiting_clients(config, soft))


def current(config: Config) -> OpenFiles:
    """``files`` as the limit is now (after :func:`raise_limit`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return OpenFiles(soft, hard, needed(config), *waiting_clients(config, soft))


def _shown(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)


def too_few(files: OpenFiles) -> str | None:
    """The one line refusing to start with ``files``, or None (enough to start)."""
    if files.limit == resource.RLIM_INFINITY or files.limit >= START_FILES:
        return None
    return (f"the open-files limit (ulimit -n) is {files.limit} (hard limit "
            f"{_shown(files.hard)}): the sidecar needs at least {START_FILES} to start (its "
            f"listeners and state files) and {files.needed} for what it lets in at once "
            f"(max_pending_requests OTLP exports; model_max_concurrent model requests at "
            f"{FILES_PER_MODEL_REQUEST} each; the control API's directive streams and "
            f"long-polls): raise it (ulimit -n {files.needed}; systemd "
            f"LimitNOFILE=, docker run --ulimit nofile=)")


def short(files: OpenFiles) -> str | None:
    """A warning when ``files`` is enough to start but not for all that is let in at once."""
    if files.limit == resource.RLIM_INFINITY or files.limit >= files.needed:
        return None
    return (f"the open-files limit (ulimit -n) is {files.limit}, below the {files.needed} "
            f"the configuration lets in at once (max_pending_requests, model_max_concurrent, "
            f"the control API's {MAX_STREAMS} directive streams and {MAX_WAITERS} long-polls): "
            f"the API holds {files.streams} streams and {files.waiters} long-polls (more are "
            f"answered 503), other connections past it fail; raise it "
            f"(ulimit -n {files.needed})")


class AcceptFailures:
    """An event loop exception handler that turns asyncio's traceback for a listener out of
    files (``EMFILE`` and the like) into one warning line a minute, with how many there were;
    everything else goes to asyncio's own handler."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.count = 0  # failures since the last line
        self.logged_at: float | None = None

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_FAILURE:
            loop.default_exception_handler(context)
            return
        self.count += 1
        now = self.clock()
        if self.logged_at is not None and now - self.logged_at < ACCEPT_FAILURE_LOG_INTERVAL:
            return
        exc = context.get("exception")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        sock = context.get("socket")
        address = _address(sock.getsockname() if sock is not None else None)
        soft = _shown(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        log.warning("cannot accept connections on %s (%s): the open-files limit (ulimit -n) is "
                    "%s; connections wait until files are free: raise it (failed accepts "
                    "since the last such line: %d)", address, reason, soft, self.count)
        self.count = 0
        self.logged_at = now


def _address(name: object) -> str:
    if isinstance(name, tuple) and len(name) >= 2:
        return f"{name[0]}:{name[1]}"
    return "a listener"
