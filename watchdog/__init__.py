"""agent-watchdog: watch LLM agents through their OpenTelemetry spans.

The package is split along the data path: ``ingest`` (OTLP receivers, decoding, conventions) →
``runs`` (run state and signals) → ``rules`` → ``directives``, with ``api``, ``metrics`` and
``cli`` at the edge. The agent-side client is a distribution of its own (``client/`` in the
repository: ``agent-watchdog-client``, import ``agent_watchdog_client``).
"""

__version__ = "0.2.0"
