"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``.

The method is registered with no request deserializer, so the handler gets the message bytes
(already inflated by gRPC when the client used gzip) and parses them itself: that is how it
hashes the exact body, so an exporter retry of an applied request is not counted twice.

A message over ``max_request_bytes`` (after decompression) is refused here as HTTP refuses it
with 413: counted (``too_large``), logged (:class:`~watchdog.shell.receivers.admission.
Oversize`), answered INVALID_ARGUMENT, which OTLP exporters do not retry (a batch that does not
fit never will). gRPC core reads at most ``READ_MARGIN`` bytes more than that
(``grpc.max_receive_message_length``, as received and after decompression): past it gRPC
answers RESOURCE_EXHAUSTED itself, before the message is read whole (from its length prefix,
or as it inflates), and the watchdog never sees the call. Refusals go through
:mod:`watchdog.shell.errors`; overload is UNAVAILABLE with a ``RetryInfo``.

``grpc`` is imported when a server is created, not with this module: the sidecar creates it
at the first connection to its gRPC port (:mod:`watchdog.shell.receivers.lazy_grpc`), and one
with ``otlp_grpc_address: off`` never loads grpcio (about 11 MB and seven threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from watchdog.core.spans.decode import (
    DecodeError,
    parse_protobuf,
    request_digest,
    response_protobuf,
)
from watchdog.shell.auth import check_bearer
from watchdog.shell.config import Config
from watchdog.shell.errors import BadRequest, PayloadTooLarge, RequestTimeout, WatchdogError
from watchdog.shell.metrics import Metrics
from watchdog.shell.receivers.admission import Admission
from watchdog.shell.receivers.consumer import TraceConsumer

if TYPE_CHECKING:
    import grpc

    from watchdog.shell.receivers.forward import Forwarder, Signal

log = logging.getLogger("watchdog.otlp_grpc")

PROTOCOL = "grpc"
SERVICE_NAME = "opentelemetry.proto.collector.trace.v1.TraceService"
METHOD_NAME = "Export"
# The standard place for error details (a google.rpc.Status) in gRPC trailers.
STATUS_DETAILS_KEY = "grpc-status-details-bin"
# opentelemetry-python's gRPC exporter reads RetryInfo from this key instead of the Status.
PYTHON_RETRY_INFO_KEY = "google.rpc.retryinfo-bin"

# A call holds its processing slot while its message arrives (an overloaded receiver refuses a
# call before reading it), at most this long; as OTLP/HTTP's BODY_READ_TIMEOUT.
MESSAGE_READ_TIMEOUT = 10.0
# Calls gRPC core takes in at once, per processing slot (max_pending_requests): past the
# slots, a call is refused by the receiver (UNAVAILABLE + RetryInfo, which every OTLP exporter
# retries) without its message being read; past this many, gRPC core refuses it itself with
# RESOURCE_EXHAUSTED and no RetryInfo (a Collector's and the Go SDK's exporters drop the batch
# then) instead of queueing it unseen behind a busy event loop.
CALLS_PER_SLOT = 4

# gRPC messages are binary protobuf; they are forwarded uncompressed (gRPC inflated them).
FORWARD_CONTENT_TYPE = "application/x-protobuf"
# gRPC core refuses (unread, uncounted) a message this much over max_request_bytes; up to it the
# message is read and refused here (counted, logged, not retried). Memory: this more per call.
READ_MARGIN = 4 * 1024 * 1024
MAX_GRPC_LENGTH = 2**31 - 1  # grpc.max_receive_message_length is a C int

# export_requests_total's outcome of a call its client cancelled (or whose deadline passed)
# before it was answered; a message read by then is applied whole all the same (see _whole)
CANCELLED = "cancelled"
# How long a call whose message stream ended empty waits for the cancellation that may have
# ended it (it comes right after, from the same stream reset), before it is answered invalid.
CANCEL_NOTICE_SECONDS = 0.1

Metadata = Sequence[tuple[str, str | bytes]]
T = TypeVar("T")


class TraceService:
    signal: Signal = "traces"

    def __init__(self, consumer: TraceConsumer, metrics: Metrics, admission: Admission,
                 config: Config, forward: Forwarder | None = None) -> None:
        self.forward = forward
        self.consumer = consumer
        self.metrics = metrics
        self.admission = admission
        self.max_request_bytes = config.max_request_bytes
        self.oversize = admission.oversize("gRPC", config.max_request_bytes)
        self._expected_auth = config.api_token

    async def export(self, requests: AsyncIterator[bytes],
                     context: grpc.aio.ServicerContext) -> bytes:
        """One ``Export`` call, its message as it arrives (:func:`handler`)."""
        body: bytes | None = None
        try:
            self._authorize(context.invocation_metadata() or ())
            with self.admission:  # taken before the message is read: overload refused unread
                body = await _one_message(requests, context)
                answer, outcome = await _whole(self._export(body))
            self._count(outcome)
            return answer
        except asyncio.CancelledError:  # the client cancelled (or its deadline passed)
            self._count(CANCELLED)
            raise
        except WatchdogError as exc:
            error = exc
        except Exception:  # never a traceback to the client; the log has it
            log.exception("OTLP/gRPC export failed")
            error = WatchdogError("internal error; see the watchdog log")
        if error.export_outcome is not None:
            self._count(error.export_outcome)
        if isinstance(error, PayloadTooLarge):
            self.oversize.refused(None if body is None else len(body))
        await context.abort(_status_code(error.grpc_status), error.message,
                            trailing_metadata=_error_details(error))
        raise AssertionError("unreachable: context.abort raises")  # pragma: no cover

    async def _export(self, body: bytes) -> tuple[bytes, str]:
        """Apply the message, forward it if new; the answer and its outcome (counted once
        answered: a call cancelled meanwhile counts as ``cancelled``)."""
        if len(body) > self.max_request_bytes:
            raise PayloadTooLarge(f"export request of {len(body)} bytes exceeds "
                                  f"max_request_bytes={self.max_request_bytes} (after "
                                  f"decompression); send smaller batches")
        answer, fresh, outcome = await self._consume(body)
        if fresh and self.forward is not None:  # queued only: the upstream never delays it
            self.forward.offer(self.signal, body, FORWARD_CONTENT_TYPE)
        return answer, outcome

    async def _consume(self, body: bytes) -> tuple[bytes, bool, str]:
        """The answer, whether the request is new (not a retry of one already applied), and
        its outcome."""
        try:
            decoded = await self.consumer.export_in_slices(
                functools.partial(parse_protobuf, body), PROTOCOL, request_digest(body))
        except DecodeError as exc:
            raise BadRequest(str(exc)) from None
        return (response_protobuf(decoded.rejected_count, decoded.message()),
                not decoded.duplicate, decoded.outcome())

    def _count(self, outcome: str) -> None:
        self.metrics.export_request(PROTOCOL, outcome)

    def _authorize(self, metadata: Metadata) -> None:
        if self._expected_auth is None:
            return
        given = next((value for key, value in metadata if key == "authorization"), None)
        check_bearer(given, self._expected_auth, "the metadata authorization:")


def _status_code(code: int) -> grpc.StatusCode:
    """grpcio's status for a ``google.rpc.Code`` (the number both name)."""
    import grpc

    return next((status for status in grpc.StatusCode if status.value[0] == code),
                grpc.StatusCode.UNKNOWN)


def handler(service_name: str, receiver: TraceService) -> grpc.GenericRpcHandler:
    """``service_name``'s ``Export`` method, answered by ``receiver``. Registered as a
    client-streaming method (on the wire a unary call is a stream of one message), so the
    handler runs before the message is read: one refused for overload is never read."""
    import grpc

    return grpc.method_handlers_generic_handler(service_name, {
        METHOD_NAME: grpc.stream_unary_rpc_method_handler(receiver.export)})


async def _one_message(requests: AsyncIterator[bytes],
                       context: grpc.aio.ServicerContext) -> bytes:
    """The one message of a unary call, within ``MESSAGE_READ_TIMEOUT``."""
    body: bytes | None = None
    try:
        async with asyncio.timeout(MESSAGE_READ_TIMEOUT):
            async for message in requests:
                if body is not None:
                    raise BadRequest("an Export call carries one request message; this one "
                                     "sent more")
                body = message
    except TimeoutError:
        raise RequestTimeout(f"the request message did not arrive within "
                             f"{MESSAGE_READ_TIMEOUT:g}s") from None
    if body is None:
        await _cancelled_soon(context)
        raise BadRequest("the Export call ended without its request message")
    return body


async def _whole(work: Coroutine[Any, Any, T]) -> T:
    """``work``'s result; cancelled meanwhile, ``work`` still runs to its end (a message read is
    applied whole, never cut between two slices, and its digest kept: the exporter's retry is
    a duplicate) before the cancellation goes on, so the call's processing slot is held until
    then."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)
        if not task.cancelled() and isinstance(task.exception(), Exception) \
                and not isinstance(task.exception(), WatchdogError):
            log.error("OTLP/gRPC export failed", exc_info=task.exception())
        raise


async def _cancelled_soon(context: grpc.aio.ServicerContext) -> None:
    """A call's message stream ended empty: wait (at most ``CANCEL_NOTICE_SECONDS``) for the
    cancellation that ends it so (gRPC ends the stream first, and cancels the handler after),
    so that a cancelled call is counted as such, not as one that sent no message."""
    over = asyncio.Event()
    context.add_done_callback(lambda _context: over.set())
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CANCEL_NOTICE_SECONDS):
            await over.wait()
    if context.cancelled():
        raise asyncio.CancelledError


def _error_details(error: WatchdogError) -> tuple[tuple[str, bytes], ...]:
    details = [(STATUS_DETAILS_KEY, error.to_status().SerializeToString())]
    retry_info = error.retry_info()
    if retry_info is not None:
        details.append((PYTHON_RETRY_INFO_KEY, retry_info.SerializeToString()))
    return tuple(details)


def read_limit(max_request_bytes: int) -> int:
    """The largest message gRPC core reads (larger: RESOURCE_EXHAUSTED, the watchdog unasked)."""
    return min(max_request_bytes + READ_MARGIN, MAX_GRPC_LENGTH)


def create_server(consumer: TraceConsumer, metrics: Metrics, admission: Admission,
                  config: Config, forward: Forwarder | None = None, address: str | None = None,
                  options: Sequence[tuple[str, int]] = ()) -> tuple[grpc.aio.Server, int]:
    """A gRPC server bound to ``address`` (``otlp_grpc_address`` if None; not started), with
    grpcio ``options`` besides (or instead of) the usual ones; returns it and its port."""
    import grpc

    receiver = TraceService(consumer, metrics, admission, config, forward)
    # Bounded in flight inside gRPC core (CALLS_PER_SLOT); below that, Admission answers
    # UNAVAILABLE + RetryInfo past max_pending_requests.
    settings = {"grpc.max_receive_message_length": read_limit(config.max_request_bytes),
                # grpc sets SO_REUSEPORT by default: a second watchdog would silently share the
                # port and split the agents' spans between two processes. Refuse the port.
                "grpc.so_reuseport": 0, **dict(options)}
    server = grpc.aio.server(handlers=(handler(SERVICE_NAME, receiver),),
                             options=tuple(settings.items()),
                             maximum_concurrent_rpcs=CALLS_PER_SLOT
                             * config.max_pending_requests)
    address = address if address is not None else config.otlp_grpc_address
    port = server.add_insecure_port(address)
    if port == 0 and not address.endswith(":0"):  # older grpcio: no raise
        raise RuntimeError(f"Failed to bind to address {address}")
    return server, port
