"""Helpers for end-to-end tests of the client SDK's framework adapters against a real sidecar."""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from tests.harness import RunningServer, run_detail, wait_until
from watchdog.client import Run


def settled(sidecar: RunningServer, run: Run) -> bool:
    """The sidecar has every span of ``run`` that has ended, and the run's board has every
    directive the sidecar fired for them."""
    detail = run_detail(sidecar.api, run.id)
    if detail is None:
        return False
    signals = detail["signals"]
    if (signals["tool_calls"], signals["iterations"]) != (run.local_tool_calls,
                                                          run.local_model_calls):
        return False
    outbox = sidecar.server.outbox
    assert outbox is not None
    asyncio.run_coroutine_threadsafe(outbox.flush(), sidecar.loop).result(10)
    fired = len(run_detail(sidecar.api, run.id)["directives"])  # type: ignore[index]
    return bool(run.board.wait_for(fired, 10)) if fired else True


def wait_settled(sidecar: RunningServer, provider: TracerProvider, run: Run) -> None:
    """Export what has ended and wait until the sidecar and the run's listener caught up."""
    provider.force_flush()
    wait_until(lambda: settled(sidecar, run), what="the sidecar and the listener")


def ended_run(sidecar: RunningServer, provider: TracerProvider, run_id: str) -> dict[str, Any]:
    provider.force_flush()
    return wait_until(lambda: (d := run_detail(sidecar.api, run_id)) and d["state"] == "ended"
                      and d, what=f"run {run_id} to end")
