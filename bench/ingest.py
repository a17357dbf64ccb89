"""Ingest benchmark: OTLP/HTTP protobuf through the whole sidecar, against a bare-parse baseline.

Run with ``make bench`` (or ``.venv/bin/python bench/ingest.py --help``). It prints, from one
process and one run, so the numbers share a machine state:

* baseline  — ``ExportTraceServiceRequest.ParseFromString`` + a walk over every attribute of the
  same payloads, in this process: the floor any OTLP consumer in Python pays;
* core      — decode + normalise + run signals in this process, no network;
* end to end — a ``watchdog serve`` subprocess fed over HTTP by 4 concurrent keep-alive clients,
  with the default rule pack and again with no rules (the cost of rule evaluation); every span
  is accounted for afterwards (received == sent, or the run is reported as failed);
* memory    — RSS growth of a fresh sidecar per active run, with 10,000 runs open.

Each workload of :data:`bench.workload.WORKLOADS` (clean loops, tool output with secret-trigger
words, misbehaving agents the default rules fire on, trace-keyed runs with sub-agents) is run
through the baseline, the core and the sidecar with the default rules; for the sidecar it also
reports spans per CPU-second of the sidecar process (user + system time, from /proc).

Speed is reported as spans/s and as a ratio to the baseline measured in the same run, because
absolute numbers depend on the machine; the README quotes a run on the 2-core CI machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workload import WORKLOADS, batches
from tests.ports import free_port
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.decode import attributes, parse_protobuf, protobuf_backend
from watchdog.core.spans.pipeline import records_from

CONCURRENCY = 4
READY_TIMEOUT = 30.0


def timed(work: Callable[[], None]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def baseline(bodies: list[bytes]) -> None:
    for body in bodies:
        request = parse_protobuf(body)
        for resource_spans in request.resource_spans:
            attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes(span.attributes)


def core(bodies: list[bytes]) -> None:
    tracker = RunTracker(max_runs=1_000_000)
    now = time.time()
    for body in bodies:
        tracker.apply(records_from(parse_protobuf(body)).records, now)


@contextmanager
def sidecar(state_dir: str, tree: str | None = None, launcher: tuple[str, ...] = ("-m", "watchdog"),
            **extra: str) -> Iterator[dict[str, Any]]:
    """A ``watchdog serve`` subprocess; ``tree``: the source tree it runs from (PYTHONPATH),
    else this environment's; ``launcher``: what runs the command (``bench/served_probe.py``:
    its threads named, its event loop profiled)."""
    ports = {name: free_port() for name in ("otlp_http", "otlp_grpc", "api", "metrics")}
    paths = {"PYTHONPATH": tree} if tree else {}
    env = dict(os.environ, **paths, WATCHDOG_STATE_DIR=state_dir, WATCHDOG_LOG_LEVEL="warning",
               WATCHDOG_OTLP_HTTP_ADDRESS=f"127.0.0.1:{ports['otlp_http']}",
               WATCHDOG_OTLP_GRPC_ADDRESS=f"127.0.0.1:{ports['otlp_grpc']}",
               WATCHDOG_API_ADDRESS=f"127.0.0.1:{ports['api']}",
               WATCHDOG_METRICS_ADDRESS=f"127.0.0.1:{ports['metrics']}",
               **{f"WATCHDOG_{k.upper()}": v for k, v in extra.items()})
    # -P: the working directory is not put first on the import path (else a tree's sidecar
    # run from another checkout would import that checkout's code)
    command = [sys.executable, "-P", *launcher, "serve"]
    if tree:
        where = subprocess.run([sys.executable, "-P", "-c",
                                "import watchdog; print(watchdog.__file__)"], env=env,
                               capture_output=True, text=True, check=True).stdout.strip()
        if not Path(where).resolve().is_relative_to(Path(tree).resolve()):
            raise SystemExit(f"the sidecar would run {where}, not the tree {tree}")
    process = subprocess.Popen(command, env=env)
    try:
        wait_ready(f"http://127.0.0.1:{ports['metrics']}/readyz", process)
        yield {"process": process, "ports": ports}
    finally:
        process.terminate()
        process.wait(30)


def wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    """Until the sidecar answers ``url`` (its /readyz) with 200; it exiting first is an error."""
    import urllib.request
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the sidecar did not become ready (exit {process.poll()})")
        time.sleep(0.02)


def settled_rss(pid: int, timeout: float = 10.0) -> int:
    """RSS once it stops moving (the state flush after a load has run), polled every 0.1 s."""
    deadline = time.monotonic() + timeout
    last = rss_bytes(pid)
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = rss_bytes(pid)
        if now == last:
            return now
        last = now
    return last


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(match.group(1)) * 1024 if match else 0


async def send_all(url: str, bodies: list[bytes]) -> tuple[float, int]:
    """Send every body (retrying on 503/429 as an exporter would); returns seconds, retries."""
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    retries = 0
    headers = {"Content-Type": "application/x-protobuf"}

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal retries
        while not queue.empty():
            body = queue.get_nowait()
            while True:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status == 200:
                        break
                    if response.status in (429, 503):
                        retries += 1
                        await asyncio.sleep(float(response.headers.get("Retry-After", "0.1")))
                        continue
                    raise SystemExit(f"export failed: HTTP {response.status}")

    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(CONCURRENCY)))
        return time.perf_counter() - start, retries


def metric(ports: dict[str, int], name: str) -> float:
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics") as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


# A few looping runs, so the warm-up makes decisions (what a first decision and a first flush
# load, such as the CEL environments, is loaded before the measurement; without cached
# bytecode, PYTHONDONTWRITEBYTECODE, its import alone was ~0.15 CPU-s)
WARM_UP = list(batches(32, 64, 1024, seed=20_261_128, workload="rules-firing"))


def flushes(ports: dict[str, int]) -> float:
    """The state flushes the sidecar has made (``background_passes_total``)."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics") as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("agent_watchdog_background_passes_total{")
               and 'task="state_flush"' in line)


