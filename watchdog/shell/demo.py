"""``watchdog demo``: an embedded sidecar and three simulated agents, watched live.

The sidecar is the real :class:`~watchdog.shell.server.Server`, in this process, on free 127.0.0.1
ports with its state in a temporary directory and the shipped default rules. The agents are
threads that emit real OpenTelemetry spans through the OTel SDK's OTLP/HTTP exporter — exactly
what an instrumented agent does — and read their directives from the control API:

* ``researcher`` is slow but progressing: a step every second (its conversation grows, a slow
  tool call is reported in flight by heartbeats); it is never stopped and ends ``completed``;
* ``crawler`` loops: the same search with the same arguments, again and again. It is sent a
  ``wind_down`` (tool-cycle), ignores it, and is aborted when the grace runs out
  (``loop_detected``);
* ``uploader`` is in an error loop: every write fails with the same error; it is aborted by
  ``error-loop`` (``loop_detected``).

A live table shows their signals and directives (redrawn 4×/s on a terminal, a frame every
couple of seconds otherwise); at the end come each run's terminal state and the looping run's
progress report (``GET /v1/runs/{id}/report``). Everything runs in this process and is stopped
and joined before the command returns: no process or thread is left behind.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TextIO

from watchdog.core.runs.steps import format_duration
from watchdog.shell.config import Config

DEFAULT_SECONDS = 15.0  # how long the slow agent works; the demo takes a few seconds more
SLOW_STEPS = 15  # the slow agent's steps (one a second by default)
LOOP_CALLS_MAX = 40  # the looping agents give up by themselves after this many calls
LOOP_STEP_MAX = 0.5  # seconds between the looping agents' calls (at most)
EXPORT_DELAY_MS = 100  # the exporters' batch delay (the README recommends 200 ms)
TTY_REFRESH = 0.25  # seconds between redraws on a terminal
PLAIN_REFRESH = 2.0  # seconds between frames when the output is not a terminal
END_WAIT = 10.0  # seconds the demo waits for every run to be seen ending
HTTP_TIMEOUT = 5.0
HOME_AND_CLEAR = "\x1b[H\x1b[2J"


# -- the embedded sidecar --------------------------------------------------------------------------

@dataclass
class EmbeddedSidecar:
    api: str
    otlp_http: str


@contextmanager
def embedded_sidecar(state_dir: str) -> Iterator[EmbeddedSidecar]:
    """The real server on an event loop of its own, in a thread; stopped and joined on exit."""
    from watchdog.shell.server import Server  # the server's dependencies load only for the demo

    config = Config(otlp_grpc_address="127.0.0.1:0", otlp_http_address="127.0.0.1:0",
                    api_address="127.0.0.1:0", metrics_address="127.0.0.1:0",
                    state_dir=state_dir, eval_interval=0.25, rules_watch_interval=0.0,
                    state_flush_interval=0.25).validate()
    server = Server(config)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failure: list[BaseException] = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as exc:  # reported by the caller's thread
            failure.append(exc)
            started.set()
            loop.run_until_complete(server.stop())
            loop.close()
            return
        started.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        loop.close()

    thread = threading.Thread(target=serve, name="watchdog-demo-sidecar", daemon=True)
    thread.start()
    started.wait()
    if failure:
        thread.join()
        raise failure[0]
    try:
        host, port = server.addresses["api"]
        otlp_host, otlp_port = server.addresses["otlp_http"]
        yield EmbeddedSidecar(f"http://{host}:{port}", f"http://{otlp_host}:{otlp_port}")
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


# -- the control API, as agents and the table use it -----------------------------------------------

def _request(method: str, url: str, body: object = None,
             accept: str = "application/json") -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": "application/json", "Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError as exc:
        return 0, str(exc).encode()


def _get_json(url: str) -> Any:
    status, body = _request("GET", url)
    return json.loads(body) if status == 200 else None


# -- the simulated agents --------------------------------------------------------------------------

@dataclass
class SimulatedAgent(ABC):
    """One agent run in a thread: spans over real OTLP, directives from the control API."""

    name: str
    behaviour: str
    sidecar: EmbeddedSidecar
    step: float
    stop: threading.Event
    run_id: str = ""
    seen: list[dict[str, Any]] = field(default_factory=list)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.run_id = f"demo-{self.name}-{uuid.uuid4().hex[:6]}"
        self.provider = TracerProvider(resource=Resource.create({"service.name": "demo"}))
        self.provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=self.sidecar.otlp_http + "/v1/traces"),
            schedule_delay_millis=EXPORT_DELAY_MS))
        self.tracer = self.provider.get_tracer("watchdog.shell.demo")
        self.ids = {"watchdog.run.id": self.run_id, "watchdog.agent.name": self.name}
        self.messages = 2
        self.thread = threading.Thread(target=self._main, name=f"demo-{self.name}", daemon=True)

    @abstractmethod
    def work(self) -> str | None:
        """The run's steps (each subclass writes its script); returns the final answer, or
        None when it stopped without one."""

    def start(self) -> None:
        self.thread.start()

    def _main(self) -> None:
        from opentelemetry import trace

        try:
            root = self.tracer.start_span(f"invoke_agent {self.name}", attributes={
                "gen_ai.operation.name": "invoke_agent", **self.ids})
            with trace.use_span(root, end_on_exit=False):
                answer = self.work()
            if answer is not None:
                root.set_attribute("final_result", answer)
            root.end()
        except BaseException as exc:  # shown at the end; the demo must still clean up
            self.error = exc
        finally:
            self.provider.shutdown()  # exports what is left, joins the exporter's thread

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    # building blocks
    def directives(self) -> list[dict[str, Any]]:
        """New directives since the last look (long-poll without waiting)."""
        after = self.seen[-1]["seq"] if self.seen else 0
        found = _get_json(f"{self.sidecar.api}/v1/runs/{self.run_id}/directives?after={after}")
        new: list[dict[str, Any]] = found["directives"] if found else []
        self.seen += new
        return new

    def aborted(self) -> bool:
        self.directives()
        return any(d["action"] == "abort" for d in self.seen)

    def chat(self, grow: int = 2, finish_reason: str = "tool_call") -> None:
        self.messages += grow
        conversation = json.dumps([{"role": "user", "parts": []}] * self.messages)
        with self.tracer.start_as_current_span("chat demo-model", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "demo-model",
                "gen_ai.input.messages": conversation,
                "gen_ai.response.finish_reasons": [finish_reason],
                "gen_ai.usage.input_tokens": 120 * self.messages,
                "gen_ai.usage.output_tokens": 40, **self.ids}):
            pass

    def tool(self, name: str, args: dict[str, Any], result: str | None = None,
             error: str | None = None, seconds: float = 0.0) -> None:
        from opentelemetry.trace import Status, StatusCode

        with self.tracer.start_as_current_span(f"execute_tool {name}", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                "gen_ai.tool.call.arguments": json.dumps(args), **self.ids}) as span:
            if seconds:
                self.wait(seconds, call_started=time.time())
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
                span.set_attribute("error.type", "OSError")
            elif result is not None:
                span.set_attribute("gen_ai.tool.call.result", result)

    def heartbeat(self, call_started: float | None = None, announce: bool = False) -> None:
        """A sign of life; ``call_started``: a call is in flight since then."""
        body: dict[str, Any] = {"messages": self.messages,
                                "in_flight": 0 if call_started is None else 1}
        if call_started is not None:
            body["oldest_call_started"] = call_started
        if announce:
            body["announce"] = {"agent": self.name}
        _request("POST", f"{self.sidecar.api}/v1/runs/{self.run_id}/heartbeat", body)

    def wait(self, seconds: float, call_started: float | None = None) -> None:
        """Time passes (a slow model or tool); heartbeats say the run is alive."""
        deadline = time.monotonic() + seconds
        while not self.stop.is_set():
            self.heartbeat(call_started)
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.stop.wait(min(left, 0.5))


class SlowResearcher(SimulatedAgent):
    """Slow but progressing: each step reads a new source (a slow call), the conversation grows."""

    def work(self) -> str | None:
        self.heartbeat(announce=True)
        for index in range(SLOW_STEPS):
            if self.stop.is_set() or self.aborted():
                return None
            self.chat()
            self.tool("fetch_paper", {"doi": f"10.1000/demo.{index}"},
                      result=f"paper {index}: {3 + index} relevant findings on agent loops",
                      seconds=self.step * 0.6)
            self.wait(self.step * 0.4)
        self.chat(finish_reason="stop")
        return f"Summary of {SLOW_STEPS} papers: agents loop when nobody watches them."


class LoopingCrawler(SimulatedAgent):
    """Calls the same search with the same arguments; ignores wind_down, stops on abort."""

    def work(self) -> str | None:
        for _ in range(LOOP_CALLS_MAX):
            if self.stop.is_set() or self.aborted():
                return None
            self.chat(grow=0)  # the conversation does not move on either
            self.tool("search", {"query": "pricing page", "site": "example.com"},
                      result="0 results")
            self.stop.wait(self.step)
        return None


class ErrorLoopUploader(SimulatedAgent):
    """Every write fails the same way (only the file name changes); stops on abort."""

    def work(self) -> str | None:
        for attempt in range(LOOP_CALLS_MAX):
            if self.stop.is_set() or self.aborted():
                return None
            self.chat(grow=1)
            path = f"/data/export-{attempt}.csv"
            self.tool("write_file", {"path": path},
                      error=f"[Errno 122] Disk quota exceeded: '{path}'")
            self.stop.wait(self.step)
        return None


# -- the live table --------------------------------------------------------------------------------

COLUMNS = ("AGENT", "BEHAVIOUR", "STATE", "ITER", "TOOLS", "ERR", "MSGS", "SAME CALL",
           "SAME ERR", "CYCLE", "IDLE", "IN FLIGHT", "TERMINAL")
NUMERIC = frozenset({"ITER", "TOOLS", "ERR", "MSGS", "SAME CALL", "SAME ERR", "CYCLE", "IDLE",
                     "IN FLIGHT"})


def table_row(agent: SimulatedAgent, detail: dict[str, Any] | None) -> tuple[str, ...]:
    if detail is None:
        return (agent.name, agent.behaviour, "starting", *("-",) * (len(COLUMNS) - 3))
    signals = detail["signals"]
    ended = detail["state"] == "ended"
    terminal = detail["terminal_state"] or "-"
    if ended and detail["terminal_reason"]:
        terminal += f" ({detail['terminal_reason']})"
    return (agent.name, agent.behaviour, detail["state"], str(signals["iterations"]),
            str(signals["tool_calls"]), str(signals["errors"]), str(signals["messages"]),
            str(signals["repeated_tool_call"]), str(signals["repeated_error"]),
            str(signals["cycle_repeats"]),
            "-" if ended else format_duration(signals["idle_seconds"]),
            str(signals["in_flight"]), terminal)


def render(agents: Sequence[SimulatedAgent], details: dict[str, dict[str, Any] | None],
           title: str) -> str:
    """One frame: the signals table, then every directive sent so far."""
    rows = [COLUMNS] + [table_row(a, details.get(a.run_id)) for a in agents]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [title, ""]
    for row in rows:
        cells = [cell.rjust(width) if name in NUMERIC else cell.ljust(width)
                 for name, cell, width in zip(COLUMNS, row, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
    lines += ["", "directives:"]
    sent = [(a, d) for a in agents for d in (details.get(a.run_id) or {}).get("directives", [])]
    if not sent:
        lines.append("  (none yet)")
    for agent, directive in sent:
        lines.append(f"  {agent.name:<10} #{directive['seq']} {directive['action']:<9} "
                     f"{directive['rule']}: {directive['message']}")
    return "\n".join(lines)


def fetch_details(api: str, agents: Sequence[SimulatedAgent]) -> dict[str, dict[str, Any] | None]:
    return {a.run_id: _get_json(f"{api}/v1/runs/{urllib.parse.quote(a.run_id, safe='')}")
            for a in agents}


class Screen:
    """Redraws in place on a terminal (ANSI); prints a frame now and then otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.interval = TTY_REFRESH if self.tty else PLAIN_REFRESH
        self._last = 0.0

    def show(self, frame: str, force: bool = False) -> None:
        """Draw ``frame`` if it is time to (``force``: now, e.g. a directive was sent)."""
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        if self.tty:
            self.out.write(HOME_AND_CLEAR + frame + "\n")
        else:
            self.out.write(frame + "\n" + "-" * 72 + "\n")
        self.out.flush()


