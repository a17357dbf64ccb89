"""OTLP receivers (gRPC and HTTP), admission and back-pressure, and forwarding to the upstream
Collector. They hand decoded requests to a one-method consumer (``consumer``)."""
