"""A scripted OpenAI-compatible model for trying agent-watchdog without an API key.

    .venv/bin/python docs/examples/scripted_model.py          # http://127.0.0.1:8000/v1

It serves ``POST /v1/chat/completions`` (plain and streamed) for the model ``gpt-4o-mini``, the
way an agent that never finishes would: every request that offers tools is answered with a call
of the ``search`` tool (a new query each time), so only a budget stops the agent; a request with
no tools (the last one a steered agent sends, asking for its progress report) is answered with
``REPORT``. The port is ``--port`` (default: ``$SCRIPTED_MODEL_PORT``, else 8000). It runs until
Ctrl-C or SIGTERM. Standard library only (the server is ``tests/frameworks/fakellm.py``, which
the framework tests use).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.frameworks import fakellm

MODEL = "gpt-4o-mini"
REPORT = "Report: searched 5 times; the config file is /srv/app/config.yaml."


def script() -> fakellm.Script:
    """Search forever with a new query each request; answer ``REPORT`` when offered no tools."""
    return fakellm.looping("search", lambda index: {"q": f"config file, attempt {index + 1}"},
                           REPORT)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=None,
                        help="port on 127.0.0.1 (default: $SCRIPTED_MODEL_PORT, else 8000)")
    args = parser.parse_args(argv)
    if args.port is None:
        env = os.environ.get("SCRIPTED_MODEL_PORT", "8000")
        if not env.isdigit():
            parser.error(f"SCRIPTED_MODEL_PORT={env!r} is not a port number")
        args.port = int(env)
    try:
        llm = fakellm.FakeLLM(port=args.port)
    except OSError as exc:
        print(f"scripted model: cannot listen on 127.0.0.1:{args.port} ({exc.strerror}): "
              "choose another port with --port", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with llm:
        llm.script(MODEL, script())
        print(f"scripted model {MODEL} on {llm.base_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
