"""``watchdog demo`` end to end: the embedded sidecar, three simulated agents over real OTLP,
the live table, the terminal states and the looping run's report — and nothing left running."""

from __future__ import annotations

import re
import threading
import time

import pytest

from tests.harness import wait_until
from watchdog.shell.cli import main


def test_the_demo_shows_each_run_ending_as_it_should(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    threads_before = set(threading.enumerate())
    started = time.monotonic()
    assert main(["demo", "--seconds", "3"]) == 0
    took = time.monotonic() - started
    out = capsys.readouterr().out

    # the live table, with the directives as they were sent
    assert "AGENT" in out and "SAME CALL" in out and "live (Ctrl-C stops)" in out
    assert re.search(r"crawler +#1 wind_down tool-cycle: Loop:", out)
    assert re.search(r"crawler +#2 abort +tool-cycle: Grace exceeded", out)
    assert re.search(r"uploader +#1 abort +error-loop: Error loop: the same error \d+ times", out)

    terminal = out[out.index("Terminal states:"):]
    assert re.search(r"researcher +slow but progressing +completed, with a final answer",
                     terminal)
    assert re.search(r"crawler +looping +loop_detected \(tool-cycle\)", terminal)
    assert re.search(r"uploader +error loop +loop_detected \(error-loop\)", terminal)

    report = out[out.index("Progress report of the looping run"):]
    assert "# Progress report: demo-crawler-" in report
    assert "## Step-by-step log" in report and "## Suggested next steps" in report
    assert "State:** ended: loop_detected (tool-cycle)" in report
    assert "Demo finished in" in out
    assert took < 30

    # the sidecar's threads, the agents and their exporters are all gone (gRPC's asyncio
    # poller is one thread per process, started with the first gRPC server and never stopped)
    def left() -> list[str]:
        return [t.name for t in set(threading.enumerate()) - threads_before
                if "_poll_wrapper" not in t.name]

    wait_until(lambda: not left(), "the sidecar's, the agents' and the exporters' threads to end",
               timeout=5)
