"""Model endpoint benchmark: the same client, the same streamed runs, direct to the scripted
upstream and through the sidecar's model endpoint (DESIGN §12), in one run.

    .venv/bin/python bench/model_endpoint.py [--streams 200] [--concurrency 50]
        [--relay python,native] [--budget N] [--budget-pack N] [--turns N]
        [--client go|python] [--upstream go|python] [--baseline TREE]
        [--relay-floor] [--unpacked] [--pin LOAD:PROXY] [--pin-loop CPUS]

The upstream is a scripted model API in a process of its own (HTTP/1.1 keep-alive, each event
one chunk of a chunked ``text/event-stream``, as hosted APIs serve them), streaming a chat
completion of ``--chunks`` events ``--chunk-ms`` apart (a model's pace). The client reads each
SSE event as it arrives and times it; each side's client keeps its connections from one phase
to the next, as an agent's HTTP client does, warmed by a wave of the phase's width. Both are
compiled by default (``bench/loadgen``, Go's standard library only, built into
``$AGENT_WATCHDOG_CACHE/loadgen/`` when its sources change), so that on a small machine they
take little of the CPU the sidecar is measured on and do not queue the requests themselves;
``--upstream python`` is this file's asyncio one, ``--client python`` aiohttp in this process.
The sidecar is a ``watchdog serve`` process with the model endpoint on, in front of the
upstream (no budget, no rule firing: the pass-through path every request of a healthy run
takes, each one still read and booked as a model call of a run); one sidecar per ``--relay``
(``model_relay``: the aiohttp relay ``python``, the compiled one ``native``), all in the same
run. Every request carries a task of its own (one conversation, one run): a new conversation's
first request, which the compiled relay sends on before the event loop reads it. ``--turns N``
makes each conversation N requests, one after another, as a real agent sends them: each but
the last offers a tool, which the upstream calls (a tool call of its own id in the stream's
finish chunk), and each later one carries the calls the model handed over before it (their
ids read from the streams) and a result for each: a request that continues a run (the path
most of a real agent's requests take), which the compiled relay sends on before the event
loop reads it when the loop has proved what it gets. ``--budget N`` gives
every run a budget of N tool calls (``x-watchdog-budget-tool-calls``, which the direct side's
upstream ignores): each request then carries the bound its response is trimmed to (N <= 3: and
the countdown in its instructions), the path every request of a budgeted run but its final one
takes. ``--budget-pack N`` gives it instead through a rule pack (``max_tool_calls: N`` for the
bench's agent): the budget the compiled relay's requests sent on ahead carry, their bound and,
from three calls left, the countdown's note (with ``--turns 5 --budget-pack 5``, the third and
fourth requests of each conversation carry it). A conversation ends at its run's final request:
with a budget of N calls and ``--turns`` past N, each conversation is N + 1 requests, the last
offering the tool too (the sidecar withdraws it and holds the answer, the final report's path;
the upstream calls the tool all the same, so the sidecar sends the stop note in its place).

``--floor`` (on unless ``--no-floor``, or neither the client nor the upstream is Go) adds a
side named ``floor``: a bare proxy (Go's ``net/http``, bench/loadgen: each read of the
upstream written and flushed at once) in front of the same upstream, measured like a relay. It
decides nothing, so what it adds is what any HTTP proxy in the agent's path adds on this
machine: the floor to read the sidecar's figures against. ``--relay-floor`` adds another,
``floor-rust``: a bare proxy on the relay's own HTTP stack (bench/relayfloor: tokio with the
relay's two threads, hyper's HTTP/1.1 server and reqwest's pool as native/relay sets them up,
built with cargo, offline, into ``$AGENT_WATCHDOG_CACHE/relayfloor/``), deciding nothing and
telling no event loop: what the native relay would add with no Python behind it.
``--unpacked`` (with ``--budget-pack``) adds each relay without the rule pack
(``RELAY@nopack``); ``--pin LOAD:PROXY`` runs the client and upstream on the CPUs LOAD and every
proxy on PROXY (``taskset -c`` lists); ``--pin-loop CPUS`` adds each relay with its sidecar's
event loop moved onto CPUS (``RELAY@loop``; its relay's threads stay where ``--pin`` put them):
whether the loop's CPU is what the relay's threads wait for.

Phases, in the order direct, each relay, each relay again in reverse, direct (so drift hits
every side alike): one stream at a time; ``--concurrency`` streams at a time starting together
(so they go in waves whose requests all arrive in the same millisecond: the worst case for a
relay that decides each request on one thread); and ``--concurrency`` streams at a time whose
first starts are spread over one stream's length (as independent agents' requests arrive).
Reported per phase and relay against the direct side, pooled per side:

* time to first byte (the first SSE event): p50 and p99, and what the sidecar adds (a run's
  final requests apart: from the request to the answer's last event, as the sidecar holds the
  answer until it ends);
* per chunk: the gap between consecutive events p50 and p99 (the upstream's pace plus the
  relay), and what the sidecar adds;
* stream time (first event to [DONE]) p50 and p99: chunk timing changed or not, end to end;
* the sidecar's CPU per stream and per relayed event (net of its idle rate), and the share of
  the phase's wall time it was busy: near 100 % it, not the relay's latency, is the bound; for
  the native relay, its relay's threads' part and the rest (the event loop's thread);
* with ``--turns``, the time to first byte of conversations' first requests and of the
  requests that continue them apart.

Figures are milliseconds and ratios to the direct baseline measured in the same run, since
absolute numbers depend on the machine. The goal on loopback: at most 1 ms added at p99.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.ports import free_port  # noqa: E402

KEY = "sk-bench-0123456789abcdef"
MODEL = "bench-stream"
READY_TIMEOUT = 30.0
KEPT_SECONDS = 600.0  # the Python client keeps an idle connection for a run's length


def wait_ready(url: str, process: subprocess.Popen[bytes], what: str,
               timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answers: it is up
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not become ready")
        time.sleep(0.05)


# -- the upstream, in its own process -------------------------------------------------------

class _Upstream(asyncio.Protocol):
    """One connection to the bench upstream: HTTP/1.1 with keep-alive, as a hosted model API
    serves it; each POST answered with a chunked ``text/event-stream`` of chat completion
    chunks ``chunk_ms`` apart, each event one HTTP chunk (one write), then ``[DONE]``."""

    def __init__(self, chunks: int, chunk_ms: float) -> None:
        self.chunks, self.pause = chunks, chunk_ms / 1000
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.busy: asyncio.Task[None] | None = None
        self.served = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy is not None:
            self.busy.cancel()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.busy is not None and not self.busy.done():
            return  # the next request waits for this answer (no pipelining)
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buffer[:head_end].decode("latin-1")
        length = 0
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buffer) < head_end + 4 + length:
            return
        offers = b'"tools"' in self.buffer[head_end + 4:head_end + 4 + length]
        self.buffer = self.buffer[head_end + 4 + length:]
        self.busy = asyncio.get_running_loop().create_task(self.answer(head.split(" ", 2),
                                                                       offers))

    async def answer(self, request_line: list[str], offers: bool = False) -> None:
        """A streamed answer; to a request that offers tools (``offers``), with a tool call of
        ``search`` in its finish chunk (an id of its own, as a model's)."""
        transport = self.transport
        assert transport is not None
        if request_line[0] != "POST":  # the readiness probe
            transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 2\r\n\r\n{}")
            return
        self.served += 1
        answer_id = f"chatcmpl-bench{id(self):x}{self.served}"
        transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8"
                        b"\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
                        b"x-request-id: " + answer_id.encode() + b"\r\n\r\n")
        deltas: list[tuple[dict[str, object], str | None]] = [({"role": "assistant",
                                                                 "content": ""}, None)]
        deltas += [({"content": f"word{i} "}, None) for i in range(self.chunks - 3)]
        if offers:
            deltas.append(({"tool_calls": [{
                "index": 0, "id": f"call_{answer_id}", "type": "function", "function": {
                    "name": "search", "arguments": json.dumps({"q": str(self.served)})}}]},
                "tool_calls"))
        else:
            deltas.append(({}, "stop"))
        for index, (delta, finish) in enumerate(deltas):
            if index:
                await asyncio.sleep(self.pause)
            event = b"data: " + json.dumps({
                "id": answer_id, "object": "chat.completion.chunk", "created": int(time.time()),
                "model": MODEL, "system_fingerprint": "fp_bench", "choices": [{
                    "index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]},
                separators=(",", ":")).encode() + b"\n\n"
            transport.write(b"%x\r\n%b\r\n" % (len(event), event))
        await asyncio.sleep(self.pause)
        done = b"data: [DONE]\n\n"
        transport.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(done), done))
        if self.buffer:  # a request that came while this one streamed
            self.data_received(b"")


def serve_upstream(port: int, chunks: int, chunk_ms: float) -> None:
    """``--serve-upstream``: the bench's model API until SIGTERM: ``chunks`` SSE events per
    streamed answer (a role chunk, words, a finish chunk, ``[DONE]``) ``chunk_ms`` apart."""
    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Upstream(chunks, chunk_ms), "127.0.0.1",
                                          port, backlog=1024)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        async with server:
            await stop.wait()

    asyncio.run(serve())


