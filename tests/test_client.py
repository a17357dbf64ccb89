"""The agent-side client on its own: imports, the span processor, the directive board, the
listener's stream and long-poll protocol, the reporter's requests, failing open.

Protocol details (what is sent, how a stream resumes) are checked against a small recording
fake sidecar; behaviour against the real one is in ``test_client_sidecar.py`` and the adapter
tests.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from agent_watchdog_client import (
    Directive,
    ToolRefused,
    Watchdog,
    WatchdogAbort,
    current_run,
    processor,
)
from agent_watchdog_client.directive import DirectiveBoard
from agent_watchdog_client.listener import sse_events
from agent_watchdog_client.processor import (
    AGENT,
    LLM_CALL,
    OTHER,
    PROCESSOR,
    SPAN_ID,
    TOOL_CALL,
    WatchdogSpanProcessor,
    classify_start,
)
from agent_watchdog_client.steer import REPORT_HEADER, Steering
from agent_watchdog_client.sync import SyncChannel
from agent_watchdog_client.transport import DeadlineConnection, Reachability
from opentelemetry.sdk.trace import ConcurrentMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext

from tests.harness import ROOT, wait_until


def directive_json(seq: int, action: str = "wind_down", rule: str = "budget-countdown",
                   message: str | None = None, run_id: str = "r") -> dict[str, Any]:
    return {"id": f"d{seq}", "run_id": run_id, "seq": seq, "action": action, "rule": rule,
            "severity": "warning", "message": message or f"[budget: {4 - seq} of 5 left]",
            "terminal_state": "tool_limit_reached" if action == "abort" else None,
            "budget": {"max_tool_calls": 5, "remaining_tool_calls": 4 - seq},
            "created_at": "2026-11-22T04:00:00Z",
            "report_prompt": f"REPORT PROMPT {seq}" if action != "notify" else None}


# -- import without the server's dependencies ------------------------------------------------------

def test_client_imports_without_server_dependencies() -> None:
    blocked = ["aiohttp", "grpc", "prometheus_client", "yaml", "cel_expr_python", "cel",
               "google.protobuf", "watchdog.shell.server", "watchdog.shell.api",
               "watchdog.shell.service"]
    code = (
        "import sys\n"
        f"for name in {blocked!r}:\n"
        "    sys.modules[name] = None\n"
        "import agent_watchdog_client\n"
        "from agent_watchdog_client import Watchdog, WatchdogAbort, Run, current_run\n"
        "wd = Watchdog('http://127.0.0.1:9')\n"
        "run = wd.run(agent='a', max_tool_calls=3)\n"
        "loaded = sorted(m for m, v in sys.modules.items() if m.startswith('watchdog.') and v)\n"
        "assert all(m.startswith('agent_watchdog_client') for m in loaded), loaded\n"
        "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# -- pure parts ------------------------------------------------------------------------------

def test_classify_start_reads_every_convention() -> None:
    assert classify_start("chat gpt-4o", {"gen_ai.operation.name": "chat"}) == LLM_CALL
    assert classify_start("chat.streaming_completions m",  # Semantic Kernel <= 1.37
                          {"gen_ai.operation.name": "chat.streaming_completions"}) == LLM_CALL
    assert classify_start("x", {"gen_ai.operation.name": "execute_tool"}) == TOOL_CALL
    assert classify_start("x", {"gen_ai.operation.name": "invoke_agent"}) == AGENT
    assert classify_start("x", {"openinference.span.kind": "LLM"}) == LLM_CALL
    assert classify_start("x", {"openinference.span.kind": "TOOL"}) == TOOL_CALL
    assert classify_start("x", {"openinference.span.kind": "AGENT"}) == AGENT
    assert classify_start("x", {"openinference.span.kind": "CHAIN"}) == OTHER
    assert classify_start("x", {"traceloop.span.kind": "tool"}) == TOOL_CALL
    assert classify_start("x", {"llm.request.type": "chat"}) == LLM_CALL
    assert classify_start("running tool", {}) == TOOL_CALL
    assert classify_start("running tools", {}) == OTHER  # pydantic-ai's wrapper, not a call
    assert classify_start("agent run", None) == AGENT
    assert classify_start("GET /api", {"http.method": "GET"}) == OTHER


def test_board_keeps_the_latest_of_each_kind_and_ignores_redelivery() -> None:
    board = DirectiveBoard()
    first = Directive.from_json(directive_json(1))
    assert board.post(first)
    assert not board.post(Directive.from_json(directive_json(1)))  # redelivered
    notice = Directive.from_json(directive_json(2, "notify", "slow-tool", "slow"))
    loop = Directive.from_json(directive_json(3, "wind_down", "tool-cycle", "Loop: 4 times"))
    for directive in (notice, loop):
        board.post(directive)
    assert board.latest is loop and board.latest_budget is first
    assert board.latest_wind_down is loop and board.latest_notify is notice
    abort = Directive.from_json(directive_json(4, "abort", "error-loop", "Error loop"))
    later_abort = Directive.from_json(directive_json(5, "abort", "budget-exhausted"))
    board.post(abort)
    board.post(later_abort)
    assert board.abort is abort  # a run is aborted once, by the first abort
    assert board.received == 5 and board.last_seq == 5
    with pytest.raises(ValueError):
        Directive.from_json({"seq": 0})


def test_turns_show_the_true_count_wind_down_and_abort() -> None:
    """The steering core alone (no sidecar answers: port 9 refuses): the countdown is the
    local count, a wind-down's report prompt follows it, an abort makes the next turn final and
    the one after raises with the report."""
    wd = Watchdog("http://127.0.0.1:9")
    run = wd.run(agent="a", max_tool_calls=5)
    assert run.instructions() == "" and run.budget_note() == "" and run.directive() is None
    run.board.post(Directive.from_json(directive_json(1)))  # "[budget: 3 of 5 left]"
    assert run.budget_note() == "[budget: 5 of 5 tool calls left — wrap up soon]"  # true count
    for _ in range(2):
        run.before_tool_call("search")
    assert run.budget_note() == "[budget: 3 of 5 left]"  # the sidecar's words, true now
    turn = run.before_model_call()
    assert turn.instructions == "[budget: 3 of 5 left]\n\nREPORT PROMPT 1"
    assert not turn.final and turn.remaining_tool_calls == 3
    assert run.before_model_call() is turn  # asked twice for one request: the same turn
    run.board.post(Directive.from_json(directive_json(2, "notify", "slow-tool", "Slow tool")))
    run.before_tool_call("search")
    assert run.before_model_call().instructions == (
        "[budget: 2 of 5 tool calls left — wrap up soon]\n\nREPORT PROMPT 1\n\nSlow tool")
    run.raise_if_aborted()  # not aborted: nothing happens
    run.board.post(Directive.from_json(directive_json(3, "abort", "error-loop", "Stop")))
    with pytest.raises(ToolRefused) as refused:
        run.before_tool_call("search")
    assert refused.value.message.startswith("Not run: Stop")
    final = run.before_model_call()
    assert final.final and final.instructions.endswith("REPORT PROMPT 3")
    run.set_final_answer("## Task\nthe report")
    with pytest.raises(ToolRefused):
        run.before_tool_call("search")
    with pytest.raises(WatchdogAbort) as raised:
        run.before_model_call()
    assert raised.value.directive.rule == "error-loop" and raised.value.report == (
        "## Task\nthe report")


def test_the_cap_holds_without_any_directive() -> None:
    wd = Watchdog("http://127.0.0.1:9")
    run = wd.run(agent="a", max_tool_calls=2)
    run.before_model_call()
    run.before_tool_call("a")
    assert run.before_model_call().instructions == (
        "[budget: 1 of 2 tool calls left — finalize now]")
    run.before_tool_call("b")
    with pytest.raises(ToolRefused):
        run.before_tool_call("c")
    final = run.before_model_call()
    assert final.final and final.stop is not None and final.stop.rule == "max_tool_calls"
    assert "[budget: 0 of 2 tool calls left" in final.instructions
    assert "This run is being stopped: [budget: all 2 tool calls used" in final.instructions
    assert run.local_tool_calls == 2


def grace_json(seq: int, ends_at: int, rule: str = "tool-cycle") -> dict[str, Any]:
    return {**directive_json(seq, "wind_down", rule, "Loop: 4 times"),
            "terminal_state": "loop_detected", "budget": {"max_tool_calls": 50},
            "grace": {"tool_calls": 2, "ends_at_tool_calls": ends_at},
            "report_prompt": REPORT_HEADER + "\n\nYou must wind down now: Loop\n## Key Findings"}


def test_a_wind_down_grace_is_a_hard_cap_with_a_true_countdown() -> None:
    """tool-cycle fired after 8 calls with a 2-call grace: the model sees the true number of
    grace calls left, no tool runs past it, the next request is the final one asking for the
    wind-down's report, and the sidecar is to be told (stop=grace) — sidecar or not."""
    wd = Watchdog("http://127.0.0.1:9")
    run = wd.run(agent="a", max_tool_calls=50)
    for _ in range(8):
        run.before_model_call()
        run.before_tool_call("list")
    run.board.post(Directive.from_json(grace_json(1, ends_at=10)))
    turn = run.before_model_call()
    assert turn.instructions.startswith("[grace: 2 tool calls left to wrap up]\n\n" + REPORT_HEADER)
    assert not turn.final and "[budget" not in turn.instructions
    run.before_tool_call("read")
    turn = run.before_model_call()
    assert turn.instructions.startswith("[grace: 1 tool call left — finalize now]")
    run.before_tool_call("list")
    with pytest.raises(ToolRefused) as refused:  # a parallel call past the grace never runs
        run.before_tool_call("read")
    assert "the 2 tool calls allowed after the wind-down (tool-cycle) are used" in (
        refused.value.message)
    final = run.before_model_call()
    assert final.final and final.stop is not None
    assert (final.stop.rule, final.stop.terminal_state) == ("tool-cycle", "loop_detected")
    assert "This run is being stopped: [grace: the 2 tool calls allowed" in final.instructions
    assert "You must wind down now: Loop\n## Key Findings" in final.instructions
    assert final.instructions.count(REPORT_HEADER) == 1
    assert run.steering.unreported_stop == "grace"  # no sidecar answered: kept for the next
    assert run.local_tool_calls == 10
    run.set_final_answer("## Task\nthe report")
    with pytest.raises(ToolRefused):  # the model ignored the final turn: still nothing runs
        run.before_tool_call("list")
    with pytest.raises(WatchdogAbort) as raised:
        run.before_model_call()
    assert raised.value.directive.rule == "tool-cycle"
    assert raised.value.report == "## Task\nthe report"


