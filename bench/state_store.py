"""State store benchmark: the flushes a real ingest makes, written to SQLite as the writer does.

Run with ``.venv/bin/python bench/state_store.py`` (``--help`` for the knobs). A workload of
:data:`bench.workload.WORKLOADS` (``rules-firing`` by default) is folded into runs by the real
tracker; every ``--flush-every`` spans the runs the batches changed are snapshotted
(``RunState.to_dict``) with their new activity, the rows of one state flush. Then, in CPU time
of this process, the best of ``--repeat`` rounds, each into a fresh store in a temporary
directory: the rows encoded (:class:`~watchdog.shell.state.store.Rows`) and written
(:meth:`~watchdog.shell.state.store.Store.write`) in parts of ``WRITE_PART_RUNS`` runs, per span
ingested and per run written, and the size of the file they make. Run it from two trees to
compare builds (``python -P``, the tree's ``bench/`` first on the path).
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


def write_all(made: list[Flush]) -> tuple[float, float, int]:
    """CPU seconds encoding and writing every flush into a fresh store, and its file's size."""
    encoding = writing = 0.0
    with tempfile.TemporaryDirectory() as directory:
        db = store.Store(directory)
        for flush in made:
            began = time.process_time()
            for rows in flush_parts(db, flush):
                encoded = time.process_time()
                db.write(rows)
                encoding += encoded - began
                began = time.process_time()
                writing += began - encoded
        db.close()
        size = os.path.getsize(Path(directory) / store.DB_FILE)
    return encoding, writing, size


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
    best = (float("inf"), float("inf"), 0)
    for _ in range(args.repeat):
        encoding, writing, size = write_all(made)
        best = (min(best[0], encoding), min(best[1], writing), size)
    encoding, writing, size = best
    print(f"[{args.workload}] {args.spans:,} spans, {len(made)} flushes, {written:,} runs "
          f"written, a {size / 1e6:.1f} MB file")
    print(f"  encode  {encoding * 1e6 / args.spans:6.1f} µs a span {encoding * 1e6 / written:7.1f} "
          f"µs a run written")
    print(f"  SQLite  {writing * 1e6 / args.spans:6.1f} µs a span {writing * 1e6 / written:7.1f} "
          f"µs a run written")


if __name__ == "__main__":
    main()
