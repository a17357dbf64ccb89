"""Writes ``packs/checked.json`` (:mod:`watchdog.core.rules.checked`) again: every expression of
the shipped packs checked with CEL; and ``packs/default.json``, the default pack read ahead
(:func:`watchdog.core.rules.pack.read_ahead`). ``python -m watchdog.core.rules.write_checked``;
``tests/test_rules_checked.py`` fails while either file is stale."""

from __future__ import annotations

import json

from watchdog.core.rules import expr
from watchdog.core.rules.checked import CHECKED, SHIPPED, Checks, fingerprint, shipped
from watchdog.core.rules.pack import (
    DEFAULT_AHEAD,
    DEFAULT_PACK,
    ahead_form,
    load_rules,
    read_yaml,
    yaml_digest,
)


def check_shipped() -> Checks:
    """Check every expression of the shipped packs with CEL (what the file should hold)."""
    found: Checks = {}
    expr.recorded = found
    try:
        for pack in SHIPPED:
            load_rules([str(pack)], include_default=False)
    finally:
        expr.recorded = None
    return dict(sorted(found.items()))


def render(checks: Checks) -> str:
    return json.dumps({"fingerprint": fingerprint(), "expressions": checks}, indent=1,
                      ensure_ascii=False) + "\n"


def render_ahead() -> str:
    """``packs/default.json``: the default pack as its YAML reads (which must hold no
    problem)."""
    file = str(DEFAULT_PACK)
    packs = read_yaml(file)
    return json.dumps(ahead_form(packs, str(yaml_digest(file))), indent=1,
                      ensure_ascii=False) + "\n"


if __name__ == "__main__":
    CHECKED.write_text(render(check_shipped()), encoding="utf-8")
    DEFAULT_AHEAD.write_text(render_ahead(), encoding="utf-8")
    print(f"{CHECKED}: {len(shipped.__wrapped__())} expressions")
