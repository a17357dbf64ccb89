"""``redact()`` now (one anchor search, anchored matches) against the previous version
(``bench/redact_baseline.py``: a trigger pre-check, then twelve whole-text patterns), measured
in the same process, best of several rounds (noise only ever adds time).

Issue 12 measured ~92 µs for a 222-character text containing "auth" against ~2 µs without a
trigger word; the first case below is that shape.

    .venv/bin/python bench/redact.py [--rounds 7] [--number 20000]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redact_baseline

from watchdog.core.redact import redact

AUTH_TEXT = ('{"query": "SELECT name FROM users WHERE id = 42", "rows": 17, "note": "the '
             'authentication module loaded; the report lists 3 warnings about deprecated calls '
             'in src/app/handlers.py line 88 and the token budget is fine today"}')[:222]
PLAIN_TEXT = ("wrote 3 files to /tmp/build/out; the result was fine and nothing else happened "
              "here at all, so the next step runs the test suite again with the same options")
SECRET_TEXT = ('{"url": "https://api.example.com/v1?q=paris", "headers": {"Authorization": '
               '"Bearer mF_9.B5f-4.1JqMzz", "x-api-key": "k3y-Abc123"}, "body": "ok"}')
NESTED_TEXT = ('{"tool": "http", "payload": "{\\"user\\": \\"alice\\", \\"password\\": '
               '\\"hunter2-very-secret\\"}", "env": "DB_PASSWORD=s3cr3t-Pa55\\nMODE=prod"}')

CASES = {"222 chars with 'auth', no secret": AUTH_TEXT, "no trigger word": PLAIN_TEXT,
         "three secrets (URL, header, key)": SECRET_TEXT, "JSON inside JSON, env line": NESTED_TEXT}


def best_us(function: Callable[[str], str], text: str, number: int, rounds: int) -> float:
    return min(timeit.repeat(lambda: function(text), number=number, repeat=rounds)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    print(f"{'case':36} {'chars':>5} {'before µs':>10} {'now µs':>8} {'ratio':>6}  leaks before")
    for name, text in CASES.items():
        before = best_us(redact_baseline.redact, text, args.number, args.rounds)
        now = best_us(redact, text, args.number, args.rounds)
        leaked = "hunter2" in redact_baseline.redact(text)
        assert "hunter2" not in redact(text) and "s3cr3t" not in redact(text)
        print(f"{name:36} {len(text):5} {before:10.2f} {now:8.2f} {now / before:6.2f}  "
              f"{'yes' if leaked else 'no'}")


if __name__ == "__main__":
    main()
