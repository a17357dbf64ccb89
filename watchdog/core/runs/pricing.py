"""What a model call cost (DESIGN §13): the interface the core prices calls through.

The core holds no prices and looks none up itself: the shell hands the step a :class:`Pricer`,
a function of data alone — model, provider, token counts, the call's time — giving the call's
price in USD or None (a model the price data does not know). The shell's is
:class:`watchdog.shell.pricing.GenAIPrices`, over the price data ``genai-prices`` ships.

:func:`price_calls` prices the model calls of one batch of records before they are folded into
runs: a cost the span reports itself wins; a call that names no model, or one no price is known
for, stays unpriced (``cost_usd`` None) — counted as such by its run, never as free.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from watchdog.core.spans.record import LLM, SpanRecord


class Pricer(Protocol):
    """A model call's price in USD from its model and token counts, or None when no price is
    known. ``input_tokens`` includes the cached ones (read and written); ``at_ns`` is when the
    call was made (prices change)."""

    def __call__(self, model: str, provider: str | None, input_tokens: int, output_tokens: int,
                 cache_read_tokens: int, cache_write_tokens: int, at_ns: int) -> float | None:
        ...


def price_calls(records: Iterable[SpanRecord], pricer: Pricer | None) -> None:
    """Set ``cost_usd`` (and for a call paired with its twin, ``twin_cost_usd``: the twin's
    tokens at this call's model) on every model-call record."""
    for record in records:
        if record.kind is not LLM:
            continue
        reported = record.reported_cost_usd
        if reported is not None and reported > 0:  # (0: an instrumentation's price list
            record.cost_usd = reported             # lacks the model — not free)
        elif record.model is None or pricer is None or not (record.input_tokens
                                                             or record.output_tokens):
            continue  # (a call that reports no usage has no price: it is not free)
        else:
            record.cost_usd = pricer(record.model, record.provider, record.input_tokens,
                                     record.output_tokens, record.cache_read_tokens,
                                     record.cache_write_tokens, record.start_ns)
        twin = record.twin_tokens
        if twin is not None and record.model is not None and pricer is not None \
                and (twin[0] or twin[1]):
            record.twin_cost_usd = pricer(record.model, record.provider, twin[0], twin[1], 0, 0,
                                          record.start_ns)
