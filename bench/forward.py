"""Pass-through: what forwarding costs the agent, and whether the upstream can slow it down.

A ``watchdog serve`` subprocess receives sequential OTLP/HTTP trace exports (the realistic
workload of ``bench/workload.py``, ``--batch`` spans per request), the way one agent's exporter
sends them, and answers each; the latency of each answer is measured at the client. Four cases:

* ``off``: no ``forward_endpoint`` (the baseline);
* ``healthy``: forwarding to an upstream that answers 200 at once;
* ``hanging``: the upstream accepts connections and never answers;
* ``down``: nothing listens at the upstream's address.

Prints p50/p99 per case, and for ``healthy`` how long the upstream took to receive everything.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest import free_port, sidecar
from bench.workload import batches

HEADERS = {"Content-Type": "application/x-protobuf"}


class Upstream:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.received = 0
        self.last_at = 0.0
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        if self.mode == "down":
            return
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self.handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        if self.mode == "hanging":
            await asyncio.sleep(3600)
        self.received += 1
        self.last_at = time.perf_counter()
        return web.Response(body=b"", content_type="application/x-protobuf")


async def measure(mode: str, bodies: list[bytes]) -> tuple[list[float], float | None]:
    upstream = Upstream(mode)
    await upstream.start()
    extra = {} if mode == "off" else {"forward_endpoint": f"http://127.0.0.1:{upstream.port}"}
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as state, sidecar(state, **extra) as proc:
        url = f"http://127.0.0.1:{proc['ports']['otlp_http']}/v1/traces"
        async with aiohttp.ClientSession() as session:
            started = time.perf_counter()
            for body in bodies:
                begin = time.perf_counter()
                async with session.post(url, data=body, headers=HEADERS) as response:
                    await response.read()
                    assert response.status == 200, response.status
                latencies.append(time.perf_counter() - begin)
            drained = None
            if mode == "healthy":
                deadline = time.perf_counter() + 60
                while upstream.received < len(bodies) and time.perf_counter() < deadline:
                    await asyncio.sleep(0.01)
                drained = upstream.last_at - started
    await upstream.stop()
    return latencies, drained


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32, help="spans per export request")
    args = parser.parse_args()
    bodies = list(batches(runs=20, batch_size=args.batch, total_spans=args.requests * args.batch))
    size = statistics.mean(len(b) for b in bodies) / 1024
    print(f"{len(bodies)} sequential OTLP/HTTP exports of {args.batch} spans (~{size:.0f} KiB)")
    for mode in ("off", "healthy", "hanging", "down"):
        latencies, drained = asyncio.run(measure(mode, bodies))
        ms = [x * 1000 for x in latencies]
        line = f"{mode:8s} answer p50 {pct(ms, 50):6.2f} ms  p99 {pct(ms, 99):6.2f} ms"
        if drained is not None:
            line += f"  (upstream had all {len(bodies)} after {drained:.2f} s)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
