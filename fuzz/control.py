"""Fuzz target: control API bodies (heartbeat, ack, checkpoint) -> the parsers the handlers
use -> the run and session state they change -> strict JSON. Coverage-guided with atheris.

A body is either refused with ``BadRequest`` (a 400 with its message) or accepted, and then
what it changed encodes as strict JSON (no ``Infinity``/``NaN``). Any other exception is a
crash: libFuzzer stops and saves the input.

    .venv/bin/python fuzz/control.py -dict=fuzz/otlp.dict fuzz/corpus/control -runs=200000

The first byte of each input picks the route (0: heartbeat, 1: ack, 2: checkpoint).
"""

from __future__ import annotations

import json
import sys

import atheris

with atheris.instrument_imports(include=["watchdog"]):
    from watchdog.core.rules.signals import run_activation
    from watchdog.core.runs.tracker import RunTracker
    from watchdog.core.sessions import Checkpoint, CheckpointError, SessionState
    from watchdog.shell.api.directives import parse_ack
    from watchdog.shell.api.http import json_object
    from watchdog.shell.api.runs import parse_heartbeat
    from watchdog.shell.errors import BadRequest

NOW = 1_900_000_000.0


def test_one_input(data: bytes) -> None:
    if not data:
        return
    route = data[0] % 3
    try:
        body = json_object(data[1:])
        if route == 0:
            beat = parse_heartbeat(body)
            tracker = RunTracker(max_runs=10, run_end_timeout=60.0)
            run, _ = tracker.heartbeat("r", beat.messages, NOW, beat.in_flight,
                                       beat.oldest_call_started, register=True)
            assert run is not None
            if beat.announce:
                run.announce(**beat.announce)
            json.dumps(run.to_dict(), allow_nan=False)
            run_activation(run.signals(NOW + 1))
        elif route == 1:
            parse_ack(body)
        else:
            checkpoint = Checkpoint.parse(body, NOW)
            session = SessionState("s")
            session.checkpoint(checkpoint, [])
            json.dumps(session.to_dict(), allow_nan=False)
            json.dumps(session.context(), allow_nan=False)
    except (BadRequest, CheckpointError):
        return


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
