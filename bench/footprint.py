"""The footprint of one idle sidecar: memory, threads, start-up and the first request.

``bench/footprint.py`` starts a real ``watchdog serve`` (free 127.0.0.1 ports, the shipped
defaults, a temporary state dir) under ``python -X importtime`` and reports:

* ``start``: seconds from the process's spawn until ``/readyz`` answers 200;
* RSS (``VmRSS`` from ``/proc/PID/status``) and threads once ready, and again after ``--idle``
  seconds with no traffic;
* the first requests (what loads on first use loads then): an OTLP/HTTP export of runs with
  priced model calls, its latency and the second one's; then the same over OTLP/gRPC (the first
  connection loads grpcio); then an OTLP/HTTP export of misbehaving runs whose rules fire (CEL
  loads when a rule first needs it), and RSS and threads afterwards;
* the imports that took longest by self time (``-X importtime``), and the same by top-level
  package;
* ``--by-package``: the RSS each top-level package adds while the sidecar starts (a second
  start, in-process, with ``__import__`` wrapped: growth while a package is imported, on any
  thread, is charged to it, the rest of the start to ``(start-up)``).

``--build NAME=TREE`` (repeatable, as in ``bench/compare.py``) compares source trees, A B A B
..., each round starting with the other build; ``--set KEY=VALUE`` passes a setting to every
build (``--set otlp_grpc_address=off``). Python's bytecode is compiled first, so import times
are not compile times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare import build
from bench.ingest import free_port, settled_rss, wait_ready
from bench.workload import batches

READY_TIMEOUT = 60.0
HERE = str(Path(__file__).resolve().parent.parent)
PORTS = ("otlp_http", "otlp_grpc", "api", "metrics")


def setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[a-z_]+", key):
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. "
                                         f"otlp_grpc_address=off")
    return key, value


def seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 0-3600 seconds")
    return value


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


def status(pid: int) -> tuple[int, int]:
    """RSS in bytes and the thread count of a process."""
    text = Path(f"/proc/{pid}/status").read_text()
    rss = re.search(r"VmRSS:\s+(\d+) kB", text)
    threads = re.search(r"Threads:\s+(\d+)", text)
    return (int(rss.group(1)) * 1024 if rss else 0), (int(threads.group(1)) if threads else 0)


def environment(tree: str, state_dir: str, ports: dict[str, int],
                settings: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("WATCHDOG_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=os.pathsep.join([tree, str(Path(tree) / "client")]),
               WATCHDOG_STATE_DIR=state_dir, WATCHDOG_LOG_LEVEL="warning")
    for name, port in ports.items():
        env[f"WATCHDOG_{name.upper()}_ADDRESS"] = f"127.0.0.1:{port}"
    env.update({f"WATCHDOG_{k.upper()}": v for k, v in settings.items()})
    return env


def export(url: str, body: bytes) -> float:
    """Seconds for one OTLP/HTTP export to be answered 200."""
    request = urllib.request.Request(url, body, {"Content-Type": "application/x-protobuf"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        if response.status != 200:
            raise SystemExit(f"export answered {response.status}")
    return time.perf_counter() - start


def export_grpc(address: str, *bodies: bytes) -> list[float]:
    """Seconds for each of ``bodies`` exported in turn over OTLP/gRPC on one channel."""
    import grpc

    seconds: list[float] = []
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        for body in bodies:
            start = time.perf_counter()
            call(body, timeout=30)
            seconds.append(time.perf_counter() - start)
    return seconds


def one_start(tree: str, idle: float, settings: dict[str, str]) -> dict[str, Any]:
    """Start, measure, send the first two requests, stop; the importtime lines too."""
    first, second, grpc_first, grpc_second = list(batches(4, 16, 64))[:4]
    firing = list(batches(2, 32, 128, seed=11, workload="rules-firing"))
    ports = {name: free_port() for name in PORTS}
    with tempfile.TemporaryDirectory() as state_dir, \
            tempfile.TemporaryFile() as errors:
        env = environment(tree, state_dir, ports, settings)
        spawned = time.perf_counter()
        # (run from the state dir: ``-m`` puts the working directory first on sys.path)
        process = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "watchdog",
                                    "serve"], env=env, stderr=errors, cwd=state_dir)
        try:
            wait_ready(f"http://127.0.0.1:{ports['metrics']}/readyz", process)
            result: dict[str, Any] = {"start_s": time.perf_counter() - spawned}
            settled_rss(process.pid)  # what start-up left running settles (flush, eval loops)
            result["ready_rss"], result["ready_threads"] = status(process.pid)
            time.sleep(idle)
            result["idle_rss"], result["idle_threads"] = status(process.pid)
            traces = f"http://127.0.0.1:{ports['otlp_http']}/v1/traces"
            result["first_request_s"] = export(traces, first)
            result["second_request_s"] = export(traces, second)
            if settings.get("otlp_grpc_address") != "off":
                result["first_grpc_s"], result["second_grpc_s"] = export_grpc(
                    f"127.0.0.1:{ports['otlp_grpc']}", grpc_first, grpc_second)
            result["firing_requests_s"] = [export(traces, body) for body in firing]
            settled_rss(process.pid)
            result["after_request_rss"], result["after_request_threads"] = status(process.pid)
        finally:
            process.terminate()
            process.wait(30)
        errors.seek(0)
        result["importtime"] = [line for line in errors.read().decode(errors="replace")
                                .splitlines() if line.startswith("import time:")]
    return result


def imports_by_self_time(lines: list[str]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(module, self µs) largest first, and the same summed by top-level package."""
    modules: list[tuple[str, int]] = []
    for line in lines:
        fields = line.split("|")
        if len(fields) != 3 or not fields[0].split(":")[1].strip().isdigit():
            continue  # the header
        modules.append((fields[2].strip(), int(fields[0].split(":")[1])))
    packages: Counter[str] = Counter()
    for name, micros in modules:
        packages[name.split(".")[0]] += micros
    return sorted(modules, key=lambda m: -m[1]), packages.most_common()


