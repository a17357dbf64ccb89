"""strands-agents, native OTel, the newer GenAI format; see :mod:`_strands`."""

from __future__ import annotations

import sys

from _strands import run

if __name__ == "__main__":
    run(sys.argv[1], latest=True)
