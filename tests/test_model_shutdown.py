"""The model endpoint at a SIGTERM, on both relays: it stops taking requests (its listener
closes, an idle keep-alive connection is closed), lets the model requests in flight finish
within ``model_shutdown_grace`` (a new conversation's first request the compiled relay sent on
ahead of Python included), books and stores each call that completed, and exits cleanly; what
outlasts the grace is cut, and the process still exits cleanly, on time — a real ``watchdog
serve`` process, the ``openai`` SDK as the agent, a loopback upstream the test holds."""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx2 as httpx
import openai
import pytest

from tests.faulty_upstream import stream_events
from tests.harness import wait_until
from tests.ports import free_port
from tests.processes import fresh_ports, running_sidecar, serve_env
from tests.test_model_proxy import RawUpstream, Seen, send

RELAYS = ("python", "native")
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {}}}]


def handing_over(number: int) -> bytes:
    """A completion that hands one tool call over."""
    return json.dumps({
        "id": f"chatcmpl-{number}", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{number}", "type": "function",
                "function": {"name": "search", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}).encode()


class HeldUpstream:
    """Answers at once, except a request whose last user message says ``hold``: that one is
    answered when ``release`` is set (``held`` is set when it has come); a stream has its head
    and first event sent before it waits."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.release = threading.Event()
        self.raw = RawUpstream(self._reply)

    def _reply(self, handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        body = json.loads(seen.body or b"{}")
        number = len(self.raw.seen)
        hold = body.get("messages", [{}])[-1].get("content") == "hold"
        if body.get("stream"):
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            for index, event in enumerate(stream_events(f"{number}", 1, None)):
                if hold and index == 1:
                    self.held.set()
                    if not self.release.wait(60):
                        return
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
            return
        if hold:
            self.held.set()
            if not self.release.wait(60):
                return
        send(handler, 200, handing_over(number))

    def close(self) -> None:
        self.release.set()
        self.raw.close()


@pytest.fixture
def upstream() -> Iterator[HeldUpstream]:
    held = HeldUpstream()
    yield held
    held.close()


def refused(port: int) -> bool:
    """Nothing listens at ``127.0.0.1:port`` any more."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def ask(port: int, conversation: str, results: list[Any], kind: str = "whole") -> None:
    """A new conversation's first request, through the ``openai`` SDK (no retry): its answer
    (a stream's tool call ids), or the error it met, in ``results``. ``kind``: ``whole``,
    ``stream``, or ``final`` (a budget of 0 tool calls: the run's final request)."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/agent/drainer/v1", api_key="k",
                           max_retries=0, timeout=60, default_headers={
                               "x-watchdog-budget-tool-calls": "0"} if kind == "final" else {})
    messages: Any = [{"role": "system", "content": f"conversation {conversation}"},
                     {"role": "user", "content": conversation}]
    try:
        if kind == "stream":
            results.append([call.id for chunk in client.chat.completions.create(
                model="m", tools=TOOLS, messages=messages, stream=True)  # type: ignore[arg-type]
                for choice in chunk.choices for call in choice.delta.tool_calls or ()
                if call.id])
        else:
            results.append(client.chat.completions.create(
                model="m", tools=TOOLS, messages=messages))  # type: ignore[arg-type]
    except (openai.APIError, httpx.TransportError) as exc:  # (a stream's: httpx's own)
        results.append(exc)
    finally:
        client.close()


def sidecar_env(tmp_path: Path, upstream: HeldUpstream, relay: str, model_port: int,
                grace: str) -> tuple[dict[str, str], dict[str, int]]:
    ports = fresh_ports()
    env = serve_env(tmp_path / "state", ports,
                    WATCHDOG_MODEL_ADDRESS=f"127.0.0.1:{model_port}",
                    WATCHDOG_MODEL_UPSTREAM=upstream.raw.base + "/v1",
                    WATCHDOG_MODEL_RELAY=relay, WATCHDOG_MODEL_SHUTDOWN_GRACE=grace)
    return env, ports


def stopped(process: subprocess.Popen[str]) -> float:
    """SIGTERM, then the seconds until the process exited (it must exit 0)."""
    process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert process.wait(timeout=60) == 0
    return time.monotonic() - started


@pytest.mark.parametrize("kind", ["whole", "stream", "final"])
@pytest.mark.parametrize("relay", RELAYS)
def test_sigterm_lets_a_model_request_in_flight_finish_and_books_it(
        tmp_path: Path, upstream: HeldUpstream, relay: str, kind: str) -> None:
    """A request with the upstream at the SIGTERM: a new conversation's (on the compiled relay
    sent on ahead of Python, its agent's first run decided), a stream already begun, a run's
    final request (its answer held: on the compiled relay until Python releases it)."""
    model_port = free_port()
    env, ports = sidecar_env(tmp_path, upstream, relay, model_port, "30s")
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        with running_sidecar(env, ports["metrics"], stderr=log) as process:
            first: list[Any] = []
            ask(model_port, "first", first)  # (decided by Python: the next one goes ahead)
            assert not isinstance(first[0], Exception), first
            idle = http.client.HTTPConnection("127.0.0.1", model_port, timeout=10)
            idle.request("POST", "/agent/drainer/v1/chat/completions", json.dumps({
                "model": "m", "messages": [{"role": "user", "content": "idle"}]}),
                {"Content-Type": "application/json"})
            assert idle.getresponse().read() and idle.sock is not None  # kept alive
            held: list[Any] = []
            asking = threading.Thread(target=ask, args=(model_port, "hold", held, kind))
            asking.start()
            assert upstream.held.wait(30), "the held request reached the upstream"
            process.send_signal(signal.SIGTERM)
            wait_until(lambda: refused(model_port), "the model listener closed", timeout=30)
            idle.sock.settimeout(10)
            assert idle.sock.recv(1) == b""  # the idle keep-alive connection was closed
            assert process.poll() is None  # still serving the request in flight
            upstream.release.set()
            asking.join(30)
            assert process.wait(timeout=60) == 0
            log.seek(0)
            text = log.read()
        [answer] = held
        assert not isinstance(answer, Exception), answer
        if kind == "stream":
            assert answer == ["call_3_0"]
        elif kind == "whole":
            assert answer.choices[0].message.tool_calls[0].id == "call_3"
        else:  # (the final turn: the tools withdrawn; the call asked for again, the stop note)
            assert json.loads(upstream.raw.seen[-1].body)["tool_choice"] == "none"
            assert not answer.choices[0].message.tool_calls
            assert (answer.choices[0].message.content or "").startswith(
                "The agent-watchdog stopped this run: the model asked for tools again"), answer
        assert "Traceback" not in text, text[-3000:]
        assert "the model requests in flight (1) get up to 30 s to finish" in text, text[-3000:]

    # what completed was booked and stored: the next start finds each run's call counted
    env, ports = sidecar_env(tmp_path, upstream, relay, free_port(), "30s")
    with running_sidecar(env, ports["metrics"]):
        api = f"http://127.0.0.1:{ports['api']}/v1/runs"
        runs = get_json(f"{api}?agent=drainer")["runs"]
        assert len(runs) == 3, runs
        for run in runs:
            signals = get_json(f"{api}/{run['id']}")["signals"]
            assert signals["iterations"] == 1, signals


@pytest.mark.parametrize("kind", ["whole", "stream", "final"])
@pytest.mark.parametrize("relay", RELAYS)
def test_sigterm_cuts_what_outlasts_model_shutdown_grace(
        tmp_path: Path, upstream: HeldUpstream, relay: str, kind: str) -> None:
    model_port = free_port()
    env, ports = sidecar_env(tmp_path, upstream, relay, model_port, "200ms")
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        with running_sidecar(env, ports["metrics"], stderr=log) as process:
            held: list[Any] = []
            asking = threading.Thread(target=ask, args=(model_port, "hold", held, kind))
            asking.start()
            assert upstream.held.wait(30), "the held request reached the upstream"
            took = stopped(process)
            asking.join(30)
            log.seek(0)
            text = log.read()
        assert took < 15, took  # the grace, and the state's last flush: not the upstream's wait
        [answer] = held  # cut, never a clean answer
        assert isinstance(answer, openai.APIConnectionError | httpx.TransportError), answer
        assert "Traceback" not in text, text[-3000:]


# -- helpers ------------------------------------------------------------------------------------

def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return json.loads(response.read())


@pytest.mark.parametrize("relay", RELAYS)
def test_a_request_whose_head_comes_once_the_endpoint_stops_is_not_taken(
        tmp_path: Path, upstream: HeldUpstream, relay: str) -> None:
    """A request whose head was still coming at the SIGTERM never reaches the upstream: the
    compiled relay answers it 503 (``stopping``, ``Retry-After``) and closes its connection;
    aiohttp closes such a connection at once, answering nothing."""
    model_port = free_port()
    env, ports = sidecar_env(tmp_path, upstream, relay, model_port, "30s")
    with running_sidecar(env, ports["metrics"]) as process:
        held: list[Any] = []
        asking = threading.Thread(target=ask, args=(model_port, "hold", held))
        asking.start()
        assert upstream.held.wait(30), "the held request reached the upstream"
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "late"}]})
        with socket.create_connection(("127.0.0.1", model_port), timeout=10) as late:
            late.sendall(b"POST /agent/late/v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            # (taken off the listener's backlog before the SIGTERM: one still queued there is
            # reset when the listener closes, which is not what this test is about)
            wait_until(lambda: not backlog(model_port), "the late connection accepted",
                       timeout=30)
            process.send_signal(signal.SIGTERM)
            wait_until(lambda: refused(model_port), "the model listener closed", timeout=30)
            answer = b""
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                late.sendall(f"Content-Type: application/json\r\nContent-Length: {len(body)}"
                             f"\r\n\r\n{body}".encode())
                while chunk := late.recv(65536):
                    answer += chunk
        upstream.release.set()
        asking.join(30)
        assert process.wait(timeout=60) == 0
    assert not isinstance(held[0], Exception), held  # the request in flight was answered
    assert len(upstream.raw.seen) == 1  # the late one never went upstream
    if relay == "python":
        assert answer == b""
        return
    head, _, text = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), answer
    assert b"\r\nRetry-After: 1\r\n" in head and b"\r\nConnection: close\r\n" in head
    assert json.loads(text)["error"]["code"] == "stopping"


def backlog(port: int) -> int:
    """The connections waiting in the accept queue of the listener on 127.0.0.1:``port``
    (a listening socket's receive queue in ``/proc/net/tcp``)."""
    address = f"0100007F:{port:04X}"
    for line in Path("/proc/net/tcp").read_text(encoding="ascii").splitlines()[1:]:
        fields = line.split()
        if fields[1] == address and fields[3] == "0A":  # (LISTEN)
            return int(fields[4].split(":")[1], 16)
    return 0


@pytest.mark.parametrize("relay", RELAYS)
def test_a_second_sigterm_cuts_the_grace_short(
        tmp_path: Path, upstream: HeldUpstream, relay: str) -> None:
    """Stopping, with a model request held and a grace of an hour: a second SIGTERM (or
    Ctrl-C) cuts what is in flight, and the sidecar stores its state and exits at once."""
    model_port = free_port()
    env, ports = sidecar_env(tmp_path, upstream, relay, model_port, "1h")
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        with running_sidecar(env, ports["metrics"], stderr=log) as process:
            held: list[Any] = []
            asking = threading.Thread(target=ask, args=(model_port, "hold", held, "stream"))
            asking.start()
            assert upstream.held.wait(30), "the held request reached the upstream"
            process.send_signal(signal.SIGTERM)
            wait_until(lambda: refused(model_port), "the model listener closed", timeout=30)
            assert process.poll() is None  # (draining)
            took = stopped(process)
            asking.join(30)
            log.seek(0)
            text = log.read()
        assert took < 15, took
        [answer] = held  # cut, never a clean answer
        assert isinstance(answer, openai.APIConnectionError | httpx.TransportError), answer
        assert "stopping at once: the model requests in flight are cut" in text, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
