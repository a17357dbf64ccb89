"""OTLP logs receivers: HTTP ``POST /v1/logs`` (protobuf or OTLP/JSON) and gRPC
``LogsService/Export``, read for their GenAI log events and, with ``forward_endpoint``, passed on.

A request passes the stages a trace export passes (auth, media type, content coding, admission
and back-pressure, bounded body: the trace receivers' own code); its GenAI log events
(:mod:`watchdog.core.spans.logs`) give the spans they name their content, and the request is
queued for the upstream when forwarding is on. Logs that are no GenAI events are only
forwarded. A malformed request is refused (400 / INVALID_ARGUMENT), as a Collector answers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from watchdog.core.spans.decode import DecodeError, request_digest
from watchdog.shell.config import Config
from watchdog.shell.errors import BadRequest
from watchdog.shell.metrics import Metrics
from watchdog.shell.receivers import otlp_grpc, otlp_http
from watchdog.shell.receivers.admission import Admission
from watchdog.shell.receivers.consumer import TraceConsumer

if TYPE_CHECKING:
    import grpc
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    from watchdog.shell.receivers.forward import Forwarder, Signal

LOGS_PATH = "/v1/logs"
GRPC_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"


def logs_codec(content_type: str) -> tuple[Callable[[bytes], ExportLogsServiceRequest],
                                           Callable[[int, str], bytes]]:
    """The parse and the answer of a logs request of ``content_type`` (protobuf or OTLP/JSON),
    from :mod:`watchdog.core.spans.logs`, which loads with the first logs export (with the span
    pipeline)."""
    from watchdog.core.spans import logs

    if content_type == "application/json":
        return logs.parse_logs_json, logs.logs_response_json
    return logs.parse_logs_protobuf, logs.logs_response_protobuf


class LogsReceiver(otlp_http.TraceReceiver):
    """``POST /v1/logs``: GenAI log events read, the request forwarded when forwarding is on."""

    signal: Signal = "logs"

    async def _consume(self, codec: otlp_http.Codec, body: bytes) -> tuple[bytes, bool]:
        parse, respond = logs_codec(codec.content_type)
        try:
            at_turn = await otlp_http.parse_at_turn(functools.partial(parse, body), codec,
                                                    len(body))
            fresh = await self.consumer.export_logs(at_turn, otlp_http.PROTOCOL,
                                                    request_digest(body))
        except DecodeError as exc:
            raise BadRequest(str(exc)) from None
        return respond(0, ""), fresh

    def _count(self, outcome: str) -> None:
        """``export_requests_total`` counts trace exports."""


class LogsService(otlp_grpc.TraceService):
    """``LogsService/Export``: as :class:`LogsReceiver`."""

    signal: Signal = "logs"

    async def _consume(self, body: bytes) -> tuple[bytes, bool, str]:
        parse, _ = logs_codec("application/x-protobuf")
        try:
            fresh = await self.consumer.export_logs(
                functools.partial(parse, body), otlp_grpc.PROTOCOL, request_digest(body))
        except DecodeError as exc:
            raise BadRequest(str(exc)) from None
        return b"", fresh, "ok"  # an empty ExportLogsServiceResponse: full success

    def _count(self, outcome: str) -> None:
        """As :meth:`LogsReceiver._count`."""


def install_http(app: web.Application, consumer: TraceConsumer, metrics: Metrics,
                 admission: Admission, config: Config, forward: Forwarder | None) -> None:
    """Add ``POST /v1/logs`` to the OTLP/HTTP app (not started yet)."""
    receiver = LogsReceiver(consumer, metrics, admission, config, forward)
    app.router.add_post(LOGS_PATH, receiver.handle)


def install_grpc(server: grpc.aio.Server, consumer: TraceConsumer, metrics: Metrics,
                 admission: Admission, config: Config, forward: Forwarder | None) -> None:
    """Add ``LogsService/Export`` to the gRPC server (not started yet)."""
    rpc = LogsService(consumer, metrics, admission, config, forward)
    server.add_generic_rpc_handlers((otlp_grpc.handler(GRPC_SERVICE, rpc),))
