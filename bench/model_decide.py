"""The event loop's CPU for each model request the endpoint decides and books, in process:
conversations of ``--turns`` streamed chat completions (each request after the first carries
the tool call the one before asked for and its result: a request that continues a run) from the
``openai`` SDK through a sidecar (``model_relay: native``) to the scripted upstream
(tests/frameworks/fakellm.py), one conversation after another.

    python -P bench/model_decide.py [--conversations 300] [--turns 3] [--rounds 2]
                                    [--baseline TREE]

Reported per request, µs of the loop thread's CPU (``time.thread_time``): deciding it
(``ModelProxy.plan``: read it, find its run, record the tool results it carries, open the run,
steer) and booking its call when its response has ended (``observe_whole`` and ``observed``,
what the relay read made into a record, and ``book_calls``, the core's step), and telling the
relay what the conversation's next request gets (``NativeEndpoint._publish_next``); the rest of
the loop's work on the relay's events (``NativeEndpoint._drain`` and ``_book_soon``: taking
them, handing each out, a booking's own part), each stage's own time (a stage called inside
another taken out of it), and their total; and the garbage collector's pauses (wall time, any
thread's: they hold every Python thread), per request and the longest, with the collections of
the oldest generation per 1,000 requests. ``--baseline
TREE`` runs the same in another source tree (a subprocess, ``python -P`` with that tree first
on the path), the two alternating for ``--rounds`` rounds: the median of the rounds of each.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOOLS = [{"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
STAGES = {"decide": (("proxy", "ModelProxy", "plan"),),
          "book": (("proxy", "ModelProxy", "observe_whole"), ("proxy", "ModelProxy", "observed"),
                   ("proxy", "ModelProxy", "book_calls")),
          # telling the relay what the conversation's next request gets (a tree without it: 0)
          "tell": (("native", "NativeEndpoint", "_publish_next"),),
          # the rest of the loop's work on the relay's events: taking them, handing each out,
          # a booking's own part (each stage's own time: the others' inside it taken out)
          "drain": (("native", "NativeEndpoint", "_drain"),
                    ("native", "NativeEndpoint", "_book_soon"))}


def measure(conversations: int, turns: int) -> dict[str, float]:
    """µs of the loop's CPU per request for each stage, in this process's tree."""
    import openai

    from tests.frameworks.fakellm import FakeLLM, answer, call
    from tests.harness import running_server, sidecar_config
    from watchdog.shell.model import native, proxy

    spent: collections.Counter[str] = collections.Counter()
    pauses: list[tuple[int, int]] = []  # (generation, ns) of each collection
    began = [0]

    def collected(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter_ns()
        else:
            pauses.append((info["generation"], time.perf_counter_ns() - began[0]))

    modules = {"proxy": proxy, "native": native}
    inner: list[int] = []  # the time of the timed calls inside each timed call running
    for stage, targets in STAGES.items():
        for module, owner, name in targets:
            cls = getattr(modules[module], owner)
            if hasattr(cls, name):
                setattr(cls, name, _timed(getattr(cls, name), stage, spent, inner))

    def pick(_index: int, body: dict[str, Any]) -> Any:
        results = sum(1 for message in body.get("messages", []) if message.get("role") == "tool")
        return call("search", q=f"q{results}") if results < turns - 1 else answer("done")

    with FakeLLM() as llm, tempfile.TemporaryDirectory() as state:
        llm.script("m", pick)
        config = sidecar_config(Path(state) / "state", model_address="127.0.0.1:0",
                                model_upstream=llm.base_url, model_agent_name="bench",
                                model_relay="native")
        with running_server(config) as server:
            client = openai.OpenAI(base_url=server.url("model") + "/v1", api_key="k",
                                   max_retries=0)
            for index in range(20):  # warm: what loads at the first requests
                _conversation(client, -index - 1)
            spent.clear()
            gc.callbacks.append(collected)
            try:
                for index in range(conversations):
                    _conversation(client, index)
            finally:
                gc.callbacks.remove(collected)
    requests = conversations * turns
    return {**{stage: spent[stage] / requests / 1000 for stage in STAGES},
            "total": sum(spent.values()) / requests / 1000,
            "gc": sum(ns for _, ns in pauses) / requests / 1000,
            "gc longest ms": max((ns for _, ns in pauses), default=0) / 1e6,
            "gen2 per 1000": sum(1 for generation, _ in pauses if generation == 2)
            * 1000 / requests}


def _timed(method: Callable[..., Any], stage: str, spent: collections.Counter[str],
           inner: list[int]) -> Callable[..., Any]:
    """``method`` charging its own time to ``stage``: the timed calls inside it taken out."""
    @functools.wraps(method)
    def timed(*args: Any, **kwargs: Any) -> Any:
        inner.append(0)
        started = time.thread_time_ns()
        try:
            return method(*args, **kwargs)
        finally:
            took = time.thread_time_ns() - started
            spent[stage] += took - inner.pop()
            if inner:
                inner[-1] += took
    return timed


def _conversation(client: Any, index: int) -> None:
    """One conversation: each streamed answer's tool call run (a result of its own, as a real
    tool's) and sent on, until the model answers."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"task {index}"}]
    while True:
        calls: dict[int, dict[str, str]] = {}
        for chunk in client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                    stream=True):
            for delta in (choice.delta for choice in chunk.choices):
                for tool_call in delta.tool_calls or ():
                    made = calls.setdefault(tool_call.index, {"id": "", "name": "", "args": ""})
                    made["id"] = tool_call.id or made["id"]
                    if tool_call.function is not None:
                        made["name"] = tool_call.function.name or made["name"]
                        made["args"] += tool_call.function.arguments or ""
        if not calls:
            return
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": made["id"], "type": "function",
             "function": {"name": made["name"], "arguments": made["args"]}}
            for made in calls.values()]})
        messages += [{"role": "tool", "tool_call_id": made["id"],
                      "content": f"found {len(messages)}"} for made in calls.values()]


