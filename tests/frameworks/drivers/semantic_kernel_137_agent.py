"""Semantic Kernel 1.37 (model calls under SK's own operation names), its ChatCompletionAgent
traced by SK's diagnostics; see :mod:`_semantic_kernel`."""

from __future__ import annotations

import sys

from _semantic_kernel import run

if __name__ == "__main__":
    run(sys.argv[1])
