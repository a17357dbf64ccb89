"""Model-call prices from ``genai-prices`` (the price data it ships: never fetched at runtime).

:class:`GenAIPrices` is the :class:`~watchdog.core.runs.pricing.Pricer` the service hands the
core. ``genai-prices`` (with pydantic: some 15 MB, and most of a second to import) is loaded
only once the sidecar has traffic: the service calls :meth:`GenAIPrices.load_soon` at the first
export, heartbeat, sync or model request, which loads it on a thread of its own, and an export
awaits :meth:`GenAIPrices.loaded` before it is applied, so the event loop never waits on the
import; a priced call that comes before the thread is done waits for it. A
full price calculation takes some hundreds of microseconds, so a model's price is resolved once
per (provider, model, price in force) and each call is then computed from it: where the price
is linear in the counts (no tiers) its rates are taken from the library itself — its own figure
for a request of no tokens and for a million tokens of each kind, cache reads and writes as it
prices them against input — and a call costs their sum (the price in force is looked up again
for each hour of call times); a tiered price is computed by the library for every call. A model
it does not know stays unpriced (None), and so do counts it refuses (more cached tokens than
input).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import threading
from collections import OrderedDict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (decimal loads with genai-prices, at the first traffic)
    from decimal import Decimal

HOUR_NS = 3600 * 1_000_000_000
MAX_MODELS = 1024  # (provider, model) resolutions kept; a name seen again after is looked up anew
_MILLION = 1_000_000
# per request, then per token: input, output, cache read, cache write
Rates = tuple["Decimal", "Decimal", "Decimal", "Decimal", "Decimal"]


class GenAIPrices:
    """``(model, provider, input, output, cache read, cache write, at_ns) -> USD | None``."""

    def __init__(self) -> None:
        self._lib: Any = None
        self._loading: concurrent.futures.Future[None] | None = None  # the thread's, once begun
        self._models: OrderedDict[tuple[str | None, str], Any] = OrderedDict()
        self._rates: dict[int, tuple[Any, Rates | None]] = {}
        # (provider, model) -> (hour of the call times, the price then, its rates as floats)
        self._calls: dict[tuple[str | None, str], tuple[int, Any, tuple[float, ...] | None]] = {}

    def __call__(self, model: str, provider: str | None, input_tokens: int, output_tokens: int,
                 cache_read_tokens: int, cache_write_tokens: int, at_ns: int) -> float | None:
        if cache_read_tokens + cache_write_tokens > input_tokens:
            return None
        hour = at_ns // HOUR_NS  # the price in force, looked up once an hour of call times
        key = (provider, model)
        entry = self._calls.get(key)
        if entry is None or entry[0] != hour:
            entry = self._price_at(key, hour, at_ns)
        _, price, rates = entry
        if price is None:
            return None
        if rates is not None:
            cost = (rates[0] + rates[1] * input_tokens + rates[2] * output_tokens
                    + rates[3] * cache_read_tokens + rates[4] * cache_write_tokens)
        else:
            try:
                cost = float(price.calc_price(self._usage(
                    input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
                )["total_price"])
            except (ValueError, ArithmeticError):
                return None
        return cost if math.isfinite(cost) and cost >= 0 else None

    def _price_at(self, key: tuple[str | None, str], hour: int, at_ns: int
                  ) -> tuple[int, Any, tuple[float, ...] | None]:
        found = self._resolve(key[1], key[0])
        entry: tuple[int, Any, tuple[float, ...] | None] = (hour, None, None)
        if found is not None:
            at = datetime.fromtimestamp(at_ns / 1e9, tz=UTC) if at_ns > 0 else datetime.now(
                tz=UTC)
            price = found.get_prices(at)
            rates = self._rates_of(price)
            entry = (hour, price, None if rates is None else tuple(float(r) for r in rates))
        if len(self._calls) >= MAX_MODELS:
            self._calls.clear()
        self._calls[key] = entry
        return entry

    def _resolve(self, model: str, provider: str | None) -> Any:
        """The library's model entry for ``model`` (with ``provider`` when it knows that
        provider and its model, else by the model name alone; a name the library does not know
        that holds a slash, by the name after it); None: unknown. Cached."""
        key = (provider, model)
        if key in self._models:
            self._models.move_to_end(key)
            return self._models[key]
        snapshot = self._snapshot()
        found: Any = None
        for provider_id in ((provider.lower(), None) if provider else (None,)):
            try:
                found = snapshot.find_provider_model(model, None, provider_id, None)[1]
                break
            except LookupError:
                continue
        head, slash, tail = model.rpartition("/")
        if found is None and slash and tail:
            # a name after its provider's or plugin's (`openai/gpt-4o`, LiteLLM's and
            # OpenRouter's; `googleai/gemini-2.5-flash`, Genkit's): the model after the slash,
            # the part before it the provider when none is given (ignored if unknown)
            found = self._resolve(tail, provider or head.rpartition("/")[2])
        self._models[key] = found
        if len(self._models) > MAX_MODELS:
            self._models.popitem(last=False)
        return found

    def _rates_of(self, price: Any) -> Rates | None:
        """The per-token rates of a price that is linear in the four counts (None: tiered, or
        priced by units beyond them), as the library itself prices a million of each."""
        entry = self._rates.get(id(price))
        if entry is not None and entry[0] is price:
            return entry[1]
        rates: Rates | None = None
        if not any(type(value).__name__ == "TieredPrices" for value in vars(price).values()):
            def total(**counts: int) -> Decimal:
                value: Decimal = price.calc_price(self._usage(**counts))["total_price"]
                return value
            fixed = total()  # a price per request, if any
            base = total(input_tokens=_MILLION)
            rates = (fixed, (base - fixed) / _MILLION,
                     (total(output_tokens=_MILLION) - fixed) / _MILLION,
                     (total(input_tokens=_MILLION, cache_read_tokens=_MILLION) - base) / _MILLION,
                     (total(input_tokens=_MILLION, cache_write_tokens=_MILLION) - base)
                     / _MILLION)
        if len(self._rates) >= MAX_MODELS:
            self._rates.clear()
        self._rates[id(price)] = (price, rates)  # (the price kept alive: its id stays its own)
        return rates

    def _usage(self, input_tokens: int = 0, output_tokens: int = 0, cache_read_tokens: int = 0,
               cache_write_tokens: int = 0) -> Any:
        return self._library().Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                                     cache_read_tokens=cache_read_tokens,
                                     cache_write_tokens=cache_write_tokens)

    @property
    def ready(self) -> bool:
        """The library and its price data are loaded."""
        return self._lib is not None

    def load_soon(self) -> None:
        """Load the library and its price data on a thread of its own, if not begun yet."""
        if self._loading is not None or self._lib is not None:
            return
        self._loading = done = concurrent.futures.Future[None]()

        def load() -> None:
            try:
                self._load()
                done.set_result(None)
            except BaseException as exc:  # the next priced call loads again, and raises
                done.set_exception(exc)

        threading.Thread(target=load, name="watchdog-prices", daemon=True).start()

    async def loaded(self) -> None:
        """Wait, without holding the event loop, until the library is loaded (begun if not)."""
        if self._lib is None:
            self.load_soon()
            assert self._loading is not None
            with contextlib.suppress(Exception):  # a failed load is retried by the call
                await asyncio.wrap_future(self._loading)

    def _library(self) -> Any:
        if self._lib is None:
            if self._loading is not None:  # the loading thread's work, not done twice
                with contextlib.suppress(Exception):
                    self._loading.result()
            if self._lib is None:
                self._load()
        return self._lib

    def _load(self) -> None:
        import genai_prices
        from genai_prices.data_snapshot import get_snapshot

        get_snapshot()  # the price data, read once and kept by the library
        self._lib = genai_prices

    def _snapshot(self) -> Any:
        self._library()
        from genai_prices.data_snapshot import get_snapshot

        return get_snapshot()
