"""The model endpoint when the client or the upstream misbehaves (DESIGN §12), on both relays:
every wait is bounded (an upstream silent on a run's final request, a body that never comes), a
whole response cut or stalled mid-body is never a clean short answer, a request without one
Host is refused, failures say what happened, and refusals are counted under the agent the
request names — a real sidecar in front of a raw upstream the test scripts byte by byte."""

from __future__ import annotations

import gzip
import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.harness import (
    RunningServer,
    http_request,
    run_detail,
    wait_until,
)
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)
from tests.test_model_proxy import (
    COMPLETION,
    RawUpstream,
    Seen,
    completion_reply,
    metric,
    post,
    reset,
    send,
    sidecar_for,
)


@pytest.fixture
def relay(model_relay: str) -> str:  # noqa: F811
    """The test's relay, for test_model_proxy's ``sidecar_for``, which starts its sidecars."""
    return model_relay


TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
# a whole answer asking for one call of TOOLS' tool
ONE_TOOL_CALL = json.dumps({
    "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "search", "arguments": "{}"}}]}}]}).encode()


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """Set at the test's end: what a stalled upstream waits for."""
    event = threading.Event()
    yield event
    event.set()


def outcomes(sidecar: RunningServer, agent: str) -> dict[str, float]:
    """``model_requests_total`` of ``agent``, by outcome."""
    prefix = f'agent_watchdog_model_requests_total{{agent="{agent}",api="chat",outcome='
    _, text = http_request("GET", sidecar.metrics + "/metrics")
    return {line[len(prefix):].split('"')[1]: float(line.rsplit(" ", 1)[1])
            for line in text.decode().splitlines() if line.startswith(prefix)}


def finals(sidecar: RunningServer) -> int:
    """The final requests the compiled relay carried itself (0 on the aiohttp relay)."""
    native = sidecar.server.native
    return 0 if native is None else native.finals


def raw_exchange(sidecar: RunningServer, request: bytes, wait: float = 10) -> bytes:
    """What the endpoint answers to these bytes, until it closes the connection (or ``wait``
    seconds pass: then the answer so far, and ``<no end>``)."""
    host, port = sidecar.server.addresses["model"]
    with socket.create_connection((host, port), timeout=wait) as sock:
        sock.sendall(request)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:
            answer += b"<no end>"
    return answer


def first_request(sidecar: RunningServer, agent: str, budget: str | None) -> tuple[int, bytes]:
    """A run's first Chat Completions request, of ``agent``, with a tool-call bound or none."""
    headers = {"x-watchdog-agent": agent}
    if budget is not None:
        headers["x-watchdog-budget-tool-calls"] = budget
    return post(sidecar, "/v1/chat/completions", json.dumps({
        "model": "m", "messages": [{"role": "user", "content": "x"}]}).encode(), headers)


# -- every wait bounded -------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_final_request_whose_upstream_never_answers_is_504_and_its_run_settled(
        relay: str, tmp_path: Path, released: threading.Event, stream: bool) -> None:
    """A run's budget is spent: its next request goes upstream once more for the final
    report (on the compiled relay too, which holds the answer until Python releases it).
    An upstream that sends no head within ``model_upstream_timeout`` gets the agent a 504, on
    both relays, and the run has no model call running any more."""
    def silent(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        released.wait(60)

    raw = RawUpstream(silent)
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay, model_upstream_timeout=0.5) as sidecar:
            body = json.dumps({"model": "m", "stream": stream, "tools": TOOLS, "messages": [
                {"role": "user", "content": f"final {stream}"}]}).encode()
            started = time.monotonic()
            status, answer = post(sidecar, "/v1/chat/completions", body, {
                "x-watchdog-agent": "finisher", "x-watchdog-budget-tool-calls": "0"})
            assert status == 504, answer
            assert time.monotonic() - started < 8
            error = json.loads(answer)["error"]
            assert error["code"] == "upstream_timeout"
            assert "did not answer within 0.5 s" in error["message"]
            assert json.loads(raw.seen[0].body)["tool_choice"] == "none"  # the final turn
            runs = sidecar.get_json("/v1/runs")["runs"]
            assert len(runs) == 1
            wait_until(lambda: (run_detail(sidecar.api, runs[0]["id"]) or {}).get(
                "signals", {}).get("in_flight") == 0, "the run has no model call running")
            assert outcomes(sidecar, "finisher") == {"upstream_timeout": 1.0}
            assert finals(sidecar) == (1 if relay == "native" else 0)
    finally:
        released.set()
        raw.close()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_body_that_does_not_arrive_in_time_is_408_and_frees_its_slot(
        relay: str, tmp_path: Path, upstream_ok: RawUpstream, path: str) -> None:
    """A client that sends a request's head and part of its body, then nothing: past
    ``model_body_timeout`` it is answered 408 in the API's error shape and its connection
    closed, so stalled bodies never hold ``model_max_concurrent``'s slots."""
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"x-watchdog-agent: staller\r\nContent-Length: 60\r\n\r\n").encode() + b'{"mod'
    with sidecar_for(tmp_path, upstream_ok, model_relay=relay, model_body_timeout=0.5,
                     model_max_concurrent=2) as sidecar:
        answers: list[bytes] = []
        stalled = [threading.Thread(target=lambda: answers.append(raw_exchange(sidecar, head)))
                   for _ in range(2)]
        for thread in stalled:
            thread.start()
        for thread in stalled:
            thread.join(15)
        assert len(answers) == 2
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
            assert not answer.endswith(b"<no end>")  # the connection was closed
            error = json.loads(answer.split(b"\r\n\r\n", 1)[1])
            if path == "/v1/messages":
                assert error["type"] == "error"
            assert error["error"]["code"] == "request_timeout"
            assert "model_body_timeout" in error["error"]["message"]
        status, _ = post(sidecar, "/v1/chat/completions", b'{"model":"m","messages":[]}')
        assert status == 200  # the slots are free
        api = "messages" if path == "/v1/messages" else "chat"
        _, text = http_request("GET", sidecar.metrics + "/metrics")
        assert (f'agent_watchdog_model_requests_total{{agent="staller",api="{api}",'
                f'outcome="refused"}} 2.0') in text.decode()


def test_slow_bodies_hold_no_place_and_the_bodies_being_read_are_bounded(
        relay: str, tmp_path: Path, upstream_ok: RawUpstream) -> None:
    """Clients that send a body a few bytes at a time, more of them than
    ``model_max_concurrent``: a request takes a place only once its body is in, so a
    well-behaved agent's requests meanwhile are served; the bodies being read are bounded on
    their own (2 × ``model_max_concurrent``: past them 503 with ``Retry-After``), and a slow
    body, once in, is served too."""
    body = json.dumps({"model": "m", "messages": [], "user": "x" * 40}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            f"\r\nx-watchdog-agent: trickler\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    slow: list[socket.socket] = []
    with sidecar_for(tmp_path, upstream_ok, model_relay=relay, model_body_timeout=30,
                     model_body_rate_window=30, model_max_concurrent=2) as sidecar:
        def trickle() -> None:  # a head, then the body's first bytes, a byte a write
            sock = socket.create_connection(sidecar.server.addresses["model"], timeout=10)
            slow.append(sock)
            sock.sendall(head)
            for byte in body[:5]:
                sock.sendall(bytes([byte]))

        def held() -> float:
            return metric(sidecar, "agent_watchdog_model_request_bytes_in_flight")

        try:
            for _ in range(3):  # more than the places
                trickle()
            # (each counted as its bytes come: 5 each)
            wait_until(lambda: held() == 3 * 5, what="3 bodies being read", timeout=10)
            for _ in range(3):
                status, answer = post(sidecar, "/v1/chat/completions", body)
                assert status == 200, answer[:300]
            assert len(upstream_ok.seen) == 3
            trickle()  # as many bodies being read as 2 × model_max_concurrent
            wait_until(lambda: held() == 4 * 5, what="4 bodies being read", timeout=10)
            answer = raw_exchange(sidecar, head + body)
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:300]
            assert b"\r\nretry-after: 1\r\n" in answer.lower()
            error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
            assert error["code"] == "overloaded" and "being read" in error["message"]
            assert len(upstream_ok.seen) == 3
            for sock in slow:  # the rest of each slow body, in small writes; its answer
                for at in range(5, len(body), 8):
                    sock.sendall(body[at:at + 8])
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
                assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
            assert len(upstream_ok.seen) == 7
        finally:
            for sock in slow:
                sock.close()
        assert metric(sidecar, "agent_watchdog_model_overloaded_total"
                      '{limit="model_max_concurrent"}') == 1.0