# -- the whole demo --------------------------------------------------------------------------------

def run_demo(seconds: float = DEFAULT_SECONDS, out: TextIO | None = None) -> int:
    """Run the demo; returns 0 when every run ended as expected, 1 otherwise."""
    out = out or sys.stdout
    started = time.monotonic()
    slow_step = seconds / SLOW_STEPS
    loop_step = min(LOOP_STEP_MAX, seconds / 20)
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="watchdog-demo-") as state_dir, \
            embedded_sidecar(state_dir) as sidecar:
        agents: list[SimulatedAgent] = [
            SlowResearcher("researcher", "slow but progressing", sidecar, slow_step, stop),
            LoopingCrawler("crawler", "looping", sidecar, loop_step, stop),
            ErrorLoopUploader("uploader", "error loop", sidecar, loop_step, stop),
        ]
        out.write(f"agent-watchdog demo: an embedded sidecar (OTLP/HTTP {sidecar.otlp_http}, "
                  f"control API {sidecar.api}, default rules) and 3 simulated agents "
                  f"exporting real OTLP.\n\n")
        screen = Screen(out)
        try:
            for agent in agents:
                agent.start()
            _watch(sidecar, agents, screen, started,
                   until=lambda: not any(a.thread.is_alive() for a in agents))
            _watch(sidecar, agents, screen, started, until=lambda: _all_ended(sidecar, agents),
                   timeout=END_WAIT)
        finally:
            stop.set()
            for agent in agents:
                agent.join(END_WAIT)
        details = fetch_details(sidecar.api, agents)
        screen.show(render(agents, details, _title(started, "final")), force=True)
        ok = _summary(out, agents, details)
        looping = agents[1]
        status, report = _request("GET", f"{sidecar.api}/v1/runs/{looping.run_id}/report",
                                  accept="text/markdown")
        out.write(f"\nProgress report of the looping run (GET /v1/runs/{looping.run_id}/report)"
                  f":\n\n")
        out.write(report.decode("utf-8", "replace") if status == 200
                  else f"(no report: HTTP {status})\n")
    out.write(f"\nDemo finished in {time.monotonic() - started:.1f}s; the sidecar is stopped "
              f"and its temporary state removed.\n")
    out.flush()
    return 0 if ok else 1


