"""The OTLP metrics receivers, for pass-through only (DESIGN §2): HTTP ``POST /v1/metrics``,
gRPC ``MetricsService/Export`` (logs are read for their GenAI events: :mod:`~watchdog.shell.
receivers.otlp_logs`).

The watchdog reads nothing in them: each request passes the same stages as a trace export
(auth, media type, content coding, admission, bounded body — the trace receivers' own code),
is checked to be a well-formed OTLP message (400 / INVALID_ARGUMENT otherwise, as a Collector
answers), queued for ``forward_endpoint`` and answered with an empty success at once.

They exist only with ``forward_endpoint`` set. Without it the watchdog answers as an OTel
Collector whose pipelines have no metrics or logs: the Collector registers no handler for a
signal without a pipeline, so HTTP answers 404 and gRPC ``UNIMPLEMENTED``. Accepting and
discarding would hide a misconfiguration — the agent's metrics would silently go nowhere; a 404
shows up in the agent's exporter log.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from watchdog.shell.config import Config
from watchdog.shell.errors import BadRequest
from watchdog.shell.metrics import Metrics
from watchdog.shell.receivers import otlp_grpc, otlp_http
from watchdog.shell.receivers.admission import Admission
from watchdog.shell.receivers.consumer import TraceConsumer
from watchdog.shell.receivers.forward import Forwarder, Signal

if TYPE_CHECKING:
    import grpc
    from google.protobuf.message import Message

PATHS: dict[Signal, str] = {"metrics": "/v1/metrics"}
GRPC_SERVICES: dict[Signal, str] = {
    "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService",
}
EMPTY_RESPONSE = {"application/x-protobuf": b"", "application/json": b"{}"}  # full success


def request_message(signal: Signal) -> type[Message]:
    """The export request message of ``signal`` (metrics, or logs passed on unread), loaded
    at its first check."""
    if signal == "metrics":
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )

        return ExportMetricsServiceRequest
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    return ExportLogsServiceRequest


def check_message(signal: Signal, body: bytes, content_type: str) -> None:
    """Refuse what is not an OTLP ``signal`` export request. JSON is checked to be an object
    only: OTLP/JSON differs from protobuf's JSON mapping (hex ids), the upstream reads it."""
    if content_type == "application/json":
        try:
            document = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(f"invalid JSON: {exc}") from None
        if not isinstance(document, dict):
            raise BadRequest("invalid OTLP/JSON payload: the top level must be an object")
        return
    from google.protobuf.message import DecodeError as ProtobufDecodeError

    try:
        request_message(signal)().ParseFromString(body)
    except ProtobufDecodeError as exc:
        raise BadRequest(f"invalid OTLP {signal} protobuf payload: {exc}") from None


class PassThroughReceiver(otlp_http.TraceReceiver):
    """An OTLP/HTTP receiver of ``signal`` whose one consumer is the forwarder."""

    def __init__(self, signal: Signal, consumer: TraceConsumer, metrics: Metrics,
                 admission: Admission, config: Config, forward: Forwarder) -> None:
        super().__init__(consumer, metrics, admission, config, forward)
        self.signal = signal

    async def _consume(self, codec: otlp_http.Codec, body: bytes) -> tuple[bytes, bool]:
        check_message(self.signal, body, codec.content_type)
        return EMPTY_RESPONSE[codec.content_type], True

    def _count(self, outcome: str) -> None:
        """``export_requests_total`` counts trace exports; these are counted when forwarded."""


class PassThroughService(otlp_grpc.TraceService):
    """An OTLP/gRPC ``Export`` of ``signal`` whose one consumer is the forwarder."""

    def __init__(self, signal: Signal, consumer: TraceConsumer, metrics: Metrics,
                 admission: Admission, config: Config, forward: Forwarder) -> None:
        super().__init__(consumer, metrics, admission, config, forward)
        self.signal = signal

    async def _consume(self, body: bytes) -> tuple[bytes, bool, str]:
        check_message(self.signal, body, otlp_grpc.FORWARD_CONTENT_TYPE)
        return b"", True, "ok"  # an empty Export*ServiceResponse: full success

    def _count(self, outcome: str) -> None:
        """As :meth:`PassThroughReceiver._count`."""


def install_http(app: web.Application, consumer: TraceConsumer, metrics: Metrics,
                 admission: Admission, config: Config, forward: Forwarder) -> None:
    """Add ``POST /v1/metrics`` to the OTLP/HTTP app (not started yet)."""
    for signal, path in PATHS.items():
        receiver = PassThroughReceiver(signal, consumer, metrics, admission, config, forward)
        app.router.add_post(path, receiver.handle)


def install_grpc(server: grpc.aio.Server, consumer: TraceConsumer, metrics: Metrics,
                 admission: Admission, config: Config, forward: Forwarder) -> None:
    """Add ``MetricsService/Export`` to the gRPC server (not started yet)."""
    handlers = []
    for signal, name in GRPC_SERVICES.items():
        rpc = PassThroughService(signal, consumer, metrics, admission, config, forward)
        handlers.append(otlp_grpc.handler(name, rpc))
    server.add_generic_rpc_handlers(tuple(handlers))
