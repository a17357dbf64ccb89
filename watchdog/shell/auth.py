"""Bearer-token checks shared by the control API and the OTLP receivers (HTTP and gRPC)."""

from __future__ import annotations

from watchdog.shell.errors import Unauthorized


def check_bearer(authorization: str | bytes | None, token: str | None, where: str) -> None:
    """Raise :class:`Unauthorized` unless ``authorization`` is ``Bearer <token>``.

    No token configured means no check (the servers then bind loopback only, see config).
    The comparison takes constant time so the token cannot be guessed byte by byte.
    """
    if token is None:
        return
    import hmac  # (only where a token is set: the defaults bind loopback and check none)

    if isinstance(authorization, bytes):
        authorization = authorization.decode("utf-8", "replace")
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode("utf-8", "replace"), token.encode("utf-8")):
        raise Unauthorized(f"missing or wrong bearer token: send {where} 'Bearer <token>'")