def _title(started: float, label: str) -> str:
    return f"t={time.monotonic() - started:5.1f}s  {label}"


def _watch(sidecar: EmbeddedSidecar, agents: Sequence[SimulatedAgent], screen: Screen,
           started: float, until: Callable[[], bool], timeout: float | None = None) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    shown: tuple[tuple[int, str], ...] = ()
    while not until():
        if deadline is not None and time.monotonic() > deadline:
            return
        details = fetch_details(sidecar.api, agents)
        # a new directive or a run ending is drawn at once, whatever the refresh interval
        events = tuple((len(d["directives"]), d["state"]) if d else (0, "")
                       for d in details.values())
        screen.show(render(agents, details, _title(started, "live (Ctrl-C stops)")),
                    force=events != shown)
        shown = events
        time.sleep(TTY_REFRESH / 2)


def _all_ended(sidecar: EmbeddedSidecar, agents: Sequence[SimulatedAgent]) -> bool:
    details = fetch_details(sidecar.api, agents)
    return all(d is not None and d["state"] == "ended" for d in details.values())


EXPECTED = {"researcher": "completed", "crawler": "loop_detected", "uploader": "loop_detected"}


def _summary(out: TextIO, agents: Sequence[SimulatedAgent],
             details: dict[str, dict[str, Any] | None]) -> bool:
    out.write("\nTerminal states:\n")
    ok = True
    for agent in agents:
        detail = details.get(agent.run_id) or {}
        state = detail.get("terminal_state") or "not ended"
        reason = detail.get("terminal_reason")
        answered = "with a final answer" if detail.get("has_final_answer") else "no final answer"
        line = f"  {agent.name:<10} {agent.behaviour:<21} {state}"
        line += f" ({reason})" if reason else ""
        out.write(f"{line}, {answered}  [{agent.run_id}]\n")
        if agent.error is not None:
            out.write(f"    the simulated agent failed: {agent.error!r}\n")
        ok = ok and state == EXPECTED[agent.name] and agent.error is None
    with suppress(Exception):
        out.flush()
    return ok
