"""Preloaded by the LlamaIndex driver processes (``PRELOAD`` in tests/frameworks/harness.py):
LlamaIndex's global tokenizer, which an agent's memory loads at its first use (tiktoken's
encoding, read from the file LlamaIndex ships: 0.3-0.5 CPU seconds in every fork otherwise).
The same call, with the same default model, as the memory's own."""

from __future__ import annotations

from llama_index.core.utils import get_tokenizer

get_tokenizer()
