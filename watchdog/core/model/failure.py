"""Whether a tool result an agent sends back says the tool failed (the Chat Completions and
Responses APIs carry no flag for it; Anthropic's ``is_error`` does)."""

from __future__ import annotations

import re

# What frameworks put in the tool message when the tool raised: "Error: ...", "Error executing
# tool ...", a traceback, "<Exception>: ...", or a JSON object whose one key is "error".
_FAILED = re.compile(
    r"^\s*(?:error\b|exception\b|traceback \(most recent call last\)|"
    r"[A-Za-z_][\w.]*(?:Error|Exception):|\{\s*\"error\"\s*:)", re.IGNORECASE)


def looks_failed(text: str) -> bool:
    return _FAILED.match(text[:200]) is not None