def test_slow_bodies_declared_large_hold_what_has_come_of_the_byte_budget(
        relay: str, tmp_path: Path, upstream_ok: RawUpstream) -> None:
    """Clients that each declare a body of ``model_max_body_bytes`` and send it a few bytes at
    a time hold what has come of ``model_max_inflight_bytes``, not what they declare: a
    well-behaved agent's request meanwhile is served; one that waits for ``100 Continue`` is
    still refused, before it sends its body, by the length it declares."""
    body = json.dumps({"model": "m", "messages": []}).encode()
    with sidecar_for(tmp_path, upstream_ok, model_relay=relay, model_body_timeout=30,
                     model_body_rate_window=30, model_max_body_bytes=4096,
                     model_max_inflight_bytes=4100) as sidecar:
        host, port = sidecar.server.addresses["model"]
        slow: list[socket.socket] = []
        try:
            for _ in range(4):  # 4 × 4096 declared: 4 times the budget
                sock = socket.create_connection((host, port), timeout=10)
                slow.append(sock)
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n")
                for byte in b'{"mo':
                    sock.sendall(bytes([byte]))
            wait_until(lambda: metric(sidecar, "agent_watchdog_model_request_bytes_in_flight")
                       == 4 * 4, what="4 bodies being read", timeout=10)
            status, answer = post(sidecar, "/v1/chat/completions", body)
            assert status == 200, answer[:300]
            waits = raw_exchange(sidecar, (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                b"application/json\r\nContent-Length: 4096\r\nExpect: 100-continue\r\n"
                b"Connection: close\r\n\r\n"), wait=5)
            assert waits.startswith(b"HTTP/1.1 503 "), waits[:300]
            assert b"model_max_inflight_bytes" in waits
        finally:
            for sock in slow:
                sock.close()
    assert len(upstream_ok.seen) == 1


def sent_slowly(sidecar: RunningServer, request: bytes, every: float, more: bytes = b"",
                most: float = 10) -> bytes:
    """What the endpoint answers to ``request`` sent at once, then ``more`` a byte each
    ``every`` seconds (none: the client stalls), until it closes the connection (or ``most``
    seconds pass: the answer so far, and ``<no end>``)."""
    host, port = sidecar.server.addresses["model"]
    answer, left = b"", more
    with socket.create_connection((host, port), timeout=most) as sock:
        sock.sendall(request)
        ends = time.monotonic() + most
        while time.monotonic() < ends:
            ready, _, _ = select.select([sock], [], [], every)
            try:
                if ready:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return answer
                    answer += chunk
                elif left:
                    sock.sendall(left[:1])
                    left = left[1:]
            except OSError:  # (reset once it was closed: what came is the answer)
                return answer
    return answer + b"<no end>"