# -- the Go load client and upstream (bench/loadgen) ------------------------------------------

LOADGEN = ROOT / "bench" / "loadgen"
LOADGEN_KEPT_DAYS = 7  # a build of other sources unused this long goes when another is made


def cached(name: str, sources: list[Path]) -> Path:
    """Where the build of ``sources`` named ``name`` is kept in the user's cache:
    ``$AGENT_WATCHDOG_CACHE/NAME/HASH/NAME``, HASH that of the sources' names and contents (as
    the Makefile keeps its builds)."""
    digest = hashlib.sha256(b"".join(path.name.encode() + b"\0" + path.read_bytes() + b"\0"
                                     for path in sorted(sources))).hexdigest()[:16]
    cache = Path(os.environ.get("AGENT_WATCHDOG_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agent-watchdog")
    return cache / name / digest / name


def loadgen() -> Path:
    """The Go client and upstream, built once per content of ``bench/loadgen/`` into the
    user's cache (``$AGENT_WATCHDOG_CACHE/loadgen/HASH/``)."""
    binary = cached("loadgen", [path for path in LOADGEN.iterdir()
                                if path.suffix == ".go" or path.name == "go.mod"])
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        raise SystemExit("bench/model_endpoint.py: building its Go client and upstream "
                         "(bench/loadgen) needs the Go toolchain (`go`; Debian: golang-go), "
                         "or run with --client python --upstream python")
    binary.parent.mkdir(parents=True, exist_ok=True)
    building = binary.with_name(f"loadgen.{os.getpid()}")
    env = {**os.environ, "GOPROXY": "off", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0",
           "GOFLAGS": "-buildvcs=false"}
    built = subprocess.run([go, "build", "-trimpath", "-o", str(building), "."], cwd=LOADGEN,
                           env=env, capture_output=True, text=True, timeout=600)
    if built.returncode != 0:
        building.unlink(missing_ok=True)
        raise SystemExit(f"bench/model_endpoint.py: go build of bench/loadgen failed:\n"
                         f"{built.stderr[-2000:]}")
    os.replace(building, binary)  # whole or not at all: other runs may build it at once
    for old in binary.parent.parent.iterdir():
        if old != binary.parent and old.is_dir() and \
                time.time() - old.stat().st_mtime > LOADGEN_KEPT_DAYS * 86400:
            shutil.rmtree(old, ignore_errors=True)
    return binary


@contextmanager
def upstream(chunks: int, chunk_ms: float, kind: str = "go") -> Iterator[str]:
    """The scripted model API in a process of its own: ``kind`` go (bench/loadgen) or python
    (``serve_upstream``); the same responses either way."""
    port = free_port()
    command = pinned("load", str(loadgen()), "upstream", "-port", str(port), "-chunks",
                     str(chunks), "-chunk-ms", str(chunk_ms)) if kind == "go" else \
        pinned("load", sys.executable, __file__, "--serve-upstream", str(port), "--chunks",
               str(chunks), "--chunk-ms", str(chunk_ms))
    process = subprocess.Popen(command)
    try:
        wait_ready(f"http://127.0.0.1:{port}/v1/models", process, "the upstream")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(30)


@contextmanager
def floor_proxy(upstream_url: str, connections: int) -> Iterator[tuple[str, int]]:
    """A bare proxy (Go's ``net/http``, bench/loadgen) in front of the upstream: what
    any HTTP proxy in the agent's path adds on this machine. Its URL and pid."""
    with bare_proxy([str(loadgen()), "proxy"], upstream_url, connections,
                    "the floor proxy") as proxy:
        yield proxy


@contextmanager
def bare_proxy(command: list[str], upstream_url: str, connections: int,
               what: str) -> Iterator[tuple[str, int]]:
    """The bare proxy ``command`` (taking -port, -upstream, -connections) on a free port, run
    until the block ends: its URL and pid."""
    port = free_port()
    process = subprocess.Popen(pinned("proxy", *command, "-port", str(port), "-upstream",
                                      upstream_url, "-connections", str(max(connections, 1))))
    try:
        wait_ready(f"http://127.0.0.1:{port}/models", process, what)
        yield f"http://127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        process.wait(30)


RELAYFLOOR = ROOT / "bench" / "relayfloor"


def relayfloor() -> Path:
    """The bare proxy on the relay's own HTTP stack (bench/relayfloor, Rust: the crates and
    settings of native/relay), built with cargo once per content of its sources into the
    user's cache (``$AGENT_WATCHDOG_CACHE/relayfloor/HASH/``), offline: the crates are those
    native/ already uses."""
    binary = cached("relayfloor", [path for path in [*RELAYFLOOR.iterdir(),
                                                     *(RELAYFLOOR / "src").iterdir()]
                                   if path.is_file()])
    if binary.is_file():
        return binary
    cargo = shutil.which("cargo")
    if cargo is None:
        raise SystemExit("bench/model_endpoint.py: --relay-floor builds bench/relayfloor with "
                         "cargo, which is not installed")
    target = binary.parent.parent / "target"
    built = subprocess.run([cargo, "build", "--release", "--offline", "--target-dir",
                            str(target)], cwd=RELAYFLOOR, capture_output=True, text=True,
                           timeout=1800)
    if built.returncode != 0:
        raise SystemExit(f"bench/model_endpoint.py: cargo build of bench/relayfloor failed:\n"
                         f"{built.stderr[-2000:]}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    building = binary.with_name(f"relayfloor.{os.getpid()}")
    shutil.copy2(target / "release" / "relayfloor", building)
    os.replace(building, binary)
    return binary


@contextmanager
def relay_floor_proxy(upstream_url: str, connections: int) -> Iterator[tuple[str, int]]:
    """``--relay-floor``: the bare proxy on the relay's own HTTP stack (bench/relayfloor: its
    runtime of two threads, as the relay's, hyper's server, reqwest's pool) in front of the
    upstream, deciding nothing and telling no event loop. Its URL and pid."""
    with bare_proxy([str(relayfloor())], upstream_url, connections,
                    "the relay floor proxy") as proxy:
        yield proxy


PIN: dict[str, str] = {}  # --pin: "load" (client, upstream) and "proxy" (every side's) CPUs


def parse_cpus(cpus: str) -> set[int]:
    """A taskset-style CPU list ("0", "0,1", "0-3") as a set."""
    chosen: set[int] = set()
    for part in cpus.split(","):
        low, _, high = part.partition("-")
        chosen.update(range(int(low), int(high or low) + 1))
    return chosen


def pinned(role: str, *command: str) -> list[str]:
    """``command``, run on the CPUs ``--pin`` gives ``role`` (taskset: every thread it starts
    inherits them)."""
    return ["taskset", "-c", PIN[role], *command] if role in PIN else list(command)


def cpu_split(pid: int) -> tuple[float, float]:
    """User + system CPU time of a process so far, and of its threads named watchdog-relay
    (the native relay's runtime) among them (Linux /proc; a thread that ended is counted in
    the whole only)."""
    relay = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name, fields = task.joinpath("stat").read_text().rsplit(")", 1)
        except OSError:
            continue  # (ended meanwhile)
        if name.split("(", 1)[1].startswith("watchdog-relay"):
            numbers = fields.split()
            relay += (int(numbers[11]) + int(numbers[12])) / os.sysconf("SC_CLK_TCK")
    return cpu_seconds(pid), relay


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def sidecar(state_dir: str, upstream_url: str, relay: str,
            callgrind: str | None = None, tree: Path = ROOT,
            pack: bool = True, loop: str | None = None) -> Iterator[tuple[str, int]]:
    """A sidecar with the model endpoint in front of ``upstream_url``: its endpoint's URL and
    pid; with ``callgrind`` (a file name) it runs under valgrind's callgrind; ``tree`` the
    source tree it runs from; ``pack``: with ``--budget-pack``'s rule pack; ``loop``: the CPUs
    of its main thread, the event loop's (taskset's list), once the relay's threads are
    started (they keep theirs)."""
    ports = {name: free_port() for name in ("otlp_http", "otlp_grpc", "api", "metrics",
                                            "model")}
    env = {key: value for key, value in os.environ.items() if not key.startswith("WATCHDOG_")}
    env.update(WATCHDOG_STATE_DIR=state_dir, WATCHDOG_LOG_LEVEL="warning",
               WATCHDOG_OTLP_HTTP_ADDRESS=f"127.0.0.1:{ports['otlp_http']}",
               WATCHDOG_OTLP_GRPC_ADDRESS=f"127.0.0.1:{ports['otlp_grpc']}",
               WATCHDOG_API_ADDRESS=f"127.0.0.1:{ports['api']}",
               WATCHDOG_METRICS_ADDRESS=f"127.0.0.1:{ports['metrics']}",
               WATCHDOG_MODEL_ADDRESS=f"127.0.0.1:{ports['model']}",
               WATCHDOG_MODEL_UPSTREAM=upstream_url, WATCHDOG_MODEL_AGENT_NAME="bench",
               WATCHDOG_MODEL_RELAY=relay,
               PYTHONPATH=f"{tree}{os.pathsep}{tree / 'client'}")
    pack = bool(PACK) and pack
    if pack:
        env["WATCHDOG_RULES"] = PACK["path"]
    command = pinned("proxy", sys.executable, "-m", "watchdog", "serve")
    if callgrind is not None:
        command = ["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={callgrind}",
                   *command]
    process = subprocess.Popen(command, env=env, cwd=tree)
    timeout = READY_TIMEOUT * (20 if callgrind else 1)  # valgrind runs it ~50x slower
    try:
        wait_ready(f"http://127.0.0.1:{ports['metrics']}/readyz", process, "the sidecar", timeout)
        wait_ready(f"http://127.0.0.1:{ports['model']}/v1/models", process, "its endpoint",
                   timeout)
        if loop is not None:  # its main thread alone (threads it starts from now inherit it)
            os.sched_setaffinity(process.pid, parse_cpus(loop))
        yield f"http://127.0.0.1:{ports['model']}/v1", process.pid
        if relay == "native" and callgrind is None:  # (which requests went on ahead)
            with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics",
                                        timeout=10) as response:
                counted = [line for line in response.read().decode().splitlines()
                           if line.startswith(("agent_watchdog_model_ahead_total",
                                               "agent_watchdog_model_steered_total"))]
            print(f"relay {relay}{'' if pack else ' without the pack'} ({tree}): "
                  + "; ".join(counted), file=sys.stderr)
    finally:
        process.terminate()
        process.wait(30)


# -- the clients ----------------------------------------------------------------------------

@dataclass
class Timings:
    ttfb: list[float] = field(default_factory=list)  # seconds to the first SSE event
    gaps: list[float] = field(default_factory=list)  # seconds between consecutive events
    streams: list[float] = field(default_factory=list)  # first event to the last
    chunks: int = 0
    # a run's final requests (--turns past a budget): seconds from the request to its last
    # event (the sidecar holds the answer until it ends), kept out of the figures above
    finals: list[float] = field(default_factory=list)
    continuing: list[float] = field(default_factory=list)  # ttfb of a conversation's later turns
    firsts: list[float] = field(default_factory=list)  # and of its first (with --turns)
    cpu: float = 0.0  # the sidecar's CPU seconds over its phases
    cpu_relay: float = 0.0  # of which its relay's threads' (the native relay's)
    wall: float = 0.0  # the phase's seconds
    idle: dict[str, float] = field(default_factory=dict)  # each sidecar's CPU, direct phases

    def extend(self, other: Timings) -> None:
        self.ttfb += other.ttfb
        self.gaps += other.gaps
        self.streams += other.streams
        self.chunks += other.chunks
        self.finals += other.finals
        self.continuing += other.continuing
        self.firsts += other.firsts
        self.cpu += other.cpu
        self.cpu_relay += other.cpu_relay
        self.wall += other.wall
        for relay, cpu in other.idle.items():
            self.idle[relay] = self.idle.get(relay, 0.0) + cpu

    @property
    def count(self) -> int:
        """The streams timed."""
        return len(self.ttfb) + len(self.finals)


BUDGET: dict[str, str] = {}  # --budget: the header that gives each run its budget
PACK: dict[str, str] = {}  # --budget-pack: the rule pack's file (WATCHDOG_RULES)
# --turns: requests a conversation; final: its last is its run's final request (a budget's)
CONVERSATION = {"turns": 1, "final": 0}


SEARCH_TOOL = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}]