def warm_up(url: str, ports: dict[str, int], pid: int) -> None:
    """Send :data:`WARM_UP` and wait for a flush that began after it (the second to end)."""
    before = flushes(ports)
    asyncio.run(send_all(url, WARM_UP))
    deadline = time.monotonic() + 30
    while flushes(ports) < before + 2:  # (one under way as it was sent may not have it)
        if time.monotonic() > deadline:
            raise SystemExit("the sidecar made no state flush in 30 s")
        time.sleep(0.02)
    settled_rss(pid)


def end_to_end(bodies: list[bytes], spans: int, rules: bool = True,
               tree: str | None = None, extra: dict[str, str] | None = None) -> dict[str, float]:
    """``rules``: the default rule pack evaluated during ingest (as shipped), or no rules;
    ``tree``: the source tree the sidecar runs from (see :func:`sidecar`); ``extra``: more
    configuration (``{"native": "false"}``)."""
    extra = dict(extra or {}, **({} if rules else {"default_rules": "false"}))
    with tempfile.TemporaryDirectory() as state, sidecar(state, tree, **extra) as proc:
        ports, pid = proc["ports"], proc["process"].pid
        url = f"http://127.0.0.1:{ports['otlp_http']}/v1/traces"
        # one small export first: what the sidecar loads once, at its first traffic (the
        # price data, the CEL environments), is not charged to the workload
        warm_up(url, ports, pid)
        warm = metric(ports, "agent_watchdog_spans_received_total")
        cpu_before = cpu_seconds(pid)
        seconds, retries = asyncio.run(send_all(url, bodies))
        received = metric(ports, "agent_watchdog_spans_received_total") - warm
        rejected = metric(ports, "agent_watchdog_spans_rejected_total")
        directives = metric(ports, "agent_watchdog_rule_fired_total")
        settled_rss(pid)  # the state flushes that the load caused are part of its cost
        cpu = cpu_seconds(pid) - cpu_before
    if received != spans or rejected:
        raise SystemExit(f"spans lost: sent {spans}, received {received}, rejected {rejected}")
    return {"seconds": seconds, "spans_per_s": spans / seconds, "retries": retries,
            "spans_per_cpu_s": spans / cpu if cpu else float("nan"), "rules_fired": directives}