def test_a_body_that_stalls_or_crawls_is_408_within_a_window_and_frees_what_it_held(
        relay: str, tmp_path: Path, upstream_ok: RawUpstream) -> None:
    """A client whose body stalls after its first bytes, and one that sends it a byte at a
    time, slower than ``model_body_min_rate``: each is answered 408 in the API's error shape
    at the end of a ``model_body_rate_window`` that brought too few bytes, long before
    ``model_body_timeout``, its connection closed, and the bodies being read and their bytes
    are free again; a body sent in small pieces fast enough, and a well-behaved agent's
    requests meanwhile, are served."""
    body = json.dumps({"model": "m", "messages": [], "user": "x" * 200}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
            f"application/json\r\nx-watchdog-agent: crawler\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    # a window of 1 s must bring 100 bytes: the crawler's byte each 0.05 s brings 20; the
    # body sent in pieces (a byte each ms, about 200) comes whole within its first window, so
    # a client held off the CPU for a while (two cores shared with other work) is not taken
    # for one that crawls (with a window of 0.2 s it was, now and then)
    with sidecar_for(tmp_path, upstream_ok, model_relay=relay, model_body_timeout=30,
                     model_body_min_rate=100, model_body_rate_window=1.0,
                     model_max_concurrent=1) as sidecar:
        answers: dict[str, bytes] = {}
        clients = {
            "staller": lambda: sent_slowly(sidecar, head + body[:30], 0.05),
            "crawler": lambda: sent_slowly(sidecar, head + body[:5], 0.05, body[5:]),
        }
        threads = [threading.Thread(target=lambda name=name, client=client: answers.update(
            {name: client()})) for name, client in clients.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(15)
        for name in clients:
            answer = answers[name]
            assert answer.startswith(b"HTTP/1.1 408 "), (name, answer[:300])
            assert not answer.endswith(b"<no end>")  # the connection was closed
            error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
            assert error["code"] == "request_timeout"
            assert "model_body_min_rate" in error["message"], error
        wait_until(lambda: metric(sidecar, "agent_watchdog_model_request_bytes_in_flight")
                   == 0, what="the slow bodies' bytes freed", timeout=10)
        # (the bodies being read, 2 × model_max_concurrent, are free again: neither is 503)
        for _ in range(2):
            status, answer = post(sidecar, "/v1/chat/completions", body)
            assert status == 200, answer[:300]
        pieces = sent_slowly(sidecar, head.replace(b"\r\n\r\n", b"\r\nConnection: close"
                                                   b"\r\n\r\n") + body[:40], 0.001, body[40:])
        assert pieces.startswith(b"HTTP/1.1 200 "), pieces[:300]
        assert len(upstream_ok.seen) == 3
        _, text = http_request("GET", sidecar.metrics + "/metrics")
        assert ('agent_watchdog_model_requests_total{agent="crawler",api="chat",'
                'outcome="refused"} 2.0') in text.decode()


def completion_of(text: str) -> bytes:
    """A whole Chat Completions answer saying ``text``."""
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                       "model": "m", "choices": [{"index": 0, "message": {
                           "role": "assistant", "content": text}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()


def test_whole_responses_held_at_once_are_bounded_and_past_it_a_judged_one_is_503(
        relay: str, tmp_path: Path, released: threading.Event) -> None:
    """Whole responses held before they are answered count in
    ``model_max_held_response_bytes`` as their bytes come: while one holds most of it (its
    upstream stalls mid-body), a response that must be judged (a run with a tool-call bound)
    and would take the total past it is answered 503 with ``Retry-After`` in the API's error
    shape, never held; one only observed is passed on as it comes, and a well-behaved
    agent's small answer is served; once the first has been answered, the judged one is
    served. A run's final answer, held until it ends, goes on as it comes once it would take
    the total past it."""
    big, held_part = completion_of("b" * 7000), 6000
    large = completion_of("l" * 5000)
    go = threading.Event()  # the final answer's end may come

    def reply(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        asked = json.loads(seen.body)
        said = next(message["content"] for message in asked["messages"]
                    if message["role"] == "user")  # (a final turn's instructions go first)
        if said == "final run" and not asked.get("stream"):  # its one tool call
            send(handler, 200, ONE_TOOL_CALL)
        elif said == "final run":  # its final answer: 5 events of 1000 bytes, then its end
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.end_headers()
            for _ in range(5):
                chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                         "choices": [{"index": 0, "delta": {"content": "f" * 1000},
                                      "finish_reason": None}]}
                handler.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            handler.wfile.flush()
            go.wait(15)
            end = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            handler.wfile.write(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
            handler.close_connection = True
        elif said == "stall":  # its head and most of its body, then nothing until released
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(big)))
            handler.end_headers()
            handler.wfile.write(big[:held_part])
            handler.wfile.flush()
            released.wait(15)
            handler.wfile.write(big[held_part:])
        else:
            send(handler, 200, large if said.startswith("large") else COMPLETION)

    def ask(said: str, agent: str, budget: str | None = None) -> tuple[int, bytes, str]:
        headers = {"x-watchdog-agent": agent}
        if budget is not None:
            headers["x-watchdog-budget-tool-calls"] = budget
        host, port = sidecar.server.addresses["model"]
        connection = http.client.HTTPConnection(host, port, timeout=15)
        connection.request("POST", "/v1/chat/completions", json.dumps({
            "model": "m", "messages": [{"role": "user", "content": said}]}), headers)
        answer = connection.getresponse()
        try:
            return answer.status, answer.read(), answer.getheader("Retry-After") or ""
        finally:
            connection.close()

    def held() -> float:
        return metric(sidecar, "agent_watchdog_model_response_bytes_held")

    def final_answer_comes_before_its_end() -> None:
        messages: list[dict[str, object]] = [{"role": "user", "content": "final run"}]
        headers = {"x-watchdog-agent": "finisher", "x-watchdog-budget-tool-calls": "1"}
        status, answer = post(sidecar, "/v1/chat/completions", json.dumps({
            "model": "m", "tools": TOOLS, "messages": messages}).encode(), headers)
        assert status == 200, answer[:300]
        messages += [json.loads(answer)["choices"][0]["message"],
                     {"role": "tool", "tool_call_id": "call_1", "content": "found"}]
        body = json.dumps({"model": "m", "stream": True, "tools": TOOLS,
                           "messages": messages}).encode()
        with socket.create_connection(sidecar.server.addresses["model"], timeout=10) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: "
                         b"close\r\nx-watchdog-agent: finisher\r\nx-watchdog-budget-tool-"
                         b"calls: 1\r\nContent-Type: application/json\r\nContent-Length: %d"
                         b"\r\n\r\n%s" % (len(body), body))
            got = b""
            while b"f" * 1000 not in got:  # (held until its end, it would not come)
                chunk = sock.recv(65536)
                assert chunk, got[:300]
                got += chunk
            go.set()
            while chunk := sock.recv(65536):
                got += chunk
        assert got.startswith(b"HTTP/1.1 200 "), got[:300]
        assert got.count(b"f" * 1000) == 5 and b"data: [DONE]" in got, got[-300:]
        assert json.loads(upstream.seen[-1].body)["tool_choice"] == "none"  # the final turn

    upstream = RawUpstream(reply)
    try:
        with sidecar_for(tmp_path, upstream, model_relay=relay,
                         model_max_held_response_bytes=10_000) as sidecar:
            stalled: list[tuple[int, bytes, str]] = []
            first = threading.Thread(target=lambda: stalled.append(ask("stall", "holder")))
            first.start()
            wait_until(lambda: held() == held_part, what="the stalled response held",
                       timeout=10)
            status, answer, retry = ask("large, judged", "bounded", "3")
            assert status == 503, answer[:300]
            assert retry == "1"
            error = json.loads(answer)["error"]
            assert error["code"] == "overloaded", error
            assert "model_max_held_response_bytes" in error["message"], error
            assert ask("large, observed", "watched")[:2] == (200, large)
            assert ask("small", "agent")[:2] == (200, COMPLETION)
            final_answer_comes_before_its_end()
            assert held() == held_part
            released.set()
            first.join(15)
            assert stalled and stalled[0][:2] == (200, big)
            wait_until(lambda: held() == 0, what="the held responses let go", timeout=10)
            assert ask("large, judged again", "bounded", "3")[:2] == (200, large)
            assert metric(sidecar, "agent_watchdog_model_overloaded_total"
                          '{limit="model_max_held_response_bytes"}') == 1.0
    finally:
        upstream.close()


@pytest.fixture
def upstream_ok() -> Iterator[RawUpstream]:
    raw = RawUpstream(completion_reply)
    yield raw
    raw.close()


# -- a whole response cut or stalled mid-body ---------------------------------------------------

@pytest.mark.parametrize("fault", ["cut", "reset", "stalled"])
@pytest.mark.parametrize("budget", [None, "3"], ids=["free", "bound"])
def test_a_whole_response_that_fails_mid_body_is_never_a_short_answer(
        relay: str, tmp_path: Path, released: threading.Event, fault: str,
        budget: str | None) -> None:
    """An upstream that sends a whole (not streamed) response's head and part of its body,
    then closes its connection, resets it (a body of no length said, which ends with its
    connection: a reset is no end, RFC 9112 §8) or goes silent: the agent gets a 502 or 504
    saying so (the relay reads a whole response before it answers), never a 200 with a short
    body, and the call is counted as the upstream's failure."""
    def partial(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if fault == "reset":
            handler.send_header("Connection", "close")
        else:
            handler.send_header("Content-Length", str(len(COMPLETION)))
        handler.end_headers()
        handler.wfile.write(COMPLETION[:40])
        handler.wfile.flush()
        if fault == "stalled":
            released.wait(60)
        if fault == "reset":
            reset(handler)
        handler.close_connection = True

    raw = RawUpstream(partial)
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay, model_upstream_timeout=0.5) as sidecar:
            status, answer = first_request(sidecar, "cutter", budget)
            error = json.loads(answer)["error"]
            if fault != "stalled":
                assert status == 502, answer
                assert error["code"] == "upstream_broken"
                assert "answered, then broke off" in error["message"]
                assert "cannot be reached" not in error["message"]
            else:
                assert status == 504, answer
                assert error["code"] == "upstream_timeout"
                assert "answered, then sent nothing more for 0.5 s" in error["message"]
            counted = "upstream_timeout" if fault == "stalled" else "upstream_error"
            wait_until(lambda: outcomes(sidecar, "cutter") == {counted: 1.0},
                       lambda: f"counted: {outcomes(sidecar, 'cutter')}")
    finally:
        released.set()
        raw.close()


@pytest.mark.parametrize("answer", [
    b"\x00\xffNOT HTTP AT ALL\r\n\r\n",  # not HTTP
    b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * (1 << 20) + b"\r\n\r\n",  # a head past any bound
    # a body framed two ways (RFC 9112 §6.3): the compiled relay passed the length on, 5
    # bytes of the answer read by the agent and the rest left in its connection
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(COMPLETION), COMPLETION),
], ids=["not-http", "head-too-long", "two-framings"])
@pytest.mark.parametrize("budget", [None, "3"], ids=["free", "bound"])
def test_an_upstream_that_answers_no_http_response_is_a_502_saying_so(
        relay: str, tmp_path: Path, answer: bytes, budget: str | None) -> None:
    """An upstream that answers with bytes no HTTP client can read as a response (a server
    that speaks another protocol on the port, a head past the relay's bound, a body framed both
    by Transfer-Encoding and Content-Length): the agent gets
    502 ``upstream_unreachable`` saying the upstream gave no HTTP response, counted as such,
    on both relays (the aiohttp relay answered 500 ``internal_error``, which only a bug may
    be, and logged the upstream's bytes as a bad request from the agent)."""
    def garbled(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        handler.wfile.write(answer)
        handler.wfile.flush()
        handler.close_connection = True

    raw = RawUpstream(garbled)
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            status, body = first_request(sidecar, "garbled", budget)
            assert status == 502, body
            error = json.loads(body)["error"]
            assert error["code"] == "upstream_unreachable", error
            assert "gave no HTTP response" in error["message"], error
            wait_until(lambda: outcomes(sidecar, "garbled") == {"upstream_unreachable": 1.0},
                       lambda: f"counted: {outcomes(sidecar, 'garbled')}")
    finally:
        raw.close()


@pytest.mark.parametrize("status", [301, 307, 308])
def test_an_upstream_redirect_passes_on_as_it_came_and_is_never_followed(
        relay: str, tmp_path: Path, status: int) -> None:
    """An upstream that answers a redirect to another host: the agent gets it as it came (its
    status and ``Location``), as an upstream error passes, and the endpoint never follows it:
    the other host sees no request, so neither the agent's key nor its conversation goes
    anywhere but the configured upstream."""
    elsewhere = RawUpstream(completion_reply)
    moved = f"{elsewhere.base}/v1/chat/completions"
    raw = RawUpstream(lambda handler, seen: send(handler, status, b"", {"Location": moved}))
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            connection = http.client.HTTPConnection(
                "127.0.0.1", sidecar.server.addresses["model"][1], timeout=10)
            connection.request("POST", "/v1/chat/completions", json.dumps({
                "model": "m", "messages": [{"role": "user", "content": "x"}]}),
                {"Content-Type": "application/json", "Authorization": "Bearer sk-secret",
                 "x-watchdog-agent": "moved"})
            answer = connection.getresponse()
            answer.read()
            connection.close()
            assert (answer.status, answer.getheader("Location")) == (status, moved)
            assert len(raw.seen) == 1 and elsewhere.seen == []
    finally:
        raw.close()
        elsewhere.close()


def test_a_compressed_stream_bomb_passed_on_is_inflated_no_further_than_its_event_bound(
        relay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gzip stream with no bound to check that inflates to 2 GiB of one event that never ends
    (2 MiB sent, a gzip member per MiB) passes on as it came, and is read up to the event bound
    only (4 MiB): past it, it is passed on unread. The aiohttp relay inflated all of it on the
    event loop (seconds in which every other run's request and the API waited); here the
    other request, sent while the bomb flows, is answered."""
    from watchdog.core.model.wire import MAX_SSE_EVENT_BYTES
    from watchdog.shell.model import streams
    inflated = [0]
    feed = streams.Inflater.feed

    def counted(self: streams.Inflater, data: bytes) -> Iterator[bytes]:
        for piece in feed(self, data):
            inflated[0] += len(piece)
            yield piece

    monkeypatch.setattr(streams.Inflater, "feed", counted)
    member = gzip.compress(b"\0" * (1 << 20), 9)
    bomb = member * 2048
    started = threading.Event()

    def reply(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        if b'"bomb"' not in seen.body:
            completion_reply(handler, seen)
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(bomb)))
        handler.end_headers()
        handler.wfile.write(bomb)
        handler.wfile.flush()
        started.set()

    raw = RawUpstream(reply)
    got: list[tuple[int, bytes]] = []
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            bombed = threading.Thread(target=lambda: got.append(post(
                sidecar, "/v1/chat/completions", json.dumps({
                    "model": "bomb", "stream": True,
                    "messages": [{"role": "user", "content": "x"}]}).encode(),
                {"x-watchdog-agent": "bomber"})))
            bombed.start()
            assert started.wait(30)
            status, answer = first_request(sidecar, "bystander", None)
            assert status == 200 and json.loads(answer)["choices"], answer
            bombed.join(60)
            assert got and got[0] == (200, bomb), [(s, len(b)) for s, b in got]
            if relay == "python":
                assert 0 < inflated[0] <= MAX_SSE_EVENT_BYTES + 2 * streams.PIECE, inflated
    finally:
        raw.close()


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_a_whole_response_too_long_to_read_that_breaks_off_is_the_upstreams_failure(
        relay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        framing: str) -> None:
    """A whole response longer than the relays read first (``MAX_RESPONSE_BYTES``, made
    64 KiB here) passes on as it comes; one whose upstream breaks it off mid-body reaches the
    agent broken off (fewer bytes than its length said, or an unfinished chunked body) and is
    counted as the upstream's failure, as a shorter one is, never as passed."""
    from watchdog.shell.model import native, streams
    for module in (native, streams):
        monkeypatch.setattr(module, "MAX_RESPONSE_BYTES", 64 * 1024)
    sent = b'{"id": "c1", "pad": "' + b"x" * 200_000

    def long_cut(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if framing == "length":
            handler.send_header("Content-Length", str(len(sent) + 1000))
            handler.end_headers()
            handler.wfile.write(sent)
        else:
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(sent), sent))
        handler.wfile.flush()
        handler.close_connection = True  # then the connection closes, mid-body

    raw = RawUpstream(long_cut)
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            body = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'
            answer = raw_exchange(sidecar, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                  b"x-watchdog-agent: longcut\r\nContent-Type: application/json"
                                  b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            head, _, got = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 "), answer[:200]
            assert not got.endswith(b"<no end>")  # closed, mid-body
            if framing == "length":
                assert len(got) < len(sent) + 1000
            else:
                assert not got.endswith(b"0\r\n\r\n")  # no last chunk
            wait_until(lambda: outcomes(sidecar, "longcut") == {"upstream_error": 1.0},
                       lambda: f"counted: {outcomes(sidecar, 'longcut')}")
    finally:
        raw.close()


def test_a_final_answer_that_keeps_coming_is_not_cut_however_long(
        relay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's final request (its answer held until it ends, on the compiled relay too)
    whose upstream streams its answer slowly but without a stall longer than
    ``model_upstream_timeout``: the agent gets the whole answer, however much longer it takes
    than the upstream's connect and read timeouts (``CONNECT_TIMEOUT`` made 0.5 s here and
    ``model_upstream_timeout`` 2 s, so 2.5 s against an answer of 8 s: the compiled relay sets no
    bound of its own on a held answer). The read timeout is ten times the upstream's gap
    between events: on two cores shared with other work a gap of 0.2 s is now and then
    read as one of over 0.5 s. A stall is
    still bounded: before the head, the test above (504); mid-answer,
    :func:`test_a_final_answer_that_stalls_mid_way_is_broken_off`."""
    from watchdog.shell.model import native
    monkeypatch.setattr(native, "CONNECT_TIMEOUT", 0.5)
    words = 40

    def slow(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        for index in range(words):
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                     "choices": [{"index": 0, "delta": {"content": f"w{index} "},
                                  "finish_reason": None}]}
            handler.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            handler.wfile.flush()
            time.sleep(0.2)  # 8 s in all; never a stall of model_upstream_timeout
        end = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        handler.wfile.write(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
        handler.close_connection = True

    raw = RawUpstream(slow)
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay,
                         model_upstream_timeout=2.0) as sidecar:
            body = json.dumps({"model": "m", "stream": True, "tools": TOOLS, "messages": [
                {"role": "user", "content": "final slow"}]}).encode()
            status, answer = post(sidecar, "/v1/chat/completions", body, {
                "x-watchdog-agent": "slowfinal", "x-watchdog-budget-tool-calls": "0"})
            assert status == 200, answer
            assert json.loads(raw.seen[0].body)["tool_choice"] == "none"  # the final turn
            assert answer.endswith(b"data: [DONE]\n\n")
            assert all(f"w{index} ".encode() in answer for index in range(words))
            wait_until(lambda: outcomes(sidecar, "slowfinal") == {"steered": 1.0},
                       lambda: f"counted: {outcomes(sidecar, 'slowfinal')}")
            assert finals(sidecar) == (1 if relay == "native" else 0)
    finally:
        raw.close()


def test_a_final_answer_that_stalls_mid_way_is_broken_off(
        relay: str, tmp_path: Path, released: threading.Event) -> None:
    """A run's final answer whose upstream sends part of it, then nothing: past
    ``model_upstream_timeout`` the agent's answer is broken off (what was held, then the
    connection closed mid-body), on the compiled relay too, which holds the answer with no
    bound of its own."""
    def stalls(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": {"content": "partly"},
                              "finish_reason": None}]}
        handler.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        handler.wfile.flush()
        released.wait(60)

    raw = RawUpstream(stalls)
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay,
                         model_upstream_timeout=0.5) as sidecar:
            body = json.dumps({"model": "m", "stream": True, "tools": TOOLS, "messages": [
                {"role": "user", "content": "final stalled"}]}).encode()
            started = time.monotonic()
            answer = raw_exchange(sidecar, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                  b"x-watchdog-agent: stalled\r\n"
                                  b"x-watchdog-budget-tool-calls: 0\r\nContent-Type: "
                                  b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                                  % (len(body), body))
            assert time.monotonic() - started < 8
            assert not answer.endswith(b"<no end>"), answer[-300:]  # closed by the endpoint
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
            assert b"partly" in answer and not answer.endswith(b"0\r\n\r\n"), answer[-300:]
            assert json.loads(raw.seen[0].body)["tool_choice"] == "none"  # the final turn
            assert finals(sidecar) == (1 if relay == "native" else 0)
    finally:
        released.set()
        raw.close()


# -- a stream broken off, then sent again ---------------------------------------------------------

def tool_call_chunks(tag: str) -> bytes:
    """A streamed answer's first events: two calls of ``search``, whole (no finish reason and
    no ``[DONE]`` yet)."""
    return b"".join(b"data: %s\n\n" % json.dumps({
        "id": "chatcmpl-" + tag, "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [{
            "index": index, "id": f"call_{tag}_{index}", "type": "function",
            "function": {"name": "search", "arguments": "{}"}}]}}]}).encode()
        for index in range(2))


@pytest.mark.parametrize("budget", ["2", None], ids=["budget", "none"])
def test_a_stream_broken_off_then_sent_again_charges_only_the_calls_the_agent_ran(
        relay: str, tmp_path: Path, budget: str | None) -> None:
    """An upstream breaks a stream off after the deltas of two tool calls: the agent sees a
    failed answer (its SDK raises) and sends the same request again, which is answered with
    two other calls that it runs. The calls of the broken answer were never handed over:
    nothing charges them, on both relays. So the request sent again still gets its tools (a
    budget of 2: not withdrawn for the final report), and once the two calls it ran are
    answered the run has made 2 tool calls, not 4; the run has no tool running while the
    agent is to send the request again."""
    def cut_then_whole(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        if len(raw.seen) == 1:  # an unfinished chunked body, then the connection closes
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            events = tool_call_chunks("cut")
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(events), events))
            handler.wfile.flush()
            handler.close_connection = True
            return
        body = json.loads(seen.body)
        calls = [] if body.get("tool_choice") == "none" or len(raw.seen) > 2 else [
            {"id": f"call_ok_{index}", "type": "function",
             "function": {"name": "search", "arguments": "{}"}} for index in range(2)]
        message = {"role": "assistant", "content": None if calls else "Report.",
                   **({"tool_calls": calls} if calls else {})}
        send(handler, 200, json.dumps({
            "id": f"chatcmpl-{len(raw.seen)}", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}]}).encode())

    raw = RawUpstream(cut_then_whole)
    headers = {"x-watchdog-agent": "resender"}
    if budget is not None:
        headers["x-watchdog-budget-tool-calls"] = budget
    messages: list[dict[str, object]] = [{"role": "user", "content": "find it"}]
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            host, port = sidecar.server.addresses["model"]
            streamed = json.dumps({"model": "m", "stream": True, "tools": TOOLS,
                                   "messages": messages}).encode()
            connection = http.client.HTTPConnection(host, port, timeout=10)
            connection.request("POST", "/v1/chat/completions", streamed,
                               {"Content-Type": "application/json", **headers})
            response = connection.getresponse()
            assert response.status == 200
            with pytest.raises(http.client.IncompleteRead) as broken:
                response.read()
            assert b"call_cut_1" in broken.value.partial
            connection.close()
            run_id = wait_until(lambda: (r := sidecar.get_json("/v1/runs")["runs"])
                                and r[0]["errors"] == 1 and r[0]["id"], "the failed call")
            signals = run_detail(sidecar.api, run_id)["signals"]  # type: ignore[index]
            assert signals["in_flight"] == 0, signals

            status, answer = post(sidecar, "/v1/chat/completions", json.dumps({
                "model": "m", "tools": TOOLS, "messages": messages}).encode(), headers)
            assert status == 200, answer
            assert "tool_choice" not in json.loads(raw.seen[1].body)  # its tools still offered
            message = json.loads(answer)["choices"][0]["message"]
            assert [call["id"] for call in message["tool_calls"]] == ["call_ok_0", "call_ok_1"]

            messages += [message, *({"role": "tool", "tool_call_id": call["id"],
                                     "content": "found"} for call in message["tool_calls"])]
            status, answer = post(sidecar, "/v1/chat/completions", json.dumps({
                "model": "m", "tools": TOOLS, "messages": messages}).encode(), headers)
            assert status == 200, answer
            if budget is not None:  # spent: the final report
                assert json.loads(raw.seen[2].body)["tool_choice"] == "none"
            runs = sidecar.get_json("/v1/runs?agent=resender")["runs"]
            assert [(run["id"], run["tool_calls"], run["iterations"]) for run in runs] == [
                (run_id, 2, 3)]
    finally:
        raw.close()


# -- tool calls whose ids are not unique --------------------------------------------------------

@pytest.mark.parametrize("ids", [["", ""], ["call_0", "call_0"]], ids=["empty", "same"])
def test_calls_an_upstream_gives_one_id_each_count_one_each(
        relay: str, tmp_path: Path, ids: list[str]) -> None:
    """An OpenAI-compatible server that gives its tool calls no id, or the same id to each
    (as some local ones do), answers with two calls at a time; the agent runs them and sends
    their results (under those ids). Every call the agent ran counts, on both relays: a
    budget of 4 is spent after two answers (the run ends ``tool_limit_reached``, its third
    request the final one), never a run of 2 tool calls that ran 4."""
    def reply(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        body = json.loads(seen.body)
        message: dict[str, object] = {"role": "assistant", "content": "Report."}
        if body.get("tool_choice") != "none":
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "search", "arguments": json.dumps({"q": at})}}
                for at, call_id in enumerate(ids)]}
        send(handler, 200, json.dumps({
            "id": f"chatcmpl-{len(raw.seen)}", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if "tool_calls" in message
                         else "stop"}]}).encode())

    raw = RawUpstream(reply)
    headers = {"x-watchdog-agent": "sameids", "x-watchdog-budget-tool-calls": "4"}
    messages: list[dict[str, object]] = [{"role": "user", "content": "find it"}]
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            for _ in range(3):
                status, answer = post(sidecar, "/v1/chat/completions", json.dumps({
                    "model": "m", "tools": TOOLS, "messages": messages}).encode(), headers)
                assert status == 200, answer
                message = json.loads(answer)["choices"][0]["message"]
                calls = message.get("tool_calls") or []
                messages += [message, *({"role": "tool", "tool_call_id": call["id"],
                                         "content": "found"} for call in calls)]
            assert json.loads(raw.seen[2].body)["tool_choice"] == "none"  # the final request
            assert message["content"] == "Report."
            runs = wait_until(lambda: (r := sidecar.get_json("/v1/runs?agent=sameids")["runs"])
                              and r[0]["state"] == "ended" and r, "the run ended")
            assert [(run["tool_calls"], run["terminal_state"]) for run in runs] == [
                (4, "tool_limit_reached")]
    finally:
        raw.close()


# -- a run's final request that gets no answer, sent again ------------------------------------

@pytest.mark.parametrize(("path", "status"), [
    ("/v1/chat/completions", 429), ("/v1/chat/completions", 503), ("/v1/messages", 529)])
def test_a_final_request_the_upstream_did_not_answer_goes_upstream_again_when_sent_again(
        relay: str, tmp_path: Path, path: str, status: int) -> None:
    """A run's budget is spent (its one tool call made): its next request goes upstream for
    the final report, and the upstream answers it with a rate limit or a server error (with
    ``retry-after``), which the agent's SDK retries. The final turn did not happen: the
    request sent again goes upstream for the report again, on both relays, and the agent
    gets the model's report — not the stop note that follows a final turn answered."""
    messages_api = path == "/v1/messages"

    def reply(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        if len(raw.seen) == 1:  # the one tool call
            content: list[dict[str, object]] = [
                {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}]
            calls = [{"id": "call_1", "type": "function",
                      "function": {"name": "search", "arguments": "{}"}}]
        elif len(raw.seen) == 2:  # the final request, busy
            send(handler, status, b'{"error": {"message": "busy", "type": "overloaded"}}',
                 {"retry-after": "0"})
            return
        else:
            content, calls = [{"type": "text", "text": "The model's report."}], []
        if messages_api:
            send(handler, 200, json.dumps({
                "id": f"msg_{len(raw.seen)}", "type": "message", "role": "assistant",
                "model": "m", "content": content,
                "stop_reason": "tool_use" if calls else "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1}}).encode())
        else:
            send(handler, 200, json.dumps({
                "id": f"chatcmpl-{len(raw.seen)}", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop",
                             "message": {"role": "assistant",
                                         "content": None if calls else content[0]["text"],
                                         **({"tool_calls": calls} if calls else {})}}]}).encode())

    raw = RawUpstream(reply)
    tools = [{"name": "search", "input_schema": {"type": "object"}}] if messages_api \
        else TOOLS
    messages: list[dict[str, object]] = [{"role": "user", "content": "find it"}]
    headers = {"x-watchdog-agent": "refinal", "x-watchdog-budget-tool-calls": "1"}

    def ask() -> tuple[int, bytes]:
        return post(sidecar, path, json.dumps({"model": "m", "max_tokens": 100, "tools": tools,
                                               "messages": messages}).encode(), headers)

    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            answered, answer = ask()
            assert answered == 200, answer
            if messages_api:
                messages += [{"role": "assistant", "content": json.loads(answer)["content"]},
                             {"role": "user", "content": [{"type": "tool_result",
                                                           "tool_use_id": "toolu_1",
                                                           "content": "found"}]}]
            else:
                messages += [json.loads(answer)["choices"][0]["message"],
                             {"role": "tool", "tool_call_id": "call_1", "content": "found"}]
            answered, answer = ask()
            assert answered == status, answer
            answered, answer = ask()  # as the SDK retries
            assert answered == 200, answer
            assert len(raw.seen) == 3  # the report asked for again
            for seen in raw.seen[1:]:
                choice = json.loads(seen.body)["tool_choice"]
                assert choice == ({"type": "none"} if messages_api else "none"), choice
            got = json.loads(answer)
            text = got["content"][0]["text"] if messages_api \
                else got["choices"][0]["message"]["content"]
            assert text == "The model's report."
    finally:
        raw.close()


@pytest.mark.parametrize("fault", ["reset", "gone"])
def test_a_final_answer_broken_off_or_left_goes_upstream_again_when_sent_again(
        relay: str, tmp_path: Path, released: threading.Event, fault: str) -> None:
    """A run's final answer, held until it ends, that the upstream resets mid-way (the agent
    gets what was held, then its answer broken off) or whose client goes away mid-way (the
    upstream request dropped): the final turn did not happen, so the request sent again goes
    upstream for the report again and the agent gets it, on both relays (the compiled relay
    carries the three final requests itself)."""
    def reply(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        if len(raw.seen) == 1:  # the one tool call
            send(handler, 200, ONE_TOOL_CALL)
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        words = ["partly"] if len(raw.seen) == 2 else ["The model's ", "report."]
        for word in words:
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                     "choices": [{"index": 0, "delta": {"content": word},
                                  "finish_reason": None}]}
            handler.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if len(raw.seen) == 2:
            if fault == "reset":
                reset(handler)
            else:
                handler.wfile.flush()
                released.wait(30)  # (the client has gone by then: the request dropped)
                handler.close_connection = True
            return
        end = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        handler.wfile.write(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
        handler.close_connection = True

    raw = RawUpstream(reply)
    messages: list[dict[str, object]] = [{"role": "user", "content": f"find it {fault}"}]
    agent = f"broken-{fault}"

    def request(stream: bool) -> bytes:
        body = json.dumps({"model": "m", "stream": stream, "tools": TOOLS,
                           "messages": messages}).encode()
        return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"x-watchdog-agent: %s\r\n"
                b"x-watchdog-budget-tool-calls: 1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (agent.encode(), len(body), body))

    try:
        with sidecar_for(tmp_path, raw, model_relay=relay,
                         model_upstream_timeout=5.0) as sidecar:
            answered, answer = post(sidecar, "/v1/chat/completions", json.dumps({
                "model": "m", "tools": TOOLS, "messages": messages}).encode(),
                {"x-watchdog-agent": agent, "x-watchdog-budget-tool-calls": "1"})
            assert answered == 200, answer
            messages += [json.loads(answer)["choices"][0]["message"],
                         {"role": "tool", "tool_call_id": "call_1", "content": "found"}]
            if fault == "reset":
                got = raw_exchange(sidecar, request(True))
                assert got.startswith(b"HTTP/1.1 200 "), got[:300]
                # broken off at once (what was held goes first, when the relay read it before
                # the reset: an RST may drop what the relay had not read yet)
                assert not got.endswith((b"0\r\n\r\n", b"<no end>")), got[-300:]
                counted = "upstream_error"
            else:
                host, port = sidecar.server.addresses["model"]
                with socket.create_connection((host, port), timeout=10) as sock:
                    sock.sendall(request(True))
                    wait_until(lambda: len(raw.seen) == 2, "the final request upstream")
                    sock.recv(1, socket.MSG_PEEK)  # the answer's head has come, unread
                # (closed with the head unread, the client's end resets the connection: the
                # upstream request is dropped then, on either relay. One that ends its side
                # before the head may be waiting for the answer: RFC 9112 §9.6)
                counted = "cancelled"
            wait_until(lambda: outcomes(sidecar, agent).get(counted) == 1.0,
                       lambda: f"counted: {outcomes(sidecar, agent)}")
            got = raw_exchange(sidecar, request(True))  # sent again
            assert got.startswith(b"HTTP/1.1 200 "), got[:300]
            assert b"The model's " in got and got.endswith(b"0\r\n\r\n"), got[-600:]
            assert b"stopped this run" not in got, got[-600:]
            assert len(raw.seen) == 3
            for seen in raw.seen[1:]:
                assert json.loads(seen.body)["tool_choice"] == "none"  # the final turn
            assert finals(sidecar) == (2 if relay == "native" else 0)
    finally:
        released.set()
        raw.close()


@pytest.mark.parametrize("empty", [False, True], ids=["report", "tools-again"])
def test_a_final_whole_answer_in_gzip_passes_as_it_came_or_is_the_stop_note_plain(
        relay: str, tmp_path: Path, empty: bool) -> None:
    """A run's final request answered whole, in gzip: the model's report goes on as it came
    (compressed, its ``Content-Encoding`` kept); an answer that asks for tools again is
    trimmed empty and replaced by the stop note, plain JSON, on both relays."""
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]} \
        if empty else {"role": "assistant", "content": "REPORT: done"}
    data = gzip.compress(json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls" if empty else "stop",
                     "message": message}]}).encode())
    raw = RawUpstream(lambda handler, seen: send(handler, 200, data,
                                                 {"Content-Encoding": "gzip"}))
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            status, answer = post(sidecar, "/v1/chat/completions", json.dumps({
                "model": "m", "tools": TOOLS, "messages": [
                    {"role": "user", "content": "final gzip"}]}).encode(),
                {"x-watchdog-agent": "gzipfinal", "x-watchdog-budget-tool-calls": "0"})
            assert status == 200, answer
            assert json.loads(raw.seen[0].body)["tool_choice"] == "none"  # the final turn
            if empty:
                got = json.loads(answer)["choices"][0]["message"]
                assert got["content"].startswith("The agent-watchdog stopped this run: the "
                                                 "model asked for tools again"), got
                assert not got.get("tool_calls"), got
            else:
                assert answer == data
            native = sidecar.server.native
            if native is not None:
                assert (native.finals, native.stopped) == (1, int(empty))
    finally:
        raw.close()


