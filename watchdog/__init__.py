"""agent-watchdog: watch LLM agents through their OpenTelemetry spans and steer them.

Two packages, one direction. ``core`` is pure (no IO, no clock of its own): spans are decoded and
read by conventions (``core.spans``), folded into runs (``core.runs``), judged by rules
(``core.rules``), and handed out as frozen views and decisions by the step (``core.step``).
``shell`` is everything that talks to the world around it: OTLP receivers, the model endpoint,
the control API, metrics, the state store and its worker lanes, directive delivery, the CLI.
The shell calls into the core; the core never imports the shell (docs/architecture.md).
The agent-side client is a distribution of its own (``client/`` in the repository:
``agent-watchdog-client``, import ``agent_watchdog_client``).
"""

from watchdog.core.version import __version__

__all__ = ["__version__"]
