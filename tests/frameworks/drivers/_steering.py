"""What every steering driver shares: the scenarios' tools and the result line it prints.

A driver runs one scenario (argv[1]: ``budget`` | ``cycle`` | ``errors``) of one framework inside
``wd.run(agent="explorer", max_tool_calls=...)`` with the client's own ``setup_tracing`` (batch
delay 200 ms: nothing waits for the exporter), then prints one JSON line: the run id, the tools
that ran, the framework's result text and the report the run recorded.
"""

from __future__ import annotations

import json
import sys
from typing import Any

BUDGETS = {"budget": 10, "cycle": 50, "errors": 50}
ran: list[str] = []


def search(q: str) -> str:
    """Search the files for a term."""
    ran.append("search")
    return f"2 results for {q}: /srv/{q.replace(' ', '_')}.txt"


def list_dir(dir: str) -> str:
    """List a directory."""
    ran.append("list")
    return "a.txt b.txt"


def read(path: str) -> str:
    """Read a file."""
    ran.append("read")
    return "nothing useful"


def fetch(url: str) -> str:
    """Fetch a URL."""
    ran.append("fetch")
    raise ConnectionError(f"connection refused: {url}")


def scenario() -> str:
    name = sys.argv[1]
    if name not in BUDGETS:
        raise SystemExit(f"unknown scenario {name!r}: expected one of {sorted(BUDGETS)}")
    return name


def report(run: Any, output: object) -> None:
    print(json.dumps({"run_id": run.id, "ran": ran, "output": str(output),
                      "report": run.report_text}), flush=True)