def memory_per_run(runs: int) -> dict[str, float]:
    """RSS growth per active run: ~5 spans per run, no root span, so every run stays open."""
    warm = list(batches(200, 512, 2048, seed=3, with_root=False))
    load = list(batches(runs, 512, runs * 5, seed=5, with_root=False))
    with tempfile.TemporaryDirectory() as state, sidecar(
            state, max_runs=str(runs * 2), state_flush_interval="0.1") as proc:
        pid, ports = proc["process"].pid, proc["ports"]
        url = f"http://127.0.0.1:{ports['otlp_http']}/v1/traces"
        asyncio.run(send_all(url, warm))
        before = settled_rss(pid)  # after the first state flushes, so they are not counted
        asyncio.run(send_all(url, load))
        after = settled_rss(pid)
        active = metric(ports, "agent_watchdog_runs_active")
    return {"runs": runs, "active": active, "rss_before_mib": before / 2**20,
            "rss_after_mib": after / 2**20, "kib_per_run": (after - before) / 1024 / runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=102_400)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs in the workload")
    parser.add_argument("--memory-runs", type=int, default=10_000)
    parser.add_argument("--workload", choices=("all", *WORKLOADS), default="all")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    workloads = WORKLOADS if args.workload == "all" else (args.workload,)
    results: dict[str, Any] = {"protobuf_backend": protobuf_backend(), "batch": args.batch,
                               "concurrent_runs": args.runs, "cpus": os.cpu_count(),
                               "workloads": {}}
    for workload in workloads:
        results["workloads"][workload] = measure(args, workload)
    results["memory"] = memory_per_run(args.memory_runs)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.runs} concurrent runs, batches of {args.batch} spans; protobuf backend "
          f"{results['protobuf_backend']}; {results['cpus']} CPUs")
    for workload, r in results["workloads"].items():
        print(f"\n[{workload}] {r['spans']} spans, {r['avg_batch_bytes'] / 1024:.0f} KiB "
              "per batch")
        print(f"  {'baseline (parse + attribute walk)':<40}{r['baseline_spans_per_s']:>10,.0f}"
              " spans/s")
        print(f"  {'core (decode+normalise+signals)':<40}{r['core_spans_per_s']:>10,.0f} spans/s"
              f"   ratio {r['ratio_core_to_baseline']:.2f}")
        e2e_rate = r["end_to_end_spans_per_s"]
        print(f"  {'end to end (OTLP/HTTP, default rules)':<40}{e2e_rate:>10,.0f}"
              f" spans/s   ratio {r['ratio_end_to_end_to_baseline']:.2f}"
              f"   (503 retries: {r['end_to_end_retries']})")
        print(f"  {'sidecar spans per CPU-second':<40}{r['spans_per_cpu_s']:>10,.0f}"
              f"   ratio {r['ratio_cpu_to_baseline']:.2f}   (rules fired: "
              f"{r['rules_fired']:.0f})")
        if "end_to_end_no_rules_spans_per_s" in r:
            print(f"  {'end to end, no rules':<40}{r['end_to_end_no_rules_spans_per_s']:>10,.0f}"
                  f" spans/s   (the default rule pack costs {r['rules_throughput_cut']:.0%})")
    memory = results["memory"]
    print(f"\n{'memory per active run':<42}{memory['kib_per_run']:>10.1f} KiB"
          f"   ({memory['active']:.0f} active runs, RSS {memory['rss_before_mib']:.0f} -> "
          f"{memory['rss_after_mib']:.0f} MiB)")


def measure(args: argparse.Namespace, workload: str) -> dict[str, Any]:
    bodies = list(batches(args.runs, args.batch, args.spans, workload=workload))
    spans = len(bodies) * args.batch
    r: dict[str, Any] = {"spans": spans, "avg_batch_bytes": int(sum(map(len, bodies))
                                                                 / len(bodies))}
    base_rate = spans / min(timed(lambda: baseline(bodies)) for _ in range(2))
    r["baseline_spans_per_s"] = base_rate
    r["core_spans_per_s"] = spans / min(timed(lambda: core(bodies)) for _ in range(2))
    r["ratio_core_to_baseline"] = r["core_spans_per_s"] / base_rate
    e2e = end_to_end(bodies, spans)
    r["end_to_end_spans_per_s"] = e2e["spans_per_s"]
    r["end_to_end_retries"] = e2e["retries"]
    r["ratio_end_to_end_to_baseline"] = e2e["spans_per_s"] / base_rate
    r["spans_per_cpu_s"] = e2e["spans_per_cpu_s"]
    r["ratio_cpu_to_baseline"] = e2e["spans_per_cpu_s"] / base_rate
    r["rules_fired"] = e2e["rules_fired"]
    if workload == "clean":
        bare = end_to_end(bodies, spans, rules=False)
        r["end_to_end_no_rules_spans_per_s"] = bare["spans_per_s"]
        r["rules_throughput_cut"] = 1 - e2e["spans_per_s"] / bare["spans_per_s"]
    return r


if __name__ == "__main__":
    main()
