"""The sidecar's timed loops (state flush, evaluate, prune, rules watch) outlive a failing pass.

A pass that raises is logged with its traceback and counted as
``agent_watchdog_background_passes_total{outcome="failed"}``, and the loop runs on: the next pass
that works counts as ``ok`` (the AgentWatchdogLoopStalled alert reads the two).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from tests.test_directives_store import directive
from watchdog.core.runs.run import RunState
from watchdog.core.spans.record import KeySource
from watchdog.shell.config import Config
from watchdog.shell.directives.outbox import Outbox
from watchdog.shell.directives.store import DirectiveStore
from watchdog.shell.metrics import Metrics
from watchdog.shell.server import Server
from watchdog.shell.service import WatchdogService
from watchdog.shell.state.store import Store


def passes(metrics: Metrics, task: str, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "agent_watchdog_background_passes_total", {"task": task, "outcome": outcome})
    return value or 0.0


def test_a_failing_pass_is_counted_logged_and_the_loop_runs_on(
        caplog: pytest.LogCaptureFixture) -> None:
    server = Server(Config())
    server.metrics = metrics = Metrics(version="test")
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(28, "No space left on device")

    async def run() -> None:
        loop = asyncio.create_task(server._every("state_flush", 0.001, work))
        while calls < 4:
            await asyncio.sleep(0.001)
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop

    with caplog.at_level(logging.ERROR, logger="watchdog"):
        asyncio.run(run())
    assert passes(metrics, "state_flush", "failed") == 1
    assert passes(metrics, "state_flush", "ok") >= 3  # the passes before and after it
    failed = [r for r in caplog.records if "background task state_flush failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "No space left on device" in caplog.text
    exposition = generate_latest(metrics.registry).decode()
    assert ('agent_watchdog_background_passes_total{outcome="failed",task="state_flush"} 1.0'
            in exposition)


def test_the_prune_keeps_as_many_ended_runs_and_directives_as_state_max_ended_runs_says(
        tmp_path: Path) -> None:
    """The prune loop's pass keeps the newest ``state_max_ended_runs`` ended runs, with their
    activity logs, and as many directives of ended runs, and every active run and its
    directives: a volume sized for fewer runs than the default (the chart's emptyDir) is not
    outgrown."""
    store = Store(str(tmp_path))
    runs = [RunState(f"ended-{i}", KeySource.WATCHDOG, "", 1000.0 + i) for i in range(5)]
    for i, run in enumerate(runs):
        run.end(1100.0 + i)
    active = RunState("active", KeySource.WATCHDOG, "", 900.0)
    store.save([run.to_dict() for run in (*runs, active)], [])
    directives = DirectiveStore(str(tmp_path))
    for g, run in enumerate((active, *runs), 1):
        directives.add(directive(1, g, run_key=run.key), [])
    config = Config(state_dir=str(tmp_path), state_max_ended_runs=2)
    server = Server(config)
    server.service = service = WatchdogService(config, store)
    server.service.tracker.restore([active])
    server.outbox = outbox = Outbox(directives)

    asyncio.run(server._prune())  # (the loop's pass, every 10 minutes)
    assert [row["key"] for row in store.load_runs(False, 100)] == ["ended-4", "ended-3"]
    assert [row["key"] for row in store.load_runs(True, 100)] == ["active"]
    assert [d.run_id for d in directives.list_after(0, 100)] == ["active", "ended-3", "ended-4"]
    asyncio.run(outbox.stop())
    service.state._lane.close()
    store.close()
