"""Loopback ports for processes a test or a benchmark starts.

The kernel's own pick (bind to port 0, close, hand the number on) races: until the new process
binds it, the port is back in the ephemeral range, and any outgoing connection on the machine
(a client, an exporter, a pip download) may take it as its local port — a sidecar then fails
with "Address already in use". Ports here come from below that range, where the kernel never
picks one, from a block of their own per pytest-xdist worker (so two workers never hand out the
same port), each checked free by binding it before it is handed out.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

LOWEST = 10_000  # below: well-known services (9090 Prometheus, 9464 our metrics, ...)
BLOCK = 1_000


def _ephemeral() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999  # Linux's default


def _candidates() -> Iterator[int]:
    low, _ = _ephemeral()
    blocks = (low - LOWEST) // BLOCK
    if blocks < 1:
        return iter(())
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else os.getpid()
    start = LOWEST + (index % blocks) * BLOCK
    first = random.randrange(BLOCK)
    return (start + (first + step) % BLOCK for step in itertools.count())


_lock = threading.Lock()
_ports = _candidates()


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port free right now, below the ephemeral range, for a process started on it
    (the kernel's pick where that range leaves no room below it)."""
    with _lock:
        for port in itertools.islice(_ports, BLOCK):
            if _free(port):
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
