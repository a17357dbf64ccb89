"""hermes-agent traced by the grafana-agento11y-hermes plugin; see :mod:`_hermes`."""

from __future__ import annotations

import sys

from _hermes import run

if __name__ == "__main__":
    run(sys.argv[1], "agento11y")
