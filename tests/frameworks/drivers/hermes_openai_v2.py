"""hermes-agent traced by opentelemetry-instrumentation-openai-v2; see :mod:`_hermes`."""

from __future__ import annotations

import sys

from _hermes import run

if __name__ == "__main__":
    run(sys.argv[1], "openai_v2")
