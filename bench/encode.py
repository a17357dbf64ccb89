"""Persistence encoding benchmark: the state flush's JSON encoders and decoders on real rows.

Run with ``.venv/bin/python bench/encode.py`` (``--help`` for the knobs). A workload of
:data:`bench.workload.WORKLOADS` is decoded and folded into runs by the real core
(:class:`~watchdog.core.runs.tracker.RunTracker`); after every ``--flush-every`` batches the runs
the batches touched are snapshotted (``RunState.to_dict``, what a state flush encodes) and their new
activity entries grouped per run (one activity chunk each), exactly the rows a flush writes.

Each codec then encodes every snapshot and chunk to the ``str`` SQLite stores as TEXT, and
decodes it back; rows are timed in blocks, the codecs interleaved, the best of ``--repeat``
rounds of each block counting (a busy machine spoils few blocks); the time per row is reported,
and as a ratio to the stdlib :mod:`json` in the same run (so the numbers share a machine state):

* ``json``    — the stdlib, as the store used it (``allow_nan=False`` for snapshots);
* ``orjson``  — ``orjson.dumps(...).decode()`` / ``orjson.loads``;
* ``msgspec`` — ``msgspec.json.Encoder().encode(...).decode()`` / ``Decoder().decode``;
* ``store``   — what :mod:`watchdog.shell.state.store` does now: msgspec, its check for Infinity/NaN
  included, and the stdlib for the rows that check sends there (their share is printed).

Every codec's output is checked to decode to what the stdlib's does. Last, the whole write of
each flush (rows encoded, then written in parts into a real SQLite store in a temporary
directory, as :class:`~watchdog.shell.state.persist.StateWriter` does) is timed in CPU seconds with
the store's encoders and with the stdlib's, alternating.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workload import WORKLOADS, batches
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.decode import parse_protobuf
from watchdog.core.spans.pipeline import records_from
from watchdog.shell.state import store
from watchdog.shell.state.persist import WRITE_PART_RUNS

Row = Any  # a snapshot dict, or a chunk: a list of activity entries without their run key


Flush = tuple[list[dict[str, Any]], dict[str, list[ActivityEntry]]]  # snapshots, activity


def collect(workload: str, runs: int, spans: int, batch: int, flush_every: int) -> list[Flush]:
    """The snapshots and activity (by run) each state flush of a real ingest would write, one
    flush every ``flush_every`` batches and one for what is left at the end; the clock is fixed
    (a batch is 0.05 s), so every process gets the same flushes."""
    tracker = RunTracker(max_runs=1_000_000)
    flushes: list[Flush] = []
    touched: dict[str, Any] = {}
    activity: dict[str, list[ActivityEntry]] = {}
    now = 1_795_320_000.0
    for index, body in enumerate(batches(runs, batch, spans, workload=workload), 1):
        now += 0.05
        result = tracker.apply(records_from(parse_protobuf(body)).records, now)
        touched.update(result.touched)
        for entry in result.activity:
            activity.setdefault(entry.run_key, []).append(entry)
        if index % flush_every == 0:
            flushes.append(([run.to_dict() for run in touched.values()], activity))
            touched, activity = {}, {}
    if touched:
        flushes.append(([run.to_dict() for run in touched.values()], activity))
    return flushes


def flush_parts(db: store.Store, flush: Flush) -> Iterator[store.Rows]:
    """One flush's rows as the state writer makes them: parts of ``WRITE_PART_RUNS`` runs, each
    with its runs' new activity (encoded as the generator runs; each part one ``db.write``)."""
    snapshots, activity = flush
    for start in range(0, len(snapshots), WRITE_PART_RUNS):
        rows = store.Rows(db.activity_log_size)
        for snapshot in snapshots[start:start + WRITE_PART_RUNS]:
            rows.add_run(snapshot)
            entries = activity.get(snapshot["key"])
            if entries:
                rows.add_activity(((snapshot["key"], entries),))
        yield rows


def stdlib_row(row: dict[str, Any]) -> str:
    return json.dumps(row, separators=(",", ":"), allow_nan=False)


def stdlib_items(items: list[Any]) -> str:
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False)


def flush_cost(flushes: list[Flush], rounds: int) -> dict[str, float]:
    """CPU seconds per snapshot of writing the flushes as the state writer does (rows encoded,
    then written in parts of ``WRITE_PART_RUNS`` runs, one transaction each, into a real store
    in a temporary directory), with the store's encoders and with the stdlib's, alternating;
    the best of ``rounds`` per flush counts."""
    encoders = {"store": (store.encode_row, store.encode_items),
                "json": (stdlib_row, stdlib_items)}
    total = dict.fromkeys(encoders, 0.0)
    with tempfile.TemporaryDirectory() as directory:
        db = store.Store(directory)
        for flush in flushes:
            best = dict.fromkeys(encoders, float("inf"))
            for _ in range(rounds):
                for name, (encode_row, encode_items) in encoders.items():
                    store.encode_row, store.encode_items = encode_row, encode_items
                    began = time.process_time()
                    for rows in flush_parts(db, flush):
                        db.write(rows)
                    best[name] = min(best[name], time.process_time() - began)
            for name in encoders:
                total[name] += best[name]
        db.close()
    store.encode_row, store.encode_items = encoders["store"]
    count = sum(len(snapshots) for snapshots, _ in flushes)
    return {name: seconds / count for name, seconds in total.items()}


