"""The home-grown Anthropic tool loop of anthropic_loop.py traced by nothing but the Anthropic
SDK's own spans (``anthropic.messages.create``, scope ``com.anthropic.sdk.python``: the SDK
traces its API calls once a tracer provider is set). Scenarios (argv[1]): ``three_tools`` /
``limit`` / ``tool_error``.
"""

from __future__ import annotations

import sys

from anthropic_loop import run
from opentelemetry.sdk.trace import TracerProvider


def sdk_only(provider: TracerProvider) -> None:
    """No instrumentation: the SDK's spans are all there is."""


if __name__ == "__main__":
    run(sys.argv[1], "anthropic-sdk", sdk_only)