def test_a_grace_cap_is_the_same_when_re_read_and_the_tightest_one_holds() -> None:
    """The cap is absolute: a client that re-reads the directive after a reconnect or restart
    (its own count lost, the sidecar's known) gets the same number left; a directive that
    arrives after its grace was used up stops at once; of two graces the first to end holds."""
    board = DirectiveBoard()
    board.post(Directive.from_json(grace_json(1, ends_at=12, rule="repeated-tool-call")))
    board.post(Directive.from_json(grace_json(2, ends_at=10)))
    board.post(Directive.from_json(grace_json(3, ends_at=14, rule="total-timeout")))
    assert board.grace is not None and board.grace.seq == 2
    fresh = Steering("r", {})
    fresh.sidecar_said(9, {})
    assert fresh.grace_left(board, 0) == 1
    assert fresh.compose(board, 0).instructions.startswith("[grace: 1 tool call left")
    late = Steering("r", {})
    late.sidecar_said(11, {})
    with pytest.raises(ToolRefused):
        late.admit_tool(board, 11)
    turn = late.compose(board, 11)
    assert turn.final and turn.stop is not None and turn.stop.rule == "tool-cycle"
    plain = Directive.from_json(directive_json(1, "wind_down", "repeated-tool-result", "same"))
    assert plain.grace_ends_at is None


