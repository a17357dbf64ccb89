"""bench/model_endpoint.py runs: a short run through both relays, same run, reports every
figure docs/performance.md quotes for each relay and phase; by default with its Go client and
upstream (bench/loadgen, built by the bench), and with its Python ones on request."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench import model_endpoint

ROOT = Path(__file__).resolve().parent.parent


def run_bench(*args: str, timeout: float = 170, **env: str) -> subprocess.CompletedProcess[str]:
    """bench/model_endpoint.py with ``args``, outside any WATCHDOG_* setting of the caller's,
    ``env`` added."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("WATCHDOG_")}
    return subprocess.run([sys.executable, str(ROOT / "bench" / "model_endpoint.py"), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**environment, **env})


SMALL = ("--streams", "4", "--concurrency", "2", "--chunks", "3", "--chunk-ms", "1")


def test_the_bench_measures_both_relays_in_one_run() -> None:
    result = run_bench("--streams", "8", "--concurrency", "4", "--chunks", "4", "--chunk-ms", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "; client go, upstream go;" in out.splitlines()[0], out
    for phase in ("1 stream at a time", "4 streams at a time, starting together (waves)",
                  "4 streams at a time, starts staggered"):
        for relay in ("floor", "python", "native"):
            header = f"{phase}, relay {relay}:"
            assert header in out, out
            section = out.split(header, 1)[1].split(", relay ", 1)[0]
            for row in ("time to first byte p50", "time to first byte p99",
                        "gap between chunks p99", "stream, first to last p50",
                        "sidecar CPU per stream"):
                assert row in section, (header, row, section)


def passes_the_stream_as_it_comes(url: str) -> None:
    """A proxy at ``url`` in front of the bench upstream (6 events 40 ms apart) carries its
    stream event by event (not at its end), its status and body."""
    request = urllib.request.Request(url + "/chat/completions", method="POST", data=b"{}")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        start, arrivals, data = time.perf_counter(), [], b""
        while chunk := response.read1(65536):
            data += chunk
            arrivals.append(time.perf_counter() - start)
    assert data.count(b"\n\n") == 6 and data.endswith(b"data: [DONE]\n\n")
    assert len(arrivals) >= 4 and arrivals[-1] - arrivals[0] > 0.1  # 40 ms apart, as sent


def test_the_floor_is_a_proxy_that_passes_the_stream_as_it_comes(tmp_path: Path) -> None:
    """``--floor``: the bare proxy carries the upstream's stream event by event (not at its
    end), its status and body, so its figures are a proxy's, not a buffer's."""
    with model_endpoint.upstream(6, 40.0) as up, model_endpoint.floor_proxy(up, 2) as (url, _):
        passes_the_stream_as_it_comes(url)


def test_the_relay_floor_is_a_proxy_on_the_relays_stack_that_passes_the_stream_as_it_comes(
        ) -> None:
    """``--relay-floor``: the bare proxy on the relay's own HTTP stack (bench/relayfloor)
    carries the upstream's stream event by event, its status, the request's body and path,
    so its figures are a proxy's, not a buffer's."""
    with model_endpoint.upstream(6, 40.0) as up, \
            model_endpoint.relay_floor_proxy(up, 2) as (url, _):
        passes_the_stream_as_it_comes(url)
        with urllib.request.urlopen(url + "/models", timeout=10) as response:
            assert response.status == 200 and response.read() == b"{}"  # not a POST: {}


def test_the_bench_runs_a_relay_unpacked_pinned_and_its_loop_apart_in_the_same_run() -> None:
    """``--relay-floor --unpacked --pin 0:0 --pin-loop 0`` with a pack: the relay floor, the
    native relay with and without the pack and with its loop pinned, each reported with its
    relay threads' CPU, and the first and continuing requests apart."""
    result = run_bench(*SMALL, "--relay", "native", "--relay-floor", "--turns", "2",
                       "--budget-pack", "5", "--unpacked", "--pin", "0:0", "--pin-loop", "0")
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    for relay in ("floor", "floor-rust", "native", "native@nopack", "native@loop"):
        assert f"2 streams at a time, starts staggered, relay {relay}:" in out, out
    section = out.split("relay native@nopack:", 1)[1].split(", relay ", 1)[0]
    for row in ("  of them first p99", "  of them continuing p99", "its relay's threads"):
        assert row in section, (row, section)
    assert "without the pack" in result.stderr
    refused = run_bench(*SMALL, "--unpacked")
    assert refused.returncode == 2 and "--unpacked: with --budget-pack" in refused.stderr


def test_the_bench_measures_a_baseline_tree_in_the_same_run() -> None:
    result = run_bench(*SMALL, "--relay", "native", "--baseline", str(ROOT))
    assert result.returncode == 0, result.stderr[-2000:]
    for relay in ("native@base", "native"):
        for start in ("starting together (waves)", "starts staggered"):
            assert f"2 streams at a time, {start}, relay {relay}:" in result.stdout, \
                result.stdout
    refused = run_bench("--baseline", "/nowhere", timeout=60)
    assert refused.returncode == 2 and "not a source tree" in refused.stderr


def test_the_bench_measures_budgeted_runs() -> None:
    """``--budget``: every run has a budget, so each request carries a bound its response is
    trimmed to (the relay's trimming path), and the report says so."""
    result = run_bench(*SMALL, "--budget", "100")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "each run a budget of 100 tool calls" in result.stdout
    for relay in ("python", "native"):
        assert f"2 streams at a time, starts staggered, relay {relay}:" in result.stdout
    bad = run_bench("--budget", "0", timeout=60)
    assert bad.returncode == 2 and "--budget: 1 to 1000000 tool calls" in bad.stderr


def test_the_bench_runs_its_python_client_and_upstream_without_go(tmp_path: Path) -> None:
    """``--client python --upstream python``: aiohttp in the bench's process and its asyncio
    upstream, the same report; nothing built, so no Go toolchain needed. Without one, the Go
    client's default says what is missing."""
    no_go = {"PATH": str(Path(sys.executable).parent), "AGENT_WATCHDOG_CACHE": str(tmp_path)}
    result = run_bench(*SMALL, "--relay", "native", "--client", "python", "--upstream", "python",
                       **no_go)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "; client python, upstream python;" in out.splitlines()[0], out
    for phase in ("1 stream at a time", "2 streams at a time, starting together (waves)",
                  "2 streams at a time, starts staggered"):
        section = out.split(f"{phase}, relay native:", 1)[1]
        for row in ("time to first byte p99", "gap between chunks p99",
                    "sidecar CPU per stream"):
            assert row in section, (phase, row, section)
    assert not (tmp_path / "loadgen").exists()
    missing = run_bench("--build-loadgen", timeout=60, **no_go)
    assert missing.returncode == 1, missing.stderr
    assert "needs the Go toolchain" in missing.stderr and "Traceback" not in missing.stderr


def test_the_go_client_and_upstream_are_built_once_per_source(tmp_path: Path) -> None:
    """``--build-loadgen`` builds bench/loadgen into the user's cache under the hash of its
    sources, and a second call finds it built."""
    env = {**os.environ, "AGENT_WATCHDOG_CACHE": str(tmp_path)}
    command = [sys.executable, str(ROOT / "bench" / "model_endpoint.py"), "--build-loadgen"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                           env=env)
    assert first.returncode == 0, first.stderr
    binary = Path(first.stdout.strip())
    assert binary.is_file() and binary.parent.parent == tmp_path / "loadgen"
    built = binary.stat().st_mtime_ns
    again = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT,
                           env=env)
    assert again.stdout == first.stdout and binary.stat().st_mtime_ns == built


