"""Write the seed corpus of the fuzz targets (valid inputs of each shape) into fuzz/corpus/."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.spans import SpanMaker, chat_attrs, encode, tool_attrs
from tests.test_otlp_http import request_json

HERE = Path(__file__).resolve().parent / "corpus"


def main() -> None:
    maker = SpanMaker({"watchdog.budget.max_tool_calls": 5})
    t = time.time()
    with maker.agent("invoke_agent a", {"gen_ai.agent.name": "a", "watchdog.session.id": "s"},
                     start=t, end=t + 9):
        maker.span("chat m", chat_attrs(100, 20, finish="tool_calls",
                                        **{"gen_ai.input.messages": '[{"role": "user"}]'}),
                   start=t + 1)
        maker.span("execute_tool f", tool_attrs("f", '{"q": "x", "password": "p4ssw0rd"}',
                                                "ok"), start=t + 2)
        maker.span("execute_tool f", tool_attrs("f", "{}"), start=t + 3, error="boom 7")
    request = encode(maker.take())
    (HERE / "ingest" / "protobuf").write_bytes(b"\0" + request.SerializeToString())
    (HERE / "ingest" / "json").write_bytes(b"\1" + request_json(request))
    # numbers of every type where numbers are read: token counts and budgets
    maker.span("chat m", {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10.5,
                          "gen_ai.usage.output_tokens": "7", "watchdog.run.id": "r{1}",
                          "watchdog.budget.max_iterations": 3.5}, start=t)
    numbers = encode(maker.take())
    (HERE / "ingest" / "numbers-protobuf").write_bytes(b"\0" + numbers.SerializeToString())
    (HERE / "ingest" / "numbers-json").write_bytes(b"\1" + request_json(numbers))
    for seed in range(4):  # route 2: the bytes only steer the builder
        (HERE / "ingest" / f"built-{seed}").write_bytes(bytes([2]) + bytes(range(seed, 200)))
    # fuzz/otlp_json.py: odd first byte: a built document, even: JSON bytes as they are
    (HERE / "otlp_json").mkdir(exist_ok=True)
    for name in ("json", "numbers-json"):
        (HERE / "otlp_json" / name).write_bytes(b"\0" + (HERE / "ingest" / name).read_bytes()[1:])
    for seed in range(4):
        (HERE / "otlp_json" / f"built-{seed}").write_bytes(bytes([1]) + bytes(range(seed, 200)))
    (HERE / "otlp_json" / "surrogate-key").write_bytes(
        b'\0{"resourceSpans": [{"scopeSpans": [{"spans": [{"\xed\xa0\x80": 1}]}]}]}')
    bodies = {
        "heartbeat": (0, {"messages": 3, "in_flight": 1, "oldest_call_started": t,
                          "announce": {"agent": "a", "session": "s", "parent_run": "p",
                                       "budget": {"max_tool_calls": 5, "max_seconds": 60.5}}}),
        "ack": (1, {"seq": 7}),
        "checkpoint": (2, {"remaining": "deploy", "state": {"path": "/srv", "n": 2, "ok": True,
                                                            "gone": None},
                           "failed_approaches": ["retry"], "run_id": "r"}),
    }
    for name, (route, body) in bodies.items():
        (HERE / "control" / name).write_bytes(bytes([route]) + json.dumps(body).encode())


if __name__ == "__main__":
    main()
