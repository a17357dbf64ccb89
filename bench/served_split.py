"""Where a served span's CPU goes: each thread of ``watchdog serve`` under the ingest load.

``bench/served_split.py --workload rules-firing --spans 51200`` feeds a workload's OTLP/HTTP
payloads (:mod:`bench.workload`, 512-span requests, 4 keep-alive clients, the default rules) to
a sidecar run by ``bench/served_probe.py`` (its threads named in ``/proc``), and prints each
thread's CPU time per span over the load and the flushes it caused (user + system, from
``/proc/PID/task/*/stat``): the event loop (``loop``), the run store's lane
(``watchdog-store_0``), the directive store's (``watchdog-directives_0``), the default executor's
threads (``asyncio_N``) and any other. ``--profile FILE`` runs the event loop under ``cProfile``
(slower, so its per-span times are not the unprofiled ones; the split of the loop's time among
its parts is what it is for) and prints that split by part of the sidecar: see
:data:`PARTS`. ``--rounds N`` repeats the load on fresh sidecars and prints each round; the profile
is a round of its own after them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest import metric, send_all, settled_rss, sidecar, warm_up
from bench.workload import WORKLOADS, batches

PROBE = str(Path(__file__).resolve().parent / "served_probe.py")
TICK = os.sysconf("SC_CLK_TCK")

# The parts of the event loop's time: each the inclusive time of the functions named (file
# ending, function), less what a part listed before it took inside it; the rest is HTTP, the
# request's bookkeeping, the loop's own turns and the hand-offs to the lanes.
PARTS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("decisions carried (outbox, snapshot, metric, log)",
     (("shell/service.py", "_decided"), ("shell/service.py", "_decided_row"))),
    ("decode + normalise", (("core/spans/pipeline.py", "slices_of"),)),
    ("Core.apply (tracker, rules, decisions)", (("core/step.py", "apply"),)),
    ("the rest of a step's carry (state, metrics)", (("shell/service.py", "_carry"),)),
    ("state flush (snapshots encoded)", (("shell/server.py", "_flush"),)),
    ("timer (timed rules, expiry)", (("shell/server.py", "_tick"),)),
    ("directive writer (batches to its lane)", (("directives/outbox.py", "_write_loop"),)),
    ("imports at first use", (("<frozen importlib._bootstrap>", "_find_and_load"),)),
)
WAIT = ("~", "<method 'poll' of 'select.epoll' objects>")  # the loop waiting, not working


def thread_cpu(pid: int) -> Counter[str]:
    """CPU seconds of each thread so far, by its name (threads of one name summed)."""
    seconds: Counter[str] = Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # (ended meanwhile)
            continue
        seconds[name] += (int(fields[11]) + int(fields[12])) / TICK
    return seconds


def one_round(bodies: list[bytes], spans: int, profile: str | None = None,
              parts: str | None = None) -> dict[str, float]:
    launcher = (PROBE, *(("--profile", profile) if profile else ()),
                *(("--parts", parts) if parts else ()))
    with tempfile.TemporaryDirectory() as state, sidecar(state, launcher=launcher) as proc:
        ports, pid = proc["ports"], proc["process"].pid
        url = f"http://127.0.0.1:{ports['otlp_http']}/v1/traces"
        warm_up(url, ports, pid)
        warm = metric(ports, "agent_watchdog_spans_received_total")
        if profile or parts:
            os.kill(pid, signal.SIGUSR1)
        before = thread_cpu(pid)
        asyncio.run(send_all(url, bodies))
        received = metric(ports, "agent_watchdog_spans_received_total") - warm
        settled_rss(pid)
        after = thread_cpu(pid)
        if profile or parts:
            written = Path(profile or parts or "")
            written.unlink(missing_ok=True)  # (a round before this one's)
            os.kill(pid, signal.SIGUSR2)
            deadline = time.monotonic() + 60  # written by the main thread at its next turn
            while not written.exists():
                if time.monotonic() > deadline:
                    raise SystemExit(f"the sidecar wrote no {written} in 60 s")
                time.sleep(0.01)
    if received != spans:
        raise SystemExit(f"spans lost: sent {spans}, received {received}")
    threads = {name: (after[name] - before.get(name, 0.0)) / spans * 1e6 for name in after}
    if parts:
        split = json.loads(Path(parts).read_text())
        loop = split.pop("loop")
        split["the rest: HTTP, request bookkeeping, hand-offs"] = loop - sum(split.values())
        threads.update({f"loop: {name}": seconds / spans * 1e6 for name, seconds in split.items()})
    return threads


def profile_split(path: str) -> list[tuple[str, float]]:
    """The share of the profiled loop's busy time (less its waits in ``epoll``) of each of
    :data:`PARTS`, and of the rest."""
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]

    def inclusive(marks: tuple[tuple[str, str], ...]) -> float:
        return sum(cum for (file, _line, name), (_cc, _nc, _own, cum, _callers) in stats.items()
                   if any(file.endswith(end) and name == want for end, want in marks))

    busy = inclusive((("asyncio/base_events.py", "_run_once"),)) - sum(
        own for (file, _line, name), (_cc, _nc, own, _cum, _c) in stats.items()
        if (file, name) == WAIT)
    shares: list[tuple[str, float]] = []
    taken = 0.0
    for part, marks in PARTS:
        # (a part nested in one listed before it is counted once: its time is taken out)
        seconds = inclusive(marks) - _inside(stats, marks, [m for _p, ms in
                                                            PARTS[:PARTS.index((part, marks))]
                                                            for m in ms])
        shares.append((part, seconds / busy))
        taken += seconds
    shares.append(("HTTP, request bookkeeping, loop turns", (busy - taken) / busy))
    return shares


def _inside(stats: dict[Any, Any], marks: tuple[tuple[str, str], ...],
            outer: list[tuple[str, str]]) -> float:
    """The time of ``outer``'s functions called (directly) from ``marks``' functions."""
    seconds = 0.0
    for (file, _line, name), (_cc, _nc, _own, _cum, callers) in stats.items():
        if not any(file.endswith(end) and name == want for end, want in outer):
            continue
        for (cfile, _cline, cname), caller in callers.items():
            if any(cfile.endswith(end) and cname == want for end, want in marks):
                seconds += caller[3]
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=WORKLOADS, default="rules-firing")
    parser.add_argument("--spans", type=int, default=51_200)
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", metavar="FILE", help="cProfile the event loop into FILE")
    parser.add_argument("--parts", action="store_true",
                        help="the event loop's CPU by part (bench/served_probe.py's PARTS)")
    args = parser.parse_args()
    bodies = list(batches(args.runs, 512, args.spans, workload=args.workload))
    spans = len(bodies) * 512
    with tempfile.TemporaryDirectory() as scratch:
        parts = f"{scratch}/parts.json" if args.parts else None
        rounds = [one_round(bodies, spans, parts=parts) for _ in range(args.rounds)]
    names = sorted({n for r in rounds for n in r}, key=lambda n: (
        n.startswith("loop: "), -statistics.median([r.get(n, 0.0) for r in rounds])))
    print(f"{args.workload}: {spans} spans, CPU µs a span by thread (each round)")
    for name in names:
        cells = " ".join(f"{r.get(name, 0.0):7.1f}" for r in rounds)
        print(f"  {name:<48}{cells}")
    print(f"  {'total':<48}" + " ".join(
        f"{sum(v for n, v in r.items() if not n.startswith('loop: ')):7.1f}" for r in rounds))
    if args.profile:
        profiled = one_round(bodies, spans, args.profile)
        loop = statistics.median(r.get("loop", 0.0) for r in rounds)
        print(f"the event loop's busy time under cProfile (a round of its own: "
              f"{profiled['loop']:.1f} µs a span profiled), by part, and that share of the "
              f"loop's CPU µs a span above (median, {loop:.1f}):")
        for part, share in profile_split(args.profile):
            print(f"  {part:<52}{share:6.1%}{share * loop:7.1f}")


if __name__ == "__main__":
    main()
