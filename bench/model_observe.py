"""Reading a relayed stream that has ended: the compiled relay's reader (``Relay.observed``, what
its ``done`` event carries, then the ``Observation`` made of it in the event loop) against
``wire.read_stream`` with the API's accumulator (what the loop did with the bytes before), in
one process, alternating, CPU time per stream.

    python -P bench/model_observe.py [--rounds 6] [--streams 2000]

The streams: bench/model_endpoint.py's upstream's (a chat completion of 20 events, compact
JSON) and the scripted upstream's of the three APIs (tests/frameworks/fakellm.py: a text and
three tool calls). Reported per stream: the median of the rounds, µs, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.test_model_trim_native import MAKERS, WIRES
from tests.test_model_wire import THREE
from watchdog.core.model.wire import Observation, observation_of, read_stream
from watchdog.shell.model._relay import Relay


def bench_stream(chunks: int = 20) -> bytes:
    """bench/model_endpoint.py's upstream's stream (a role chunk, words, a finish chunk)."""
    deltas: list[tuple[dict[str, str], str | None]] = [({"role": "assistant", "content": ""},
                                                         None)]
    deltas += [({"content": f"word{i} "}, None) for i in range(chunks - 3)]
    deltas.append(({}, "stop"))
    return b"".join(b"data: " + json.dumps({
        "id": "chatcmpl-bench1", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": "bench-model", "system_fingerprint": "fp_bench", "choices": [{
            "index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]},
        separators=(",", ":")).encode() + b"\n\n" for delta, finish in deltas) \
        + b"data: [DONE]\n\n"


def python(api: str, data: bytes) -> Observation:
    accumulator = WIRES[api].accumulator()
    read_stream(accumulator, data)
    return accumulator.observation


def compiled(api: str, data: bytes) -> Observation:
    fields = Relay.observed(api, data)
    assert fields is not None, "declined"
    return observation_of(fields)


def made(fields: object) -> Callable[[str, bytes], Observation]:
    """What the event loop does with a done event's reading: the Observation made of it."""
    return lambda api, data: observation_of(fields)  # type: ignore[arg-type]


def cpu(read: Callable[[str, bytes], Observation], api: str, data: bytes, streams: int) -> float:
    start = time.process_time()
    for _ in range(streams):
        read(api, data)
    return (time.process_time() - start) / streams * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--streams", type=int, default=2000)
    args = parser.parse_args()
    cases = [("bench chat, 20 events", "chat", bench_stream())]
    cases += [(f"fakellm {api}", api, make(THREE)) for api, make in MAKERS.items()]
    print("µs of CPU per stream (median of rounds, alternating): read_stream in the loop; the "
          "compiled read (the relay's thread) with the Observation made of it; that last part "
          "alone (the loop's)")
    for name, api, data in cases:
        assert python(api, data) == compiled(api, data)
        times: dict[str, list[float]] = {"python": [], "compiled": [], "loop": []}
        in_loop = made(Relay.observed(api, data))
        for _ in range(args.rounds):
            times["python"].append(cpu(python, api, data, args.streams))
            times["compiled"].append(cpu(compiled, api, data, args.streams))
            times["loop"].append(cpu(in_loop, api, data, args.streams))
        py, rs, loop = (statistics.median(times[key]) for key in ("python", "compiled", "loop"))
        print(f"  {name:24s} {len(data):6d} bytes  {py:7.1f}  {rs:7.1f} ({rs / py:.2f})  "
              f"{loop:5.1f} ({loop / py:.3f})")


if __name__ == "__main__":
    main()