def test_an_answer_sent_before_the_outage_does_not_end_it(
        caplog: pytest.LogCaptureFixture) -> None:
    """Two requests in flight when the sidecar is killed: the one cut off fails first, the
    other's answer (on its way before the kill) is handled after. That answer is old news: the
    outage is said once, not "unreachable", "reachable", "unreachable" again (the flapping the
    killed-sidecar steering tests caught on a loaded machine)."""
    health = Reachability("http://127.0.0.1:9")
    answered, cut_off = health.started(), health.started()
    health.succeeded(answered - 1)  # an earlier request: the sidecar was there
    with caplog.at_level("INFO", logger="agent_watchdog_client"):
        health.failed(ConnectionResetError("reset"), cut_off)
        health.succeeded(answered)  # sent before the cut-off one: says nothing
        assert health.reachable is False
        health.failed(ConnectionRefusedError("refused"), health.started())
        health.succeeded(health.started())  # a request sent after the outage: back
    messages = [record.getMessage() for record in caplog.records]
    assert [m.split(" at ")[0] for m in messages] == [
        "agent-watchdog sidecar unreachable", "agent-watchdog sidecar reachable again"], messages
    assert health.reachable is True


def test_sse_parser_joins_data_lines_and_skips_comments() -> None:
    stream = io.BytesIO(b"retry: 1000\n\n: keep-alive\n\nid: 1\nevent: directive\n"
                        b"data: {\"a\":\ndata: 1}\n\nid: 2\ndata:{}\n\n")
    assert list(sse_events(stream)) == ['{"a":\n1}', "{}"]  # type: ignore[arg-type]


# -- a recording fake sidecar ---------------------------------------------------------------------

class FakeSidecar:
    """Records requests; serves heartbeats, acks, an SSE stream (or 404 for it, to force
    long-polling) and long-polls from ``directives``."""

    def __init__(self, stream: bool = True) -> None:
        self.stream = stream
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.directives: list[dict[str, Any]] = []
        self.stream_hangups = 0  # streams to end after their backlog (forcing a reconnect)
        self.lock = threading.Lock()
        self.session_routes = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _record(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                with fake.lock:
                    fake.requests.append((self.command, self.path, dict(self.headers), body))
                return body

            def _json(self, status: int, value: Any) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                self._record()
                if "/sessions/" in self.path and not fake.session_routes:
                    self._json(404, {"error": {"code": "not_found", "message": "no route"}})
                else:
                    self._json(200, {"ok": True})

            def do_GET(self) -> None:
                self._record()
                if self.path.endswith("/directives/stream"):
                    if not fake.stream:
                        self._json(404, {"error": {"code": "not_found", "message": "x"}})
                        return
                    self._serve_stream(int(self.headers.get("Last-Event-ID") or 0))
                elif "/directives?" in self.path:
                    after = int(self.path.split("after=")[1].split("&")[0])
                    deadline = time.monotonic() + 5
                    while time.monotonic() < deadline:
                        ready = [d for d in fake.directives if d["seq"] > after]
                        if ready:
                            break
                        time.sleep(0.01)
                    self._json(200, {"directives": ready, "last_seq": after})
                elif "/context" in self.path and fake.session_routes:
                    self._json(200, {"session": "s", "facts": {"path": "/srv"},
                                     "failed_approaches": [], "zero_progress": False,
                                     "note": None})
                else:
                    self._json(404, {"error": {"code": "not_found", "message": "x"}})

            def _serve_stream(self, after: int) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b"retry: 1000\n\n")
                sent = after
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    for item in [d for d in fake.directives if d["seq"] > sent]:
                        self.wfile.write(f"id: {item['seq']}\nevent: directive\ndata: "
                                         f"{json.dumps(item)}\n\n".encode())
                        self.wfile.flush()
                        sent = item["seq"]
                    with fake.lock:
                        if sent > after and fake.stream_hangups:
                            fake.stream_hangups -= 1
                            return
                    time.sleep(0.01)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,),
                                       daemon=True)
        self.thread.start()

    def seen(self, method: str, fragment: str) -> list[tuple[str, str, dict[str, str], Any]]:
        with self.lock:
            return [r for r in self.requests if r[0] == method and fragment in r[1]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True, params=["c", "python"])