# The child of --by-package: runs ``watchdog serve`` in-process with __import__ wrapped.
BY_PACKAGE = r"""
import builtins, json, os, re, sys, threading, time, urllib.request
charged, stacks, lock, url = {}, {}, threading.Lock(), sys.argv[1]
def rss():
    with open('/proc/self/status') as f:
        return int(re.search(r'VmRSS:\s+(\d+)', f.read()).group(1)) * 1024
last = [rss()]
def charge(to):
    now = rss(); charged[to] = charged.get(to, 0) + now - last[0]; last[0] = now
real = builtins.__import__
def hooked(name, globals=None, locals=None, fromlist=(), level=0):
    top = name.split('.')[0] if level == 0 else None
    if top is None or top in sys.modules or threading.current_thread() is reporter:
        return real(name, globals, locals, fromlist, level)
    stack = stacks.setdefault(threading.get_ident(), [])
    with lock:
        charge(stack[-1] if stack else '(start-up)'); stack.append(top)
    try:
        return real(name, globals, locals, fromlist, level)
    finally:
        with lock:
            charge(stack.pop())
def report():
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200: break
        except OSError: pass
        time.sleep(0.02)
    settled = None
    while settled != rss():  # what start-up left running settles: RSS stops moving
        settled = rss()
        time.sleep(0.1)
    with lock:
        charge('(start-up)')
    sys.stdout.write(json.dumps({'rss': rss(), 'charged': charged}) + '\n'); sys.stdout.flush()
    os._exit(0)
reporter = threading.Thread(target=report, daemon=True)
reporter.start()
builtins.__import__ = hooked
sys.argv = ['watchdog', 'serve']
import runpy
runpy.run_module('watchdog', run_name='__main__', alter_sys=True)
"""


def by_package(tree: str, settings: dict[str, str]) -> dict[str, Any]:
    ports = {name: free_port() for name in PORTS}
    with tempfile.TemporaryDirectory() as state_dir:
        env = environment(tree, state_dir, ports, settings)
        out = subprocess.run([sys.executable, "-c", BY_PACKAGE,
                              f"http://127.0.0.1:{ports['metrics']}/readyz"],
                             env=env, capture_output=True, timeout=READY_TIMEOUT, check=False,
                             cwd=state_dir)
    if out.returncode != 0 or not out.stdout.strip():
        raise SystemExit(f"--by-package: the sidecar did not start: {out.stderr.decode()[-500:]}")
    result: dict[str, Any] = json.loads(out.stdout.decode().splitlines()[-1])
    return result


def compile_tree(tree: str) -> None:
    for part in ("watchdog", "client"):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(tree) / part)],
                       check=True, stdout=subprocess.DEVNULL)


def mb(value: float) -> str:
    return f"{value / 2**20:.1f} MB"


