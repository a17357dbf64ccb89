"""The client's entry point: configuration, tracing setup and the factory for runs."""

from __future__ import annotations

import logging
import math
import os
import threading
import weakref
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from agent_watchdog_client.processor import install
from agent_watchdog_client.reporter import HEARTBEAT_INTERVAL, Reporter
from agent_watchdog_client.run import BUDGET_KEYS, MAX_BUDGET, WHOLE_BUDGET_KEYS, Run
from agent_watchdog_client.sync import SyncChannel
from agent_watchdog_client.transport import DEFAULT_URL, Transport

log = logging.getLogger("agent_watchdog_client")

EXPORT_DELAY_MS = 200  # the exporter's batch delay (the SDK default, 5 s, delays every directive)
TRACER_NAME = "agent-watchdog.client"

# Providers the processor is installed on; weak, so a discarded provider is not kept alive.
_instrumented: weakref.WeakSet[TracerProvider] = weakref.WeakSet()
_instrument_lock = threading.Lock()


OTLP_GRPC_PORT = 4317  # OTLP's ports by convention: gRPC 4317, HTTP 4318 (the sidecar's too)


def _warn_of_the_grpc_port(endpoint: str | None) -> None:
    """An OTLP/HTTP exporter pointed at OTLP/gRPC's port gets an HTTP/2 answer it cannot read
    (a BadStatusLine of binary bytes, retried), and none of the agent's spans arrive: said once,
    with the port to use."""
    from urllib.parse import urlsplit

    target = (endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
              or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    try:
        port = urlsplit(target.strip()).port if target else None
    except ValueError:
        return  # (the exporter says what is wrong with it)
    if port == OTLP_GRPC_PORT:
        log.warning("agent-watchdog: setup_tracing() exports OTLP/HTTP to %s, port %d, which is "
                    "OTLP/gRPC's: the sidecar takes OTLP/HTTP on port 4318 "
                    "(OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318)", target,
                    OTLP_GRPC_PORT)


class Watchdog:
    """``Watchdog()`` reads ``WATCHDOG_URL`` (default ``http://127.0.0.1:9477``) and
    ``WATCHDOG_API_TOKEN`` (sent as a Bearer token)."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 tracer_provider: TracerProvider | None = None,
                 heartbeat_interval: float = HEARTBEAT_INTERVAL) -> None:
        self.url = url or os.environ.get("WATCHDOG_URL") or DEFAULT_URL
        env_token = os.environ.get("WATCHDOG_API_TOKEN", "").strip()  # (a file's newline)
        self.transport = Transport(self.url, token or env_token or None)
        self.reporter = Reporter(self.transport, heartbeat_interval)
        self.syncer = SyncChannel(self.transport)
        self._provider: TracerProvider | None = tracer_provider
        self._warned_uninstrumented = False
        if tracer_provider is not None:
            self.instrument(tracer_provider)

    # -- tracing ----------------------------------------------------------------------------------

    def instrument(self, tracer_provider: TracerProvider | None = None) -> TracerProvider | None:
        """Install the span processor on ``tracer_provider`` (default: the global one, if it is
        an SDK provider). Idempotent. Runs started later use this provider for their span."""
        provider = tracer_provider or trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            return None
        with _instrument_lock:
            if provider not in _instrumented:
                install(provider)
                _instrumented.add(provider)
        if tracer_provider is not None or self._provider is None:
            self._provider = provider
        return provider

    def ensure_instrumented(self) -> None:
        """Called by each run: install on the global provider if nobody chose one."""
        if self._provider is not None:
            return
        if self.instrument() is None and not self._warned_uninstrumented:
            self._warned_uninstrumented = True
            log.warning("agent-watchdog: no OpenTelemetry SDK TracerProvider is set, so spans "
                        "cannot carry the run id; call Watchdog.setup_tracing() or "
                        "Watchdog.instrument(provider)")

    def tracer(self) -> trace.Tracer:
        return trace.get_tracer(TRACER_NAME, tracer_provider=self._provider)

    def setup_tracing(self, service_name: str = "agent", *, endpoint: str | None = None,
                      headers: dict[str, str] | None = None,
                      schedule_delay_millis: int = EXPORT_DELAY_MS,
                      set_global: bool = True) -> TracerProvider:
        """A TracerProvider that exports OTLP/HTTP to the sidecar (``endpoint``, default the
        exporter's: ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`` or ``http://localhost:4318``) in
        batches every ``schedule_delay_millis``, with this client's processor installed; made
        the global provider unless ``set_global=False`` (or one is set already).

        Needs ``opentelemetry-exporter-otlp-proto-http`` (the client's ``otlp`` extra:
        ``agent-watchdog-client[otlp]``).
        """
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise ImportError("Watchdog.setup_tracing() needs the OTLP exporter: pip install "
                              "opentelemetry-exporter-otlp-proto-http (the client's "
                              "extra: agent-watchdog-client[otlp])") from exc
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        _warn_of_the_grpc_port(endpoint)
        exporter_args: dict[str, Any] = {}
        if endpoint is not None:
            exporter_args["endpoint"] = endpoint
        if headers is not None:
            exporter_args["headers"] = headers
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(**exporter_args), schedule_delay_millis=schedule_delay_millis))
        self.instrument(provider)
        if set_global:
            current = trace.get_tracer_provider()
            if isinstance(current, TracerProvider):
                log.warning("agent-watchdog: a global TracerProvider is already set; the one "
                            "from setup_tracing() is used for runs but not made global")
            else:
                trace.set_tracer_provider(provider)
        return provider

    # -- runs -------------------------------------------------------------------------------------

    def run(self, agent: str, *, max_tool_calls: int | None = None,
            max_iterations: int | None = None, max_seconds: float | None = None,
            max_tokens: int | None = None, max_cost_usd: float | None = None,
            session: str | None = None, parent: Run | str | None = None,
            run_id: str | None = None) -> Run:
        """A run of ``agent`` with an optional budget (``max_cost_usd``: US dollars, as the
        sidecar prices the run's model calls); use as ``with wd.run(...) as run:``.
        Inside another run it is a child run (``parent`` defaults to the enclosing run)."""
        limits = (max_tool_calls, max_iterations, max_seconds, max_tokens, max_cost_usd)
        budget: dict[str, float] = {}
        for key, value in zip(BUDGET_KEYS, limits, strict=True):
            if value is None:
                continue
            whole = key in WHOLE_BUDGET_KEYS
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 <= value <= MAX_BUDGET or (whole and value != math.floor(value)):
                raise ValueError(f"{key}={value!r} is not allowed: expected "
                                 f"{'a whole number' if whole else 'a number'} from 0 to "
                                 f"{MAX_BUDGET:g} (what the sidecar takes)")
            budget[key] = value
        if not isinstance(agent, str) or not agent:
            raise ValueError(f"agent={agent!r} is not allowed: expected the agent's name")
        return Run(self, agent=agent, budget=budget, session=session, parent=parent,
                   run_id=run_id)

    def close(self) -> None:
        """Stop the background reporter (runs still open stop reporting); the acks it still
        owes (directives put into a model request) are sent first."""
        self.reporter.close()
        self.syncer.close()