def span_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on both span paths: the C one (``_spanpath.c``, built by ``make
    test``) and the Python one (what runs where the package was installed without a
    compiler)."""
    if request.param == "python":
        monkeypatch.setattr(processor, "SPAN_PATH", None)
    return str(request.param)


@pytest.fixture
def fake() -> Iterator[FakeSidecar]:
    sidecar = FakeSidecar()
    yield sidecar
    sidecar.close()


@pytest.fixture
def memory() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def test_spans_in_a_run_are_stamped_and_nested_runs_are_children(
        fake: FakeSidecar, memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = memory
    wd = Watchdog(fake.url, tracer_provider=provider)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("outside"):
        pass
    with wd.run(agent="planner", max_tool_calls=20, max_seconds=60, session="s1") as run:
        assert current_run() is run
        with tracer.start_as_current_span("invoke_agent planner",
                                          attributes={"gen_ai.operation.name": "invoke_agent"}):
            with tracer.start_as_current_span("chat m",
                                              attributes={"gen_ai.operation.name": "chat"}):
                pass
            with wd.run(agent="researcher", max_tool_calls=3) as child:
                assert current_run() is child
                with tracer.start_as_current_span(
                        "execute_tool grep", attributes={"gen_ai.operation.name": "execute_tool"}):
                    pass
            assert current_run() is run
    assert current_run() is None
    wd.close()

    spans = {span.name: dict(span.attributes or {}) for span in exporter.get_finished_spans()}
    assert not any(key.startswith("watchdog.") for key in spans["outside"])
    # every span of a run carries the run id, and only that (each attribute costs every span
    # its export); the run's own span carries the rest, as its announcement does
    watchdog_keys = {name: {k: v for k, v in attrs.items() if k.startswith("watchdog.")}
                     for name, attrs in spans.items()}
    assert watchdog_keys["chat m"] == watchdog_keys["invoke_agent planner"] == {
        "watchdog.run.id": run.id}
    assert watchdog_keys["execute_tool grep"] == {"watchdog.run.id": child.id} != \
        watchdog_keys["chat m"]
    assert watchdog_keys["watchdog.run planner"] == {
        "watchdog.run.id": run.id, "watchdog.agent.name": "planner",
        "watchdog.session.id": "s1", "watchdog.budget.max_tool_calls": 20,
        "watchdog.budget.max_seconds": 60}
    assert watchdog_keys["watchdog.run researcher"] == {
        "watchdog.run.id": child.id, "watchdog.agent.name": "researcher",
        "watchdog.session.id": "s1",  # inherited
        "watchdog.parent_run.id": run.id, "watchdog.budget.max_tool_calls": 3}
    # The parent run has an agent span: its own span stays plain; the child had none, so its
    # run span becomes the agent span that closes it on the sidecar.
    assert "gen_ai.operation.name" not in spans["watchdog.run planner"]
    assert spans["watchdog.run researcher"]["gen_ai.operation.name"] == "invoke_agent"


def test_processor_is_fused_into_the_sdk_multi_processor_and_others_still_run(
        fake: FakeSidecar, span_path: str) -> None:
    """install() folds the processor into the provider's SynchronousMultiSpanProcessor: the
    processors added before and after still see every span, in order, with the stamp."""
    provider = TracerProvider()
    before, after = InMemorySpanExporter(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(before))
    wd = Watchdog(fake.url, tracer_provider=provider)
    provider.add_span_processor(SimpleSpanProcessor(after))
    active = provider._active_span_processor
    assert not any(isinstance(p, WatchdogSpanProcessor) for p in active._span_processors)
    fused = active.on_start.__self__
    if span_path == "c":
        compiled = processor.SPAN_PATH
        assert compiled is not None  # tests/test_client_span_path.py: make test builds it
        assert type(fused) is compiled.SpanPath
    else:
        assert type(fused) is WatchdogSpanProcessor
    assert active.on_end.__self__ is fused
    Watchdog(fake.url, tracer_provider=provider)  # installing again changes nothing
    assert active.on_start.__self__ is fused and fused._chain is active
    tracer = provider.get_tracer("test")
    with wd.run(agent="a", max_tool_calls=3) as run:
        with tracer.start_as_current_span("execute_tool t",
                                          attributes={"gen_ai.operation.name": "execute_tool"}):
            assert run.in_flight == 1
        assert run.in_flight == 0 and run.local_tool_calls == 1
    wd.close()
    for exporter in (before, after):
        tool = next(s for s in exporter.get_finished_spans() if s.name == "execute_tool t")
        assert (tool.attributes or {})["watchdog.run.id"] == run.id
    provider.shutdown()


def test_processor_is_added_to_a_provider_whose_processor_is_not_the_sdk_default(
        fake: FakeSidecar) -> None:
    multi = ConcurrentMultiSpanProcessor(2)
    provider = TracerProvider(active_span_processor=multi, shutdown_on_exit=False)
    wd = Watchdog(fake.url, tracer_provider=provider)
    assert multi._span_processors == (PROCESSOR,)
    assert "on_start" not in vars(multi)
    wd.close()
    provider.shutdown()


def test_processor_is_added_when_the_multi_processor_was_patched_on_the_instance(
        fake: FakeSidecar) -> None:
    """Someone else replaced the SDK multi-processor's on_start on the instance: it is kept, and
    the processor is added as one more processor rather than fused."""
    provider = TracerProvider()
    active = provider._active_span_processor
    started: list[str] = []
    original = active.on_start

    def patched(span: Any, parent_context: Any = None) -> None:
        started.append(span.name)
        original(span, parent_context=parent_context)

    active.on_start = patched  # type: ignore[method-assign]
    wd = Watchdog(fake.url, tracer_provider=provider)
    assert active.on_start is patched and active._span_processors == (PROCESSOR,)
    tool = {"gen_ai.operation.name": "execute_tool"}
    with wd.run(agent="a") as run, provider.get_tracer("test").start_as_current_span(
            "execute_tool t", attributes=tool):
        assert run.in_flight == 1
    wd.close()
    assert "execute_tool t" in started
    provider.shutdown()


def test_spans_are_told_apart_by_name_and_by_what_they_have_when_they_end(
        fake: FakeSidecar, memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    """Names alone make calls and agent spans (plumbing whose name shares only a first letter
    with them stays plumbing), and a span that gets its kind, or its name, only before it ends
    is counted then."""
    provider, exporter = memory
    tracer = provider.get_tracer("test")
    wd = Watchdog(fake.url, tracer_provider=provider)
    with wd.run(agent="a") as run:
        for name in ("", "e", "embeddings", "retriever", "invoke", "agent step",
                     "running tools", "GET /api"):
            with tracer.start_as_current_span(name):
                assert run.in_flight == 0 and run.agent_spans == 0
        with tracer.start_as_current_span("running tool: grep"):
            assert run.in_flight == 1
        with tracer.start_as_current_span("execute_tool final_result"):
            assert run.in_flight == 1  # in flight, not counted
        with (tracer.start_as_current_span("invoke_agent helper"),
              tracer.start_as_current_span("agent run")):
            assert run.agent_spans == 2 and run.in_flight == 0
        assert (run.local_tool_calls, run.local_model_calls) == (1, 0)
        with tracer.start_as_current_span("tool") as span:
            span.set_attribute("openinference.span.kind", "TOOL")
            assert run.in_flight == 0
        with tracer.start_as_current_span("step") as span:
            span.update_name("execute_tool ls")
        with tracer.start_as_current_span("completion") as span:
            span.set_attribute("llm.request.type", "chat")
        assert (run.local_tool_calls, run.local_model_calls) == (3, 1)
    wd.close()
    stamped = [span for span in exporter.get_finished_spans()
               if (span.attributes or {}).get("watchdog.run.id") == run.id]
    assert len(stamped) == 16  # the run's own span and every span inside it


def test_span_id_is_read_from_the_span_context_tuple() -> None:
    context = SpanContext(trace_id=7, span_id=0xABC, is_remote=False)
    assert context[SPAN_ID] == context.span_id == 0xABC


def test_run_announces_reports_calls_in_flight_and_acks(
        fake: FakeSidecar, memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, _ = memory
    wd = Watchdog(fake.url, tracer_provider=provider, heartbeat_interval=0.2)
    tracer = provider.get_tracer("test")
    with wd.run(agent="explorer", max_tool_calls=5, session="s1", run_id="run-1") as run:
        announce = wait_until(lambda: fake.seen("POST", "/v1/runs/run-1/heartbeat"))[0][3]
        assert announce["announce"] == {"agent": "explorer", "session": "s1",
                                        "budget": {"max_tool_calls": 5}}
        with tracer.start_as_current_span("execute_tool slow",
                                          attributes={"gen_ai.operation.name": "execute_tool"}):
            assert run.in_flight == 1
            beat = wait_until(lambda: [r for r in fake.seen("POST", "/heartbeat")
                                       if r[3]["in_flight"] == 1], what="in_flight 1")[0][3]
            assert "announce" not in beat  # announced once
            assert abs(beat["oldest_call_started"] - time.time()) < 5
        wait_until(lambda: fake.seen("POST", "/heartbeat")[-1][3]["in_flight"] == 0,
                   what="in_flight back to 0")
        fake.directives.append(directive_json(1, run_id="run-1"))
        assert run.board.wait_for(1, 10)
        run.before_model_call()  # what the turn shows counts as applied
        assert wait_until(lambda: fake.seen("POST", "/v1/runs/run-1/ack"))[0][3] == {"seq": 1}
        beats = len(fake.seen("POST", "/heartbeat"))
        wait_until(lambda: len(fake.seen("POST", "/heartbeat")) > beats, what="a periodic beat")
    wd.close()


@pytest.mark.parametrize("stream", [True, False], ids=["sse", "long-poll"])
def test_listener_resumes_without_gaps_or_repeats(
        stream: bool, memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    fake = FakeSidecar(stream=stream)
    fake.stream_hangups = 1
    received: list[int] = []
    wd = Watchdog(fake.url, tracer_provider=memory[0])
    try:
        with wd.run(agent="a", run_id="run-2") as run:
            run.board.post = _spy(run.board.post, received)  # type: ignore[method-assign]
            fake.directives.append(directive_json(1, run_id="run-2"))
            assert run.board.wait_for(1, 10)
            fake.directives.append(directive_json(2, run_id="run-2"))
            fake.directives.append(directive_json(3, "abort", "error-loop", run_id="run-2"))
            assert run.board.wait_for(3, 10)
            with pytest.raises(WatchdogAbort):
                run.raise_if_aborted()
    finally:
        wd.close()
        fake.close()
    assert received == [1, 2, 3]
    if stream:
        resumes = [r[2].get("Last-Event-ID") for r in fake.seen("GET", "/directives/stream")]
        assert resumes[0] is None and "1" in resumes  # reconnected after seq 1
    else:
        polls = [r[1] for r in fake.seen("GET", "/directives?")]
        assert polls[0].startswith("/v1/runs/run-2/directives?after=0&wait=")
        assert any("after=1&" in path for path in polls)


def _spy(post: Callable[[Directive], bool], received: list[int]) -> Callable[[Directive], bool]:
    def spy(directive: Directive) -> bool:
        accepted = post(directive)
        if accepted:
            received.append(directive.seq)
        return accepted

    return spy


def test_checkpoint_and_resume_context_send_the_contract_and_fail_open(
        fake: FakeSidecar, memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    wd = Watchdog(fake.url, "s3cret", tracer_provider=memory[0])
    with wd.run(agent="a", session="sess/1") as run:
        assert run.checkpoint(remaining="2 files", state={"project": "/srv/app"},
                              failed_approaches=["grep -r"]) is None  # no route yet: fails open
        assert run.resume_context() is None
        fake.session_routes = True
        assert run.checkpoint(remaining=3) == {"ok": True}
        assert run.resume_context()["facts"] == {"path": "/srv"}  # type: ignore[index]
    with wd.run(agent="a") as sessionless, pytest.raises(ValueError, match="session="):
        sessionless.checkpoint(remaining=1)
    wd.close()
    posts = fake.seen("POST", "/v1/sessions/sess%2F1/checkpoints")
    assert posts[0][3] == {"remaining": "2 files", "state": {"project": "/srv/app"},
                           "failed_approaches": ["grep -r"], "run_id": run.id}
    assert posts[1][3] == {"remaining": 3, "state": {}, "failed_approaches": [],
                           "run_id": run.id}
    assert posts[0][2]["Authorization"] == "Bearer s3cret"
    assert fake.seen("GET", "/v1/sessions/sess%2F1/context")


def test_a_checkpoint_the_sidecar_would_not_take_is_refused_before_it_is_sent(
        fake: FakeSidecar, memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    """A state value that is no flat JSON fact (an object, a nested dict, NaN), a key that is
    no string: a ``ValueError`` naming the key, with a bounded repr, and nothing posted."""
    wd = Watchdog(fake.url, tracer_provider=memory[0])
    fake.session_routes = True

    class Opaque:
        def __repr__(self) -> str:
            return "Opaque(" + "x" * 10_000 + ")"

    refused: list[tuple[Any, Any, str]] = [
        ({"path": "/srv", "obj": object()}, "x", r"state\['obj'\]=<object object at .*> is not"),
        ({"big": Opaque()}, "x", r"state\['big'\]=Opaque\(x+\.\.\.x+\) is not allowed"),
        ({"cfg": {"depth": [object()]}}, "x", r"state\['cfg'\]=\{'depth': \[.*\]\} is not"),
        ({"ratio": float("nan")}, "x", r"state\['ratio'\]=nan is not allowed"),
        ({7: "seven"}, "x", r"state key 7 is not allowed"),
        ({"": 1}, "x", r"state key '' is not allowed"),
        (["a"], "x", r"state=\['a'\] is not allowed"),
        ({}, object(), r"remaining=<object object at .*> is not allowed"),
    ]
    with wd.run(agent="a", session="s") as run:
        for state, remaining, message in refused:
            with pytest.raises(ValueError, match=message) as caught:
                run.checkpoint(remaining, state=state)
            assert len(str(caught.value)) < 300
        assert run.checkpoint(2, state={"n": 1, "ok": True, "gone": None, "f": 0.5}) == {
            "ok": True}
    wd.close()
    posts = fake.seen("POST", "/checkpoints")
    assert [post[3]["state"] for post in posts] == [{"n": 1, "ok": True, "gone": None, "f": 0.5}]


def test_without_a_tracer_provider_runs_still_work(fake: FakeSidecar) -> None:
    wd = Watchdog(fake.url)  # the global provider, whatever it is (none, in this suite)
    with wd.run(agent="bare", max_tool_calls=2, run_id="run-3") as run:
        wait_until(lambda: fake.seen("POST", "/v1/runs/run-3/heartbeat"))
        assert run.directive() is None
    wd.close()


def test_budget_validation() -> None:
    wd = Watchdog("http://127.0.0.1:9")
    with pytest.raises(ValueError, match="max_tool_calls=-1"):
        wd.run(agent="a", max_tool_calls=-1)
    with pytest.raises(ValueError, match="agent"):
        wd.run(agent="")
    with pytest.raises(ValueError, match="agent=None is not allowed"):
        wd.run(agent=None)  # type: ignore[arg-type]
    # what the sidecar would not take as a budget (its span attribute dropped): refused here
    for budget in ({"max_tool_calls": 2.5}, {"max_tokens": 10**30},
                   {"max_seconds": float("nan")}, {"max_cost_usd": 1e13}):
        with pytest.raises(ValueError, match=f"{next(iter(budget))}=.* is not allowed"):
            wd.run(agent="a", **budget)
    with wd.run(agent="a", max_tool_calls=2.0, max_seconds=0.5) as run:
        assert run.budget == {"max_tool_calls": 2.0, "max_seconds": 0.5}
        with pytest.raises(ValueError, match="failed_approaches='pin aiohttp' is not allowed"):
            run.checkpoint("x", failed_approaches="pin aiohttp")  # type: ignore[arg-type]
    for url in ("ftp://x", "http://[::1", "http://127.0.0.1:99999", "http://127.0.0.1:port"):
        with pytest.raises(ValueError) as refused:
            Watchdog(url)
        assert str(refused.value) == (f"WATCHDOG_URL={url!r} is not allowed: expected "
                                      f"http://HOST:PORT or https://HOST:PORT")


def test_client_modules_import_each_other_without_a_cycle() -> None:
    """processor <- run <- watchdog, never the reverse (TYPE_CHECKING imports included)."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "client" / "agent_watchdog_client"
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        if path.stem == "__init__":
            continue
        graph[path.stem] = {node.module.rsplit(".", 1)[-1]
                            for node in ast.walk(ast.parse(path.read_text()))
                            if isinstance(node, ast.ImportFrom) and node.module
                            and node.module.startswith("agent_watchdog_client.")}

    def visit(module: str, path: tuple[str, ...]) -> None:
        for imported in graph.get(module, ()):
            assert imported not in path, " -> ".join((*path, imported))
            visit(imported, (*path, imported))

    for module in graph:
        visit(module, (module,))
    assert graph["processor"] == {"tally"} and "watchdog" not in graph["run"]


