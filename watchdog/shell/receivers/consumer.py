"""What the receivers hand decoded export requests to: two methods (traces, logs), nothing else
of the sidecar.

The OTLP receivers (HTTP, gRPC, pass-through) depend on this protocol only; the shell's
:class:`~watchdog.shell.service.WatchdogService` implements it. Raising
:class:`~watchdog.shell.errors.Overloaded` or :class:`~watchdog.shell.errors.StateUnavailable`
refuses the request with the protocol's back-pressure (HTTP 503 + Retry-After, gRPC UNAVAILABLE).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from watchdog.core.spans.decode import TraceRequest

if TYPE_CHECKING:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    from watchdog.core.spans.pipeline import Decoded


class TraceConsumer(Protocol):
    async def export_in_slices(self, parse: Callable[[], TraceRequest],
                               protocol: str, digest: bytes | None = None) -> Decoded:
        """Apply one export request, parsed by ``parse()`` when its turn comes (its
        :class:`~watchdog.core.spans.decode.DecodeError` raised to the receiver); ``digest`` (of
        its body) drops an exporter's retry unparsed."""
        ...

    async def export_logs(self, parse: Callable[[], ExportLogsServiceRequest], protocol: str,
                          digest: bytes | None = None) -> bool:
        """Read one OTLP logs export request's GenAI log events; False for an exporter's retry
        of one already read (not to be forwarded again)."""
        ...
