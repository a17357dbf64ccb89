"""``agentops.init`` as the AgentOps drivers call it, kept on this machine: no API key (it then
asks its backend for no token and exports without one), no log file in the working directory,
and its metrics exporter, which ``init`` cannot be told about (it always sends to AgentOps'
own host), pointed at a closed local port."""

from __future__ import annotations

import os
from typing import Any

CLOSED_PORT = "http://127.0.0.1:9"


def init_agentops(exporter_endpoint: str) -> Any:
    """AgentOps initialised, its spans to ``exporter_endpoint``; its tracer (``.provider``)."""
    os.environ["AGENTOPS_LOGGING_TO_FILE"] = "False"  # (else an agentops.log in the cwd)
    import agentops
    from agentops.sdk import core

    setup_telemetry = core.setup_telemetry

    def kept_here(**settings: Any) -> Any:
        return setup_telemetry(**{**settings, "metrics_endpoint": CLOSED_PORT + "/v1/metrics"})

    core.setup_telemetry = kept_here
    agentops.init(api_key=None, auto_start_session=False, log_level="ERROR",
                  exporter_endpoint=exporter_endpoint)
    return core.tracer
