"""Per-span overhead of the client's span processor, against the plain OpenTelemetry SDK.

Two tracer providers built the same way — ``TracerProvider`` + ``BatchSpanProcessor`` with an
exporter that drops everything (``--exporter drop``, the default: the worst case, where the SDK
does least per span), or the OTLP/HTTP exporter every agent watched by the sidecar runs, its
export inside the timed round (``--exporter otlp``: what the client adds to what an agent
already pays per span) — one of them also carrying the client's
:class:`~agent_watchdog_client.WatchdogSpanProcessor`. The client's spans are started inside a
``wd.run(...)`` with a budget and a session (so every span is stamped with four ``watchdog.*``
attributes); the baseline's spans are not. Rounds alternate between the two in one process, so
machine noise hits both alike.

Three workloads: *plumbing* spans (one attribute, as HTTP or framework spans have), bare
*calls* (model and tool spans with just enough ``gen_ai.*`` attributes to be recognised, which
the client also tracks as in flight and reports from its background thread) — the two worst
cases, where the SDK does least per span — and *agent* calls as instrumentation really makes
them (a dozen attributes, the conversation as JSON, tool arguments and results).

The sidecar is a stand-in in another process that answers every request with 200 (as the real
one does, in its own process), so the reporter's heartbeats and the listener's stream are part
of what is measured.

Measuring on a shared 2-core machine: each round is timed in *process CPU time* (every thread of
this process: the agent's thread, the exporter's, and the client's reporter and listener
threads), so another process taking the core does not count while all the client's work does.
Rounds come in pairs — a baseline round and a client round back to back, in alternating order —
and each pair gives one ratio; the figure is the median of those ratios, with its spread
(the middle half and the middle 80 % of the pairs), so a disturbed round moves one pair and not
the result.

    .venv/bin/python bench/client_overhead.py [--spans 2000] [--rounds 100] [--clock cpu|wall]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import logging
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from agent_watchdog_client import Watchdog
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

TARGET_RATIO = 1.05  # the client may add at most 5% per span


class DropExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


STAND_IN = """
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def _ok(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
    do_POST = _ok
    def do_GET(self):
        if self.path.endswith("/stream"):  # an open stream with no directive
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b": hello\\n\\n")
            self.wfile.flush()
            self.rfile.read()  # until the client goes away
        else:
            self._ok()
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def start_stand_in() -> tuple[subprocess.Popen[str], str]:
    """A process that answers the client like a sidecar with nothing to say."""
    process = subprocess.Popen([sys.executable, "-c", STAND_IN], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    port = int(process.stdout.readline())
    return process, f"http://127.0.0.1:{port}"


def provider(exporter: str, url: str) -> TracerProvider:
    result = TracerProvider()
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        sink: SpanExporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces")
    else:
        sink = DropExporter()
    result.add_span_processor(BatchSpanProcessor(sink, max_queue_size=65536,
                                                 schedule_delay_millis=200))
    return result


def plumbing(tracer: object, count: int) -> None:
    start = tracer.start_as_current_span  # type: ignore[attr-defined]
    for _ in range(count):
        with start("GET /api", attributes={"http.method": "GET"}):
            pass


def calls(tracer: object, count: int) -> None:
    start = tracer.start_as_current_span  # type: ignore[attr-defined]
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
    for index in range(count):
        with start("chat gpt-4o" if index % 2 else "execute_tool search",
                   attributes=chat if index % 2 else tool):
            pass


MESSAGES = json.dumps([
    {"role": "system", "parts": [{"type": "text", "content": "You are a research agent."}]},
    {"role": "user", "parts": [{"type": "text", "content": "Find the file " * 20}]}])
CHAT_ATTRIBUTES = {"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                   "gen_ai.request.model": "gpt-4o", "gen_ai.response.model": "gpt-4o",
                   "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 80,
                   "gen_ai.response.finish_reasons": ("tool_call",),
                   "gen_ai.agent.name": "explorer", "gen_ai.input.messages": MESSAGES,
                   "server.address": "api.openai.com"}
TOOL_ATTRIBUTES = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                   "gen_ai.tool.call.id": "call_abc123", "gen_ai.agent.name": "explorer",
                   "gen_ai.tool.call.arguments": json.dumps({"query": "retry policy"}),
                   "gen_ai.tool.call.result": "3 results: " + "lorem ipsum " * 30}


