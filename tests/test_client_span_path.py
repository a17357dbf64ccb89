"""The client's span path in C (``agent_watchdog_client/_spanpath.c``) against the Python one it
mirrors (``agent_watchdog_client/processor.py``): the same spans, of every kind the processor
tells apart, nested and flat, read at each step, give the same counts, calls in flight, spans
kept for the sync and stamps; and the client's tests pass with the extension turned off.

The C path is what ``make test`` builds (gcc and the Python headers are on the machine): it must
be there, so a build that silently fell back to Python fails here rather than passing slower.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from agent_watchdog_client import Watchdog, processor, tally
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ROOT = Path(__file__).resolve().parent.parent

# (name, attributes at start, attributes set before it ends, children): every way the processor
# reads a span's kind, output tools, a tool no model asked for that runs the model loop itself,
# a kind known only at the end, and plumbing.
SHAPES: list[tuple[str, dict[str, Any], dict[str, Any], list[Any]]] = [
    ("invoke_agent outer", {"gen_ai.operation.name": "invoke_agent"}, {}, [
        ("chat gpt-4o", {"gen_ai.operation.name": "chat"}, {}, []),
        ("execute_tool search", {"gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.call.id": "c1"}, {}, [
            ("GET /search", {"http.method": "GET"}, {}, [])]),
        ("execute_tool fetch", {"gen_ai.operation.name": "execute_tool"}, {}, []),
        ("execute_tool prompt_fn", {"gen_ai.operation.name": "execute_tool"}, {}, [
            ("chat inner", {"gen_ai.operation.name": "chat"}, {}, [])]),
        ("execute_tool final_result", {"gen_ai.operation.name": "execute_tool"}, {}, []),
        ("running output function", {"gen_ai.operation.name": "execute_tool"}, {}, []),
    ]),
    ("agent run", {}, {}, [
        ("LLM", {"openinference.span.kind": "llm"}, {}, []),
        ("search", {"openinference.span.kind": "TOOL"}, {}, []),
        ("graph", {"openinference.span.kind": "CHAIN"}, {}, []),
        ("tool.call", {"traceloop.span.kind": "tool"}, {}, []),
        ("workflow", {"traceloop.span.kind": "workflow"}, {}, []),
        ("openai.chat", {"llm.request.type": "chat"}, {}, []),
        ("running tool: lookup", {}, {}, []),
        ("running tool", {}, {}, []),
    ]),
    ("chat late", {}, {"gen_ai.operation.name": "chat"}, []),
    ("ChatOpenAI", {}, {"openinference.span.kind": "LLM"}, []),
    ("lookup", {"openinference.span.kind": "CHAIN"}, {"openinference.span.kind": "TOOL"}, []),
    ("text_completion x", {"gen_ai.operation.name": "text_completion"}, {}, []),
    ("odd", {"gen_ai.operation.name": "embeddings"}, {}, []),
    ("", {}, {}, []),
    ("invoke_agent bare", {}, {}, []),
    ("execute_tool named only", {}, {}, []),
]


class Quiet(BaseHTTPRequestHandler):
    """A sidecar that accepts everything and says nothing."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _ok(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_POST = do_GET = _ok


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (the listener's stream, at the run's end)


@pytest.fixture(scope="module")
def sidecar() -> Iterator[str]:
    server = QuietServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def state(run: Any) -> tuple[Any, ...]:
    t = run.tally
    return (t.model_spans, t.tool_spans, t.tools_ended, t.ended_calls, t.agent_spans,
            run.in_flight, [s.name for s in t.unsynced], t.unsynced_dropped, t.changed)


