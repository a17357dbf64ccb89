"""The tests' one polling helper: what it returns, how it fails, and that it stops in time."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tests.harness import eventually, wait_until


def test_returns_the_first_truthy_value() -> None:
    counts = itertools.count()
    assert wait_until(lambda: [n] if (n := next(counts)) >= 3 else [], every=0.001) == [3]


def test_fails_naming_what_was_awaited_and_the_last_value_seen() -> None:
    values = iter(range(-1000, 0))
    started = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        wait_until(lambda: next(values) > 0, what="a positive number", timeout=0.1, every=1)
    took = time.monotonic() - started
    assert str(failure.value) == "not within 0.1 s: a positive number (last seen: False)"
    assert 0.1 <= took < 0.6  # the last check is at the deadline, not a poll interval beyond


def test_a_function_describes_the_wait_only_when_it_fails() -> None:
    described: list[str] = []

    def what() -> str:
        described.append("called")
        return "the diagnosis"

    assert wait_until(lambda: "ok", what, timeout=0.1) == "ok"
    assert described == []
    with pytest.raises(AssertionError, match=r"the diagnosis \(last seen: ''\)"):
        wait_until(lambda: "", what, timeout=0.05)
    assert described == ["called"]


def test_without_a_description_the_condition_is_named() -> None:
    def run_listed() -> list[str]:
        return []

    with pytest.raises(AssertionError, match=r"^not within 0 s: <function .*run_listed.*> "
                                             r"\(last seen: \[\]\)$"):
        wait_until(run_listed, timeout=0)


def test_eventually_serves_the_loop_while_it_waits() -> None:
    async def main() -> str:
        done: list[str] = []
        asyncio.get_running_loop().call_later(0.02, done.append, "set by the loop")
        return (await eventually(lambda: done, "the callback", timeout=5))[0]

    assert asyncio.run(main()) == "set by the loop"
