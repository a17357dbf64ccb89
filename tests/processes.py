"""A real ``python -m watchdog serve`` process on free loopback ports, for tests of what only a
process shows: exit codes, stderr, log lines."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import IO

from tests.harness import wait_until
from tests.ports import free_port

PORT_NAMES = ("otlp_grpc", "otlp_http", "api", "metrics")
READY_TIMEOUT = 30.0


def fresh_ports() -> dict[str, int]:
    return {name: free_port() for name in PORT_NAMES}


def serve_env(state_dir: Path, ports: dict[str, int], **extra: str) -> dict[str, str]:
    """The test's environment without its WATCHDOG_* variables, plus the sidecar's."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("WATCHDOG_")}
    env.update({f"WATCHDOG_{name.upper()}_ADDRESS": f"127.0.0.1:{port}"
                for name, port in ports.items()})
    env["WATCHDOG_STATE_DIR"] = str(state_dir)
    env["WATCHDOG_RULES_WATCH_INTERVAL"] = "0"
    env.update(extra)
    return env


def answers(url: str, timeout: float = 1) -> bool:
    """``GET url`` answers 200 (False while nothing listens or it answers otherwise)."""
    with suppress(OSError), urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status == 200
    return False


@contextmanager
def running_sidecar(env: dict[str, str], metrics_port: int,
                    stderr: IO[str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """A sidecar that is ready (``/readyz``); SIGTERM and wait on the way out. Its stderr goes
    to ``stderr``, by default to a temporary file (shown if it does not start): a pipe nobody
    reads would block a sidecar that logs a lot."""
    with ExitStack() as stack:
        log = stderr if stderr is not None else stack.enter_context(
            tempfile.TemporaryFile("w+", encoding="utf-8"))
        process = subprocess.Popen([sys.executable, "-m", "watchdog", "serve"], env=env,
                                   stderr=log, text=True)
        try:
            wait_until(lambda: process.poll() is not None
                       or answers(f"http://127.0.0.1:{metrics_port}/readyz"),
                       timeout=READY_TIMEOUT, what="the sidecar to be ready")
            if process.poll() is not None:
                shown = "" if stderr is not None else (log.seek(0), log.read()[-3000:])[1]
                raise AssertionError(f"the sidecar exited ({process.returncode}): {shown}")
            yield process
        finally:
            process.terminate()
            process.wait(timeout=30)
