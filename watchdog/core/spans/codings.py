"""HTTP content codings of OTLP request bodies: gzip and deflate, inflated here with a bound.

The receiver reads the body as sent (aiohttp's own decompression is off: it refuses ``br`` and
``zstd`` with a plain-text 400 before any handler runs, where OTLP wants a 415 with a status
body) and inflates it in one bounded step: at most ``limit + 1`` bytes are ever produced, so a
gzip bomb costs ``limit`` bytes of memory, not its inflated size.

After the data (gzip's last member) only zero bytes may follow, the padding ``gzip -d`` and
Python's gzip take; anything else there is :class:`BadCoding`. The model endpoint's inflaters
(``streams.Inflater``, the compiled relay's ``inflate.rs``) keep the same rule.
"""

from __future__ import annotations

import zlib

IDENTITY = frozenset({"", "identity"})
SUPPORTED = frozenset({"", "identity", "gzip", "deflate"})
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_DEFLATE_WBITS = -zlib.MAX_WBITS  # "deflate" as some clients send it: no zlib header


class BodyTooLarge(ValueError):
    """The inflated body would exceed the limit."""


class BadCoding(ValueError):
    """The body is not valid data of its content coding."""


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` decoded from ``encoding`` (one of :data:`SUPPORTED`), at most ``limit`` bytes."""
    if encoding in IDENTITY:
        if len(body) > limit:
            raise BodyTooLarge(f"{len(body)} bytes")
        return body
    if encoding == "gzip":
        return _inflate_members(body, limit)
    try:
        return _inflate_one(body, _ZLIB_WBITS, limit)
    except BadCoding:
        return _inflate_one(body, _RAW_DEFLATE_WBITS, limit)


def _inflate_members(body: bytes, limit: int) -> bytes:
    """gzip allows several members one after the other; each is inflated in turn."""
    out = bytearray()
    data = body
    while True:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        try:
            out += inflater.decompress(data, limit + 1 - len(out))
        except zlib.error as exc:
            raise BadCoding(str(exc)) from None
        if len(out) > limit:
            raise BodyTooLarge(f"more than {limit} bytes")
        if not inflater.eof:
            raise BadCoding("the gzip data ends before its end marker")
        data = inflater.unused_data
        if not data:
            return bytes(out)
        if data[0] == 0:  # no member starts with a zero byte: padding to the end
            _padding(data, "gzip")
            return bytes(out)


def _inflate_one(body: bytes, wbits: int, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadCoding(str(exc)) from None
    if len(out) > limit:
        raise BodyTooLarge(f"more than {limit} bytes")
    if not inflater.eof:
        raise BadCoding("the deflate data ends before its end marker")
    _padding(inflater.unused_data, "deflate")
    return out


def _padding(data: bytes, coding: str) -> None:
    """What follows the data: zero bytes, else :class:`BadCoding`."""
    if data.strip(b"\0"):
        raise BadCoding(f"bytes past the end of the {coding} data (only zero bytes may pad it)")