def _events(url: str) -> list[dict[str, object] | str]:
    """One streamed answer's SSE events as a client reads them, its id and time taken out."""
    request = urllib.request.Request(url + "/chat/completions", method="POST", data=b"{}",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        assert response.headers["Transfer-Encoding"] == "chunked"
        assert response.headers["x-request-id"].startswith("chatcmpl-bench")
        text = response.read().decode()
    events: list[dict[str, object] | str] = []
    for event in text.split("\n\n")[:-1]:
        data = event.removeprefix("data: ")
        if data == "[DONE]":
            events.append(data)
            continue
        chunk = json.loads(data)
        assert chunk.pop("id") == response.headers["x-request-id"]
        assert isinstance(chunk.pop("created"), int)
        events.append(chunk)
    return events


def test_the_go_upstream_streams_what_the_python_one_does() -> None:
    """Both scripted upstreams answer a streamed chat completion with the same events."""
    answers = {}
    for kind in ("go", "python"):
        with model_endpoint.upstream(5, 1, kind) as url:
            answers[kind] = _events(url)
    assert answers["go"] == answers["python"]
    assert len(answers["go"]) == 5 and answers["go"][-1] == "[DONE]"


def test_the_go_client_runs_phases_over_kept_connections() -> None:
    """loadgen's client: a phase a line of its stdin, a JSON line per stream (every event
    timed) and the phase's wall time back; a line that is not a phase refused by name."""
    binary = str(model_endpoint.loadgen())
    with model_endpoint.upstream(4, 1, "go") as url:
        result = subprocess.run([binary, "client", "-url", url, "-connections", "3"],
                                input="2 1 0 0\n6 3 10 0.01\n", capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        walls = [index for index, line in enumerate(lines) if "wall" in line]
        assert walls == [2, 9], lines
        for line in lines[:2] + lines[3:9]:
            assert len(line["gaps"]) == 3 and 0 < line["ttfb"] < 1, line
        bad = subprocess.run([binary, "client", "-url", url], input="2 0 0 0\n",
                             capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "a phase is STREAMS CONCURRENCY FIRST SPREAD" in bad.stderr


def test_both_clients_send_a_conversations_turns_in_order_with_its_history() -> None:
    """``--turns 3``: each worker sends a conversation's three requests one after another, each
    but the last offering a tool, the later ones carrying the tool call the model handed over
    (its id, read from the stream before) and a result for it, as a real agent does; the Go
    client sends what the Python one does (``request_body``), byte for byte as JSON."""
    seen: list[dict[str, Any]] = []

    def handed_id(body: bytes) -> str:
        return "call_" + hashlib.sha256(body).hexdigest()[:12]

    class Recorder(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            request = json.loads(raw)
            seen.append(request)
            delta: dict[str, Any] = {}
            if "tools" in request:  # (an id from the request: the same for both clients)
                delta = {"tool_calls": [{"index": 0, "id": handed_id(raw), "type": "function",
                                         "function": {"name": "search", "arguments": "{}"}}]}
            body = b"data: " + json.dumps({"choices": [{"delta": delta}]}).encode() + \
                b"\n\ndata: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        result = subprocess.run([str(model_endpoint.loadgen()), "client", "-url", url,
                                 "-turns", "3"], input="7 1 40 0\n", capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert sum("ttfb" in line for line in result.stdout.splitlines()) == 7
        go = list(seen)
        seen.clear()
        model_endpoint.CONVERSATION["turns"] = 3
        client = model_endpoint.PythonClient()
        try:
            assert len(client(url, 7, 1, 40, 0.0).ttfb) == 7
        finally:
            client.close()
            model_endpoint.CONVERSATION["turns"] = 1
    finally:
        server.shutdown()
        server.server_close()
    expected = []
    for number, turns in ((40, 3), (41, 3), (42, 1)):
        history: list[dict[str, object]] = []
        for turn in range(1, turns + 1):
            body = model_endpoint.request_body(number, history, turn < 3)
            expected.append(json.loads(body))
            call = handed_id(json.dumps(json.loads(body), separators=(", ", ": ")).encode())
            history += [{"role": "assistant", "content": None, "tool_calls": [{
                            "id": call, "type": "function",
                            "function": {"name": "search", "arguments": "{}"}}]},
                        {"role": "tool", "tool_call_id": call, "content": f"result {turn}"}]
    assert go == expected
    assert seen == expected
    assert [len(body["messages"]) for body in go] == [2, 4, 6, 2, 4, 6, 2]
    assert [("tools" in body) for body in go] == [True, True, False] * 2 + [True]


def test_the_bench_measures_conversations_of_several_turns() -> None:
    result = run_bench("--streams", "6", "--concurrency", "2", "--chunks", "3", "--chunk-ms",
                       "1", "--relay", "native", "--turns", "3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert ", 3 requests a conversation;" in result.stdout.splitlines()[0]
    assert "2 streams at a time, starts staggered, relay native: 6 + 6 streams" in result.stdout


def test_the_decide_bench_times_each_request_against_a_baseline_in_the_same_run() -> None:
    """bench/model_decide.py: the loop's CPU to decide and to book a request, and the
    collector's pauses, this tree and a baseline tree (this one again) alternating."""
    result = subprocess.run(
        [sys.executable, "-P", str(ROOT / "bench" / "model_decide.py"), "--conversations", "3",
         "--turns", "2", "--rounds", "1", "--baseline", str(ROOT)],
        capture_output=True, text=True, timeout=170, cwd=ROOT,
        env={key: value for key, value in os.environ.items() if not key.startswith("WATCHDOG_")})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("the loop's CPU per request, µs (3 conversations of 2"), lines
    assert lines[1].startswith("  this tree: decide ") and ", book " in lines[1], lines
    assert lines[2].startswith("    collector: gc ") and ", gen2 per 1000 " in lines[2], lines
    assert lines[3].startswith(f"  baseline {ROOT}: decide ") and " of this tree)" in lines[3]
    assert lines[4].startswith("    collector: gc "), lines
    figures = [float(part.split()[-1]) for part in lines[1].split(":", 1)[1].split(",")]
    assert all(0 < figure < 100_000 for figure in figures), figures
    collector = [float(part.split()[-1]) for part in lines[2].split(":", 1)[1].split(",")]
    assert all(0 <= figure < 100_000 for figure in collector), collector
