"""crewai traced by OpenLIT: ``openlit.init()`` (it reuses the tracer provider already set,
exporting to the sidecar, and instruments crewai and the OpenAI client); see :mod:`_crewai`."""

from __future__ import annotations

import sys

from _crewai import run

if __name__ == "__main__":
    run(sys.argv[1], instrument_openai=False, tracer="openlit")
