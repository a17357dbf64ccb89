"""HTTP content codings of OTLP request bodies: gzip and deflate, inflated here with a bound.

The receiver reads the body as sent (aiohttp's own decompression is off: it refuses ``br`` and
``zstd`` with a plain-text 400 before any handler runs, where OTLP wants a 415 with a status
body) and inflates it in one bounded step: at most ``limit + 1`` bytes are ever produced, so a
gzip bomb costs ``limit`` bytes of memory, not its inflated size.

After the data (gzip's last member) only zero bytes may follow, the padding ``gzip -d`` and
Python's gzip take; anything else there is :class:`BadCoding`. The model endpoint's inflaters
(``streams.Inflater``, the compiled relay's ``inflate.rs``) keep the same rule.

A body taken so goes on to the upstream (pass-through) as it came where a Collector reads it
that way, else in the nearest form it does read (:func:`forwardable`): Go's zlib reader (the
Collector's ``deflate``) wants zlib's header, and its gzip reader takes zero bytes after a
member for the header of another.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

IDENTITY = frozenset({"", "identity"})
SUPPORTED = frozenset({"", "identity", "gzip", "deflate"})
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_DEFLATE_WBITS = -zlib.MAX_WBITS  # "deflate" as some clients send it: no zlib header
# zlib's header for deflate data with a window of up to 32 KiB (the most raw deflate can use):
# CM 8, CINFO 7; FLEVEL 2, no dictionary, and the check bits that make it a multiple of 31
ZLIB_HEADER = b"\x78\x9c"


class BodyTooLarge(ValueError):
    """The inflated body would exceed the limit."""


class BadCoding(ValueError):
    """The body is not valid data of its content coding."""


@dataclass(frozen=True, slots=True)
class Inflated:
    """A body decoded: what it holds, where its coded data ends in it (zero bytes of padding
    after that), and whether it was deflate as raw data (no zlib header and checksum)."""

    data: bytes
    end: int
    raw: bool = False


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` decoded from ``encoding`` (one of :data:`SUPPORTED`), at most ``limit`` bytes."""
    return decode(body, encoding, limit).data


def decode(body: bytes, encoding: str, limit: int) -> Inflated:
    """:func:`inflate`, and how the body was coded (for :func:`forwardable`)."""
    if encoding in IDENTITY:
        if len(body) > limit:
            raise BodyTooLarge(f"{len(body)} bytes")
        return Inflated(body, len(body))
    if encoding == "gzip":
        return _inflate_members(body, limit)
    try:
        return _inflate_one(body, _ZLIB_WBITS, limit)
    except BadCoding:
        return _inflate_one(body, _RAW_DEFLATE_WBITS, limit)


def forwardable(body: bytes, encoding: str, inflated: Inflated) -> bytes:
    """``body`` (of ``encoding``, decoded as ``inflated``) as a receiver that reads gzip and
    zlib as Go does (an OpenTelemetry Collector) takes it: as it came, but raw deflate as zlib
    (its header, the same compressed data, the Adler-32 of what it holds: nothing compressed
    again), and gzip without the zero bytes after its last member."""
    if inflated.raw:
        return (ZLIB_HEADER + body[:inflated.end]
                + zlib.adler32(inflated.data).to_bytes(4, "big"))
    if encoding == "gzip" and inflated.end < len(body):
        return body[:inflated.end]
    return body


def _inflate_members(body: bytes, limit: int) -> Inflated:
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
            return Inflated(bytes(out), len(body))
        if data[0] == 0:  # no member starts with a zero byte: padding to the end
            _padding(data, "gzip")
            return Inflated(bytes(out), len(body) - len(data))


def _inflate_one(body: bytes, wbits: int, limit: int) -> Inflated:
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
    return Inflated(out, len(body) - len(inflater.unused_data), wbits == _RAW_DEFLATE_WBITS)


def _padding(data: bytes, coding: str) -> None:
    """What follows the data: zero bytes, else :class:`BadCoding`."""
    if data.strip(b"\0"):
        raise BadCoding(f"bytes past the end of the {coding} data (only zero bytes may pad it)")