def spread(values: list[float], unit: Any) -> str:
    if len(values) == 1:
        return unit(values[0])
    return f"{unit(statistics.median(values))} ({unit(min(values))}-{unit(max(values))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=build, action="append",
                        help="NAME=TREE, repeatable; default: this tree")
    parser.add_argument("--set", type=setting, action="append", default=[], dest="settings",
                        help="KEY=VALUE, a setting for every build (WATCHDOG_KEY)")
    parser.add_argument("--rounds", type=positive, default=1)
    parser.add_argument("--idle", type=seconds, default=60.0,
                        help="seconds idle before the second reading (default 60)")
    parser.add_argument("--top", type=positive, default=12, help="imports listed")
    parser.add_argument("--by-package", action="store_true",
                        help="also the RSS each top-level package adds at start")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    builds = dict(args.build or [("this", HERE)])
    settings = dict(args.settings)
    for tree in builds.values():
        compile_tree(tree)
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in builds}
    for index in range(args.rounds):
        order = list(builds) if index % 2 == 0 else list(reversed(builds))
        for name in order:
            result = one_start(builds[name], args.idle, settings)
            rounds[name].append(result)
            print(f"round {index + 1} {name}: ready {mb(result['ready_rss'])} "
                  f"{result['ready_threads']} threads, idle {mb(result['idle_rss'])}, "
                  f"first request {result['first_request_s'] * 1000:.0f} ms",
                  file=sys.stderr, flush=True)
    results: dict[str, Any] = {"builds": builds, "settings": settings, "idle_s": args.idle,
                               "results": {}}
    for name, runs in rounds.items():
        modules, packages = imports_by_self_time(runs[0]["importtime"])
        entry: dict[str, Any] = {key: [run[key] for run in runs] for key in runs[0]
                                 if key != "importtime"}
        entry["modules_imported"] = len(modules)
        entry["top_imports_us"] = modules[:args.top]
        entry["top_packages_us"] = packages[:args.top]
        if args.by_package:
            entry["by_package"] = by_package(builds[name], settings)
        results["results"][name] = entry
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, r in results["results"].items():
        print(f"== {name} ({builds[name]}){' with ' + str(settings) if settings else ''}")
        print(f"start-up          {spread(r['start_s'], lambda v: f'{v:.2f} s')}")
        print(f"RSS when ready    {spread(r['ready_rss'], mb)}, "
              f"{spread(r['ready_threads'], lambda v: f'{v:.0f}')} threads")
        print(f"RSS idle {args.idle:.0f} s     {spread(r['idle_rss'], mb)}, "
              f"{spread(r['idle_threads'], lambda v: f'{v:.0f}')} threads")
        print(f"first request     {spread(r['first_request_s'], lambda v: f'{v * 1000:.0f} ms')}"
              f" (second {spread(r['second_request_s'], lambda v: f'{v * 1000:.1f} ms')})")
        if "first_grpc_s" in r:
            print(f"first gRPC export "
                  f"{spread(r['first_grpc_s'], lambda v: f'{v * 1000:.0f} ms')}"
                  f" (second {spread(r['second_grpc_s'], lambda v: f'{v * 1000:.1f} ms')})")
        firing = [run[0] for run in r["firing_requests_s"]]
        later = [max(run[1:]) for run in r["firing_requests_s"]]
        print(f"rules firing      first export {spread(firing, lambda v: f'{v * 1000:.0f} ms')}"
              f" (slowest later {spread(later, lambda v: f'{v * 1000:.1f} ms')})")
        print(f"RSS after them    {spread(r['after_request_rss'], mb)}, "
              f"{spread(r['after_request_threads'], lambda v: f'{v:.0f}')} threads")
        print(f"imports           {r['modules_imported']} modules (start and first requests); "
              f"longest by self time:")
        for module, micros in r["top_imports_us"]:
            print(f"  {micros / 1000:7.1f} ms  {module}")
        print("  by top-level package:")
        for package, micros in r["top_packages_us"]:
            print(f"  {micros / 1000:7.1f} ms  {package}")
        if "by_package" in r:
            charged = sorted(r["by_package"]["charged"].items(), key=lambda c: -c[1])
            print(f"RSS by package at start (in-process, {mb(r['by_package']['rss'])}):")
            for package, grown in charged[:args.top]:
                print(f"  {mb(grown):>9}  {package}")


if __name__ == "__main__":
    main()