BLOCK = 200  # rows timed together: short enough that a busy neighbour spoils few of them


def timed_blocks(rounds: int, work: dict[str, tuple[Callable[[list[Any]], object], list[Any]]]
                 ) -> dict[str, float]:
    """Seconds per codec for all its rows (codec -> (work, rows); as many rows each): each
    block of ``BLOCK`` rows is timed ``rounds`` times per codec, the codecs interleaved (so load
    on the machine hits them alike), and the best time of each block counts."""
    total = dict.fromkeys(work, 0.0)
    size = min(len(rows) for _, rows in work.values())
    for start in range(0, size, BLOCK):
        best = dict.fromkeys(work, float("inf"))
        for _ in range(rounds):
            for name, (run, rows) in work.items():
                block = rows[start:start + BLOCK]
                began = time.perf_counter()
                run(block)
                best[name] = min(best[name], time.perf_counter() - began)
        for name in work:
            total[name] += best[name]
    return total


def codecs() -> dict[str, tuple[Callable[[Any], str], Callable[[Any], str],
                                Callable[[str], Any]]]:
    """name -> (encode a snapshot, encode a chunk, decode either)."""
    mencoder, mdecoder = msgspec.json.Encoder(), msgspec.json.Decoder()
    return {
        "json": (stdlib_row, stdlib_items, json.loads),
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
    results: dict[str, Any] = {name: {} for name in codecs()}
    for index, (kind, rows) in enumerate((("snapshots", snapshots), ("chunks", chunks))):
        encoders: dict[str, tuple[Callable[[list[Any]], object], list[Any]]] = {}
        decoders: dict[str, tuple[Callable[[list[Any]], object], list[Any]]] = {}
        texts: dict[str, list[str]] = {}
        for name, (encode_row, encode_items, decode) in codecs().items():
            encode = (encode_row, encode_items)[index]
            try:
                texts[name] = [encode(row) for row in rows]
            except (TypeError, ValueError) as exc:
                results[name][kind] = {"error": str(exc)}
                continue
            results[name][kind] = {
                "round_trips": [decode(text) for text in texts[name]] == reference[kind],
                "bytes": sum(len(text.encode()) for text in texts[name]) / len(rows)}
            encoders[name] = (lambda block, encode=encode: [encode(row) for row in block], rows)
            decoders[name] = (lambda block, decode=decode: [decode(text) for text in block],
                              texts[name])  # each decodes its own text
        encode_s = timed_blocks(rounds, encoders)
        decode_s = timed_blocks(rounds, decoders)
        for name in encoders:
            row = results[name][kind]
            row["encode_us"] = encode_s[name] / len(rows) * 1e6
            row["decode_us"] = decode_s[name] / len(rows) * 1e6
        results["store"][kind]["stdlib_share"] = (
            sum(store._fast_json(row) is None for row in rows) / len(rows))
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
    parser.add_argument("--spans", type=int, default=20_480)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--flush-every", type=int, default=4,
                        help="batches between two state flushes (the rows of one flush)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="rounds per block of rows; the best counts")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if min(args.runs, args.spans, args.batch, args.flush_every, args.repeat) < 1:
        parser.error("--runs, --spans, --batch, --flush-every and --repeat must be >= 1")

    flushes = collect(args.workload, args.runs, args.spans, args.batch, args.flush_every)
    snapshots = [row for rows, _ in flushes for row in rows]
    chunks = [[entry[1:] for entry in entries]
              for _, activity in flushes for entries in activity.values()]
    if not snapshots or not chunks:
        parser.error("the workload produced no rows: raise --spans or lower --flush-every")
    results = {"workload": args.workload, "snapshots": len(snapshots), "chunks": len(chunks),
               "msgspec": msgspec.__version__, "orjson": orjson.__version__,
               "python": sys.version.split()[0],
               "codecs": measure(snapshots, chunks, args.repeat),
               "flush_cpu_us_per_run": {name: seconds * 1e6 for name, seconds
                                        in flush_cost(flushes, args.repeat).items()}}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"[{args.workload}] {len(snapshots)} snapshots, {len(chunks)} activity chunks; "
          f"msgspec {msgspec.__version__}, orjson {orjson.__version__}, Python "
          f"{results['python']}; best of {args.repeat} per block of {BLOCK} rows")
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
    flush = results["flush_cpu_us_per_run"]
    print(f"\nflush (rows encoded and written to SQLite in parts of {WRITE_PART_RUNS} runs), CPU "
          f"per run: {flush['store']:.1f} µs with the store's encoders, {flush['json']:.1f} µs "
          f"with the stdlib's ({flush['json'] / flush['store']:.2f}x)")


if __name__ == "__main__":
    main()
