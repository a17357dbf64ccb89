"""When the state cannot be written: refuse instead of acknowledging into the void, say so on
/readyz and in metrics, recover without a restart, and lose no acknowledged export.

As root the state lives on a real 2 MiB tmpfs that is filled up; otherwise (no mount rights)
the store's writes are made to fail the way SQLite fails on a full disk."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.harness import RunningServer, http_request, running_server, sidecar_config, wait_until
from tests.spans import SpanMaker, chat_attrs, encode
from tests.test_bad_input import grpc_export, status_message
from tests.test_otlp_http import PROTOBUF, post_full
from watchdog.shell.state.store import DB_FILE, StoreWriteError

FLUSH = 0.05  # state_flush_interval: short, so the test sees each flush quickly


def one_run(key: str) -> bytes:
    maker = SpanMaker()
    maker.span("chat m", {**chat_attrs(), "watchdog.run.id": key}, start=time.time())
    body: bytes = encode(maker.take()).SerializeToString()
    return body


def ready(sidecar: RunningServer) -> int:
    return http_request("GET", sidecar.metrics + "/readyz")[0]


def gauge(sidecar: RunningServer, name: str) -> float:
    metrics = sidecar.server.metrics
    assert metrics is not None
    return sum(sample.value for family in metrics.registry.collect()
               for sample in family.samples if sample.name == name)


class FullDisk:
    """Fill the tmpfs the state is on; free it again."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.filler = state / "filler"

    def fill(self) -> None:
        # The WAL is emptied first so the next commit must grow it (a WAL that already has
        # room takes writes without asking the disk for space).
        with contextlib.closing(sqlite3.connect(self.state / DB_FILE)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        chunk = b"\0" * 65536
        # unbuffered: a buffer left holding a partial write's rest fails again at its close
        with open(self.filler, "wb", buffering=0) as out:
            try:
                while True:
                    out.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        small = 0
        with contextlib.suppress(OSError), open(self.filler, "ab", buffering=0) as out:
            while True:  # the last partial blocks too
                out.write(b"\0" * 512)
                small += 1

    def free(self) -> None:
        self.filler.unlink()


class FailingWrites:
    """Without mount rights: the store's writes fail as they do on a full disk."""

    def __init__(self, sidecar: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sidecar = sidecar
        self.monkeypatch = monkeypatch

    def fill(self) -> None:
        def full(*args: object, **kwargs: object) -> list[str]:
            raise StoreWriteError("database or disk is full")
        service = self.sidecar.server.service
        assert service is not None
        for write in ("save", "save_sessions", "write"):  # (a flush writes in parts)
            self.monkeypatch.setattr(service.store, write, full)

    def free(self) -> None:
        self.monkeypatch.undo()


@contextlib.contextmanager
def small_state_dir(tmp_path: Path) -> Iterator[tuple[Path, bool]]:
    state = tmp_path / "state"
    state.mkdir()
    mounted = os.geteuid() == 0 and shutil.which("mount") is not None and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(state)],
        capture_output=True).returncode == 0
    try:
        yield state, mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(state)], check=False)


def test_state_that_cannot_be_written_refuses_exports_and_recovers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acknowledged: list[str] = []
    with small_state_dir(tmp_path) as (state, mounted):
        config = sidecar_config(state, state_flush_interval=FLUSH)
        with running_server(config) as sidecar:
            disk = FullDisk(state) if mounted else FailingWrites(sidecar, monkeypatch)
            assert post_full(sidecar, one_run("before"))[0] == 200
            acknowledged.append("before")
            wait_until(lambda: sidecar.server.service is not None
                       and not sidecar.server.service.state._dirty, what="the first flush")
            disk.fill()
            refused = None
            for index in range(3000):  # acknowledged until a flush finds the disk full
                key = f"during-{index}"
                status, headers, body = post_full(sidecar, one_run(key))
                if status == 200:
                    acknowledged.append(key)
                    time.sleep(FLUSH / 5)
                    continue
                refused = (status, headers, body)
                break
            assert refused is not None, "exports were never refused on a full disk"
            status, headers, body = refused
            assert status == 503 and headers["Retry-After"] == "5"
            assert "the state cannot be written" in status_message(body, PROTOBUF).message
            with pytest.raises(grpc.RpcError) as caught:
                grpc_export(sidecar, one_run("grpc-refused"))
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
            assert ready(sidecar) == 503
            status, answer = http_request("POST", sidecar.api + "/v1/sessions/s/checkpoints",
                                          b'{"remaining": "x"}')
            assert status == 503 and b"state_unavailable" in answer  # not acknowledged either
            assert gauge(sidecar, "agent_watchdog_state_writable") == 0
            assert gauge(sidecar, "agent_watchdog_state_write_failures_total") == 1
            # refused again and again, but counted (and logged) once per change of state
            for _ in range(3):
                assert post_full(sidecar, one_run("refused"))[0] == 503
                time.sleep(FLUSH)
            assert gauge(sidecar, "agent_watchdog_state_write_failures_total") == 1

            disk.free()  # no restart: the next flush writes what waited, exports resume
            wait_until(lambda: ready(sidecar) == 200, what="/readyz ready again")
            assert gauge(sidecar, "agent_watchdog_state_writable") == 1
            assert post_full(sidecar, one_run("after"))[0] == 200
            acknowledged.append("after")
        with running_server(sidecar_config(state)) as restarted:
            missing = [key for key in acknowledged
                       if http_request("GET", restarted.api + f"/v1/runs/{key}")[0] != 200]
            assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged runs lost"
            assert http_request("GET", restarted.api + "/v1/runs/refused")[0] == 404
    print(f"{len(acknowledged)} acknowledged exports kept "
          f"({'a full tmpfs' if mounted else 'injected write failures'})")


@pytest.mark.parametrize("room_at_the_end", [True, False])
def test_a_shutdown_on_a_full_disk_says_what_it_saved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        room_at_the_end: bool) -> None:
    """The shutdown's last save after the state could not be written: when it writes, the log
    says the pending state is saved (it said "writable again: exports are accepted", with the
    receivers closed); when it cannot, that the state is left unsaved."""
    config = sidecar_config(tmp_path / "state", state_flush_interval=3600)
    with running_server(config) as sidecar:
        disk = FailingWrites(sidecar, monkeypatch)
        assert post_full(sidecar, one_run("acknowledged"))[0] == 200
        disk.fill()  # a checkpoint is written at once: it finds the disk full
        status, answer = http_request("POST", sidecar.api + "/v1/sessions/s/checkpoints",
                                      b'{"remaining": "x"}')
        assert status == 503 and b"state_unavailable" in answer
        assert ready(sidecar) == 503
        if room_at_the_end:
            disk.free()  # (the last save finds room: SQLite freed pages, a WAL with space)
        caplog.clear()
    said = [record.getMessage() for record in caplog.records if record.name.startswith(
        "watchdog") and "state" in record.getMessage()]
    assert not any("exports are accepted" in line for line in said), said
    if room_at_the_end:
        assert (f"the state in {config.state_dir} could be written at shutdown: what waited "
                f"in memory is saved") in said, said
        with running_server(sidecar_config(tmp_path / "state")) as restarted:
            assert http_request("GET", restarted.api + "/v1/runs/acknowledged")[0] == 200
    else:
        assert any(line.startswith("shutting down with unsaved state: 1 runs") for line in said), \
            said
