"""Preloaded by the CAMEL-AI driver process (``PRELOAD`` in tests/frameworks/harness.py), and
imported by its driver first: CAMEL's OpenAI models count tokens with tiktoken's ``o200k_base``
(read when an agent is made), which tiktoken would download; the same file ships with LiteLLM
(in the venv for it alone), read from there by ``TIKTOKEN_CACHE_DIR``, as a user without the
network points tiktoken at a copy. Then CAMEL."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

_LITELLM = importlib.util.find_spec("litellm")
if _LITELLM is not None and _LITELLM.origin is not None:
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(
        Path(_LITELLM.origin).parent / "litellm_core_utils" / "tokenizers"))

import tiktoken  # noqa: E402
from camel.agents import ChatAgent  # noqa: E402,F401
from camel.models import ModelFactory  # noqa: E402,F401
from camel.societies import RolePlaying  # noqa: E402,F401

tiktoken.get_encoding("o200k_base")  # read once, for every scenario of the process
