"""The outbox: rule decisions become numbered directives, stored, then sent.

Theory of operation
-------------------
:meth:`Outbox.submit` runs on the event loop thread right after rule evaluation. It is
synchronous: it allocates the run's next ``seq`` and the next ``global_seq`` in memory
(continuing from the store, see :meth:`restore`) and builds the whole :class:`Directive` from
what the decision carries (:class:`~watchdog.core.step.Decided`: the budget view and the run's last
steps, what the ``report_prompt`` of a wind_down/abort is made of when it is read) — no callback,
no store read — and queues it. A single writer task then, in submission order:

1. stores a batch of directives, with their webhook deliveries, in one transaction on the
   directive store's own thread (the "lane": one thread, so writes keep their order);
2. only then publishes them to the :class:`~watchdog.shell.directives.hub.Hub` (long-poll, SSE) and
   wakes the :class:`~watchdog.shell.directives.webhooks.WebhookSender`.

So a directive is stored before it is sent, and published in ``global_seq`` order (which is
what makes SSE resumption gap-free). A decision whose ``(run, dedup_key)`` is already stored is
not published again.

Bounded: at most ``max_pending`` directives wait for the store. Beyond that a submission is
dropped, logged as an error and counted (``directives_delivered_total{channel="outbox",
outcome="dropped"}``). A dropped decision is lost: the rule engine has recorded it as fired and
will not repeat it (after a restart it only remembers what was stored, so it may fire again).
That only happens when the disk cannot keep up with 10,000 decisions, at which point the
sidecar is failing anyway and says so loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from watchdog.core.directives.model import REPORTING_ACTIONS, Directive
from watchdog.core.rules.decision import Decided
from watchdog.core.rules.engine import FiredRecord
from watchdog.core.shown import shown
from watchdog.shell.clock import Clock, SystemClock
from watchdog.shell.directives.hub import DeliveryMetrics, Hub, NullMetrics
from watchdog.shell.directives.store import MAX_DIRECTIVES_STORED, AddResult, DirectiveStore
from watchdog.shell.errors import BadRequest
from watchdog.shell.state.lanes import Lane

if TYPE_CHECKING:
    from watchdog.shell.directives.webhooks import RetryPolicy, WebhookSender, WebhookTarget

log = logging.getLogger("watchdog.directives")

MAX_PENDING_DIRECTIVES = 10_000  # directives waiting for the store before submissions drop
MAX_WRITE_BATCH = 256  # directives stored per transaction
STOP_TIMEOUT = 10.0  # seconds stop() waits for pending directives to be stored
STORE_RETRY_MAX = 5.0  # seconds between attempts while the store keeps failing
MAX_RUN_DIRECTIVES = 1_000  # directives listed for one run (the run detail)
CHECKPOINT_INTERVAL = 1.0  # seconds between WAL checkpoints, off the write path (see store)
# runs whose clients have seen more of their directives than this sidecar numbered, kept
MAX_CLIENTS_AHEAD = 65_536
MAX_CLIENT_SEQ = 2**53 - 1  # a client's seen number taken as a floor (past it: not believed)
DROPPED, CONFLICT = "dropped", "conflict"  # the outbox's outcomes in directives_delivered_total
OUTCOMES = (DROPPED, CONFLICT)


class Outbox:
    """Construct, ``await restore(run_ids)`` (fired records for the rule engine), ``await
    start()``; ``submit()`` per decision; ``await stop()`` on shutdown."""

    def __init__(self, store: DirectiveStore, hub: Hub | None = None,
                 webhooks: Sequence[WebhookTarget] = (),
                 metrics: DeliveryMetrics | None = None, clock: Clock | None = None, *,
                 max_pending: int = MAX_PENDING_DIRECTIVES,
                 retry: RetryPolicy | None = None,
                 webhook_clock: Clock | None = None) -> None:
        self.store = store
        self.metrics: DeliveryMetrics = metrics or NullMetrics()
        self.hub = hub if hub is not None else Hub(store, metrics=self.metrics)
        self.clock: Clock = clock or SystemClock()
        self.max_pending = max_pending
        self._lane = Lane("watchdog-directives")
        # Webhook retries run on wall-clock time even when tests inject a clock for the rules:
        # a frozen test clock must not freeze the backoff, nor stamp a webhook-timestamp that a
        # receiver's replay check would refuse.
        self.webhooks: WebhookSender | None = None
        if webhooks:  # (without a webhook their sender is never loaded)
            from watchdog.shell.directives.webhooks import WebhookSender

            self.webhooks = WebhookSender(store, webhooks, self._lane.run, metrics=self.metrics,
                                          clock=webhook_clock or SystemClock(), retry=retry)
        # each with its run's snapshot as the decision left it (None: none could be taken)
        self._pending: deque[tuple[Directive, str | None]] = deque()
        self._storing: set[str] = set()  # runs of the batch being written
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._global_seq = 0
        # snapshots stored with directives, perhaps not forgotten yet (True at the start: the
        # store may hold some from before)
        self._snapshots_kept = True
        self._run_seq: dict[str, int] = {}
        # run -> the highest directive number its clients say they have seen, where this
        # sidecar numbered fewer (its state was lost, or the run was another replica's)
        self._clients_ahead: OrderedDict[str, int] = OrderedDict()
        self._counters_loaded = False
        self._writer: asyncio.Task[None] | None = None
        self._checkpoints: asyncio.Task[None] | None = None
        self._stopping = False
        self._closed = False
        self.dropped = 0  # submissions refused (queue full or stopping)
        self.duplicates = 0  # decisions that were already stored

    # -- lifecycle ------------------------------------------------------------------------------

    async def restore(self, run_ids: Iterable[str] | None = None) -> list[FiredRecord]:
        """Continue the numbering from the store and return what was fired for ``run_ids``
        (all runs when None), for the rule engine to restore its fired state from."""
        await self._load_counters()
        ids = None if run_ids is None else list(run_ids)
        if ids == []:  # no runs, nothing fired to read: the reader's thread starts at a read
            return []
        return await self.hub.reader.run(self.store.fired_records, ids)

    async def directives_of(self, run_ids: Iterable[str]) -> list[Directive]:
        """The stored directives of ``run_ids``, oldest first (for the model endpoint's boards
        after a restart)."""
        ids = list(run_ids)
        if not ids:
            return []
        return await self.hub.reader.run(self.store.directives_of, ids)

    async def start(self) -> None:
        await self._load_counters()
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_loop(), name="watchdog-outbox")
            self._checkpoints = asyncio.create_task(self._checkpoint_loop(),
                                                    name="watchdog-outbox-checkpoint")
            if self._pending:
                self._wake.set()
        if self.webhooks is not None:
            await self.webhooks.start()

    async def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """End streams, store what is pending (up to ``timeout`` s), stop webhook delivery
        (attempts in flight finish), close the store. Idempotent."""
        if self._closed:
            return
        self._stopping = True
        self.hub.close()
        if self._writer is not None:
            try:
                await asyncio.wait_for(self._idle.wait(), timeout)
            except TimeoutError:
                log.error("shutdown: %d directives could not be stored in %.0f s and are lost",
                          len(self._pending), timeout)
            for task in (self._writer, self._checkpoints):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            self._writer = self._checkpoints = None
        if self.webhooks is not None:
            await self.webhooks.stop()
        self._closed = True
        await self._lane.run(self.store.close)
        self._lane.close()
        self.hub.reader.close()

    async def flush(self) -> None:
        """Wait until everything submitted so far is stored and published."""
        if self._writer is not None:
            await self._idle.wait()

    async def _load_counters(self) -> None:
        if self._counters_loaded:
            return
        top, per_run = await self._lane.run(self.store.counters)
        self._global_seq = max(self._global_seq, top)
        for run_id, seq in per_run.items():
            if seq > self._run_seq.get(run_id, 0):
                self._run_seq[run_id] = seq
        self._counters_loaded = True

    # -- the hot path ---------------------------------------------------------------------------

    def submit(self, decided: Decided, run_row: str | None = None) -> Directive | None:
        """Number, write and queue a decision (loop thread, non-blocking), with ``run_row``,
        its run's snapshot as the decision left it (the runs database's row), to be stored in
        the same transaction as the directive. Returns the directive, or None if it was
        dropped."""
        if not self._counters_loaded:
            raise RuntimeError("Outbox.submit() before restore()/start(): directive numbers "
                               "must continue from the store")
        decision = decided.decision
        if self._stopping or len(self._pending) >= self.max_pending:
            self.dropped += 1
            self.metrics.directive_delivered(decision.action.value, "outbox", DROPPED)
            log.error("directive dropped (%s): rule %s for run %s (%s); the decision is lost",
                      "shutting down" if self._stopping else
                      f"{self.max_pending} directives already wait for the store",
                      decision.rule, decision.run_key, decision.action.value)
            return None
        key = decision.run_key
        seq = max(self._run_seq.get(key, 0), self._clients_ahead.pop(key, 0)) + 1
        self._run_seq[key] = seq
        self._global_seq += 1
        facts = None
        if decision.action.value in REPORTING_ACTIONS:
            from watchdog.core.directives.prompt import decided_facts, facts_of  # (first use)

            try:
                facts = decided_facts(decided)
            except Exception:  # a bug here must not lose the directive: the bare request
                log.exception("report_prompt for run %s failed", key)
                facts = facts_of(decided.run, log_available=False)
        directive = Directive.from_decision(decision, decided.run, decided.now, None, seq,
                                            self._global_seq, budget=decided.budget,
                                            prompt_facts=facts)
        self._pending.append((directive, run_row))
        self._idle.clear()
        self._wake.set()
        return directive

    # -- the writer -----------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch: list[tuple[Directive, str | None]] = []
                while self._pending and len(batch) < MAX_WRITE_BATCH:
                    batch.append(self._pending.popleft())
                self._storing = {directive.run_id for directive, _row in batch}
                await self._persist(batch)
                self._storing = set()
            self._idle.set()

    async def _checkpoint_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL)
            try:
                await loop.run_in_executor(None, self.store.checkpoint)
            except Exception:  # the log grows until a later one works; say why
                log.exception("directive store checkpoint failed")

    async def _persist(self, batch: list[tuple[Directive, str | None]]) -> None:
        webhooks = self.webhooks
        items = [(d, webhooks.hooks_for(d) if webhooks is not None else []) for d, _row in batch]
        # each run's latest snapshot of the batch, stored with the directives (one transaction)
        runs = list({d.run_id: (d.run_id, d.global_seq, row) for d, row in batch
                     if row is not None}.values())
        if runs:
            self._snapshots_kept = True
        delay = 0.05
        while True:
            try:
                results = await self._lane.run(self.store.add_many, items, None, runs)
                break
            except Exception:  # never send what is not stored: keep trying, say so
                log.exception("storing %d directives failed; retrying in %.2f s",
                              len(items), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, STORE_RETRY_MAX)
        wake_webhooks = False
        for (directive, hooks), result in zip(items, results, strict=True):
            if result is AddResult.STORED:
                self.hub.publish(directive)
                wake_webhooks = wake_webhooks or bool(hooks)
            elif result is AddResult.DUPLICATE:
                self.duplicates += 1
                log.info("rule %s for run %s (%s) was already stored; not sent again",
                         directive.rule, directive.run_id, directive.dedup_key)
            else:
                self.metrics.directive_delivered(directive.action, "outbox", CONFLICT)
                log.error("directive seq %d / global %d for run %s clashes with a stored one "
                          "(is another watchdog using this state_dir?); not sent",
                          directive.seq, directive.global_seq, directive.run_id)
        if wake_webhooks and webhooks is not None:
            webhooks.notify()

    # -- the API's questions --------------------------------------------------------------------

    async def ack(self, run_id: str, seq: int) -> int:
        """The agent has seen directives up to ``seq``; returns the run's acked seq."""
        latest = await self.hub.latest_seq(run_id)
        if seq > latest:
            raise BadRequest(f"seq={seq} is not allowed: run {shown(run_id)} has directives up to "
                             f"seq {latest}")
        return await self._lane.run(self.store.ack, run_id, seq, self.clock.now())

    def client_has_seen(self, run_id: str, seq: int) -> None:
        """A client of run ``run_id`` has seen its directives up to ``seq`` (a sync's, a
        poll's or a stream's ``after``). When that is more than this sidecar has numbered (its
        state directory was lost, or the run was another replica's), the run's next directive
        is numbered after it: clients ignore a directive numbered at or below what they have
        seen, so one numbered from 1 again would never be applied."""
        if seq <= self._run_seq.get(run_id, 0) or seq > MAX_CLIENT_SEQ:
            return
        known = self._clients_ahead.get(run_id)
        if known is not None and known >= seq:
            return
        if known is None:
            log.warning("run %s: its client has seen directives up to %d, more than this "
                        "sidecar numbered (its state was lost?); the run's next directive "
                        "is numbered after them", run_id, seq)
        self._clients_ahead[run_id] = seq
        self._clients_ahead.move_to_end(run_id)
        while len(self._clients_ahead) > MAX_CLIENTS_AHEAD:
            self._clients_ahead.popitem(last=False)

    async def directives_after(self, run_id: str, after: int, wait: float
                               ) -> list[Directive]:
        """The run's directives after ``after``, including every one submitted so far (waits
        up to ``wait`` s for those still on their way to the store). Read-your-writes for a sync:
        with nothing new submitted for the run it answers from memory."""
        target = self._run_seq.get(run_id, 0)
        if target <= after:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        found: list[Directive] = []
        last = after
        while last < target:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            batch = await self.hub.wait_for_run(run_id, last, remaining)
            if not batch:
                break
            found.extend(batch)
            last = batch[-1].seq
        return found

    async def run_directives(self, run_id: str) -> tuple[list[dict[str, Any]], int]:
        """The run's newest ``MAX_RUN_DIRECTIVES`` directives (oldest first) with ``acked``
        flags, and how many older ones were left out, for ``GET /v1/runs/{id}``: ``acked`` is
        true once the agent acked a seq at or past it — its process put the directive into a
        model request it made, or stopped the run at it (every adapter of the client SDK acks
        the same way)."""
        directives, omitted = await self.hub.reader.run(self.store.newest_for_run, run_id,
                                                        MAX_RUN_DIRECTIVES)
        if not directives:
            return [], omitted
        acked = await self.hub.reader.run(self.store.acked, run_id)
        return [{**d.to_json(), "acked": d.seq <= acked} for d in directives], omitted

    async def first_stop(self, run_id: str) -> Directive | None:
        """The run's first stored directive that decides how it ends (its report's stop)."""
        return await self.hub.reader.run(self.store.first_stop, run_id)

    @property
    def global_seq(self) -> int:
        """The newest directive's ``global_seq`` (submitted, perhaps not stored yet)."""
        return self._global_seq

    async def forget_snapshots(self, up_to: int) -> None:
        """The runs database has stored every run decided on up to directive ``up_to``
        (``global_seq``) as it was then or later: their snapshots stored with the directives
        are not needed any more (on the directive lane, after the directives stored before)."""
        if self._closed or not self._snapshots_kept:  # none stored since they were forgotten
            return
        if not (self._storing or self._pending):  # (else some may be stored after this one)
            self._snapshots_kept = False
        await self._lane.run(self.store.forget_snapshots, up_to)

    async def prune(self, active_runs: Iterable[str],
                    max_directives: int = MAX_DIRECTIVES_STORED) -> int:
        """Bound the store to ``max_directives`` of ended runs (call now and then with the
        active runs' ids)."""
        keep = list(active_runs)
        pruned, emptied = await self._lane.run(self.store.prune, keep, max_directives)
        waiting = self._storing | {directive.run_id for directive, _row in self._pending}
        for run_id in emptied:
            if run_id not in waiting:
                self._run_seq.pop(run_id, None)
        return pruned
