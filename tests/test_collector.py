"""The serving process's garbage collector (:func:`watchdog.shell.service.collect_less`): what
exists at the start is left out of collections, the youngest generation is collected less
often, and cyclic garbage is still freed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from watchdog.shell.service import GC_THRESHOLDS, collect_less


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_serving_collects_less_often_and_still_frees_cycles(restored_collector: None) -> None:
    before = gc.get_freeze_count()
    collect_less()
    assert gc.get_threshold() == GC_THRESHOLDS
    assert GC_THRESHOLDS[0] > 700  # Python's default, which cost ~20 % of the sidecar's CPU
    assert gc.get_freeze_count() > before  # what existed at the start is left out
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    gone = weakref.ref(a)
    del a, b
    survivors = [Node() for _ in range(GC_THRESHOLDS[0] * 3)]  # allocations: a collection runs
    assert gone() is None
    assert len(survivors) == GC_THRESHOLDS[0] * 3
