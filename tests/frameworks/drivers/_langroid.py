"""Preloaded by the Langroid driver process (``PRELOAD`` in tests/frameworks/harness.py), and
imported by its driver first: Langroid loads tiktoken's ``cl100k_base`` when imported, which
tiktoken would download; the same file ships with LiteLLM (in the venv: Langroid's litellm
extra), read from there by ``TIKTOKEN_CACHE_DIR``, as LiteLLM itself reads it. Then Langroid
(18 CPU seconds to import on a loaded machine: once per test run, not per scenario)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

_LITELLM = importlib.util.find_spec("litellm")
if _LITELLM is not None and _LITELLM.origin is not None:
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(
        Path(_LITELLM.origin).parent / "litellm_core_utils" / "tokenizers"))

import langroid  # noqa: E402
import langroid.language_models  # noqa: E402,F401
from langroid.agent.tools import orchestration  # noqa: E402,F401
