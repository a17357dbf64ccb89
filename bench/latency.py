"""Directive latency: from an export request reaching the sidecar to the directive it causes
arriving on the Server-Sent Events stream, under a steady background load.

A ``watchdog serve`` subprocess runs the default rule pack. Background load: the realistic
workload of ``bench/workload.py`` at ``--rate`` spans/s. Probes: small requests whose single
tool span announces a budget of 4 tool calls, so the default ``budget-countdown`` rule fires on
it ("3 of 4 tool calls left"); the clock starts when the probe is handed to the socket and stops
when its directive is read from ``GET /v1/directives/stream``. Prints p50/p90/p99/max.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from bench.ingest import sidecar
from bench.workload import _kv, batches

HEADERS = {"Content-Type": "application/x-protobuf"}


def probe(run_id: str, rng: random.Random) -> bytes:
    now = time.time_ns()
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    scope.spans.append(Span(
        trace_id=rng.randbytes(16), span_id=rng.randbytes(8), parent_span_id=rng.randbytes(8),
        name="execute_tool probe", start_time_unix_nano=now - 1_000_000, end_time_unix_nano=now,
        attributes=[_kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", "probe"),
                    _kv("gen_ai.tool.call.arguments", '{"n": 1}'),
                    _kv("watchdog.run.id", run_id), _kv("watchdog.agent.name", "probe"),
                    _kv("watchdog.budget.max_tool_calls", 4)]))
    return request.SerializeToString()


async def background(session: aiohttp.ClientSession, url: str, bodies: list[bytes],
                     spans_per_body: int, rate: float, stop: asyncio.Event) -> int:
    interval = spans_per_body / rate
    sent = 0
    next_at = time.perf_counter()
    for body in bodies:
        if stop.is_set():
            break
        async with session.post(url, data=body, headers=HEADERS) as response:
            await response.read()
        sent += spans_per_body
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    return sent


def read_stream(url: str, ready: Any, arrivals: Any, expected: int) -> None:
    """In its own process, so the reader never waits behind the load generator: records when
    each probe's directive arrives (wall clock, as the sender does)."""

    async def run() -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
                url, headers={"Accept": "text/event-stream"}) as response:
            if response.status != 200:
                raise SystemExit(f"directive stream: HTTP {response.status}")
            ready.set()
            seen = 0
            async for raw in response.content:
                if raw.startswith(b"data:"):
                    arrived = time.time()
                    run_id = json.loads(raw[5:])["run_id"]
                    if run_id.startswith("probe-"):
                        arrivals.put((run_id, arrived))
                        seen += 1
                        if seen >= expected:
                            return
        raise SystemExit("the directive stream ended early (a slow reader is disconnected)")

    asyncio.run(run())


async def measure(ports: dict[str, int], probes: int, rate: float, batch: int
                  ) -> dict[str, float]:
    url = f"http://127.0.0.1:{ports['otlp_http']}/v1/traces"
    stream = f"http://127.0.0.1:{ports['api']}/v1/directives/stream"
    rng = random.Random(11)
    load = list(batches(1000, batch, int(rate * (probes * 0.02 + 10)), seed=13))
    context = multiprocessing.get_context("spawn")
    ready, arrivals = context.Event(), context.Queue()
    reader = context.Process(target=read_stream, args=(stream, ready, arrivals, probes))
    reader.start()
    if not ready.wait(30):
        raise SystemExit("the directive stream did not open")
    sent_at: dict[str, float] = {}
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as session:
        loader = asyncio.create_task(background(session, url, load, batch, rate, stop))
        await asyncio.sleep(1.0)  # let the load settle
        for index in range(probes):
            run_id = f"probe-{index}"
            body = probe(run_id, rng)
            sent_at[run_id] = time.time()
            async with session.post(url, data=body, headers=HEADERS) as response:
                await response.read()
            await asyncio.sleep(0.02)
        stop.set()
        background_spans = await loader
    latencies = []
    for _ in range(probes):
        run_id, arrived = arrivals.get(timeout=30)
        latencies.append((arrived - sent_at[run_id]) * 1000)
    reader.join(10)
    latencies.sort()
    return {"probes": len(latencies), "p50_ms": statistics.median(latencies),
            "p90_ms": latencies[int(len(latencies) * 0.90) - 1],
            "p99_ms": latencies[int(len(latencies) * 0.99) - 1],
            "max_ms": latencies[-1], "background_spans": background_spans}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=10_000, help="background spans/s")
    parser.add_argument("--probes", type=int, default=500)
    parser.add_argument("--batch", type=int, default=128, help="spans per background request")
    parser.add_argument("--tree", help="the source tree the sidecar runs from (a baseline "
                                       "build: run it and this one in turn, same load)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state, sidecar(state, args.tree) as proc:
        result = asyncio.run(measure(proc["ports"], args.probes, args.rate, args.batch))
    print(f"directive latency, export received -> visible on SSE, background {args.rate:,.0f} "
          f"spans/s ({args.batch}-span requests), default rule pack, {result['probes']} probes:")
    print(f"  p50 {result['p50_ms']:.2f} ms   p90 {result['p90_ms']:.2f} ms   "
          f"p99 {result['p99_ms']:.2f} ms   max {result['max_ms']:.2f} ms")


if __name__ == "__main__":
    main()
