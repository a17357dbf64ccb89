"""Repro (review3): a client of 872607a with a sidecar of 7b5113e (which ignores the sync's
X-Watchdog-Announce). The run's first sync is answered before its first heartbeat (here the
reporter reaches the sidecar only after two syncs; under load its thread is late): the client
took the answered sync for its announcement heard, so its heartbeats never announced the run,
and the sidecar never learnt its budget (nor agent, session, parent). Run it with the sidecar
of one tree and the client of another first on the path:

    PYTHONPATH=/work/wt/review3-base:/work/main/client:/work/wt/review3-base \
        .venv/bin/python -P review/announce_old_sidecar.py     # 872607a's client: budget {}
    PYTHONPATH=/work/wt/review3-base:$PWD/client:/work/wt/review3-base \
        .venv/bin/python -P review/announce_old_sidecar.py     # fixed: max_tool_calls 7
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import agent_watchdog_client
from agent_watchdog_client import Watchdog
from agent_watchdog_client.reporter import Reporter
from agent_watchdog_client.transport import Transport
from opentelemetry.sdk.trace import TracerProvider

from tests.harness import run_detail, running_server, sidecar_config
from tests.ports import free_port

print("client:", agent_watchdog_client.__file__)
with tempfile.TemporaryDirectory() as tmp, \
        running_server(sidecar_config(Path(tmp) / "state")) as sidecar:
    wd = Watchdog(sidecar.api, tracer_provider=TracerProvider())
    reporter = wd.reporter = Reporter(Transport(f"http://127.0.0.1:{free_port()}"))
    tracer = wd.tracer()
    with wd.run(agent="late", max_tool_calls=7) as run:
        for _ in range(2):
            run.before_model_call()
            with tracer.start_as_current_span("chat", attributes={
                    "gen_ai.operation.name": "chat"}):
                pass
        reporter.transport = Transport(sidecar.api)
        time.sleep(8)  # the reporter's retries reach the sidecar
        print("budget at the sidecar:", (run_detail(sidecar.api, run.id) or {}).get("budget"))
    wd.close()
