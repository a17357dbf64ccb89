"""The open-files limit (``RLIMIT_NOFILE``, ``ulimit -n``) that ``watchdog serve`` needs,
checked before it starts: below it the start failed wherever the next file happened to be
opened (an import's traceback, a listener "cannot listen", "unable to open database file").

The soft limit is raised towards what the configuration needs when the hard limit allows it
(as Go's runtime and most servers do); a limit too low to start is one line naming it."""

from __future__ import annotations

import resource
from dataclasses import dataclass

from watchdog.shell.config import Config

# What a started sidecar holds, everything on (its listeners, the two state stores' database,
# WAL and shared-memory files, the event loop's, the gRPC server's, the compiled relay's): 29
# measured once started, 36 after a first gRPC export; with room for the files imports and the
# rule packs open on the way, and a few connections.
START_FILES = 64
# A request through the model endpoint holds two: the agent's connection and the upstream's.
FILES_PER_MODEL_REQUEST = 2


@dataclass(frozen=True, slots=True)
class OpenFiles:
    limit: int  # the soft limit now (raised, when it could be)
    hard: int  # the hard limit (resource.RLIM_INFINITY: none)
    needed: int  # what the configuration needs: START_FILES and a file per connection


def needed(config: Config) -> int:
    """Open files for what ``config`` lets in at once: the OTLP exports being read and, with
    the model endpoint, its requests."""
    model = config.model_max_concurrent * FILES_PER_MODEL_REQUEST if config.model_address else 0
    return START_FILES + config.max_pending_requests + model


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
    return OpenFiles(soft, hard, want)


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
            f"{FILES_PER_MODEL_REQUEST} each): raise it (ulimit -n {files.needed}; systemd "
            f"LimitNOFILE=, docker run --ulimit nofile=)")


def short(files: OpenFiles) -> str | None:
    """A warning when ``files`` is enough to start but not for all that is let in at once."""
    if files.limit == resource.RLIM_INFINITY or files.limit >= files.needed:
        return None
    return (f"the open-files limit (ulimit -n) is {files.limit}, below the {files.needed} "
            f"the configuration lets in at once (max_pending_requests, model_max_concurrent): "
            f"connections past it fail; raise it (ulimit -n {files.needed})")
