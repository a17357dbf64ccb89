"""Shared fixtures: a real sidecar on loopback ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import RunningServer, running_server, sidecar_config


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(sidecar_config(tmp_path / "state")) as server:
        yield server