def test_a_tool_call_no_model_asked_for_that_runs_the_model_loop_is_not_counted(
        fake: FakeSidecar, memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    """Semantic Kernel's ``kernel.invoke_prompt`` inside a run: the prompt function's
    ``execute_tool`` has no call id and model calls start inside it (here one set at start,
    one only before it ends, as SK does): the loop's frame, not a tool call. A tool call
    without a call id and no model call inside it counts."""
    provider, _ = memory
    tracer = provider.get_tracer("test")
    tool = {"gen_ai.operation.name": "execute_tool"}
    wd = Watchdog(fake.url, tracer_provider=provider)
    with wd.run(agent="a") as run:
        with tracer.start_as_current_span("execute_tool func3f2a", attributes=tool):
            with tracer.start_as_current_span("chat m", attributes={
                    "gen_ai.operation.name": "chat"}):
                pass
            with tracer.start_as_current_span("execute_tool lookup", attributes={
                    **tool, "gen_ai.tool.call.id": "call_1"}):
                pass
            with tracer.start_as_current_span("chat m") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
        assert (run.local_tool_calls, run.local_model_calls) == (1, 2)
        with tracer.start_as_current_span("execute_tool lookup", attributes=tool):
            pass
        assert (run.local_tool_calls, run.local_model_calls) == (2, 2)
    wd.close()


def test_without_the_exporter_setup_tracing_names_the_clients_own_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The install hint names this client's distribution and its extra (PyPI's
    ``agent-watchdog`` is another project)."""
    import tomllib

    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    assert "otlp" in project["optional-dependencies"]
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter",
                        None)
    with pytest.raises(ImportError) as missing:
        Watchdog(url="http://127.0.0.1:9").setup_tracing()
    assert f"{project['name']}[otlp]" in str(missing.value)


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_ENDPOINT",
                                      "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])
def test_setup_tracing_pointed_at_the_grpc_port_says_so(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        variable: str) -> None:
    """OTLP/HTTP to :4317 (OTLP/gRPC's port, the sidecar's too) reads as binary garbage
    retried, and no span arrives: a warning names the port to use; :4318 gets none."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    wd = Watchdog(url="http://127.0.0.1:9")
    monkeypatch.setenv(variable, "http://127.0.0.1:4317")
    with caplog.at_level(logging.WARNING, logger="agent_watchdog_client"):
        wd.setup_tracing("grpc-port", set_global=False).shutdown()
        (warning,) = [r.getMessage() for r in caplog.records if "4317" in r.getMessage()]
        assert "OTLP/gRPC's: the sidecar takes OTLP/HTTP on port 4318" in warning
        caplog.clear()
        monkeypatch.setenv(variable, "http://127.0.0.1:4318")
        wd.setup_tracing("http-port", set_global=False).shutdown()
        wd.setup_tracing("explicit", endpoint="http://127.0.0.1:4318/v1/traces",
                         set_global=False).shutdown()
        assert not [r for r in caplog.records if "4317" in r.getMessage()]
    wd.close()


