"""What a libFuzzer run printed, read the same way for every fuzz target the suite runs
(tests/test_fuzz.py, tests/test_native_fuzz.py)."""

from __future__ import annotations

import re

import pytest


def finished(log: str, runs: int, what: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The run did at least ``runs`` inputs; its figures are shown in every run of the suite."""
    done = re.search(r"Done (\d+) runs in (\d+) second", log)
    assert done is not None, log[-2000:]
    assert int(done.group(1)) >= runs
    coverage = re.findall(r"cov: (\d+)", log)
    with capsys.disabled():  # shown in every run, not only when the test fails
        print(f"\nfuzz {what}: {done.group(1)} inputs in {done.group(2)} s, "
              f"{coverage[-1] if coverage else '?'} coverage points, no crash")
