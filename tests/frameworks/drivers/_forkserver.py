"""One long-lived driver process per framework venv for a whole test run: it imports the
framework once, then runs each scenario, whichever pytest worker asks, in a fork of itself, so
a scenario pays for a fork instead of an interpreter start and the framework's import
(tests.frameworks.harness starts it, one per venv and run, behind a file lock).

``python _forkserver.py SOCKET OWNER MODULE...`` imports the MODULEs (the framework's heavy
modules, before any scenario configures anything; ``NAME?`` only where NAME is installed),
listens on the Unix socket SOCKET, says
``{"ready": ...}`` on stdout and then never writes there again. Each connection (one per pytest
worker) sends one request per line: ``{"argv": [driver, scenario], "env": {...}, "cwd": ...,
"stdout": path, "stderr": path}``. For each it forks; the child takes that environment,
working directory, ``sys.argv`` and output files and runs the driver as ``__main__``, exactly as
``python driver scenario`` would from there on: its own tracer provider, instrumentors,
exporters and atexit flushes, its exit status. The driver process answers ``{"pid": N}`` at
once and ``{"returncode": N, "cpu": SECONDS}`` (what the child used) when the child ends, on
the connection that asked; the forks of different connections run side by side. A connection
that closes takes its running forks with it (SIGKILL). After every fork it writes the CPU
seconds it and its forks have used to ``SOCKET.cpu`` (the test run adds them to its own). It
ends when the process OWNER (the pytest run) ends. Only the standard library here: it runs in
every framework's venv.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import os
import resource
import runpy
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any


def _pythonpath(value: str) -> list[str]:
    return [os.path.abspath(entry) for entry in value.split(os.pathsep) if entry]


_STARTUP_PYTHONPATH = _pythonpath(os.environ.get("PYTHONPATH", ""))


def _run_child(request: dict[str, Any]) -> int:
    """In the fork: become ``python argv[0] argv[1:]`` with the request's environment."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    driver = request["argv"][0]
    sys.argv = list(request["argv"])
    # the search path a new interpreter would start with: the script's directory, then the
    # request's PYTHONPATH, then the rest (the standard library and the venv's packages)
    rest = [entry for entry in sys.path[1:] if entry not in _STARTUP_PYTHONPATH]
    sys.path[:] = [os.path.dirname(os.path.abspath(driver)),
                   *_pythonpath(request["env"].get("PYTHONPATH", "")), *rest]
    try:
        runpy.run_path(driver, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    except BaseException:  # as the interpreter does with an uncaught exception
        traceback.print_exc()
        return 1
    return 0


class _Connection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.children: set[int] = set()

    def say(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # the worker went away: its children go too
            self.sock.sendall((json.dumps(message) + "\n").encode())


class ForkServer:
    def __init__(self, path: str, owner: int) -> None:
        self.path = path
        self.pid = os.getpid()
        self.selector = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.owner = os.pidfd_open(owner)  # readable once the pytest run has ended
        self.selector.register(self.owner, selectors.EVENT_READ, "owner")
        self.connections: set[_Connection] = set()
        self.children: dict[int, tuple[int, _Connection]] = {}  # pidfd -> (pid, connection)

    def serve(self) -> None:
        self._account()
        while True:
            for key, _ in self.selector.select():
                if key.data == "owner":
                    return
                if key.data == "accept":
                    connection = _Connection(self.listener.accept()[0])
                    self.connections.add(connection)
                    self.selector.register(connection.sock, selectors.EVENT_READ, connection)
                elif isinstance(key.data, _Connection):
                    self._read(key.data)
                else:
                    self._reap(key.fd)

    def _read(self, connection: _Connection) -> None:
        chunk = connection.sock.recv(65536)
        if not chunk:  # the worker closed it (done, or giving up on a scenario)
            self.selector.unregister(connection.sock)
            self.connections.discard(connection)
            connection.sock.close()
            for pid in connection.children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return
        connection.buffer += chunk
        while b"\n" in connection.buffer:
            line, connection.buffer = connection.buffer.split(b"\n", 1)
            self._fork(json.loads(line), connection)

    def _fork(self, request: dict[str, Any], connection: _Connection) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            # none of the driver process's sockets or descriptors stay open in the scenario
            self.selector.close()
            self.listener.close()
            os.close(self.owner)
            for pidfd in self.children:
                os.close(pidfd)
            for other in self.connections:
                other.sock.close()
            # the child ends as an interpreter does: atexit handlers (the tracer provider's
            # flush), non-daemon threads joined, then this status
            raise SystemExit(_run_child(request))
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (pid, connection)
        connection.children.add(pid)
        self.selector.register(pidfd, selectors.EVENT_READ, pidfd)
        connection.say({"pid": pid})

    def _reap(self, pidfd: int) -> None:
        self.selector.unregister(pidfd)
        os.close(pidfd)
        pid, connection = self.children.pop(pidfd)
        _, status, usage = os.wait4(pid, 0)
        connection.children.discard(pid)
        self._account()
        connection.say({"returncode": os.waitstatus_to_exitcode(status),
                        "cpu": round(usage.ru_utime + usage.ru_stime, 3)})

    def _account(self) -> None:
        used = sum(getattr(resource.getrusage(who), field)
                   for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                   for field in ("ru_utime", "ru_stime"))
        with open(self.path + ".cpu.tmp", "w") as file:
            file.write(f"{used:.3f}")
        os.replace(self.path + ".cpu.tmp", self.path + ".cpu")

    def close(self, ended: bool) -> None:
        """Its forks killed; once the run has ended (``ended``), its files gone too (its log
        stays after a failure). A fork leaving through here (its SystemExit) does nothing."""
        if os.getpid() != self.pid:
            return
        for pid, _ in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        base = self.path.removesuffix(".sock")
        for path in (self.path, *((base + ".log", base + ".lock", self.path + ".cpu",
                                   os.path.dirname(self.path)) if ended else ())):
            with contextlib.suppress(OSError):
                os.rmdir(path) if os.path.isdir(path) else os.unlink(path)


def main(path: str, owner: int, modules: list[str]) -> None:
    started = time.perf_counter()
    for name in modules:
        if name.endswith("?"):  # optional: imported where it is installed
            name = name[:-1]
            if importlib.util.find_spec(name) is None:
                continue
        importlib.import_module(name)
    if threading.active_count() > 1:  # a fork would copy them half-way: never serve then
        raise SystemExit(f"importing {modules} started threads {threading.enumerate()}: "
                         "leave those modules out of the fork server's preload list")
    # what the preload made stays out of the collector's sight: a child's collections would
    # otherwise touch every one of those objects and copy its pages from this process
    gc.freeze()
    server = ForkServer(path, owner)
    try:
        os.write(1, (json.dumps({"ready": round(time.perf_counter() - started, 3)}) + "\n")
                 .encode())
        null = os.open(os.devnull, os.O_WRONLY)  # whoever started it need not outlive it
        os.dup2(null, 1)
        os.close(null)
        server.serve()
    except BaseException:
        server.close(ended=False)
        raise
    server.close(ended=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