def agent_calls(tracer: object, count: int) -> None:
    """Model and tool spans as agent instrumentation makes them: a dozen attributes, the
    conversation as JSON, the tool's arguments and result."""
    start = tracer.start_as_current_span  # type: ignore[attr-defined]
    for index in range(count):
        with start("chat gpt-4o" if index % 2 else "execute_tool search",
                   attributes=CHAT_ATTRIBUTES if index % 2 else TOOL_ATTRIBUTES):
            pass


CLOCKS = {"cpu": time.process_time_ns, "wall": time.perf_counter_ns}


def per_span(work: Callable[[], None], count: int, flush: TracerProvider,
             clock: Callable[[], int], settle: Callable[[], object] = lambda: None,
             export_inside: bool = False) -> float:
    """One timed round, in ns per span. ``settle`` runs inside the round: the client's round
    ends by reading its run's counts, which sweeps the spans it queued (else that work would
    land in whichever round the reporter thread happens to sweep in, perhaps the baseline's).
    The exporter thread drains this round's spans before the next round starts (else it
    competes with whichever variant runs next) — inside the round with ``export_inside`` — and
    the collector waits."""
    gc.collect()
    gc.disable()
    try:
        started = clock()
        work()
        settle()
        if export_inside:
            flush.force_flush()
        elapsed = clock() - started
    finally:
        gc.enable()
    flush.force_flush()
    return elapsed / count


def quantile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=2_000, help="spans per round")
    parser.add_argument("--rounds", type=int, default=100, help="rounds (pairs) per workload")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="cpu: process CPU time (default); wall: elapsed time")
    parser.add_argument("--exporter", choices=["drop", "otlp"], default="drop",
                        help="drop: an exporter that drops the spans (the worst case, "
                             "default); otlp: the OTLP/HTTP exporter, its export timed")
    args = parser.parse_args()
    clock = CLOCKS[args.clock]
    logging.getLogger("agent_watchdog_client").setLevel(logging.ERROR)

    stand_in, url = start_stand_in()
    plain, watched = provider(args.exporter, url), provider(args.exporter, url)
    wd = Watchdog(url, tracer_provider=watched)
    plain_tracer, watched_tracer = plain.get_tracer("bench"), watched.get_tracer("bench")
    print(f"{args.spans} spans per round, {args.rounds} pairs of rounds per workload "
          f"(baseline and client back to back, order alternating), {args.clock} time, "
          f"{args.exporter} exporter")
    print(f"{'workload':<10} {'plain SDK':>10} {'with client':>12} {'overhead':>9} "
          f"{'ratio':>6}  {'middle 50%':>12}  {'middle 80%':>12}")
    worst = 0.0
    for name, workload in (("plumbing", plumbing), ("calls", calls),
                           ("agent", agent_calls)):
        baseline: list[float] = []
        client: list[float] = []
        with wd.run(agent="bench", max_tool_calls=10**9, session="bench-session") as run:
            def counts() -> int:
                return run.local_model_calls  # the counts, as at an agent's decision point

            for round_number in range(args.rounds + 1):
                variants = [(baseline, plain_tracer, plain, lambda: None),
                            (client, watched_tracer, watched, counts)]
                if round_number % 2:
                    variants.reverse()  # neither variant always runs first
                for results, tracer, owner, settle in variants:
                    work = functools.partial(workload, tracer, args.spans)
                    results.append(per_span(work, args.spans, owner, clock, settle,
                                            export_inside=args.exporter == "otlp"))
        del baseline[0], client[0]  # the warm-up pair
        ratios = [c / b for b, c in zip(baseline, client, strict=True)]
        ratio = statistics.median(ratios)
        base, with_client = statistics.median(baseline), statistics.median(client)
        worst = max(worst, ratio)
        print(f"{name:<10} {base / 1e3:>8.2f}µs {with_client / 1e3:>10.2f}µs "
              f"{(with_client - base) / 1e3:>7.2f}µs {ratio:>6.3f}  "
              f"{quantile(ratios, 0.25):>5.3f}–{quantile(ratios, 0.75):<6.3f}  "
              f"{quantile(ratios, 0.10):>5.3f}–{quantile(ratios, 0.90):<6.3f}")
    plain.shutdown()
    watched.shutdown()
    wd.close()
    stand_in.terminate()
    stand_in.wait(10)
    verdict = "within" if worst <= TARGET_RATIO else "over"
    print(f"worst median ratio {worst:.3f}: {verdict} the target of {TARGET_RATIO:.2f}"
          + (" (with the export an agent pays for; the worst case is --exporter drop)"
             if args.exporter == "otlp" else ""))


if __name__ == "__main__":
    main()