def test_a_sidecar_that_stops_answering_costs_a_sync_one_timeout() -> None:
    """A kept-alive connection the sidecar closed is tried once more, anew; one on which it
    did not answer in time is not (a hung sidecar would cost every step two timeouts)."""
    import socket

    from agent_watchdog_client.sync import SyncChannel
    from agent_watchdog_client.transport import Transport

    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n"
              b"{}")
    requests: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                while data := connection.recv(65536):
                    requests.append(data)
                    if len(requests) == 1:
                        connection.sendall(answer)  # the first: answered, kept alive
                    # later ones: never answered (the sidecar hangs)

    threading.Thread(target=serve, daemon=True).start()
    try:
        channel = SyncChannel(Transport(f"http://127.0.0.1:{port}"), timeout=0.3)
        channel.sync("run-1", [], 0)
        assert len(requests) == 1
        assert channel.sync("run-1", [], 0) is None  # timed out
        # (a second attempt would have sent its request a timeout before this sync returned)
        assert len(requests) == 2, requests
    finally:
        listener.close()


@pytest.mark.parametrize("said", ["one", 1e999, float("nan"), True, None, [1]])
def test_a_directives_budget_of_no_number_is_read_as_none(said: Any) -> None:
    """A directive's budget holds numbers; a value that is none (a sidecar's bug, or a
    stand-in's) is left out as the directive is read, never a traceback when a turn is
    composed (the iterations note's recount reads ``remaining_iterations``)."""
    wd = Watchdog("http://127.0.0.1:9")
    run = wd.run(agent="a")
    data = directive_json(1, "wind_down", "budget-iterations",
                          "[budget: 1 of 2 model calls left — finalize now]")
    data["budget"] = {"max_iterations": 2, "remaining_iterations": said,
                      "max_tool_calls": said, "remaining_tool_calls": 1}
    directive = Directive.from_json(data)
    assert directive.budget == {"max_iterations": 2, "remaining_tool_calls": 1}
    run.board.post(directive)
    assert run.before_model_call().instructions.endswith("REPORT PROMPT 1")


