"""Ingest: OTLP receivers (the shell), decoding and convention normalisation (pure)."""
