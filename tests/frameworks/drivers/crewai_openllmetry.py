"""crewai traced by OpenLLMetry (opentelemetry-instrumentation-crewai and -openai); see
:mod:`_crewai`."""

from __future__ import annotations

import sys

from _crewai import run

if __name__ == "__main__":
    run(sys.argv[1], instrument_openai=True, tracer="openllmetry")