# -- a client that half-closes its connection --------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_client_that_half_closes_after_its_request_gets_its_answer(
        relay: str, tmp_path: Path, stream: bool) -> None:
    """RFC 9112 §9.6: a client may end its side of the connection once it has sent its
    request (``shutdown(SHUT_WR)``); it still gets its whole answer, then the endpoint closes
    the connection. A request cut short by its client's end is still refused. The upstream
    answers only once the relay has told its client's end (the request's ``ended``, which
    both relays set when they read the end), so the answer always comes after the
    half-close."""
    def answer(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        asking = sidecar.server.model.asking  # (read from this thread: a copy, taken at once)
        wait_until(lambda: any(a.ended for a in list(asking.values())),
                   "the relay to read its client's end of the connection")
        if not stream:
            completion_reply(handler, seen)
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Content-Length", str(len(STREAM)))
        handler.end_headers()
        handler.wfile.write(STREAM)

    raw = RawUpstream(answer)
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            body = json.dumps({"model": "m", "stream": stream, "messages": [
                {"role": "user", "content": "half"}]}).encode()
            request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            host, port = sidecar.server.addresses["model"]
            for sent in (request, request[:-5]):
                with socket.create_connection((host, port), timeout=10) as sock:
                    sock.sendall(sent)
                    sock.shutdown(socket.SHUT_WR)
                    got = b""
                    while chunk := sock.recv(65536):  # (closed by the endpoint)
                        got += chunk
                if sent is request:
                    assert got.startswith(b"HTTP/1.1 200 "), got[:300]
                    if stream:  # (as it came, or chunked: its end said)
                        assert b"data: [DONE]" in got, got[-300:]
                        assert got.endswith((STREAM, b"\r\n0\r\n\r\n")), got[-300:]
                    else:
                        assert got.endswith(COMPLETION), got[-300:]
                else:  # (its body's end never came: the body could not be read)
                    assert got.startswith(b"HTTP/1.1 400 "), got[:300]
                    error = json.loads(got.split(b"\r\n\r\n", 1)[1])["error"]
                    assert error["message"] == "the request body could not be read", error
            assert len(raw.seen) == 1
    finally:
        raw.close()


def held_until_dropped(handler: BaseHTTPRequestHandler, dropped: threading.Event) -> None:
    """An upstream answering nothing until the relay drops its request (``dropped`` set then;
    at most 10 s)."""
    handler.connection.settimeout(10)
    try:
        if handler.connection.recv(1) == b"":
            dropped.set()
    except TimeoutError:
        pass  # (never dropped)
    except OSError:  # (reset)
        dropped.set()


def sent_then_closed(sidecar: RunningServer, request: bytes,
                     upstream: Callable[[], bool]) -> None:
    """A client sends ``request`` and closes its connection once it is with the model
    (``upstream`` true: an SDK's timeout), then waits a moment, as an SDK does before its
    retry."""
    host, port = sidecar.server.addresses["model"]
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(request)
        wait_until(upstream, "the request upstream")
    time.sleep(0.3)


def test_a_request_whose_client_closed_is_let_go_when_it_is_sent_again(
        relay: str, tmp_path: Path) -> None:
    """A client closes its connection while its request is with the model (an SDK's timeout)
    and sends the request again: the first is let go (its upstream request dropped, counted
    ``cancelled``), and the one sent again is the run's, answered; one run."""
    dropped = threading.Event()

    def answer(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        if seen is raw.seen[0]:  # the first: held until the relay drops it
            held_until_dropped(handler, dropped)
            return
        completion_reply(handler, seen)

    raw = RawUpstream(answer)
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            body = json.dumps({"model": "m", "tools": TOOLS, "messages": [
                {"role": "user", "content": "closed, then sent again"}]}).encode()
            request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       b"application/json\r\nx-watchdog-agent: resent\r\nConnection: close"
                       b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            sent_then_closed(sidecar, request, lambda: len(raw.seen) == 1)
            answered = raw_exchange(sidecar, request)
            assert answered.startswith(b"HTTP/1.1 200 "), answered[:300]
            assert answered.endswith(COMPLETION), answered[-300:]
            assert dropped.wait(10), "the first request's upstream request was not dropped"
            wait_until(lambda: outcomes(sidecar, "resent").get("cancelled") == 1,
                       "the first counted cancelled")
            assert len(raw.seen) == 2
            assert len(sidecar.get_json("/v1/runs?agent=resent")["runs"]) == 1
    finally:
        raw.close()


def test_a_final_request_whose_client_closed_gets_the_report_when_it_is_sent_again(
        relay: str, tmp_path: Path) -> None:
    """The run's budget is spent: its next request goes upstream for the final report, which
    the model takes long to write; the SDK gives up waiting (its timeout, its connection
    closed) and sends the request again. The first is let go: it had no turn, so the one sent
    again goes upstream for the report, and the agent gets it (not the stop note that follows
    a final turn answered)."""
    dropped = threading.Event()

    def answer(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        if len(raw.seen) == 1:  # the one tool call
            send(handler, 200, json.dumps({
                "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": None, "tool_calls": [{
                        "id": "call_1", "type": "function",
                        "function": {"name": "search", "arguments": "{}"}}]}}]}).encode())
            return
        if seen is raw.seen[1]:  # the final request: held until the relay drops it
            held_until_dropped(handler, dropped)
            return
        send(handler, 200, json.dumps({
            "id": "chatcmpl-3", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "The model's report."}}]}).encode())

    raw = RawUpstream(answer)
    messages: list[dict[str, object]] = [{"role": "user", "content": "find it, slowly"}]
    headers = {"x-watchdog-agent": "refinal-closed", "x-watchdog-budget-tool-calls": "1"}
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay) as sidecar:
            answered, first = post(sidecar, "/v1/chat/completions", json.dumps(
                {"model": "m", "tools": TOOLS, "messages": messages}).encode(), headers)
            assert answered == 200, first
            messages += [json.loads(first)["choices"][0]["message"],
                         {"role": "tool", "tool_call_id": "call_1", "content": "found"}]
            body = json.dumps({"model": "m", "tools": TOOLS, "messages": messages}).encode()
            request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       b"application/json\r\nx-watchdog-agent: refinal-closed\r\n"
                       b"x-watchdog-budget-tool-calls: 1\r\nConnection: close"
                       b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            sent_then_closed(sidecar, request, lambda: len(raw.seen) == 2)
            answered_again = raw_exchange(sidecar, request)
            assert answered_again.startswith(b"HTTP/1.1 200 "), answered_again[:300]
            got = json.loads(answered_again.split(b"\r\n\r\n", 1)[1])
            assert got["choices"][0]["message"]["content"] == "The model's report.", got
            assert dropped.wait(10), "the first request's upstream request was not dropped"
            assert len(raw.seen) == 3
            assert json.loads(raw.seen[2].body)["tool_choice"] == "none"  # the final request
            wait_until(lambda: outcomes(sidecar, "refinal-closed").get("cancelled") == 1,
                       "the first counted cancelled")
            # the final turn was had: the request is answered here, not sent upstream again
            again = raw_exchange(sidecar, request)
            assert b'"chatcmpl-watchdog' in again and len(raw.seen) == 3, again[-300:]
    finally:
        raw.close()


