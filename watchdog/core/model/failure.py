"""Whether a tool result an agent sends back says the tool failed (the Chat Completions and
Responses APIs carry no flag for it; Anthropic's ``is_error`` does), and what a model API's
refusal of a request says."""

from __future__ import annotations

import json
import re

# What frameworks put in the tool message when the tool raised: "Error: ...", "Error executing
# tool ...", a traceback, "<Exception>: ...", a JSON object whose one key is "error", the text
# tagged "[ERROR] ..." (Strands for TypeScript's); a sentence of at most 6 words more that begins
# with the tool and ends "error:" ("Tool error: ...", langchain-rust's "The tool return the
# following error: ..."); a Node.js system error's message ("ENOENT: no such file or directory,
# open ..."), an MCP error's ("MCP error -32602: ...", the MCP SDKs'), as an agent that drops an
# MCP result's isError sends them.
_FAILED = re.compile(
    r"^\s*(?:error\b|exception\b|\[error\]|traceback \(most recent call last\)|"
    r"[A-Za-z_][\w.]*(?:Error|Exception):|\{\s*\"error\"\s*:|mcp error -?\d+:|"
    r"(?:the )?tool(?: [a-z]+){0,6} error:)"
    r"|^\s*(?-i:E[A-Z]{3,14}: [a-z][a-z ]*, [a-z])", re.IGNORECASE)


def looks_failed(text: str) -> bool:
    return _FAILED.match(text[:200]) is not None


# A request the model API refused as bad: a 4xx but these, which say nothing of the request
# (a timeout, a conflict, a rate limit: the same request may pass later)
TRANSIENT = frozenset({408, 409, 429})
MAX_REFUSAL_READ = 64 * 1024  # bytes of a refusal's body read (for its error, or what it refuses)


def refused(status: int) -> bool:
    """Whether an upstream status refuses the request itself (sending it again fails again)."""
    return 400 <= status < 500 and status not in TRANSIENT


def refusal_of(status: int, body: bytes) -> tuple[str, str]:
    """(error type, message) of a model API's error answer: the OpenAI shape (``{"error":
    {"message", "type", "code"}}``) and Anthropic's (``{"type": "error", "error": {"type",
    "message"}}``); else ``HTTP <status>`` and the start of the body."""
    error: object = None
    if len(body) <= MAX_REFUSAL_READ:
        try:
            error = json.loads(body).get("error")
        except (ValueError, AttributeError, RecursionError):
            error = None
    kind = message = None
    if isinstance(error, dict):
        found = error.get("code") or error.get("type")
        kind = found if isinstance(found, str) and found else None
        message = error.get("message") if isinstance(error.get("message"), str) else None
    elif isinstance(error, str):
        message = error
    if message is None:
        message = body[:400].decode("utf-8", "replace").strip()
    return f"HTTP {status}" + (f" {kind}" if kind else ""), message
