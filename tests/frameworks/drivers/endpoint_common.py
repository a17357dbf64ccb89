"""What every endpoint driver shares: the agent's one tool, the task, and the line it prints.

The drivers ``endpoint_*.py`` run a real agent of one framework (or SDK) pointed at the
sidecar's model endpoint by base URL alone: ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` in the
environment (or the framework's own base-URL setting where it reads none), no OpenTelemetry and
no client SDK. The model to ask is ``ENDPOINT_MODEL``, the task ``ENDPOINT_TASK`` (default
"Find the file."), the agent's own step limit ``ENDPOINT_OWN_LIMIT`` where its driver sets one
(default the driver's); what the agent does is the scripted model's business, not the driver's.
Each driver prints one JSON line last: ``{"ran": [the search terms its tool ran with, in
order], "output": the agent's final output}``.
"""

from __future__ import annotations

import json
import os

TASK = os.environ.get("ENDPOINT_TASK", "Find the file.")
INSTRUCTIONS = "You are a careful research agent. Use the search tool, then answer."
RAN: list[str] = []  # every execution of the tool, counted in the tool itself


def model() -> str:
    return os.environ["ENDPOINT_MODEL"]


def own_limit(default: int) -> int:
    """The agent's own step limit (``max_turns``, ``recursion_limit``, ...): ``ENDPOINT_OWN_LIMIT``
    if set, else the driver's ``default``."""
    return int(os.environ.get("ENDPOINT_OWN_LIMIT", default))


def search(q: str) -> str:
    """Search the files for a term.

    Args:
        q: the term to search for
    """
    RAN.append(q)
    # numbered: the same call gets a new result each time, as a search over a changing index
    # does (crewai stops an agent itself at 5 identical calls with identical results)
    return f"search #{len(RAN)}: no file matches {q!r}"


SEARCH_SCHEMA = {"type": "object", "properties": {"q": {"type": "string",
                                                        "description": "the term"}},
                 "required": ["q"]}


def done(output: object) -> None:
    print(json.dumps({"ran": RAN, "output": output if isinstance(output, str) else str(output)}),
          flush=True)
