"""google-adk, its native OTel tracing; see :mod:`_adk`."""

from __future__ import annotations

import sys

from _adk import run

if __name__ == "__main__":
    run(sys.argv[1], openinference=False)
