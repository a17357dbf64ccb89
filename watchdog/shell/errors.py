"""Every error a user can see, and the one place that maps it to HTTP and gRPC.

Retryable errors (overload) carry ``retry_after`` so receivers can answer with the protocol's
back-pressure: HTTP 429/503 + ``Retry-After``, gRPC ``UNAVAILABLE`` with ``RetryInfo``.
Permanent errors tell the client not to retry (OTLP exporters drop data on 400/413/415).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (the messages load when an error is written: the codes are plain ints)
    from google.rpc import error_details_pb2, status_pb2


class Code:
    """The ``google.rpc.Code`` values used here (``google/rpc/code.proto``: gRPC's status codes),
    plain ints as ``google.rpc.code_pb2`` has them."""

    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    UNIMPLEMENTED = 12
    RESOURCE_EXHAUSTED = 8
    INTERNAL = 13
    UNAVAILABLE = 14
    UNAUTHENTICATED = 16


class WatchdogError(Exception):
    """Base class: ``code`` is a stable machine-readable name, the message is for humans."""

    code = "internal"
    http_status = 500
    grpc_status: int = Code.INTERNAL  # a google.rpc.Code
    retry_after: float | None = None
    export_outcome: str | None = None  # the OTLP receivers' request-outcome metric label

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_json(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}

    def to_status(self) -> status_pb2.Status:
        """The ``google.rpc.Status`` OTLP puts in error bodies (HTTP) and in the
        ``grpc-status-details-bin`` trailer (gRPC); back-pressure carries a ``RetryInfo``."""
        from google.rpc import status_pb2

        status = status_pb2.Status(code=self.grpc_status, message=self.message)
        retry_info = self.retry_info()
        if retry_info is not None:
            status.details.add().Pack(retry_info)
        return status

    def retry_info(self) -> error_details_pb2.RetryInfo | None:
        if self.retry_after is None:
            return None
        from google.rpc import error_details_pb2

        retry_info = error_details_pb2.RetryInfo()
        retry_info.retry_delay.FromNanoseconds(round(self.retry_after * 1e9))
        return retry_info


class BadRequest(WatchdogError):
    code = "bad_request"
    http_status = 400
    grpc_status = Code.INVALID_ARGUMENT
    export_outcome = "invalid"


class Unauthorized(WatchdogError):
    code = "unauthorized"
    http_status = 401
    grpc_status = Code.UNAUTHENTICATED
    export_outcome = "unauthorized"


class NotFound(WatchdogError):
    code = "not_found"
    http_status = 404
    grpc_status = Code.NOT_FOUND


class MethodNotAllowed(WatchdogError):
    code = "method_not_allowed"
    http_status = 405
    grpc_status = Code.UNIMPLEMENTED


class PayloadTooLarge(WatchdogError):
    code = "payload_too_large"
    http_status = 413
    # A request that will never fit: OTLP/gRPC names INVALID_ARGUMENT not retryable (the
    # exporters retry RESOURCE_EXHAUSTED, whatever the spec says of it without RetryInfo).
    grpc_status = Code.INVALID_ARGUMENT
    export_outcome = "too_large"


class UnsupportedMediaType(WatchdogError):
    code = "unsupported_media_type"
    http_status = 415
    grpc_status = Code.INVALID_ARGUMENT
    export_outcome = "unsupported_media_type"


class RequestTimeout(WatchdogError):
    """The client did not send its request body in time (a stalled upload holds a slot)."""

    code = "request_timeout"
    http_status = 408
    grpc_status = Code.DEADLINE_EXCEEDED
    export_outcome = "invalid"


class Overloaded(WatchdogError):
    """Too much work in flight; the client should retry after ``retry_after`` seconds."""

    code = "overloaded"
    http_status = 503
    grpc_status = Code.UNAVAILABLE
    export_outcome = "overloaded"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ConfigError(WatchdogError):
    """A configuration key has a bad value; the message names the key, value and what is allowed."""

    code = "config"


class StateUnavailable(Overloaded):
    """The state store cannot be written (disk full, read-only, I/O error): work that would be
    acknowledged but not persisted is refused until a write succeeds again."""

    code = "state_unavailable"
    export_outcome = "state_unavailable"


class StartupError(WatchdogError):
    """The sidecar cannot start (a port is taken, the rules or the state dir are unusable); the
    message names the problem and what to do, for one line on stderr and exit code 2."""

    code = "startup"
