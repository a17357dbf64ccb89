"""bench/served_split.py runs: a short load through a sidecar run by bench/served_probe.py,
whose threads it reads by name and whose event loop it splits by part (the functions
served_probe.PARTS names must exist, or the sidecar does not start: this catches a rename)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_a_served_span_is_split_by_thread_and_by_part_of_the_loop() -> None:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("WATCHDOG_")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "served_split.py"), "--spans", "2048", "--runs", "64",
         "--parts"],
        capture_output=True, text=True, timeout=170, cwd=ROOT, env=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = {name.strip(): float(value) for name, value in
               re.findall(r"^  (\S.*?)\s+(-?[\d.]+)$", result.stdout, re.MULTILINE)}
    # the threads, by the names the probe gave the kernel
    assert figures["loop"] > 0 and figures["total"] >= figures["loop"]
    assert "watchdog-store_" in figures and "watchdog-direct" in figures
    # the loop's parts: the core's, the shell's, and the rest, which add up to the loop's CPU
    parts = {name[len("loop: "):]: value for name, value in figures.items()
             if name.startswith("loop: ")}
    for part in ("decode", "normalise", "Core.apply", "decisions carried",
                 "HTTP: the body read", "the request applied in slices"):
        assert parts[part] > 0, part
    # the parts add up to the loop's CPU over the probe's window (the thread's own clock), the
    # loop's line is /proc's (in clock ticks, 10 ms: ~5 µs a span of 2,048) over the load's
    tick = 1e6 / os.sysconf("SC_CLK_TCK") / 2048
    assert sum(parts.values()) == pytest.approx(figures["loop"], abs=2 * tick + 1)
