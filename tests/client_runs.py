"""Helpers for end-to-end tests of the client SDK's framework adapters against a real sidecar."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from tests.harness import RunningServer, run_detail, wait_until


def ended_run(sidecar: RunningServer, provider: TracerProvider, run_id: str) -> dict[str, Any]:
    provider.force_flush()
    return wait_until(lambda: (d := run_detail(sidecar.api, run_id)) and d["state"] == "ended"
                      and d, what=f"run {run_id} to end")