STREAM = (b'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
          b'"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')


# -- Host --------------------------------------------------------------------------------------

@pytest.mark.parametrize("hosts", [b"", b"Host: a\r\nHost: b\r\n"], ids=["none", "two"])
def test_an_http11_request_without_one_host_header_is_400(
        relay: str, tmp_path: Path, upstream_ok: RawUpstream, hosts: bytes) -> None:
    """RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host header; one with none or two
    is refused 400 and reaches nothing (HTTP/1.0 needs none)."""
    with sidecar_for(tmp_path, upstream_ok, model_relay=relay) as sidecar:
        body = b'{"model":"m","messages":[]}'
        answer = raw_exchange(sidecar, b"POST /v1/chat/completions HTTP/1.1\r\n" + hosts
                              + b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                              b"\r\n%s" % (len(body), body))
        assert answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.0 400 ")), answer[:200]
        assert upstream_ok.seen == []
        answer = raw_exchange(sidecar, b"POST /v1/chat/completions HTTP/1.0\r\n"
                              b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                              b"\r\n%s" % (len(body), body))
        assert b" 200 " in answer.split(b"\r\n", 1)[0], answer[:200]
        assert len(upstream_ok.seen) == 1


# -- what is not an HTTP/1.1 request ----------------------------------------------------------

