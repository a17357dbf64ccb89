"""One long-lived driver process per framework venv: it imports the framework once, then runs
each scenario in a fork of itself, so a scenario pays for a fork instead of an interpreter
start and the framework's import (tests.frameworks.harness starts it, one per venv).

``python _forkserver.py MODULE...`` imports the MODULEs (the framework's heavy modules, before
any scenario configures anything), says ``{"ready": ...}`` on stdout, then reads one request
per stdin line: ``{"argv": [driver, scenario], "env": {...}, "cwd": ..., "stdout": path,
"stderr": path}``. For each it forks; the child takes that environment, working directory,
``sys.argv`` and output files and runs the driver as ``__main__``, exactly as ``python driver
scenario`` would from there on: its own tracer provider, instrumentors, exporters and atexit
flushes, its exit status. The parent answers ``{"pid": N}`` at once and ``{"returncode": N}``
when the child ends. Only the standard library here: it runs in every framework's venv.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import sys
import threading
import time
import traceback
from typing import Any


def _say(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


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


def serve(modules: list[str]) -> None:
    started = time.perf_counter()
    for name in modules:
        importlib.import_module(name)
    if threading.active_count() > 1:  # a fork would copy them half-way: never serve then
        raise SystemExit(f"importing {modules} started threads {threading.enumerate()}: "
                         "leave those modules out of the fork server's preload list")
    # what the preload made stays out of the collector's sight: a child's collections would
    # otherwise touch every one of those objects and copy its pages from this process
    gc.freeze()
    _say({"ready": round(time.perf_counter() - started, 3)})
    for line in sys.stdin.buffer:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            # the child ends as an interpreter does: atexit handlers (the tracer provider's
            # flush), non-daemon threads joined, then this status
            raise SystemExit(_run_child(request))
        _say({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _say({"returncode": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve(sys.argv[1:])
