"""Short coverage-guided fuzz runs of the compiled decode, as part of the suite (the longer
runs: docs/limits.md, "Fuzzing").

- ``fuzz/native_decode.py`` (atheris, libFuzzer): the compiled decode against the Python one
  (protobuf's upb) on the same bytes: the same refusal, or the same records. As many inputs as
  ``fuzz/ingest.py`` gets in tests/test_fuzz.py.
- ``fuzz/native_brief.py`` (atheris): the compiled brief against ``redact.brief`` on the same
  text and limit.
- ``native/otlp/fuzz`` (cargo-fuzz, libFuzzer, AddressSanitizer): the Rust decoder alone, on
  its own: no panic, and what it reads lies in the body. Built with the stable toolchain
  (``RUSTC_BOOTSTRAP=1`` for the sanitizer flag), cached in the user's cache
  (``AGENT_WATCHDOG_CACHE``, ``~/.cache/agent-watchdog``); ``make test`` installs cargo-fuzz there.

Both start from ``fuzz/corpus/native_decode`` (recordings of real frameworks, and what the
fuzzers found, ``found-*``: tests/test_native.py reads each through both decodes).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzzing import finished

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus" / "native_decode"
# the user's cache, as the Makefile sets it (AGENT_WATCHDOG_CACHE, default ~/.cache/agent-watchdog)
CACHE = Path(os.environ.get("AGENT_WATCHDOG_CACHE")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agent-watchdog")
CARGO_FUZZ = CACHE / "cargo" / "bin" / "cargo-fuzz"
RUNS = {"differential": 10_000, "rust": 200_000}  # ~50 s and ~20 s (a loaded machine)
BUILD_SECONDS = 900  # cold: libFuzzer's C++ and the crate with AddressSanitizer


def test_the_compiled_decode_reads_fuzzed_bytes_as_the_python_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = RUNS["differential"]
    shutil.copytree(CORPUS, tmp_path / "corpus")
    result = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "native_decode.py"), str(tmp_path / "corpus"),
         f"-runs={runs}", f"-dict={ROOT / 'fuzz' / 'otlp.dict'}", "-seed=1", "-max_len=8192",
         f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=170)
    log = result.stderr + result.stdout
    assert result.returncode == 0, f"the decodes differ (or crashed):\n{log[-6000:]}"
    finished(log, runs, "native_decode (compiled vs upb)", capsys)


# fuzz/native_brief.py's seeds: a first byte (the limit; an anchor spliced in, at or above 0x80)
# and a text: plain, with a secret, not ASCII, undecodable bytes
BRIEF_SEEDS = (b"\x00the result is 42", b"\x81password=hunter2hunter2 and more",
               b"\xc5Authorization: Bearer abcdefghijklmnopqrstuvwx", b"\x02" + "é".encode() * 60,
               b"\x03" + b"x" * 300 + b"\xff\xfe", b"\x04{\"api_key\": \"xyz-123-456\"}")


def test_the_compiled_brief_briefs_fuzzed_texts_as_redact_brief(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = 20_000  # (~45,000 a second: the brief is short work)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for index, seed in enumerate(BRIEF_SEEDS):
        (corpus / f"seed-{index}").write_bytes(seed)
    result = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "native_brief.py"), str(corpus), f"-runs={runs}",
         "-seed=1", "-max_len=4096", f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=170)
    log = result.stderr + result.stdout
    assert result.returncode == 0, f"the briefs differ (or crashed):\n{log[-6000:]}"
    finished(log, runs, "native_brief (compiled vs redact.brief)", capsys)


@pytest.mark.timeout(BUILD_SECONDS + 120)
def test_the_rust_decoder_survives_fuzzed_bytes_under_asan(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert CARGO_FUZZ.exists(), f"{CARGO_FUZZ} is missing: make test installs it (cargo install)"
    runs = RUNS["rust"]
    shutil.copytree(CORPUS, tmp_path / "corpus")
    env = dict(os.environ, RUSTC_BOOTSTRAP="1",
               CARGO_TARGET_DIR=str(CACHE / "cargo-fuzz-target"))
    result = subprocess.run(
        [str(CARGO_FUZZ), "run", "-O", "decode", str(tmp_path / "corpus"), "--",
         f"-runs={runs}", f"-dict={ROOT / 'fuzz' / 'otlp.dict'}", "-seed=1", "-max_len=8192",
         f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        cwd=ROOT / "native" / "otlp", env=env, capture_output=True, text=True,
        timeout=BUILD_SECONDS + 60)
    log = result.stderr + result.stdout
    assert result.returncode == 0, f"the Rust decoder crashed:\n{log[-6000:]}"
    finished(log, runs, "native/otlp decode (Rust, ASan)", capsys)


@pytest.mark.parametrize("crate", ["watchdog-otlp", "watchdog-relay"])
def test_the_rust_unit_tests_pass(crate: str) -> None:
    """``cargo test`` of each crate (its own tests; no Python needed)."""
    result = subprocess.run(
        ["cargo", "test", "--quiet", "--manifest-path", str(ROOT / "native" / "Cargo.toml"),
         "-p", crate],
        env=dict(os.environ, CARGO_TARGET_DIR=str(CACHE / "cargo-test-target")),
        capture_output=True, text=True, timeout=BUILD_SECONDS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"test result: ok\. [1-9]\d* passed", result.stdout), result.stdout
