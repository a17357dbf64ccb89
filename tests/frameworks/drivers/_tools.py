"""The one tool every driver's agent gets, and the tasks its scenarios give it (frameworks that
wrap a tool with a decorator of their own wrap this function, or define theirs the same way).

``lookup`` answers ``value of <key>``; the key ``broken`` raises, as a failing backend would.
"""

from __future__ import annotations

TASKS = {"three_tools": "Look up a, b and c.", "limit": "Look up every key you can find.",
         "tool_error": "Look up broken."}


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key to look up.
    """
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"
