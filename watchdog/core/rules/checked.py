"""The shipped packs' expressions, checked ahead: a sidecar with the default rules loads CEL only
when a rule needs it.

Checking an expression takes CEL (cel-expr-python, some 15 MB resident with its environments).
``packs/checked.json`` holds what checking every expression of the shipped packs gave (its
result type and whether it reads a time-dependent signal), with a fingerprint of what that
depends on: the signal schemas and the time-dependent signals.
:func:`~watchdog.core.rules.expr.compile_expr` takes an expression it lists from there and
checks every other one with CEL, at load, as before; when the fingerprint differs, none is taken
from it. The runtime program of an expression taken from it is compiled at its first
evaluation.

``python -m watchdog.core.rules.write_checked`` writes the file again
(``tests/test_rules_checked.py`` fails while it is stale).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

from watchdog.core.rules.signals import SCHEMAS, TIME_DEPENDENT

CHECKED = Path(__file__).resolve().parent / "packs" / "checked.json"
SHIPPED = tuple(sorted(CHECKED.parent.glob("*.yaml")))

# source -> (result type name, reads a time-dependent signal)
Checks = dict[str, tuple[str, bool]]


def fingerprint() -> str:
    """What a check depends on besides the expression and CEL: the schemas and the
    time-dependent signals. CEL's version is not in it (a release of CEL would silently turn the
    shipped checks off, and with them the lazy load): ``tests/test_rules_checked.py`` checks
    every shipped expression again with the CEL installed and fails if any result differs."""
    timed = sorted((name, sorted(fields)) for name, fields in TIME_DEPENDENT.items())
    return hashlib.sha256(repr((SCHEMAS, timed)).encode()).hexdigest()


@cache
def shipped() -> Checks:
    """The checks of ``packs/checked.json`` if they were made for this build, else none."""
    try:
        data = json.loads(CHECKED.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint():
        return {}
    expressions = data.get("expressions")
    if not isinstance(expressions, dict):
        return {}
    return {source: (str(kind), bool(timed)) for source, (kind, timed) in expressions.items()}
