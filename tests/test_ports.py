"""The tests' port picker: below the kernel's ephemeral range, never one that is taken."""

from __future__ import annotations

import socket

from tests import ports


def test_ports_come_from_below_the_ephemeral_range_and_are_free() -> None:
    low, _ = ports._ephemeral()
    picked = [ports.free_port() for _ in range(50)]
    assert len(set(picked)) == 50
    assert all(ports.LOWEST <= port < low for port in picked)
    for port in picked:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_never_handed_out() -> None:
    held = []
    try:
        for _ in range(ports.BLOCK // 2):  # half the worker's block held by listeners
            sock = socket.socket()
            sock.bind(("127.0.0.1", ports.free_port()))
            sock.listen()
            held.append(sock)
        taken = {sock.getsockname()[1] for sock in held}
        assert len(taken) == len(held)
        assert not taken & {ports.free_port() for _ in range(100)}
    finally:
        for sock in held:
            sock.close()