def test_raise_if_aborted_returns_at_once_while_another_thread_syncs() -> None:
    """``aborted``, ``stop`` and ``raise_if_aborted()`` read the board and return at once (the
    module's promise), even while another thread's decision waits on a sync the sidecar is slow
    to answer (a parallel tool call's thread)."""
    import socket

    with socket.socket() as server:  # a sidecar that takes the connection and never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        wd = Watchdog(f"http://127.0.0.1:{server.getsockname()[1]}")
        try:
            run = wd.run(agent="a", max_tool_calls=5)
            deciding = threading.Thread(target=run.before_model_call, daemon=True)
            started = time.monotonic()
            deciding.start()
            time.sleep(0.3)  # (its sync has begun: it waits for the answer)
            assert deciding.is_alive()
            read_at = time.monotonic()
            run.raise_if_aborted()
            assert not run.aborted and run.stop is None
            assert time.monotonic() - read_at < 0.5, "waited for the other thread's sync"
            deciding.join(10)
            assert time.monotonic() - started >= 1.0  # (the sync did wait)
        finally:
            wd.close()


@pytest.mark.parametrize("token", ["abc\ndef", "abc\r\ndef", "t\u00f6k\u0435n", "a\x01b"])
def test_a_token_no_header_can_carry_is_refused_at_construction(
        monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    """Not at the first model request, on the agent's thread (http.client refuses the header
    there), and never shown (it is a secret)."""
    for make in (lambda: Watchdog("http://127.0.0.1:9", token=token),
                 lambda: (monkeypatch.setenv("WATCHDOG_API_TOKEN", token),
                          Watchdog("http://127.0.0.1:9"))):
        with pytest.raises(ValueError, match="WATCHDOG_API_TOKEN is not allowed") as caught:
            make()
        assert token.strip() not in str(caught.value)


def test_a_kept_alive_sync_connection_sends_its_next_body_with_the_whole_timeout() -> None:
    """The reads of an answer leave the socket's timeout at what was left of their deadline:
    the next request on that kept-alive connection (a body of 32 MiB, more than the socket
    buffers hold, sent while the sidecar reads it) must be sent with its own whole timeout, or
    a sidecar that reads it a moment late makes the sync time out while sending."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    answer = b'{"directives": [], "last_seq": 0}'
    bodies: list[int] = []

    def serve() -> None:
        connection, _ = server.accept()
        with connection, connection.makefile("rb") as reader:
            for _ in range(2):
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                bodies.append(len(reader.read(length)))
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n"
                                   % len(answer) + answer)

    threading.Thread(target=serve, daemon=True).start()
    connection = DeadlineConnection("127.0.0.1", server.getsockname()[1], timeout=30.0)
    try:
        connection.begin(30.0)
        connection.request("POST", "/v1/runs/r/sync", body=b"{}")
        assert connection.getresponse().read() == answer
        assert connection.sock is not None
        assert connection.sock.gettimeout() < 30.0  # what the answer's reads left
        connection.begin(30.0)
        assert connection.sock.gettimeout() == 30.0  # the next request's whole timeout
        connection.request("POST", "/v1/runs/r/sync", body=b"x" * (32 << 20))
        assert connection.getresponse().read() == answer
        assert bodies == [2, 32 << 20]
    finally:
        connection.close()
        server.close()


def test_a_peer_that_trickles_its_answer_holds_a_sync_no_longer_than_its_timeout() -> None:
    """A port that answers a byte a second (garbage, slowly): every read is within the socket
    timeout, but the answer never comes whole — the model request's sync gives up at its
    timeout (0.5 s here), as the explicit calls and the reporter's give up at theirs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def trickle(connection: socket.socket) -> None:
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\n")
            while not stop.wait(0.1):
                connection.sendall(b"X")

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=trickle, args=(connection,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    wd = Watchdog(f"http://127.0.0.1:{server.getsockname()[1]}", tracer_provider=TracerProvider())
    wd.syncer = SyncChannel(wd.transport, timeout=0.5)
    done = threading.Event()
    try:
        with wd.run(agent="explorer", max_tool_calls=3) as run:
            def step() -> None:
                run.before_model_call()
                done.set()
            threading.Thread(target=step, daemon=True).start()
            assert done.wait(10), "the sync waited on the trickle"
            assert wd.syncer.failures == 1 and run.remaining_tool_calls() == 3
    finally:
        stop.set()
        server.close()
        wd.close()