@pytest.mark.parametrize("sent", [
    b"GARBAGE\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 10_000 + b"\r\n"
    b"Connection: close\r\nContent-Length: 2\r\n\r\n{}",
    b"GET /v1/models\r\n\r\n",  # HTTP/0.9's request line: no version, no Host
], ids=["request_line", "header", "long_header", "no_version"])
def test_what_is_not_an_http11_request_is_refused_in_the_apis_error_shape(
        relay: str, tmp_path: Path, upstream_ok: RawUpstream, sent: bytes) -> None:
    """A malformed request line or header, or a header line past aiohttp's limit (8,190
    bytes): the aiohttp relay refuses it in the model API's error shape, as the endpoint's
    other refusals; the compiled relay's server (hyper) a malformed one with a status and no
    body, and it takes a header of that length (docs/model-endpoint.md). Both close the
    connection after a refusal, and nothing reaches the upstream."""
    with sidecar_for(tmp_path, upstream_ok, model_relay=relay) as sidecar:
        answer = raw_exchange(sidecar, sent)
        if relay == "native" and b"X-Long" in sent:  # (hyper's limit is the whole head's)
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
            return
        assert not answer.endswith(b"<no end>"), answer[-200:]
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b" ", 2)[1] in (b"400", b"431"), head
        if relay == "python":
            assert b"Content-Type: application/json" in head, head
            error = json.loads(body)["error"]
            assert error["code"] in ("bad_request", "request_header_fields_too_large")
            assert error["message"].startswith("the request could not be read as HTTP/1.1")
        else:
            assert body == b"", body[:200]
        assert upstream_ok.seen == []


