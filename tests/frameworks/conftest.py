"""Fixtures for the real-framework tests: one scripted model server for the session, and a
sidecar that ends a run of loose model calls (no invocation span: a home-grown loop, Hermes'
plugin) 1 s after its last call instead of 2 min, so an unanswered run ends within a test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.harness import RunningServer, running_server, sidecar_config


@pytest.fixture(scope="session")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningServer]:
    config = sidecar_config(tmp_path / "state", loose_run_gap=1.0, eval_interval=0.2)
    with running_server(config) as server:
        yield server
