"""Repro (review3): a client run whose session the sidecar refuses (over 200 characters) syncs
nothing at all once the sync carries the announcement (X-Watchdog-Announce, edbc65d): every
sync is a 400, so the spans never arrive by sync and no directive comes back. At 7b5113e the
syncs were answered (the run known, its tool call counted).

    PYTHONPATH=$PWD:$PWD/client .venv/bin/python review/sync_bad_announce.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agent_watchdog_client import Watchdog
from opentelemetry.sdk.trace import TracerProvider

from tests.harness import http_request, running_server, sidecar_config

with tempfile.TemporaryDirectory() as tmp, \
        running_server(sidecar_config(Path(tmp) / "state")) as sidecar:
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())  # spans go by sync only
    tracer = wd.tracer()
    with wd.run(agent="a", session="s" * 201, max_tool_calls=5) as run:
        for _ in range(3):
            run.before_model_call()
            with tracer.start_as_current_span("chat", attributes={
                    "gen_ai.operation.name": "chat"}):
                pass
        run_id = run.id
    print("syncs answered:", wd.syncer.sent)
    wd.close()
    status, body = http_request("GET", f"{sidecar.api}/v1/runs/{run_id}")
    print("GET run:", status, body[:200])