@pytest.mark.parametrize(("sent", "status", "code"), [
    (b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n", b"400",
     "bad_request"),
    (b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"404", "not_found"),
], ids=["connect", "asterisk"])
def test_a_target_that_is_no_path_is_refused_in_the_apis_error_shape(
        relay: str, tmp_path: Path, upstream_ok: RawUpstream, sent: bytes, status: bytes,
        code: str) -> None:
    """``CONNECT host:port`` (the authority form) and ``OPTIONS *`` name no path: both relays
    refuse them in the model API's error shape, as any other target outside /v1/ (the aiohttp
    relay's router matched no route and answered its own text/plain 404, a CONNECT
    included), and nothing reaches the upstream."""
    with sidecar_for(tmp_path, upstream_ok, model_relay=relay) as sidecar:
        answer = raw_exchange(sidecar, sent, wait=3)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b" ", 2)[1] == status, answer[:300]
        assert b"content-type: application/json" in head.lower(), head
        body = body.removesuffix(b"<no end>")
        assert json.loads(body)["error"]["code"] == code, body
        assert upstream_ok.seen == []


# -- refusals counted under their agent ----------------------------------------------------------

def test_a_refused_request_is_counted_under_the_agent_it_names(
        relay: str, tmp_path: Path, upstream_ok: RawUpstream) -> None:
    """A request the endpoint refuses itself (too large here) is counted under its
    ``x-watchdog-agent``, not as an unknown agent's; one whose header is no name the endpoint
    takes, under ``model_agent_name``."""
    with sidecar_for(tmp_path, upstream_ok, model_relay=relay, model_max_body_bytes=100,
                     model_agent_name="the-pod") as sidecar:
        big = json.dumps({"model": "m", "messages": [{"role": "user",
                                                      "content": "x" * 200}]}).encode()
        for agent in ("writer", "tab\there"):
            status, answer = post(sidecar, "/v1/chat/completions", big,
                                  {"x-watchdog-agent": agent})
            assert status == 413, answer
        assert outcomes(sidecar, "writer") == {"refused": 1.0}
        assert outcomes(sidecar, "the-pod") == {"refused": 1.0}
        assert outcomes(sidecar, "unknown") == {}
        assert upstream_ok.seen == []