def request_body(number: int, history: list[dict[str, object]], tools: bool) -> bytes:
    """A turn of conversation ``number``: a system and a user message, and for each turn
    before (``history``), the model's tool call and the tool's result; with ``tools`` (every
    turn but a conversation's last), the tool offered, which the upstream calls (loadgen's
    ``stream`` sends the same)."""
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a benchmark."},
        {"role": "user", "content": f"Task {number}: say the words."}, *history]
    return json.dumps({"model": MODEL, "stream": True, "messages": messages,
                       **({"tools": SEARCH_TOOL} if tools else {})}).encode()


def answered(event: bytes, turn: int) -> list[dict[str, object]]:
    """The model's answer that handed the tool call in ``event`` (an SSE event) over, and the
    tool's result, as an agent sends them back."""
    call = json.loads(event.removeprefix(b"data: "))["choices"][0]["delta"]["tool_calls"][0]
    return [{"role": "assistant", "content": None, "tool_calls": [{
                "id": call["id"], "type": "function", "function": call["function"]}]},
            {"role": "tool", "tool_call_id": call["id"], "content": f"result {turn}"}]


async def one_stream(session: aiohttp.ClientSession, base_url: str, number: int, turn: int,
                     timings: Timings, history: list[dict[str, object]] | None = None,
                     tools: bool = False, expect: bool | None = None) -> None:
    """Turn ``turn`` of conversation ``number`` after ``history`` (the turns before); with
    ``tools`` it offers the tool, and with ``expect`` (a turn that is not its conversation's
    last; by default ``tools``) the tool call the model hands over and its result are added to
    it."""
    history = [] if history is None else history
    expect = tools if expect is None else expect
    body = request_body(number, history, tools)
    handed = b""
    start = time.perf_counter()
    arrivals: list[float] = []
    pending = b""
    async with session.post(base_url + "/chat/completions", data=body, headers={
            "Authorization": f"Bearer {KEY}", "Content-Type": "application/json",
            **BUDGET}) as response:
        if response.status != 200:
            raise SystemExit(f"{base_url}: HTTP {response.status}: {await response.text()}")
        async for data in response.content.iter_any():
            now = time.perf_counter()
            pending += data
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                if expect and not handed and b'"tool_calls"' in event:
                    handed = event
                arrivals.append(now)
    if len(arrivals) < 2:
        raise SystemExit(f"{base_url}: a stream of {len(arrivals)} events")
    if expect:
        if not handed:
            raise SystemExit(f"{base_url}: no tool call handed over")
        history += answered(handed, turn)
    timings.chunks += len(arrivals)
    if tools and not expect:  # a run's final request: its answer held until it ends
        timings.finals.append(arrivals[-1] - start)
        return
    timings.ttfb.append(arrivals[0] - start)
    (timings.continuing if turn > 1 else timings.firsts).append(arrivals[0] - start)
    timings.gaps += [b - a for a, b in itertools.pairwise(arrivals)]
    timings.streams.append(arrivals[-1] - arrivals[0])


