"""agent-watchdog: watch LLM agents through their OpenTelemetry spans.

The package is split along the data path: ``ingest`` (OTLP receivers, decoding, conventions) →
``runs`` (run state and signals) → ``rules`` → ``directives``, with ``api``, ``metrics`` and
``cli`` at the edge and ``client`` (the agent side) apart from the server.
"""

__version__ = "0.1.0"
