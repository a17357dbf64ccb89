"""Who owns the running rules: loads the packs at startup, reloads them on request (the API's
``POST /v1/rules/reload``) and when a rule file changes, and keeps the running rules whenever a
new load fails.

The rules themselves live in the :class:`~watchdog.core.rules.engine.RuleEngine` the manager made;
a reload replaces them in place (:meth:`RuleEngine.replace`), so whoever holds the engine sees
the new rules at its next evaluation; ``applied`` then evaluates the active runs against them
before the reload is answered. Loading reads files: it runs in a worker thread, never on
the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import RulePackError, RuleSet, Source, load_rules

log = logging.getLogger("watchdog")


class RuleManager:
    """``paths``: the rule packs (files or directories) to load, with the shipped default pack
    first when ``include_default``. ``reloaded`` hears the outcome of every load (the
    ``watchdog_rules_reload_success`` gauge); ``applied`` is awaited after new rules replaced
    the running ones; ``clock`` says when (the runs' clock: a run that ended before a rule was
    loaded is not classified again by it)."""

    def __init__(self, paths: Sequence[str], include_default: bool = True,
                 reloaded: Callable[[bool], None] = lambda ok: None,
                 applied: Callable[[], Awaitable[None]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.clock = clock  # when a reload's rules were loaded (the runs' clock)
        self.paths = tuple(paths)
        self.include_default = include_default
        self.reloaded = reloaded
        self.applied = applied
        self.engine: RuleEngine | None = None
        self._sources: tuple[Source, ...] = ()  # as last seen by the file watch
        self._lock = asyncio.Lock()
        # the reload that begins next, shared by everyone who asks before it begins (its load
        # reads the files after their requests came): one running and one waiting, however
        # many ask (200 POST /-/reload at once were 200 loads one after the other)
        self._next: asyncio.Future[tuple[bool, str]] | None = None

    async def start(self) -> RuleEngine:
        """The engine, with the packs loaded. Raises :class:`RulePackError` when they do not
        load: a bad pack refuses to start (:func:`pack_failure` says it in one line)."""
        ruleset = await asyncio.to_thread(self._load)
        self.engine = RuleEngine(ruleset)
        self._sources = ruleset.sources
        self.reloaded(True)
        return self.engine

    async def reload(self) -> tuple[bool, str]:
        """Load the rule packs again; on any problem keep the running rules and say why. A
        reload asked for while another waits to begin is that one (:attr:`_next`)."""
        assert self.engine is not None, "start() first"
        if self._next is None:
            self._next = asyncio.ensure_future(self._reload_next())
        return await asyncio.shield(self._next)

    async def _reload_next(self) -> tuple[bool, str]:
        assert self.engine is not None
        async with self._lock:
            self._next = None  # begun: who asks from now on gets the reload after this one
            try:
                ruleset = await asyncio.to_thread(self._load)
            except RulePackError as exc:
                self.reloaded(False)
                message = "rule reload failed, keeping the previous rules:\n" + str(exc)
                log.error("%s", message)
                return False, message
            except Exception as exc:  # not a pack's problem (a bug, a directory gone): the
                # same answer, and the traceback in the log
                self.reloaded(False)
                message = (f"rule reload failed, keeping the previous rules: "
                           f"{type(exc).__name__}: {exc}")
                log.exception("%s", message)
                return False, message
            self.engine.replace(ruleset, self.clock())
            self._sources = ruleset.sources
            self.reloaded(True)
            if self.applied is not None:
                await self.applied()
            message = f"rules reloaded: {len(ruleset.rules)} active"
            log.info("%s", message)
            return True, message

    async def watch(self) -> None:
        """Reload when a rule file changed since the last look (Kubernetes swaps ConfigMap
        files via a symlink); the shell calls it every ``rules_watch_interval``."""
        seen = await asyncio.to_thread(
            lambda: tuple(Source.of(source.path) for source in self._sources))
        if seen != self._sources:
            self._sources = seen  # a broken edit is reported once, not every interval
            await self.reload()

    def _load(self) -> RuleSet:
        return load_rules(list(self.paths), include_default=self.include_default)


def pack_failure(exc: RulePackError) -> str:
    """Why the rule packs did not load, in one line, and what to do about it."""
    first = exc.problems[0] if exc.problems else "no rules could be loaded"
    more = len(exc.problems) - 1
    return (f"bad rule pack: {first}" + (f" (and {more} more problem{'s' if more > 1 else ''})"
                                          if more > 0 else "")
            + "; fix it (`watchdog rules check PATH...` lists every problem) and start again")