# -- a run whose agent gives up at an error -----------------------------------------------------

@pytest.mark.parametrize("failure", ["unreachable", "500", "400"])
@pytest.mark.parametrize("first", [True, False], ids=["at_once", "after_a_call"])
def test_a_run_whose_agent_gives_up_at_an_error_ends_error_loose_run_gap_later(
        relay: str, tmp_path: Path, failure: str, first: bool) -> None:
    """The openai SDK's loop, each of its requests (and the SDK's own retries) answered with
    an error: the upstream unreachable (the endpoint's 502), a server error, a request refused.
    The agent gives up (the SDK raises) and sends nothing more: its run ends ``error``, the
    error's code its reason, ``loose_run_gap`` after the last request, on both relays — with
    no call counted as with one (it stayed ``active`` until ``run_end_timeout``, then
    ``abandoned``)."""
    import openai

    def scripted(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        if not first and len(raw.seen) == 1:
            send(handler, 200, ONE_TOOL_CALL)
        elif failure == "unreachable":
            handler.close_connection = True  # (closed before any head: no HTTP response)
        else:
            send(handler, int(failure), json.dumps({"error": {
                "message": "scripted", "type": "x", "code": None}}).encode())

    raw = RawUpstream(scripted)
    try:
        with sidecar_for(tmp_path, raw, model_relay=relay, loose_run_gap=1.0,
                         eval_interval=0.2) as sidecar:
            client = openai.OpenAI(base_url=sidecar.url("model") + "/agent/giver/v1",
                                   api_key="k", max_retries=1)
            messages: list[dict[str, object]] = [{"role": "user", "content": f"go {first}"}]
            with pytest.raises(openai.APIError):
                while True:  # (the agent's loop: it runs the calls asked, then asks again)
                    reply = client.chat.completions.create(
                        model="m", messages=messages, tools=TOOLS,  # type: ignore[arg-type]
                    ).choices[0].message
                    messages.append(reply.model_dump(exclude_none=True))
                    for call in reply.tool_calls or []:
                        messages.append({"role": "tool", "tool_call_id": call.id,
                                         "content": "found"})
            asked = len(raw.seen)
            # the SDK retried the failed request once (a refusal it does not retry)
            assert asked == (0 if first else 1) + (1 if failure == "400" else 2)
            runs = sidecar.get_json("/v1/runs?agent=giver")["runs"]
            assert len(runs) == 1, runs
            code = {"unreachable": "upstream_unreachable"}.get(failure, f"upstream_{failure}")
            run = wait_until(lambda: (lambda detail: detail if detail and detail.get(
                "terminal_state") else None)(run_detail(sidecar.api, runs[0]["id"])),
                "the run to end")
            assert (run["terminal_state"], run["terminal_reason"]) == ("error", code), run
            assert run["has_final_answer"] is False
            assert len(raw.seen) == asked  # (nothing more went upstream)
    finally:
        raw.close()
