"""State store benchmark: the flushes a real ingest makes, written to SQLite as the writer does.

Run with ``.venv/bin/python bench/state_store.py`` (``--help`` for the knobs). A workload of
:data:`bench.workload.WORKLOADS` (``rules-firing`` by default) is folded into runs by the real
tracker; every ``--flush-every`` spans the runs the batches changed are snapshotted
(``RunState.to_dict``) with their new activity, the rows of one state flush. Then, in CPU time
of this process, the best of ``--repeat`` rounds, each into a fresh store in a temporary
directory: the rows encoded (:class:`~watchdog.shell.state.store.Rows`) and written
(:meth:`~watchdog.shell.state.store.Store.write`) in parts of ``WRITE_PART_RUNS`` runs, per span
ingested and per run written, and the size of the file they make; and, alternating with
those rounds, the same flushes with the ids of their spans stored too (a chunk a flush, as the
state writer stores them for a start after a crash): the ratio of the two. Last, the CPU time
of a quiet flush (a chunk of two span ids) into a store holding ``MAX_APPLIED_CHUNKS`` chunks
(the table at its bound) against one holding 32, alternating: what keeping the bound costs
as the table fills. Run it from two trees to compare builds (``python -P``, the tree's
``bench/`` first on the path).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.encode import Flush, collect, flush_parts
from bench.workload import WORKLOADS
from watchdog.shell.state import store


def applied_ids(spans: int, start: int) -> list[tuple[str, int, int]]:
    """The ids of ``spans`` spans applied (:meth:`RecentSpans.take_new`'s shape: trace + span
    id in hex, start and end in ns), as a flush stores them."""
    now = 1_795_320_000 * 10**9
    return [(f"{(start + n) * 7919:032x}{start + n:016x}", now + n * 1000, now + n * 1000 + 500)
            for n in range(spans)]


def write_all(made: list[Flush], applied: list[list[tuple[str, int, int]]] | None = None
              ) -> tuple[float, float, int]:
    """CPU seconds encoding and writing every flush into a fresh store, and its file's size;
    ``applied``: each flush's span ids, stored with its last part (as the state writer does)."""
    encoding = writing = 0.0
    with tempfile.TemporaryDirectory() as directory:
        db = store.Store(directory)
        for index, flush in enumerate(made):
            began = time.process_time()
            parts = list(flush_parts(db, flush))
            if applied is not None:
                parts[-1].add_applied(applied[index])
            for rows in parts:
                encoded = time.process_time()
                db.write(rows)
                encoding += encoded - began
                began = time.process_time()
                writing += began - encoded
        db.close()
        size = os.path.getsize(Path(directory) / store.DB_FILE)
    return encoding, writing, size


def quiet_flushes(held: int, flushes: int) -> float:
    """CPU seconds of ``flushes`` flushes storing a chunk of two span ids each (a quiet
    sidecar) into a store already holding ``held`` such chunks."""
    with tempfile.TemporaryDirectory() as directory:
        db = store.Store(directory)
        for index in range(held):
            db.save([], [], applied=applied_ids(2, 2 * index))
        began = time.process_time()
        for index in range(held, held + flushes):
            db.save([], [], applied=applied_ids(2, 2 * index))
        spent = time.process_time() - began
        db.close()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=WORKLOADS, default="rules-firing")
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs in the workload")
    parser.add_argument("--spans", type=int, default=51_200)
    parser.add_argument("--batch", type=int, default=512, help="spans per export")
    parser.add_argument("--flush-every", type=int, default=5120,
                        help="spans between flushes (a served sidecar at ~5,000 spans/s: 1 s)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best counts")
    args = parser.parse_args()
    made = collect(args.workload, args.runs, args.spans, args.batch,
                   max(1, args.flush_every // args.batch))
    written = sum(len(snapshots) for snapshots, _ in made)
    per_flush = min(args.flush_every, args.spans)
    ids = [applied_ids(per_flush, index * per_flush) for index in range(len(made))]
    best = (float("inf"), float("inf"), 0)
    best_ids = (float("inf"), float("inf"), 0)
    for _ in range(args.repeat):  # alternating: the same load on both
        encoding, writing, size = write_all(made, ids)
        best_ids = (min(best_ids[0], encoding), min(best_ids[1], writing), size)
        encoding, writing, size = write_all(made)
        best = (min(best[0], encoding), min(best[1], writing), size)
    with_ids = best_ids[0] + best_ids[1]
    encoding, writing, size = best
    print(f"[{args.workload}] {args.spans:,} spans, {len(made)} flushes, {written:,} runs "
          f"written, a {size / 1e6:.1f} MB file")
    print(f"  encode  {encoding * 1e6 / args.spans:6.1f} µs a span {encoding * 1e6 / written:7.1f} "
          f"µs a run written")
    print(f"  SQLite  {writing * 1e6 / args.spans:6.1f} µs a span {writing * 1e6 / written:7.1f} "
          f"µs a run written")
    added = (with_ids - encoding - writing) * 1e6 / args.spans
    print(f"  with the span ids applied stored too (a chunk a flush): "
          f"x{with_ids / (encoding + writing):.3f} the CPU time, {added:.2f} µs a span; "
          f"a {best_ids[2] / 1e6:.1f} MB file")
    full = few = float("inf")
    for _ in range(args.repeat):  # alternating
        full = min(full, quiet_flushes(store.MAX_APPLIED_CHUNKS, 200) / 200)
        few = min(few, quiet_flushes(32, 200) / 200)
    print(f"  a quiet flush (2 span ids): {full * 1e6:.0f} µs with {store.MAX_APPLIED_CHUNKS:,} "
          f"chunks of ids stored, {few * 1e6:.0f} µs with 32: x{full / few:.2f}")


if __name__ == "__main__":
    main()
