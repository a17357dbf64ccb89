"""A loopback Chat Completions upstream that hands tool calls over (each with arguments of its
own, whole or streamed, as the request's ``stream`` asks) and fails the requests the test
names, in the ways an upstream fails: a reset before its head or mid-body, a stall, an error
status with a body, a stream in odd but valid SSE (events split across writes, CRLF lines,
comments, no ``[DONE]``), a ``data:`` that is not JSON, gzip."""

from __future__ import annotations

import gzip
import hashlib
import json
import socket
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.test_model_proxy import RawUpstream, Seen

FAULTS = ("reset_head", "reset_mid", "stall", "429", "500", "odd_sse", "no_done", "junk_data",
          "gzip", "hold_head", "hold_mid")


def reset(handler: BaseHTTPRequestHandler) -> None:
    """Close the connection with a TCP reset (SO_LINGER 0)."""
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.connection.close()
    handler.close_connection = True


class FaultyUpstream:
    """``faults``: the upstream's request number (from 0) -> the fault it meets; every other
    request is answered with ``metadata.calls`` tool calls (0: a plain answer; none once the
    request withdraws the tools). ``released``: what a stalled request waits for."""

    def __init__(self, faults: dict[int, str] | None = None) -> None:
        self.faults = dict(faults or {})
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.count = 0
        self.came = threading.Event()  # set when the next request comes
        self.raw = RawUpstream(self._reply)

    @property
    def base(self) -> str:
        return self.raw.base

    @property
    def seen(self) -> list[Seen]:
        return self.raw.seen

    def close(self) -> None:
        self.released.set()
        self.raw.close()

    def _reply(self, handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        with self.lock:
            number, self.count = self.count, self.count + 1
            came, self.came = self.came, threading.Event()
            following = self.came  # set when the request after this one comes
        came.set()
        fault = self.faults.get(number)
        body = json.loads(seen.body)
        tag = hashlib.sha256(seen.body).hexdigest()[:10]
        calls = 0 if body.get("tool_choice") == "none" or not body.get("tools") else int(
            body.get("metadata", {}).get("calls", 0))
        if fault == "reset_head":
            return reset(handler)
        if fault == "hold_head":  # answered once the next request has come (a client's retry)
            following.wait(30)
        if fault == "stall":
            self.released.wait(60)
            return reset(handler)
        if fault in ("429", "500"):
            error = json.dumps({"error": {"message": "try later", "type": "rate_limit",
                                          "code": fault}}).encode()
            handler.send_response(int(fault))
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(error)))
            if fault == "429":
                handler.send_header("Retry-After", "0")
            handler.end_headers()
            handler.wfile.write(error)
            return None
        if body.get("stream"):
            return self._stream(handler, tag, calls, fault, following)
        whole = json.dumps(completion(tag, calls)).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if fault == "gzip":
            whole = gzip.compress(whole)
            handler.send_header("Content-Encoding", "gzip")
        if fault == "reset_mid":
            handler.send_header("Content-Length", str(len(whole)))
            handler.end_headers()
            handler.wfile.write(whole[:len(whole) // 2])
            handler.wfile.flush()
            return reset(handler)
        handler.send_header("Content-Length", str(len(whole)))
        handler.end_headers()
        handler.wfile.write(whole)
        return None

    def _stream(self, handler: BaseHTTPRequestHandler, tag: str, calls: int,
                fault: str | None, following: threading.Event) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        if fault == "gzip":
            handler.send_header("Content-Encoding", "gzip")
        handler.end_headers()
        events = list(stream_events(tag, calls, fault))
        data = b"".join(events)
        if fault == "gzip":
            data = gzip.compress(data)
            events = [data]
        pieces: list[bytes] = []
        if fault == "odd_sse":  # every event split in three writes
            for event in events:
                third = max(1, len(event) // 3)
                pieces += [event[:third], event[third:2 * third], event[2 * third:]]
        else:
            pieces = events
        for index, piece in enumerate(pieces):
            if fault == "reset_mid" and index == len(pieces) // 2:
                handler.wfile.flush()
                return reset(handler)
            if fault == "hold_mid" and index == len(pieces) // 2:
                following.wait(30)
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
        return None


def completion(tag: str, calls: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else "done"}
    if calls:
        message["tool_calls"] = [{"id": f"call_{tag}_{n}", "type": "function", "function": {
            "name": "search", "arguments": json.dumps({"q": f"{tag} {n}"})}}
            for n in range(calls)]
    return {"id": "chatcmpl-" + tag, "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12}}


def stream_events(tag: str, calls: int, fault: str | None) -> Iterator[bytes]:
    newline = b"\r\n" if fault == "odd_sse" else b"\n"

    def event(payload: dict[str, Any] | str) -> bytes:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        return b"data: " + text.encode() + newline + newline

    head = {"id": "chatcmpl-" + tag, "object": "chat.completion.chunk", "created": 1,
            "model": "m"}
    if fault == "odd_sse":
        yield b": a comment" + newline + newline
    yield event({**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                            "content": None if calls else ""},
                                      "finish_reason": None}]})
    if not calls:
        yield event({**head, "choices": [{"index": 0, "delta": {"content": "done"},
                                          "finish_reason": None}]})
    for n in range(calls):
        yield event({**head, "choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": n, "id": f"call_{tag}_{n}", "type": "function",
            "function": {"name": "search", "arguments": ""}}]}, "finish_reason": None}]})
        yield event({**head, "choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": n, "function": {"arguments": json.dumps({"q": f"{tag} {n}"})}}]},
            "finish_reason": None}]})
        if fault == "junk_data" and n == 0:
            yield event("not json at all")
    yield event({**head, "choices": [{"index": 0, "delta": {},
                                      "finish_reason": "tool_calls" if calls else "stop"}],
                 "usage": None})
    if fault != "no_done":
        yield event("[DONE]")
