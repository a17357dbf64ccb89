"""Overload figures: a ``watchdog serve`` subprocess (shipped defaults: max_pending_requests 64)
pushed past what it can take, three ways, while a control-API client reads a run every 20 ms.

* **HTTP overload**: ``--clients`` concurrent OTLP/HTTP exporters, each sending 512-span
  protobuf requests back to back (no backoff: the worst case).
* **gRPC overload**: the same number of concurrent gRPC Export calls kept in flight.
* **Slow uploaders**: ``--slow`` clients that send headers and 10 bytes of a body and then
  stall, while 4 normal exporters send as above.

For each: requests accepted vs refused (by status), p50/p99 of the accepted requests, p50/p99
of the control API during the phase, the server's peak RSS (VmHWM) so far, and the CPU time the
server got during the phase with the requests it accepted per CPU-second. The counts are of a
fixed wall-clock window: on a shared machine they move with the CPU the server gets, the
per-CPU-second figure much less.

    .venv/bin/python bench/overload.py [--seconds 10] [--clients 300] [--slow 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest import sidecar
from bench.workload import batches

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
PROTOBUF = "application/x-protobuf"
PROBE_INTERVAL = 0.02


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Phase:
    def __init__(self, name: str, pid: int) -> None:
        self.name = name
        self.cpu_at_start = cpu_seconds(pid)
        self.outcomes: Counter[str] = Counter()
        self.accepted_ms: list[float] = []
        self.api_ms: list[float] = []
        self.api_failures = 0

    def report(self, pid: int) -> str:
        accepted = self.outcomes.get("200", 0) + self.outcomes.get("OK", 0)
        refused = sum(self.outcomes.values()) - accepted
        cpu = cpu_seconds(pid) - self.cpu_at_start
        by_status = ", ".join(f"{k}: {v}" for k, v in sorted(self.outcomes.items()))
        return (f"{self.name}: accepted {accepted}, refused {refused} ({by_status}); accepted "
                f"p50 {percentile(self.accepted_ms, 0.5):.0f} ms p99 "
                f"{percentile(self.accepted_ms, 0.99):.0f} ms; API p50 "
                f"{percentile(self.api_ms, 0.5):.1f} ms p99 {percentile(self.api_ms, 0.99):.1f} "
                f"ms ({len(self.api_ms)} reads, {self.api_failures} failed); peak RSS "
                f"{peak_rss_mib(pid):.0f} MiB; server CPU {cpu:.1f} s, "
                f"{accepted / cpu if cpu > 0 else float('nan'):.1f} accepted per CPU-second")


async def probe_api(session: aiohttp.ClientSession, url: str, phase: Phase,
                    stop: asyncio.Event) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        try:
            async with session.get(url) as response:
                await response.read()
                if response.status >= 500:
                    phase.api_failures += 1
        except aiohttp.ClientError:
            phase.api_failures += 1
        phase.api_ms.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(PROBE_INTERVAL)


async def http_exporter(session: aiohttp.ClientSession, url: str, bodies: list[bytes],
                        offset: int, phase: Phase, stop: asyncio.Event) -> None:
    index = offset
    while not stop.is_set():
        body = bodies[index % len(bodies)]
        index += 7
        started = time.perf_counter()
        try:
            async with session.post(url, data=body,
                                    headers={"Content-Type": PROTOBUF}) as response:
                await response.read()
                phase.outcomes[str(response.status)] += 1
                if response.status == 200:
                    phase.accepted_ms.append((time.perf_counter() - started) * 1000)
        except (TimeoutError, aiohttp.ClientError) as exc:
            phase.outcomes[type(exc).__name__] += 1


async def grpc_exporter(channel: grpc.aio.Channel, bodies: list[bytes], offset: int,
                        phase: Phase, stop: asyncio.Event) -> None:
    call = channel.unary_unary(EXPORT_METHOD)
    index = offset
    while not stop.is_set():
        body = bodies[index % len(bodies)]
        index += 7
        started = time.perf_counter()
        try:
            await call(body, timeout=30)
            phase.outcomes["OK"] += 1
            phase.accepted_ms.append((time.perf_counter() - started) * 1000)
        except grpc.aio.AioRpcError as exc:
            phase.outcomes[exc.code().name] += 1


def slow_upload(port: int, body: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: w\r\nContent-Type: " + PROTOBUF.encode()
                 + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:10])
    return sock


async def run_phase(phase: Phase, api_url: str, seconds: float, workers: list[Any]) -> None:
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(probe_api(session, api_url, phase, stop))]
        tasks += [asyncio.create_task(worker(stop)) for worker in workers]
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.wait(tasks, timeout=40)


async def main_async(args: argparse.Namespace) -> None:
    bodies = list(batches(runs=1000, batch_size=512, total_spans=512 * 64))
    with tempfile.TemporaryDirectory() as state, sidecar(state) as server:
        pid = server["process"].pid
        ports = server["ports"]
        traces = f"http://127.0.0.1:{ports['otlp_http']}/v1/traces"
        async with aiohttp.ClientSession() as session:
            async with session.post(traces, data=bodies[0],
                                    headers={"Content-Type": PROTOBUF}) as response:
                assert response.status == 200
            async with session.get(f"http://127.0.0.1:{ports['api']}/v1/runs?limit=1") as answer:
                run_id = (await answer.json())["runs"][0]["id"]
        api_url = f"http://127.0.0.1:{ports['api']}/v1/runs/{run_id}"
        print(f"workload: 512-span OTLP requests (~{len(bodies[0]) // 1024} KiB), "
              f"{args.seconds:g} s per phase, server pid {pid}")

        phase = Phase(f"HTTP overload, {args.clients} exporters", pid)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as exporters:
            await run_phase(phase, api_url, args.seconds, [
                lambda stop, i=i: http_exporter(exporters, traces, bodies, i, phase, stop)
                for i in range(args.clients)])
        print(phase.report(pid))

        phase = Phase(f"gRPC overload, {args.clients} calls in flight", pid)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['otlp_grpc']}") as channel:
            await run_phase(phase, api_url, args.seconds, [
                lambda stop, i=i: grpc_exporter(channel, bodies, i, phase, stop)
                for i in range(args.clients)])
        print(phase.report(pid))

        phase = Phase(f"{args.slow} slow uploaders + 4 exporters", pid)
        held = [slow_upload(ports["otlp_http"], bodies[i % len(bodies)])
                for i in range(args.slow)]
        async with aiohttp.ClientSession() as exporters:
            await run_phase(phase, api_url, args.seconds, [
                lambda stop, i=i: http_exporter(exporters, traces, bodies, i, phase, stop)
                for i in range(4)])
        answers: Counter[str] = Counter()
        for sock in held:
            try:
                answers[sock.recv(64).split(b" ", 2)[1].decode() or "closed"] += 1
            except (OSError, IndexError):
                answers["closed"] += 1
            sock.close()
        print(phase.report(pid) + f"; the slow uploads were answered {dict(answers)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=300)
    parser.add_argument("--slow", type=int, default=100)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
