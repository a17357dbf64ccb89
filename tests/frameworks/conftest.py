"""Fixtures for the real-framework tests: one scripted model server for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.frameworks.fakellm import FakeLLM


@pytest.fixture(scope="session")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server
