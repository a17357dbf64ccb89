"""Read-your-writes latency (DESIGN §8): ``run.before_model_call()`` — the client sending the
run's newly ended spans on ``POST /v1/runs/{id}/sync`` and the sidecar answering once it has
applied them and stored the directives they caused — under a steady background load.

A ``watchdog serve`` subprocess runs the default rule pack. Background load: another process
exports the realistic workload of ``bench/workload.py`` as OTLP/HTTP protobuf at ``--rate``
spans/s. Probe: a real client run (``Watchdog``, its span processor, a budget of 18 tool calls)
whose every step ends a model span and a tool span and then times ``before_model_call()`` —
one sync carrying two spans, answered with the countdown directives they fire. Prints
p50/p90/p99/max.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_watchdog_client import Watchdog
from opentelemetry.sdk.trace import TracerProvider

from bench.ingest import metric, sidecar
from bench.workload import batches

STEPS_PER_RUN = 16  # with a budget of 18, the last two steps fire the countdown (3 and 2 left)


def load(url: str, rate: float, batch: int, seconds: float, ready: Any) -> None:
    """In its own process: OTLP/HTTP export requests of ``batch`` spans at ``rate`` spans/s."""
    import aiohttp

    from bench.latency import background

    bodies = list(batches(1000, batch, int(rate * seconds), seed=13))

    async def run() -> None:
        stop = asyncio.Event()
        async with aiohttp.ClientSession() as session:
            ready.set()
            await background(session, url, bodies, batch, rate, stop)

    asyncio.run(run())


def settled(ports: dict[str, int], rate: float, timeout: float = 30.0) -> None:
    """Wait until the sidecar has received a second's worth of the background load."""
    deadline = time.monotonic() + timeout
    while metric(ports, "agent_watchdog_spans_received_total") < rate:
        if time.monotonic() > deadline:
            raise SystemExit("the background load never reached the sidecar")
        time.sleep(0.05)


def probe(api: str, probes: int, gap: float = 0.0) -> tuple[list[float], list[float]]:
    """Latencies (ms) of syncs that brought no new directive, and of those that did (the
    sidecar then answers once the directive is stored). ``gap``: seconds between a step's
    spans and its sync (the model call an agent waits for), 0: back to back."""
    provider = TracerProvider()
    wd = Watchdog(api, tracer_provider=provider)
    tracer = provider.get_tracer("probe")
    plain: list[float] = []
    directed: list[float] = []
    while len(plain) + len(directed) < probes:
        with wd.run(agent="probe", max_tool_calls=STEPS_PER_RUN + 2) as run:
            run.before_model_call()
            for step in range(STEPS_PER_RUN):
                with tracer.start_as_current_span("chat probe", attributes={
                        "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 100}):
                    pass
                with tracer.start_as_current_span("execute_tool search", attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                        "gen_ai.tool.call.arguments": json.dumps({"q": f"term {step}"})}):
                    run.before_tool_call("search")
                if gap:
                    time.sleep(gap)
                seq = run.board.last_seq
                started = time.perf_counter()
                run.before_model_call()
                elapsed = (time.perf_counter() - started) * 1000
                (directed if run.board.last_seq > seq else plain).append(elapsed)
    wd.close()
    if wd.syncer.failures:
        raise SystemExit(f"{wd.syncer.failures} syncs failed")
    return plain, directed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=10_000, help="background spans/s")
    parser.add_argument("--probes", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=128, help="spans per background request")
    parser.add_argument("--gap", type=float, default=0.0,
                        help="seconds between a step's spans and its sync (a model call); "
                             "0: back to back, the worst case")
    parser.add_argument("--tree", help="the source tree the sidecar runs from (default: this "
                                       "environment's)")
    args = parser.parse_args()
    tree = str(Path(args.tree).resolve()) if args.tree else None
    with tempfile.TemporaryDirectory() as state, sidecar(state, tree) as proc:
        ports = proc["ports"]
        context = multiprocessing.get_context("spawn")
        ready = context.Event()
        loader = context.Process(target=load, args=(
            f"http://127.0.0.1:{ports['otlp_http']}/v1/traces", args.rate, args.batch,
            args.probes * (0.01 + args.gap) + 30, ready))
        loader.start()
        ready.wait(60)
        settled(ports, args.rate)
        try:
            plain, directed = probe(f"http://127.0.0.1:{ports['api']}", args.probes, args.gap)
        finally:
            loader.terminate()
            loader.join(10)
    print(f"sync latency (run.before_model_call(): 2 ended spans applied + directives), "
          f"background {args.rate:,.0f} spans/s ({args.batch}-span requests), default rule "
          f"pack, {len(plain) + len(directed)} probes, {args.gap * 1000:g} ms between a step and "
          f"its sync:")
    for label, values in (("all", plain + directed), ("no new directive", plain),
                          ("with a new directive", directed)):
        print(f"  {label:<22}" + summary(values))


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    count = len(ordered)
    if not count:
        return "none"
    return (f"n={count:<5} p50 {statistics.median(ordered):.2f} ms   "
            f"p90 {ordered[max(int(count * 0.90) - 1, 0)]:.2f} ms   "
            f"p99 {ordered[max(int(count * 0.99) - 1, 0)]:.2f} ms   max {ordered[-1]:.2f} ms")


if __name__ == "__main__":
    main()