async def phase(session: aiohttp.ClientSession, base_url: str, streams: int,
                concurrency: int, first: int, spread: float = 0.0) -> Timings:
    """``streams`` streams, ``concurrency`` at a time, each worker starting its next stream as
    its last ends; ``spread``: seconds over which the workers' first streams start (0: all at
    once, so the streams go in waves that arrive together). A worker takes a conversation and
    sends its turns one after the other (``--turns``)."""
    timings = Timings()
    turns = CONVERSATION["turns"]
    numbers = iter(range(-(-streams // turns)))

    async def worker(index: int) -> None:
        await asyncio.sleep(spread * index / concurrency)
        for number in numbers:
            history: list[dict[str, object]] = []
            for turn in range(1, min(turns, streams - number * turns) + 1):
                await one_stream(session, base_url, first + number, turn, timings, history,
                                 turn < turns or bool(CONVERSATION["final"]), turn < turns)
    await asyncio.gather(*(worker(index) for index in range(concurrency)))
    return timings


class Client(Protocol):
    """Runs a phase: ``streams`` streams from ``url``, ``width`` at a time, the first's task
    number ``first``, the workers' first starts spread over ``spread`` seconds; its Timings,
    ``wall`` the phase's seconds. Connections are kept from one phase to the next (each side's
    own), as an agent's HTTP client keeps them: a phase measures requests, not connects."""

    def __call__(self, url: str, streams: int, width: int, first: int,
                 spread: float) -> Timings: ...


class PythonClient:
    """aiohttp in this process, a session per URL."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.sessions: dict[str, aiohttp.ClientSession] = {}

    def __call__(self, url: str, streams: int, width: int, first: int,
                 spread: float) -> Timings:
        wall = time.perf_counter()
        timings = self.runner.run(self.phase(url, streams, width, first, spread))
        timings.wall = time.perf_counter() - wall
        return timings

    async def phase(self, url: str, streams: int, width: int, first: int,
                    spread: float) -> Timings:
        if url not in self.sessions:
            self.sessions[url] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                limit=0, keepalive_timeout=KEPT_SECONDS))
        return await phase(self.sessions[url], url, streams, width, first, spread)

    def close(self) -> None:
        for session in self.sessions.values():
            self.runner.run(session.close())
        self.runner.close()


class GoClient:
    """bench/loadgen's client, a process per URL: a phase a line on its stdin, a JSON line of
    timings per stream back, then the phase's wall time."""

    def __init__(self, connections: int) -> None:
        self.binary, self.connections = str(loadgen()), connections
        self.processes: dict[str, subprocess.Popen[str]] = {}

    def __call__(self, url: str, streams: int, width: int, first: int,
                 spread: float) -> Timings:
        process = self.processes.get(url)
        if process is None:
            process = self.processes[url] = subprocess.Popen(
                pinned("load", self.binary, "client", "-url", url, "-connections",
                       str(self.connections), "-budget",
                       BUDGET.get("x-watchdog-budget-tool-calls", "0"),
                       "-turns", str(CONVERSATION["turns"]),
                       *(["-final"] if CONVERSATION["final"] else [])),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True)
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(f"{streams} {width} {first} {spread!r}\n")
        process.stdin.flush()
        timings = Timings()
        for line in process.stdout:  # each stream ends within loadgen's -stream-timeout
            one = json.loads(line)
            if "wall" in one:
                timings.wall = one["wall"]
                return timings
            timings.chunks += len(one["gaps"]) + 1
            if one.get("final"):
                timings.finals.append(one["ttfb"] + one["stream"])
                continue
            timings.ttfb.append(one["ttfb"])
            (timings.continuing if one.get("turn", 1) > 1 else timings.firsts).append(
                one["ttfb"])
            timings.gaps += one["gaps"]
            timings.streams.append(one["stream"])
        assert process.stderr is not None
        raise SystemExit(f"the Go client: {process.stderr.read().strip()[-2000:]}")

    def close(self) -> None:
        for process in self.processes.values():
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def client_of(kind: str, connections: int) -> Iterator[Client]:
    """``--client``: go or python, keeping up to ``connections`` connections per side."""
    client = GoClient(connections) if kind == "go" else PythonClient()
    try:
        yield client
    finally:
        client.close()


# -- the report -----------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (NaN for none: a phase whose events all came in one
    read has no gaps between them)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f}"


def report(label: str, relay: str, direct: Timings, proxied: Timings) -> list[str]:
    rows = [f"{label}, relay {relay}: {direct.count} + {proxied.count} streams, "
            f"{direct.chunks} + {proxied.chunks} events (direct + through the sidecar)",
            f"  {'':26} {'direct ms':>10} {'sidecar ms':>10} {'added ms':>10} {'ratio':>7}"]
    for name, values in (("time to first byte", "ttfb"), ("gap between chunks", "gaps"),
                         ("stream, first to last", "streams")):
        for q in (0.5, 0.99):
            d, p = pct(getattr(direct, values), q), pct(getattr(proxied, values), q)
            rows.append(f"  {name + f' p{round(q * 100)}':26} {ms(d):>10} {ms(p):>10} "
                        f"{ms(p - d):>10} {p / d if d else float('nan'):7.2f}")
    for name, values in (("first", "firsts"), ("continuing", "continuing")):
        for q in (0.5, 0.99) if direct.continuing and proxied.continuing else ():
            d, p = pct(getattr(direct, values), q), pct(getattr(proxied, values), q)
            rows.append(f"  {f'  of them {name} p{round(q * 100)}':26} {ms(d):>10} {ms(p):>10} "
                        f"{ms(p - d):>10} {p / d if d else float('nan'):7.2f}")
    for q in (0.5, 0.99) if direct.finals and proxied.finals else ():
        d, p = pct(direct.finals, q), pct(proxied.finals, q)
        rows.append(f"  {f'final, to its end p{round(q * 100)}':26} {ms(d):>10} {ms(p):>10} "
                    f"{ms(p - d):>10} {p / d if d else float('nan'):7.2f}")
    d_mean, p_mean = (statistics.fmean(side.gaps) if side.gaps else math.nan
                      for side in (direct, proxied))
    rows.append(f"  {'gap between chunks mean':26} {ms(d_mean):>10} {ms(p_mean):>10} "
                f"{ms(p_mean - d_mean):>10} {p_mean / d_mean if d_mean else math.nan:7.2f}")
    together = sum(gap < 0.0005 for gap in proxied.gaps), sum(gap < 0.0005 for gap in direct.gaps)
    rows.append(f"  events read together with the one before (< 0.5 ms apart): "
                f"{together[1]} direct, {together[0]} through the sidecar")
    idle = direct.idle.get(relay, 0.0) / direct.wall if direct.wall else 0.0  # its own timers
    busy = max(proxied.cpu - idle * proxied.wall, 0.0)
    threads = (f"; its relay's threads {proxied.cpu_relay / proxied.count * 1000:.2f} ms a "
               f"stream, the rest (the event loop's thread) "
               f"{(busy - proxied.cpu_relay) / proxied.count * 1000:.2f}"
               if relay.split("@")[0] == "native" else "")
    rows.append(f"  sidecar CPU per stream: {busy / proxied.count * 1000:.2f} ms, per "
                f"event {busy / proxied.chunks * 1e6:.0f} µs, busy "
                f"{busy / proxied.wall * 100 if proxied.wall else 0:.0f} % of the wall time "
                f"(its idle {idle * 1000:.1f} ms/s, measured while the direct side ran, "
                f"taken off){threads}")
    return rows


def measure(client: Client, direct_url: str, sidecars: dict[str, tuple[str, int]],
            streams: int, concurrency: int, stream_seconds: float) -> list[str]:
    """``sidecars``: relay -> (its endpoint's URL, its pid); ``stream_seconds``: how long the
    upstream takes to stream one response (the staggered phase spreads the first starts over
    it, so ``concurrency`` streams are open at any time but their requests do not arrive
    together)."""
    lines: list[str] = []
    counter = 0
    relays = list(sidecars)
    for width, count, spread in ((1, max(streams // 4, 10), 0.0), (concurrency, streams, 0.0),
                                 (concurrency, streams, stream_seconds)):
        sides = {side: Timings() for side in ("direct", *relays)}
        warm = max(width, 5)  # a wave: the connections this width takes, and the sidecars'
        client(direct_url, warm, width, 10**6 + counter, 0.0)
        for number, (url, _pid) in enumerate(sidecars.values()):
            client(url, warm, width, (2 + number) * 10**6 + counter, 0.0)
        for side in ("direct", *relays, *reversed(relays), "direct"):
            url = direct_url if side == "direct" else sidecars[side][0]
            cpu = {relay: cpu_split(pid) for relay, (_url, pid) in sidecars.items()}
            timings = client(url, count // 2, width, counter, spread)
            spent = {relay: tuple(now - then for now, then in zip(cpu_split(pid), cpu[relay],
                                                                  strict=True))
                     for relay, (_url, pid) in sidecars.items()}
            if side == "direct":
                timings.idle = {relay: both[0] for relay, both in spent.items()}
            else:
                timings.cpu, timings.cpu_relay = spent[side]
            sides[side].extend(timings)
            counter += count
        for relay in relays:
            label = f"{width} stream{'s' if width > 1 else ''} at a time"
            if width > 1:
                label += ", starts staggered" if spread else ", starting together (waves)"
            lines += report(label, relay, sides["direct"], sides[relay])
    return lines


def instructions(pid: int, out: str) -> int:
    """The instructions callgrind counted in ``pid`` since it was last zeroed (dumped now)."""
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True,
                   capture_output=True)
    total = 0
    for dump in Path(out).parent.glob(Path(out).name + "*"):
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                total += int(line.split()[1])
                break
        dump.unlink()
    return total


def count_instructions(client: Client, state: str, up: str, trees: dict[str, Path],
                       streams: int, width: int = 1) -> list[str]:
    """``--callgrind``: instructions per stream in each sidecar (its relay threads included),
    ``width`` streams at a time after a warm-up, whatever the machine's load; ``trees``: each
    sidecar's relay (``RELAY@base``: of the baseline) and source tree."""
    lines = []
    for relay, tree in trees.items():
        out = f"{state}/callgrind-{relay.replace('@', '-')}.out"
        with sidecar(f"{state}/{relay}", up, relay.split("@")[0], callgrind=out,
                     tree=tree, pack=not relay.endswith("@nopack")) as (url, pid):
            client(url, max(width, 10), width, 0, 0.0)  # imports, the pools, the pricer
            subprocess.run(["callgrind_control", "--zero", str(pid)], check=True,
                           capture_output=True)
            client(url, streams, width, 1000, 0.0)
            counted = instructions(pid, out)
        lines.append(f"  relay {relay}: {counted / streams / 1e6:.2f} M instructions per "
                     f"stream ({streams} streams, {width} at a time)")
    return lines


def write_pack(state: Path, calls: int) -> str:
    """``--budget-pack``: a rule pack giving the bench's agent a budget of ``calls`` tool
    calls; its path."""
    path = state / "budget-pack.yaml"
    path.write_text(f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: bench-budget
budgets:
  - agents: ["bench"]
    max_tool_calls: {calls}
""")
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200,
                        help="streams per side at full concurrency (default 200)")
    parser.add_argument("--concurrency", type=int, default=50,
                        help="streams at once (default 50)")
    parser.add_argument("--chunks", type=int, default=20, help="SSE events per stream")
    parser.add_argument("--chunk-ms", type=float, default=5.0,
                        help="the upstream's pause between chunks, ms (default 5)")
    parser.add_argument("--relay", default="python,native",
                        help="the sidecars' model_relay, comma-separated: python, native "
                             "(default both, alternating in one run)")
    parser.add_argument("--callgrind", action="store_true",
                        help="count each sidecar's instructions per stream under valgrind's "
                             "callgrind instead (repeatable whatever the load; --streams of "
                             "them, one at a time)")
    parser.add_argument("--callgrind-width", type=int, default=1, metavar="N",
                        help="with --callgrind: streams at a time (default 1)")
    parser.add_argument("--baseline", type=Path, metavar="TREE",
                        help="also each relay of the sidecar in this source tree (another "
                             "build: before/after in the same run), reported as RELAY@base")
    parser.add_argument("--budget", type=int, metavar="N",
                        help="every run with a budget of N tool calls (its responses trimmed "
                             "to the calls left; default: no budget)")
    parser.add_argument("--budget-pack", type=int, metavar="N",
                        help="every run with a budget of N tool calls from a rule pack (the "
                             "budget continuing requests sent on ahead carry; default: none)")
    parser.add_argument("--turns", type=int, default=1, metavar="N",
                        help="requests a conversation (default 1): each after the last's "
                             "answer, carrying a tool call and its result more, so all but "
                             "the first continue a run")
    parser.add_argument("--client", choices=("go", "python"), default="go",
                        help="the load client: go (bench/loadgen, compiled; default) or python "
                             "(aiohttp in this process)")
    parser.add_argument("--upstream", choices=("go", "python"), default="go",
                        help="the scripted model API: go (bench/loadgen; default) or python "
                             "(asyncio)")
    parser.add_argument("--floor", action=argparse.BooleanOptionalAction,
                        help="also a bare proxy (Go's net/http, bench/loadgen) in "
                             "front of the upstream, reported as relay floor: what any proxy "
                             "adds on this machine (default: on, unless neither the client "
                             "nor the upstream is Go)")
    parser.add_argument("--relay-floor", action="store_true",
                        help="also a bare proxy on the relay's own HTTP stack (bench/relayfloor, "
                             "Rust: tokio, hyper, reqwest as native/relay has them, no event "
                             "loop; built with cargo), reported as relay floor-rust")
    parser.add_argument("--unpacked", action="store_true",
                        help="with --budget-pack: each relay also without the rule pack, "
                             "reported as RELAY@nopack, in the same run")
    parser.add_argument("--pin", metavar="LOAD:PROXY",
                        help="CPU affinities (taskset -c lists): the client and upstream on "
                             "LOAD, every proxy and sidecar on PROXY, e.g. 0:1")
    parser.add_argument("--pin-loop", metavar="CPUS",
                        help="also each relay with its sidecar's event loop (the main thread, "
                             "once the relay's threads are started) on these CPUs, reported as "
                             "RELAY@loop: e.g. 0 with --pin 0:1, the relay's threads then have "
                             "the proxies' CPU to themselves")
    parser.add_argument("--build-loadgen", action="store_true",
                        help="only build bench/loadgen (the Go client and upstream) and say "
                             "where it is")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream is not None:
        serve_upstream(args.serve_upstream, args.chunks, args.chunk_ms)
        return
    if args.build_loadgen:
        print(loadgen())
        return
    if args.streams < 4 or not 1 <= args.concurrency <= 10_000 or args.chunks < 3 or \
            args.chunk_ms < 0:
        parser.error("--streams >= 4, --concurrency 1 to 10000, --chunks >= 3, --chunk-ms >= 0")
    if not 1 <= args.turns <= 100:
        parser.error("--turns: 1 to 100")
    CONVERSATION["turns"] = args.turns
    if args.budget is not None:
        if not 0 < args.budget <= 1_000_000:
            parser.error("--budget: 1 to 1000000 tool calls")
        BUDGET["x-watchdog-budget-tool-calls"] = str(args.budget)
    if args.budget_pack is not None and not 0 < args.budget_pack <= 1_000_000:
        parser.error("--budget-pack: 1 to 1000000 tool calls")
    limit = min(calls for calls in (args.budget, args.budget_pack) if calls is not None) \
        if args.budget is not None or args.budget_pack is not None else None
    if limit is not None and args.turns > limit:  # (its budget spent: its final request)
        args.turns = limit + 1
        CONVERSATION.update(turns=args.turns, final=1)
    if args.pin is not None:
        load, _, proxy = args.pin.partition(":")
        if not load or not proxy:
            parser.error("--pin LOAD:PROXY, each a CPU list for taskset -c (e.g. 0:1)")
        PIN.update(load=load, proxy=proxy)
    if args.pin_loop is not None:
        try:
            parse_cpus(args.pin_loop)
        except ValueError:
            parser.error("--pin-loop CPUS: a CPU list for taskset -c (e.g. 0)")
    if args.unpacked and args.budget_pack is None:
        parser.error("--unpacked: with --budget-pack")
    relays = list(dict.fromkeys(relay.strip() for relay in args.relay.split(",")))
    if not relays or any(relay not in ("python", "native") for relay in relays):
        parser.error("--relay: python, native or both, comma-separated")
    trees = {relay: ROOT for relay in relays}
    if args.baseline is not None:
        if not (args.baseline / "watchdog" / "__main__.py").is_file():
            parser.error(f"--baseline {args.baseline}: not a source tree of the sidecar")
        trees = {name: tree for relay in relays for name, tree in (
            (relay + "@base", args.baseline.resolve()), (relay, ROOT))}
    if args.unpacked:
        trees.update({relay + "@nopack": ROOT for relay in relays})
    if args.pin_loop is not None:
        trees.update({relay + "@loop": ROOT for relay in relays})
    stream_seconds = args.chunks * args.chunk_ms / 1000
    if args.callgrind:
        width = max(args.callgrind_width, 1)
        with tempfile.TemporaryDirectory() as state, \
                upstream(args.chunks, args.chunk_ms, args.upstream) as up, \
                client_of(args.client, width) as client:
            if args.budget_pack is not None:
                PACK["path"] = write_pack(Path(state), args.budget_pack)
            lines = count_instructions(client, state, up, trees, args.streams, width)
        print(f"model endpoint under callgrind: streamed chat completions, {args.chunks} "
              f"events each")
        print("\n".join(lines))
        return
    with tempfile.TemporaryDirectory() as state, \
            upstream(args.chunks, args.chunk_ms, args.upstream) as up, ExitStack() as stack, \
            client_of(args.client, args.concurrency) as client:
        if args.budget_pack is not None:
            PACK["path"] = write_pack(Path(state), args.budget_pack)
        sidecars = {"floor": stack.enter_context(floor_proxy(up, args.concurrency))} \
            if args.floor or (args.floor is None and "go" in (args.client, args.upstream)) \
            else {}
        if args.relay_floor:
            sidecars["floor-rust"] = stack.enter_context(relay_floor_proxy(up, args.concurrency))
        sidecars.update({name: stack.enter_context(sidecar(
            f"{state}/{name}", up, name.split("@")[0], tree=tree,
            pack=not name.endswith("@nopack"),
            loop=args.pin_loop if name.endswith("@loop") else None))
            for name, tree in trees.items()})
        lines = measure(client, up, sidecars, args.streams, args.concurrency, stream_seconds)
    budget = f", each run a budget of {args.budget} tool calls" if args.budget else ""
    if args.budget_pack:
        budget += f", each run a rule pack's budget of {args.budget_pack} tool calls"
    if args.turns > 1:
        budget += f", {args.turns} requests a conversation" + (
            " (the last its run's final one)" if CONVERSATION["final"] else "")
    print(f"model endpoint: streamed chat completions, {args.chunks} events "
          f"{args.chunk_ms:g} ms apart{budget}; client {args.client}, upstream "
          f"{args.upstream}; same client, same run, direct vs through the sidecar")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
