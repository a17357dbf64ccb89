"""Per-span overhead of the client's span processor, against the plain OpenTelemetry SDK.

Two tracer providers built the same way — ``TracerProvider`` + ``BatchSpanProcessor`` with an
exporter that drops everything — one of them also carrying the client's
:class:`~watchdog.client.WatchdogSpanProcessor`. The client's spans are started inside a
``wd.run(...)`` with a budget and a session (so every span is stamped with six ``watchdog.*``
attributes); the baseline's spans are not. Rounds alternate between the two in one process, and
the best round of each is compared, so machine noise hits both alike.

Two workloads: *plumbing* spans (one attribute, as HTTP or framework spans have) and *calls*
(model and tool spans with ``gen_ai.*`` attributes, which the client also tracks as in flight
and reports to the sidecar from its background thread). The sidecar here is a port nobody
listens on: the reporter backs off after the first refusal, as it would in production with the
sidecar down; with the sidecar up it sends at most one heartbeat per run at a time, whatever the
span rate.

    .venv/bin/python bench/client_overhead.py [--spans 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import gc
import logging
import socket
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from watchdog.client import Watchdog

TARGET_RATIO = 1.05  # the client may add at most 5% per span


class DropExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def provider() -> TracerProvider:
    result = TracerProvider()
    result.add_span_processor(BatchSpanProcessor(DropExporter(), max_queue_size=65536,
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


def per_span(work: Callable[[], None], count: int, flush: TracerProvider) -> float:
    """One timed round. The exporter thread drains this round's spans before the next round
    starts (else it competes with whichever variant runs next), and the collector waits."""
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        work()
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
    flush.force_flush()
    return elapsed / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=20_000, help="spans per round")
    parser.add_argument("--rounds", type=int, default=11, help="rounds per variant")
    args = parser.parse_args()
    logging.getLogger("watchdog.client").setLevel(logging.ERROR)  # the sidecar is absent

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    plain, watched = provider(), provider()
    wd = Watchdog(url, tracer_provider=watched)
    plain_tracer, watched_tracer = plain.get_tracer("bench"), watched.get_tracer("bench")
    print(f"{args.spans} spans per round, best of {args.rounds} rounds per variant, "
          f"alternating")
    print(f"{'workload':<10} {'plain SDK':>12} {'with client':>12} {'overhead':>10} {'ratio':>7}")
    worst = 0.0
    for name, workload in (("plumbing", plumbing), ("calls", calls)):
        baseline: list[float] = []
        client: list[float] = []
        with wd.run(agent="bench", max_tool_calls=10**9, session="bench-session"):
            for round_number in range(args.rounds):
                variants = [(baseline, plain_tracer, plain), (client, watched_tracer, watched)]
                if round_number % 2:
                    variants.reverse()  # neither variant always runs first
                for results, tracer, owner in variants:
                    results.append(per_span(lambda w=workload, t=tracer: w(t, args.spans),
                                            args.spans, owner))
        base, with_client = min(baseline), min(client)
        ratio = with_client / base
        worst = max(worst, ratio)
        print(f"{name:<10} {base * 1e6:>10.2f}µs {with_client * 1e6:>10.2f}µs "
              f"{(with_client - base) * 1e6:>8.2f}µs {ratio:>7.3f}")
    plain.shutdown()
    watched.shutdown()
    wd.close()
    verdict = "within" if worst <= TARGET_RATIO else "OVER"
    print(f"worst ratio {worst:.3f}: {verdict} the target of {TARGET_RATIO:.2f}")


if __name__ == "__main__":
    main()
