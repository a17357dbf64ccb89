"""The compiled parts that layers above the spans call, installed by
:mod:`watchdog.core.spans.native` with the compiled decode (None: not loaded, or switched off;
the Python twins answer). This module imports nothing: a run reads its hook without loading the
span pipeline, which an idle sidecar has not loaded.
"""

from __future__ import annotations

from collections.abc import Callable

# The fold of a tool call's signatures into its run's (native/otlp/src/signatures.rs): what
# ``watchdog.core.runs.counts.tool_signatures`` answers, the run's dict and lists changed as it
# changes them.
signatures: Callable[..., tuple[int, int, int]] | None = None
