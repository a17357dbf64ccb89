"""Fuzz target: the compiled brief (``native/otlp/src/briefs.rs``) against ``redact.brief``, its
Python reference, on the same text and limit. Coverage-guided with atheris (libFuzzer).

The contract checked: the same brief for every text (what a tool call's arguments or result, a
model's answer or an error may hold: any code point, a lone surrogate) and every limit. The
text is the input after its first byte, read as UTF-8 with its undecodable bytes as lone
surrogates, with a word a secret can start at (``redact.ANCHORS``) spliced in where the first
byte says; the first byte also picks the limit. Any difference, or any exception, is a crash.

    .venv/bin/python fuzz/native_brief.py fuzz/corpus/native_brief
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with atheris.instrument_imports(include=["watchdog"]):
    from watchdog.core import redact
    from watchdog.core.spans import native

native.use_native(True)
assert native._native is not None, "the compiled decode is not built: make"
BRIEF = native._native.Briefs(list(redact.ANCHORS), redact.brief)
LIMITS = (1, 2, 3, 8, 40, 500)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    head, text = data[0], data[1:].decode("utf-8", "surrogateescape")
    if head & 0x80 and text:
        anchor = redact.ANCHORS[head % len(redact.ANCHORS)]
        at = (head * 7) % (len(text) + 1)
        text = text[:at] + (anchor.upper() if head & 0x40 else anchor) + text[at:]
    limit = LIMITS[head % len(LIMITS)]
    ours, theirs = BRIEF(text, limit), redact.brief(text, limit)
    if ours != theirs:
        raise AssertionError(f"{text!r} at {limit}: {ours!r} != {theirs!r}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