def drive(url: str, compiled: bool, limits: SpanLimits | None, steering: bool
          ) -> tuple[list[tuple[Any, ...]], list[tuple[str, dict[str, Any]]]]:
    """Every shape, nested as written, in a run; the run's state after each start and end, and
    the exported spans' names and attributes (run ids made equal)."""
    saved = processor.SPAN_PATH
    processor.SPAN_PATH = saved if compiled else None
    try:
        provider = TracerProvider(span_limits=limits)
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        wd = Watchdog(url, tracer_provider=provider)
    finally:
        processor.SPAN_PATH = saved
    wd.reporter.close()  # no heartbeats: the reporter would clear the runs' `changed` meanwhile
    fused = provider._active_span_processor.on_start.__self__
    assert (type(fused).__name__ == "SpanPath") is compiled
    tracer = provider.get_tracer("shapes")
    seen: list[tuple[Any, ...]] = []
    with wd.run(agent="shapes", max_tool_calls=100) as run:
        run.tally.keep_spans = steering

        def play(shapes: list[Any]) -> None:
            for name, start, end, children in shapes:
                with tracer.start_as_current_span(name, attributes=start) as span:
                    seen.append(("start", name, *state(run)))
                    play(children)
                    span.set_attributes(end)
                seen.append(("end", name, *state(run)))
                run.tally.changed = False

        play(SHAPES)
        # a span started with an explicit parent context that carries the run, off the current
        # context, and one with a context that does not
        parent = trace.set_span_in_context(trace.get_current_span())
        tracer.start_span("chat explicit", context=parent,
                          attributes={"gen_ai.operation.name": "chat"}).end()
        seen.append(("explicit", *state(run)))
    tracer.start_span("chat outside", attributes={"gen_ai.operation.name": "chat"}).end()
    seen.append(("after", *state(run)))
    wd.close()
    spans = [(s.name, {k: ("RUN" if k == "watchdog.run.id" else v)
                       for k, v in (s.attributes or {}).items()})
             for s in exporter.get_finished_spans()]
    provider.shutdown()
    return seen, spans


@pytest.mark.parametrize("steering", [False, True], ids=["counting", "steering"])
@pytest.mark.parametrize("limits", [None, SpanLimits(max_attributes=2)],
                         ids=["default-limits", "two-attributes"])
def test_the_c_path_does_what_the_python_path_does(sidecar: str, limits: SpanLimits | None,
                                                   steering: bool) -> None:
    python_states, python_spans = drive(sidecar, False, limits, steering)
    c_states, c_spans = drive(sidecar, True, limits, steering)
    assert c_states == python_states
    assert c_spans == python_spans
    # and what they did is what the shapes are: 8 model calls (2 known at their end, 1 under an
    # explicit parent context); 8 tool calls counted (not the output tools, not the function
    # that ran the model loop itself), all ended; 19 calls ended (those 3 uncounted included)
    final = python_states[-1]
    assert final[1:5] == (8, 8, 8, 19)
    if limits is None:
        assert all(attributes.get("watchdog.run.id") == "RUN" for name, attributes in c_spans
                   if name not in ("chat outside",) and not name.startswith("watchdog.run"))


def test_the_c_path_is_built_and_chosen() -> None:
    """``make test`` builds the extension in place (``pip install -e .``): the client uses it."""
    assert tally.SPAN_PATH is not None, "client/agent_watchdog_client/_spanpath.c was not built"
    assert processor.SPAN_PATH is tally.SPAN_PATH
    assert type(tally.RunTally(None)).__mro__[1] is tally.SPAN_PATH.Counts


def test_the_client_tests_pass_on_the_pure_python_path() -> None:
    """With the extension turned off (as where it could not be built), the run's counts are
    Python slots and the processor is the Python one: the client's tests pass as they are."""
    env = {**os.environ, "WATCHDOG_CLIENT_PURE_PYTHON": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", "from agent_watchdog_client import tally, processor; "
         "print(tally.SPAN_PATH, processor.SPAN_PATH, tally.RunTally.__mro__[1].__name__)"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert probe.stdout.split() == ["None", "None", "_Counts"], probe.stderr
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_client.py", "-k", "python"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
