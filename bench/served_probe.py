"""``watchdog`` run with its threads named for ``/proc`` and, optionally, its event loop profiled.

``python -P bench/served_probe.py [--profile FILE] serve ...`` is ``watchdog serve ...`` with
each Python thread's name given to the kernel as well (``/proc/PID/task/TID/comm``, the first 15
bytes: ``watchdog-store_0``'s is ``watchdog-store_``), so :mod:`bench.served_split` can read each
thread's CPU time from outside; the main thread is ``loop``. ``--profile FILE``: the main
thread (the event loop: HTTP, the core's steps, the flushes' encoding, metrics) under
``cProfile`` from SIGUSR1 to SIGUSR2, which writes ``FILE``: the load alone, not the start.
(Its clock is the wall's: a thread CPU clock is a system call per function call, which would
charge small functions many times their cost; the loop's waits are in ``select.epoll.poll``.)
``--parts FILE``: instead, the event loop thread's CPU time (``time.thread_time``) in each of
:data:`PARTS` from SIGUSR1 to SIGUSR2, which writes them to ``FILE`` as JSON: a few functions
timed (two clock reads a call, some 0.1 of a call a span), each part's own time (what a part
called inside another is taken out of the outer one), the garbage collector's apart.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import importlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

PR_SET_NAME = 15
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _name_thread(name: str) -> None:
    _libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _named_threads() -> None:
    """Every thread started from now on tells the kernel its Python name."""
    inner = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def bootstrap(self: threading.Thread) -> None:
        _name_thread(self.name)
        inner(self)

    threading.Thread._bootstrap_inner = bootstrap  # type: ignore[attr-defined]


# (part, module, function or Class.method, charged to the part it is called in, if any)
PARTS: tuple[tuple[str, str, str, bool], ...] = (
    ("decode", "watchdog.shell.receivers.otlp_http", "PROTOBUF.parse", False),
    ("normalise", "watchdog.core.spans.pipeline", "slices_of", False),
    ("Core.apply", "watchdog.core.step", "Core.apply", False),
    ("decisions carried", "watchdog.shell.service", "WatchdogService._decided", False),
    ("decisions carried", "watchdog.shell.service", "WatchdogService._decided_row", False),
    ("step carried", "watchdog.shell.service", "WatchdogService._carry", False),
    ("flush encoding", "watchdog.core.runs.run", "RunState.to_row", True),
    ("flush encoding", "watchdog.core.sessions", "SessionState.to_dict", True),
    ("flush encoding", "watchdog.shell.state.store", "Rows.add_run", True),
    ("flush encoding", "watchdog.shell.state.store", "Rows.add_activity", True),
    ("flush encoding", "watchdog.shell.state.store", "Rows.add_sessions", True),
    ("timer", "watchdog.shell.service", "WatchdogService.evaluate", False),
    ("timer", "watchdog.shell.service", "WatchdogService._expire", False),
    ("timer", "watchdog.core.step", "Core.fleet_tick", False),
    ("directives published", "watchdog.shell.directives.hub", "Hub.publish", True),
    # coroutines: each step timed (what they await runs outside them)
    ("HTTP: a request handled (aiohttp)", "aiohttp.web_protocol", "RequestHandler._handle_request",
     False),
    ("HTTP: the body read", "watchdog.shell.receivers.otlp_http", "TraceReceiver._read_body",
     False),
    ("the request applied in slices", "watchdog.shell.service",
     "WatchdogService.export_in_slices", False),
    ("slices' turns", "watchdog.shell.priority", "Priority.turn", False),
    ("directive writer", "watchdog.shell.directives.outbox", "Outbox._write_loop", False),
    ("flush", "watchdog.shell.state.persist", "StateWriter.save_pending", False),
    ("timer", "watchdog.shell.service", "WatchdogService.tick_in_slices", False),
)


class Parts:
    """Each part's own CPU time on the thread that made this (the event loop's)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.on = False
        self._stack: list[list[Any]] = []  # [part, started, taken by parts inside]
        self._thread = threading.get_ident()

    def enter(self, part: str, inherit: bool) -> list[Any] | None:
        if not self.on or threading.get_ident() != self._thread:
            return None
        if inherit and self._stack:
            part = self._stack[-1][0]
        frame = [part, time.thread_time(), 0.0]
        self._stack.append(frame)
        return frame

    def leave(self, frame: list[Any] | None) -> None:
        if frame is None or not self._stack or self._stack[-1] is not frame:
            return
        self._stack.pop()
        spent = time.thread_time() - frame[1]
        self.seconds[frame[0]] = self.seconds.get(frame[0], 0.0) + spent - frame[2]
        if self._stack:
            self._stack[-1][2] += spent

    def timed(self, part: str, inherit: bool, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            frame = self.enter(part, inherit)
            try:
                return function(*args, **kwargs)
            finally:
                self.leave(frame)

        return call

    def timed_generator(self, part: str, function: Callable[..., Iterator[Any]]
                        ) -> Callable[..., Iterator[Any]]:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
            items = function(*args, **kwargs)
            while True:
                frame = self.enter(part, False)
                try:
                    item = next(items)
                except StopIteration:
                    return
                finally:
                    self.leave(frame)
                yield item

        return call

    def timed_coroutine(self, part: str, function: Callable[..., Any]) -> Callable[..., Any]:
        parts = self

        class Steps:
            def __init__(self, coroutine: Any) -> None:
                self.coroutine = coroutine

            def __await__(self) -> Any:
                steps = self.coroutine.__await__()
                sent: Any = None
                thrown: BaseException | None = None
                while True:
                    frame = parts.enter(part, False)
                    try:
                        waiting = steps.throw(thrown) if thrown is not None else steps.send(sent)
                    except StopIteration as done:
                        return done.value
                    finally:
                        parts.leave(frame)
                    sent = thrown = None
                    try:
                        sent = yield waiting
                    except BaseException as exc:  # (a cancellation, thrown into the step)
                        thrown = exc

        @functools.wraps(function)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await Steps(function(*args, **kwargs))

        return call

    def collector(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self.gc_frame = self.enter("garbage collector", False)
        else:
            self.leave(getattr(self, "gc_frame", None))

    def install(self) -> None:
        import dataclasses
        import inspect

        for part, module_name, name, inherit in PARTS:
            module = importlib.import_module(module_name)
            owner_name, _, attribute = name.rpartition(".")
            owner = getattr(module, owner_name) if owner_name else module
            function = getattr(owner, attribute)
            if inspect.isgeneratorfunction(function):
                timed = self.timed_generator(part, function)
            elif inspect.iscoroutinefunction(function):
                timed = self.timed_coroutine(part, function)
            else:
                timed = self.timed(part, inherit, function)
            if dataclasses.is_dataclass(owner) and not isinstance(owner, type):
                replaced = dataclasses.replace(owner, **{attribute: timed})
                setattr(module, owner_name, replaced)
                codecs = getattr(module, "CODECS", None)
                if codecs is not None:
                    codecs[replaced.content_type] = replaced
            else:
                setattr(owner, attribute, timed)
        gc.callbacks.append(self.collector)


def main() -> int:
    args = sys.argv[1:]
    profile = parts_file = None
    if args[:1] == ["--profile"]:
        profile, args = args[1], args[2:]
    if args[:1] == ["--parts"]:
        parts_file, args = args[1], args[2:]
    _name_thread("loop")
    _named_threads()
    from watchdog.shell.cli import main as watchdog

    sys.argv = ["watchdog", *args]
    if profile is not None:
        import cProfile

        profiler = cProfile.Profile()
        signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())

        def stop(*_: object) -> None:
            profiler.disable()
            profiler.dump_stats(f"{profile}.tmp")
            os.replace(f"{profile}.tmp", profile)  # whole when it appears

        signal.signal(signal.SIGUSR2, stop)
    if parts_file is not None:
        parts = Parts()
        parts.install()
        busy = [0.0]

        def start(*_: object) -> None:
            parts.seconds, parts.on, busy[0] = {}, True, time.thread_time()

        def write(*_: object) -> None:
            parts.on = False
            with open(f"{parts_file}.tmp", "w") as out:
                json.dump({"loop": time.thread_time() - busy[0], **parts.seconds}, out)
            os.replace(f"{parts_file}.tmp", parts_file)  # whole when it appears

        signal.signal(signal.SIGUSR1, start)
        signal.signal(signal.SIGUSR2, write)
    return int(watchdog() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
