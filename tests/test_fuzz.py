"""A short coverage-guided fuzz run of each in-tree target (``fuzz/``), as part of the suite.

Each target runs in a subprocess (libFuzzer ends its process when done) from a copy of the seed
corpus, for a fixed number of inputs and a fixed seed; a crash makes libFuzzer exit non-zero
with the input and its traceback, which fails the test. The input count is printed. The longer
run is in the README ("Fuzzing").
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNS = {"ingest": 10_000, "otlp_json": 5_000, "control": 50_000}  # about 5 s, 3 s and 1 s
# (unloaded); fuzz/otlp_json.py is the OTLP/JSON decode edge alone


@pytest.mark.parametrize("target", sorted(RUNS))
def test_fuzz_target_finds_no_crash(target: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    runs = RUNS[target]
    corpus = tmp_path / "corpus"
    shutil.copytree(ROOT / "fuzz" / "corpus" / target, corpus)
    result = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / f"{target}.py"), str(corpus), f"-runs={runs}",
         f"-dict={ROOT / 'fuzz' / 'otlp.dict'}",
         "-seed=1", "-max_len=8192", f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=170)
    log = result.stderr + result.stdout
    assert result.returncode == 0, f"fuzz target {target} crashed:\n{log[-6000:]}"
    done = re.search(r"Done (\d+) runs in (\d+) second", log)
    assert done is not None, log[-2000:]
    assert int(done.group(1)) >= runs
    coverage = re.findall(r"cov: (\d+)", log)
    with capsys.disabled():  # shown in every run, not only when the test fails
        print(f"\nfuzz {target}: {done.group(1)} inputs in {done.group(2)} s, "
              f"{coverage[-1] if coverage else '?'} coverage points, no crash")