def in_tree(tree: Path, conversations: int, turns: int) -> dict[str, float]:
    """:func:`measure` in another source tree (a subprocess whose path starts there)."""
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{ROOT}")
    out = subprocess.run([sys.executable, "-P", str(Path(__file__).resolve()), "--json",
                          "--conversations", str(conversations), "--turns", str(turns)],
                         env=env, capture_output=True, text=True, check=True, cwd=tree).stdout
    return dict(json.loads(out.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", type=Path, metavar="TREE")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.conversations, args.turns)))
        return
    builds = {"this tree": ROOT, **({f"baseline {args.baseline}": args.baseline}
                                    if args.baseline else {})}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in builds}
    for _ in range(args.rounds):
        for name, tree in builds.items():
            rounds[name].append(in_tree(tree, args.conversations, args.turns))
    print(f"the loop's CPU per request, µs ({args.conversations} conversations of "
          f"{args.turns} requests; median of {args.rounds} rounds)")
    first = None
    for name, results in rounds.items():
        medians = {stage: statistics.median(r[stage] for r in results)
                   for stage in (*STAGES, "total")}
        collector = {what: statistics.median(r.get(what, 0.0) for r in results)
                     for what in ("gc", "gc longest ms", "gen2 per 1000")}
        ratio = "" if first is None else "  (" + ", ".join(
            f"{stage} x{medians[stage] / first[stage]:.2f}" for stage in medians) \
            + " of this tree)"
        print(f"  {name}: " + ", ".join(f"{stage} {value:.1f}"
                                         for stage, value in medians.items()) + ratio)
        print("    collector: " + ", ".join(f"{what} {value:.2f}"
                                            for what, value in collector.items()))
        first = first or medians


if __name__ == "__main__":
    main()
