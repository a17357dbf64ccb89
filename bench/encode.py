"""Persistence encoding benchmark: the state flush's JSON encoders and decoders on real rows.

Run with ``.venv/bin/python bench/encode.py`` (``--help`` for the knobs). A workload of
:data:`bench.workload.WORKLOADS` is decoded and folded into runs by the real core
(:class:`~watchdog.runs.tracker.RunTracker`); after every ``--flush-every`` batches the runs the
batches touched are snapshotted (``RunState.to_dict``, what a state flush encodes) and their new
activity entries grouped per run (one activity chunk each), exactly the rows a flush writes.

Each codec then encodes every snapshot and chunk to the ``str`` SQLite stores as TEXT, and
decodes it back; the best of ``--repeat`` rounds is reported per row and as a ratio to the
stdlib :mod:`json` in the same run (so the numbers share a machine state):

* ``json``    — the stdlib, as the store used it (``allow_nan=False`` for snapshots);
* ``orjson``  — ``orjson.dumps(...).decode()`` / ``orjson.loads``;
* ``msgspec`` — ``msgspec.json.Encoder().encode(...).decode()`` / ``Decoder().decode``;
* ``store``   — what :mod:`watchdog.store` does now: msgspec, its check for Infinity/NaN
  included, and the stdlib for the rows that check sends there (their share is printed).

Every codec's output is checked to decode to what the stdlib's does, and what it cannot hold is
said (orjson stops at 64-bit integers and reads larger ones back as floats).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workload import WORKLOADS, batches
from watchdog import store
from watchdog.ingest.decode import parse_protobuf
from watchdog.ingest.pipeline import records_from
from watchdog.runs.activity import ActivityEntry
from watchdog.runs.tracker import RunTracker

Row = Any  # a snapshot dict, or a chunk: a list of activity entries without their run key


def collect(workload: str, runs: int, spans: int, batch: int,
            flush_every: int) -> tuple[list[dict[str, Any]], list[list[Row]]]:
    """The snapshots and activity chunks the state flushes of a real ingest would write."""
    tracker = RunTracker(max_runs=1_000_000)
    snapshots: list[dict[str, Any]] = []
    chunks: list[list[Row]] = []
    touched: dict[str, Any] = {}
    activity: dict[str, list[ActivityEntry]] = {}
    now = time.time()
    for index, body in enumerate(batches(runs, batch, spans, workload=workload), 1):
        result = tracker.apply(records_from(parse_protobuf(body)).records, now)
        touched.update(result.touched)
        for entry in result.activity:
            activity.setdefault(entry.run_key, []).append(entry)
        if index % flush_every == 0:
            snapshots.extend(run.to_dict() for run in touched.values())
            chunks.extend([entry[1:] for entry in entries] for entries in activity.values())
            touched, activity = {}, {}
    return snapshots, chunks


def best(rounds: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def codecs() -> dict[str, tuple[Callable[[Any], str], Callable[[Any], str],
                                Callable[[str], Any]]]:
    """name -> (encode a snapshot, encode a chunk, decode either)."""
    mencoder, mdecoder = msgspec.json.Encoder(), msgspec.json.Decoder()
    return {
        "json": (lambda row: json.dumps(row, separators=(",", ":"), allow_nan=False),
                 lambda items: json.dumps(items, separators=(",", ":"), ensure_ascii=False),
                 json.loads),
        "orjson": (lambda row: orjson.dumps(row).decode(),
                   lambda items: orjson.dumps(items).decode(), orjson.loads),
        "msgspec": (lambda row: mencoder.encode(row).decode(),
                    lambda items: mencoder.encode(items).decode(), mdecoder.decode),
        "store": (store.encode_row, store.encode_items, store.decode),
    }


def measure(snapshots: list[dict[str, Any]], chunks: list[list[Row]],
            rounds: int) -> dict[str, Any]:
    reference = {"snapshots": [json.loads(json.dumps(row)) for row in snapshots],
                 "chunks": [json.loads(json.dumps(items)) for items in chunks]}
    results: dict[str, Any] = {}
    for name, (encode_row, encode_items, decode) in codecs().items():
        r: dict[str, Any] = {}
        for kind, rows, encode in (("snapshots", snapshots, encode_row),
                                   ("chunks", chunks, encode_items)):
            try:
                texts = [encode(row) for row in rows]
            except (TypeError, ValueError) as exc:
                r[kind] = {"error": str(exc)}
                continue
            same = [decode(text) for text in texts] == reference[kind]
            encode_s = best(rounds, lambda rows=rows, encode=encode: [encode(x) for x in rows])
            decode_s = best(rounds, lambda texts=texts, decode=decode: [decode(t) for t in texts])
            r[kind] = {"encode_us": encode_s / len(rows) * 1e6,
                       "decode_us": decode_s / len(rows) * 1e6,
                       "bytes": sum(len(text.encode()) for text in texts) / len(rows),
                       "round_trips": same}
        results[name] = r
    for kind, rows in (("snapshots", snapshots), ("chunks", chunks)):
        slow = sum(store._fast_json(row) is None for row in rows)
        results["store"][kind]["stdlib_share"] = slow / len(rows)
    for r in results.values():
        for kind, row in r.items():
            base = results["json"][kind]
            if "error" not in row and "error" not in base:
                row["encode_ratio"] = base["encode_us"] / row["encode_us"]
                row["decode_ratio"] = base["decode_us"] / row["decode_us"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=WORKLOADS, default="rules-firing")
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs in the workload")
    parser.add_argument("--spans", type=int, default=51_200)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--flush-every", type=int, default=4,
                        help="batches between two state flushes (the rows of one flush)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; the best is reported")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if min(args.runs, args.spans, args.batch, args.flush_every, args.repeat) < 1:
        parser.error("--runs, --spans, --batch, --flush-every and --repeat must be >= 1")

    snapshots, chunks = collect(args.workload, args.runs, args.spans, args.batch,
                                args.flush_every)
    if not snapshots or not chunks:
        parser.error("the workload produced no rows: raise --spans or lower --flush-every")
    results = {"workload": args.workload, "snapshots": len(snapshots), "chunks": len(chunks),
               "msgspec": msgspec.__version__, "orjson": orjson.__version__,
               "python": sys.version.split()[0], "codecs": measure(snapshots, chunks,
                                                                   args.repeat)}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"[{args.workload}] {len(snapshots)} snapshots, {len(chunks)} activity chunks; "
          f"msgspec {msgspec.__version__}, orjson {orjson.__version__}, Python "
          f"{results['python']}; best of {args.repeat}")
    for kind in ("snapshots", "chunks"):
        size = results["codecs"]["json"][kind]["bytes"]
        print(f"\n{kind} ({size:,.0f} bytes of JSON each)")
        print(f"  {'codec':<10}{'encode µs':>11}{'ratio':>8}{'decode µs':>12}{'ratio':>8}"
              "  round-trips")
        for name, r in results["codecs"].items():
            row = r[kind]
            if "error" in row:
                print(f"  {name:<10}  cannot encode: {row['error']}")
                continue
            print(f"  {name:<10}{row['encode_us']:>11.1f}{row['encode_ratio']:>7.2f}x"
                  f"{row['decode_us']:>12.1f}{row['decode_ratio']:>7.2f}x  "
                  f"{'yes' if row['round_trips'] else 'NO'}"
                  + (f"   ({row['stdlib_share']:.2%} by the stdlib)" if name == "store" else ""))


if __name__ == "__main__":
    main()
