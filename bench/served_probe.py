"""``watchdog`` run with its threads named for ``/proc`` and, optionally, its event loop profiled.

``python -P bench/served_probe.py [--profile FILE] serve ...`` is ``watchdog serve ...`` with
each Python thread's name given to the kernel as well (``/proc/PID/task/TID/comm``, the first 15
bytes: ``watchdog-store_0``'s is ``watchdog-store_``), so :mod:`bench.served_split` can read each
thread's CPU time from outside; the main thread is ``loop``. ``--profile FILE``: the main
thread (the event loop: HTTP, the core's steps, the flushes' encoding, metrics) under
``cProfile`` from SIGUSR1 to SIGUSR2, which writes ``FILE``: the load alone, not the start.
(Its clock is the wall's: a thread CPU clock is a system call per function call, which would
charge small functions many times their cost; the loop's waits are in ``select.epoll.poll``.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
import sys
import threading

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


def main() -> int:
    args = sys.argv[1:]
    profile = None
    if args[:1] == ["--profile"]:
        profile, args = args[1], args[2:]
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
            profiler.dump_stats(profile)

        signal.signal(signal.SIGUSR2, stop)
    return int(watchdog() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
