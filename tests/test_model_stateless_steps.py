"""What a program's next stateless prompt must quote of an answer-shaped call to go on from it
(:func:`watchdog.core.model.book._shaped_value`): the call's longest string argument."""

from __future__ import annotations

import json

import pytest

from watchdog.core.model.book import _shaped_value
from watchdog.core.model.wire import ToolCall


def call(arguments: object) -> ToolCall:
    return ToolCall("c1", "return_action", json.dumps(arguments))


@pytest.mark.parametrize(("arguments", "value"), [
    ({"kind": "search", "q": "term  0", "answer": None}, "term 0"),  # (the latest longest)
    ({"kind": "search", "q": "the config file"}, "the config file"),
    ({"kind": "go", "n": 3}, None),  # (no string of 4 characters or more)
    (["a list"], None),
])
def test_the_longest_string_argument(arguments: object, value: str | None) -> None:
    assert _shaped_value(call(arguments)) == value


def test_arguments_that_are_no_json_give_nothing() -> None:
    assert _shaped_value(ToolCall("c1", "return_action", "{not json")) is None
