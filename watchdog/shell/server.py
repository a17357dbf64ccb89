"""The shell: builds the store, the service, the receivers, the API and the metrics endpoint,
owns the clock-driven loops (state flush, run expiry) and shuts everything down in order.

Order matters on the way out: receivers stop first (no new spans), then pending state is
flushed, then the store closes. ``Server.addresses`` holds the bound ports (tests bind port 0).

What the configuration leaves off is not loaded, and what it uses loads when first used: grpcio at
the first connection to ``otlp_grpc_address`` (bound at start; never with ``off``), the model
endpoint's modules only with ``model_address`` (docs/performance.md, Footprint).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import gc
import logging
import os
import signal
import socket
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from aiohttp import web

from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import RulePackError
from watchdog.core.spans.decode import protobuf_backend
from watchdog.core.spans.native import native_state, use_native
from watchdog.core.version import __version__
from watchdog.shell import open_files
from watchdog.shell.api.app import ApiRunner, create_app
from watchdog.shell.clock import Clock, SystemClock
from watchdog.shell.config import OFF, Config, split_address
from watchdog.shell.connections import QuietRunner
from watchdog.shell.directives.hub import Hub
from watchdog.shell.directives.outbox import OUTCOMES as OUTBOX_OUTCOMES
from watchdog.shell.directives.outbox import Outbox
from watchdog.shell.directives.store import HELD as DIRECTIVES_HELD
from watchdog.shell.directives.store import DirectiveStore, DirectiveStoreError
from watchdog.shell.errors import StartupError
from watchdog.shell.metrics import Metrics, create_metrics_app
from watchdog.shell.receivers import otlp_grpc, otlp_http, otlp_logs
from watchdog.shell.receivers.admission import Admission
from watchdog.shell.receivers.lazy_grpc import LazyGrpc, listen_addresses
from watchdog.shell.rule_files import RuleManager, pack_failure
from watchdog.shell.service import WatchdogService
from watchdog.shell.state.store import HELD as RUNS_HELD
from watchdog.shell.state.store import (
    NewerSchema,
    StateFileUnreadable,
    Store,
    StoreError,
    own,
    unreadable_file,
)

# the start's log line on the OTLP protobuf decode (watchdog.core.spans.native)
DECODES = {"on": "compiled (Rust)", "off": "Python (native: false)",
           "unavailable": "Python (the compiled decode was not built: no Rust toolchain at "
                          "install)"}

if TYPE_CHECKING:
    import grpc

    from watchdog.shell.directives.webhooks import WebhookTarget
    from watchdog.shell.model.native import NativeEndpoint
    from watchdog.shell.model.proxy import ModelProxy
    from watchdog.shell.receivers.forward import Forwarder, ForwardMetrics

log = logging.getLogger("watchdog")

SHUTDOWN_GRACE = 5.0  # seconds in-flight requests get to finish on shutdown (model_shutdown_grace
# for the model endpoint's)
MIN_GRACE = 0.001  # seconds: what a grace of 0 is to aiohttp, which takes 0 as none
GIL_SWITCH_INTERVAL = 0.001  # seconds; see Server.start
PRUNE_INTERVAL = 600.0  # seconds between prunes of old directives and ended runs
# Seconds an idle metrics connection is kept after a request (aiohttp's default is an hour): the
# port listens on all interfaces without a token, so a peer's one request a connection held a
# file that long. Prometheus scrapes more often than this or connects again; probes do not keep.
METRICS_KEEPALIVE = 75.0
# Generation-1 collections between two full ones (CPython's default: 10); see settle_collector.
FULL_COLLECTION_EVERY = 1000


class Server:
    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.addresses: dict[str, tuple[str, int]] = {}
        self.service: WatchdogService | None = None
        self.metrics: Metrics | None = None
        self._runners: list[web.AppRunner] = []
        self._model_runner: web.AppRunner | None = None  # the Python relay's (model_relay: python)
        # set by a second SIGINT/SIGTERM while stopping: the model requests in flight are cut
        self.hurry = asyncio.Event()
        self._grpc: LazyGrpc | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._ready = False
        self.engine: RuleEngine | None = None
        self.rules: RuleManager | None = None
        self.outbox: Outbox | None = None
        self.forwarder: Forwarder | None = None
        self.admission: Admission | None = None
        self.model: ModelProxy | None = None  # the model endpoint, when model_address is set
        self.native: NativeEndpoint | None = None  # its compiled relay (model_relay: native)
        self._owner: IO[bytes] | None = None  # the state dir held (state.store.own)

    @property
    def ready(self) -> bool:
        """Taking spans: started, not stopping, and the state can be written."""
        return self._ready and self.service is not None and self.service.state_error is None

    async def start(self) -> None:
        config = self.config
        # A worker thread holding the GIL (the store's JSON and SQLite work) delays the event
        # loop by up to one switch interval; 5 ms by default is the whole directive budget.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL)
        use_native(config.native, at_first_request=True)  # loaded by the first request
        if native_state() != "on" and protobuf_backend() == "python":
            log.warning("protobuf is using its pure-Python backend; ingest will be ~20x slower")
        # Ports first: a second watchdog started by mistake fails before it opens the state
        # dir (perhaps the first one's) or logs anything. The binds below still check.
        for key in LISTEN_KEYS:
            if getattr(config, key) != OFF:
                check_port_free(key, getattr(config, key))
        if config.model_address is not None:
            check_port_free("model_address", config.model_address)
        self.metrics = metrics = Metrics(version=__version__)
        self.rules = rules = RuleManager(config.rules, config.default_rules,
                                         reloaded=self._rules_reloaded,
                                         applied=self._rules_applied,
                                         clock=self.clock.now)
        try:
            self.engine = await rules.start()  # a bad pack refuses to start
        except RulePackError as exc:
            raise StartupError(pack_failure(exc)) from None
        try:
            self._owner = own(config.state_dir)  # a second sidecar on it is refused here
            store = await asyncio.to_thread(Store, config.state_dir, config.activity_log_size)
            directive_store = await asyncio.to_thread(DirectiveStore, config.state_dir)
        except (StateFileUnreadable, NewerSchema) as exc:  # (the directory is fine)
            raise StartupError(str(exc)) from None
        except (StoreError, DirectiveStoreError) as exc:
            raise StartupError(f"{exc}: set state_dir (WATCHDOG_STATE_DIR, --state-dir) to a "
                               f"writable directory, or :memory: to keep nothing") from None
        webhooks = webhook_targets(config)
        files = open_files.current(config)  # waiting API clients never take the last files
        hub = Hub(directive_store, metrics=metrics, max_streams=files.streams,
                  max_waiters=files.waiters)
        self.outbox = outbox = Outbox(directive_store, hub, webhooks, metrics=metrics,
                                      clock=self.clock)
        metrics.directive_outcomes("outbox", OUTBOX_OUTCOMES)
        if webhooks:
            from watchdog.shell.directives.webhooks import Outcome

            metrics.directive_outcomes("webhook", (Outcome.DELIVERED, Outcome.RETRY,
                                                   Outcome.FAILED))
        self.service = service = WatchdogService(config, store, metrics, self.clock,
                                                 engine=self.engine, sink=outbox)
        metrics.read_live_runs(service.live_runs, service.now)
        metrics.read_log_content(service.log_content_counts)
        # the runs decided on since the last flush, as their directives were decided: what a
        # crash before that flush would otherwise lose (a directive without its run)
        # A damaged page found as the files are read back stops the start, naming the file;
        # the stores are closed as they are (the shutdown would write into them)
        try:
            with readable(directive_store.path, DIRECTIVES_HELD):
                decided = await asyncio.to_thread(directive_store.run_snapshots)
            with readable(store.path, RUNS_HELD):
                restored = await asyncio.to_thread(service.restore, decided)
            # What already fired for the runs still open: nothing fires twice, grace
            # continues, and a run stopped just before a crash keeps the terminal state the
            # rule decided.
            with readable(directive_store.path, DIRECTIVES_HELD):
                fired = await outbox.restore(service.active_keys())
                if config.model_address is not None:  # (what the endpoint's requests read)
                    service.restore_boards(await outbox.directives_of(service.active_keys()))
        except StartupError:
            self.service = self.outbox = None
            for closing in (store.close, directive_store.close):
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(closing)
            raise
        self.engine.restore(fired)
        service.restore_forced(fired)
        await outbox.start()
        if restored:
            log.info("restored %d active runs from %s", restored, config.state_dir)
        self.admission = admission = Admission(config.max_pending_requests)
        self.forwarder = forward = forwarder(config, metrics)
        if forward is not None:
            await forward.start()
        else:
            log.info("forward_endpoint not set: traces and logs are not passed on; OTLP metrics "
                     "are answered 404 / UNIMPLEMENTED, as by a Collector without such a "
                     "pipeline")

        await self._start_app("metrics", config.metrics_address,
                              create_metrics_app(self.metrics, lambda: self.ready),
                              keepalive_timeout=METRICS_KEEPALIVE)
        otlp_app = otlp_http.create_app(service, metrics, admission, config, forward)
        otlp_logs.install_http(otlp_app, service, metrics, admission, config, forward)
        if forward is not None:
            from watchdog.shell.receivers import passthrough

            passthrough.install_http(otlp_app, service, metrics, admission, config, forward)
        await self._start_app("otlp_http", config.otlp_http_address, otlp_app,
                              make_runner=functools.partial(otlp_http.Runner, metrics=metrics))
        await self._start_app("api", config.api_address, create_app(
            service, config, directives=outbox, rules=self.engine, reload=rules.reload),
            make_runner=functools.partial(ApiRunner, priority=service.priority))
        if config.otlp_grpc_address != OFF:
            await self._start_grpc(admission, forward)

        if config.model_address is not None:  # (its modules load only when it is on)
            from watchdog.shell.model.native import built as native_built
            from watchdog.shell.model.proxy import ModelProxy

            self.model = proxy = ModelProxy(service, config, metrics)
            relay = config.model_relay or ("native" if native_built() else "python")
            if relay == "native":
                await self._start_native(proxy)
            else:
                from watchdog.shell.model.http1 import Http1Runner

                # (an idle keep-alive connection closed when no request head comes within
                # model_body_timeout, a new one that sends none within the first request's
                # bound: the compiled relay's)
                self._model_runner = await self._start_app(
                    "model", config.model_address, proxy.app(), make_runner=Http1Runner,
                    handler_cancellation=True, auto_decompress=False,
                    keepalive_timeout=config.model_body_timeout,
                    first_request_bound=config.model_body_timeout,
                    # (aiohttp reads 0 as no bound at all)
                    shutdown_timeout=max(config.model_shutdown_grace, MIN_GRACE))
        loops = [("state_flush", config.state_flush_interval, self._flush),
                 ("evaluate", config.eval_interval, self._tick),
                 ("prune", PRUNE_INTERVAL, self._prune)]
        if config.rules_watch_interval > 0:
            loops.append(("rules_watch", config.rules_watch_interval, rules.watch))
        self._tasks = [asyncio.create_task(self._every(*loop)) for loop in loops]
        self._ready = True
        log.info("watchdog %s listening: %s", __version__,
                 ", ".join(f"{k}={f'[{h}]' if ':' in h else h}:{p}"
                           for k, (h, p) in self.addresses.items()))
        log.info("OTLP protobuf decode: %s", DECODES[native_state()])
        shared = filesystem_watchdog()
        if shared is not None:
            log.warning("the filesystem-events library watchdog %s is installed here too, in "
                        "the import package agent-watchdog-sidecar has (watchdog: each writes "
                        "its watchdog/__init__.py over the other's); give the sidecar a venv "
                        "of its own (README: Names)", shared)

    async def _start_grpc(self, admission: Admission, forward: Forwarder | None) -> None:
        """The OTLP/gRPC receivers: the port is bound here, grpcio loads at its first
        connection and takes the port over (:mod:`watchdog.shell.receivers.lazy_grpc`)."""
        config, service, metrics = self.config, self.service, self.metrics
        assert service is not None and metrics is not None
        host, port = split_address("otlp_grpc_address", config.otlp_grpc_address)

        def build(address: str, options: Sequence[tuple[str, int]]
                  ) -> tuple[grpc.aio.Server, int]:
            assert service is not None and metrics is not None
            server, bound = otlp_grpc.create_server(service, metrics, admission, config,
                                                    forward, address, options)
            otlp_logs.install_grpc(server, service, metrics, admission, config, forward)
            if forward is not None:
                from watchdog.shell.receivers import passthrough

                passthrough.install_grpc(server, service, metrics, admission, config, forward)
            return server, bound

        self._grpc = LazyGrpc(build)
        try:
            bound = await self._grpc.listen(host, port)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise StartupError(listen_failure("otlp_grpc_address", config.otlp_grpc_address,
                                              reason, exc.errno)) from None
        self.addresses["otlp_grpc"] = (host, bound)

    def _rules_reloaded(self, ok: bool) -> None:
        assert self.metrics is not None
        self.metrics.rules_reloaded(ok)
        engine = self.rules.engine if self.rules is not None else None
        if ok and engine is not None:  # each rule's error count shown at 0, ahead of any
            self.metrics.rules_loaded(rule.name for rule in engine.ruleset.rules)
        if self.native is not None:
            self.native.check_basis()  # what new runs get may have changed

    async def _rules_applied(self) -> None:
        if self.service is not None:  # (none yet at startup: nothing runs)
            await self.service.rules_replaced()
            if self.outbox is not None:  # the reload is answered with what it decided stored
                await self.outbox.flush()

    async def _start_native(self, proxy: ModelProxy) -> None:
        """The model endpoint on the compiled relay (``model_relay: native``)."""
        from watchdog.shell.model.native import NativeEndpoint, missing_relay

        address = self.config.model_address
        assert address is not None
        if (missing := missing_relay()) is not None:
            raise StartupError(f"model_relay: native needs the compiled relay, which is not "
                               f"built ({missing}); build it (pip install with Rust, see "
                               f"docs/model-endpoint.md) or set model_relay: python")
        host, port = split_address("model_address", address)
        self.native = NativeEndpoint(proxy)
        try:
            bound = await self.native.start(host, port)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise StartupError(listen_failure("model_address", address, reason,
                                              exc.errno)) from None
        self.addresses["model"] = (host, bound)

    async def _start_app(self, name: str, address: str, app: web.Application,
                         *, make_runner: Callable[..., web.AppRunner] = QuietRunner,
                         **options: Any) -> web.AppRunner:
        host, port = split_address(name, address)
        options.setdefault("shutdown_timeout", SHUTDOWN_GRACE)
        runner = make_runner(app, access_log=None, handle_signals=False, **options)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
        self._runners.append(runner)
        try:
            await site.start()
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)  # asyncio wraps it
            raise StartupError(listen_failure(f"{name}_address", address, reason,
                                              exc.errno)) from None
        sockets = runner.addresses
        self.addresses[name] = (host, sockets[0][1] if sockets else port)
        return runner

    async def _every(self, task: str, interval: float,
                     work: Callable[[], Awaitable[None]]) -> None:
        assert self.metrics is not None
        while True:
            await asyncio.sleep(interval)
            try:
                await work()
            except Exception:  # a failing loop must not kill the sidecar; it says why
                log.exception("background task %s failed", task)
                self.metrics.background_pass(task, "failed")
            else:
                self.metrics.background_pass(task, "ok")

    async def _flush(self) -> None:
        assert self.service is not None
        await self.service.save_pending()

    async def _tick(self) -> None:
        assert self.service is not None
        await self.service.tick_in_slices()

    async def _prune(self) -> None:
        assert self.service is not None and self.outbox is not None
        # (the ended runs kept, and as many directives of ended runs: a directive with its
        # report prompt takes up to some 12 KB, so the state's disk is bounded by the one key)
        await self.outbox.prune(self.service.active_keys(), self.config.state_max_ended_runs)
        await self.service.prune_store()

    async def reload_rules(self) -> tuple[bool, str]:
        """Load the rule packs again (SIGHUP); on any problem keep the running rules."""
        assert self.rules is not None
        return await self.rules.reload()

    def _model_in_flight(self) -> int:
        """The model requests being served now, on either relay."""
        if self.native is not None and self.native.relay is not None:
            return int(self.native.relay.in_flight)
        return self.model.in_flight if self.model is not None else 0

    async def _drain_model(self, runner: web.AppRunner) -> None:
        """The Python relay's runner cleaned up: its listener closed, its requests in flight
        given model_shutdown_grace, unless ``hurry`` comes first (then they are cut)."""
        self._runners.remove(runner)
        self._model_runner = None
        cleanup = asyncio.ensure_future(runner.cleanup())
        hurried = asyncio.ensure_future(self.hurry.wait())
        await asyncio.wait((cleanup, hurried), return_when=asyncio.FIRST_COMPLETED)
        hurried.cancel()
        if not cleanup.done() and runner.server is not None:
            for connection in runner.server.connections:
                connection.force_close()  # (its handler is cancelled: the request is cut)
        await cleanup

    async def stop(self) -> None:
        self._ready = False
        if self.outbox is not None:
            self.outbox.hub.close()  # open SSE / long-poll requests end now, not at a timeout
        if self._grpc is not None:
            await self._grpc.stop(SHUTDOWN_GRACE)
        if self.model is not None and (left := self._model_in_flight()):
            log.info("stopping: the model requests in flight (%d) get up to %g s to finish "
                     "(model_shutdown_grace)", left, self.config.model_shutdown_grace)
        if self.native is not None:
            await self.native.close(self.config.model_shutdown_grace, self.hurry)
            self.native = None
        if self._model_runner is not None:  # (the Python relay: its cleanup drains alike)
            await self._drain_model(self._model_runner)
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        if self.forwarder is not None:  # receivers are closed: nothing more is offered
            await self.forwarder.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.service is not None:
            self.service.closing()
            await self.service.save_pending()
        if self.outbox is not None:
            await self.outbox.stop()  # stores what is pending; lets webhook attempts finish
            self.outbox = None
        if self.service is not None:
            await self.service.close()
            self.service = None
        if self._owner is not None:
            self._owner.close()  # the state dir is free for the next sidecar
            self._owner = None


def filesystem_watchdog() -> str | None:
    """The version of the filesystem-events library ``watchdog`` where it is installed beside
    the sidecar (its import package is ``watchdog`` too: the two share one directory), else
    None."""
    from importlib import metadata

    try:
        return metadata.version("watchdog")
    except metadata.PackageNotFoundError:
        return None


@contextlib.contextmanager
def readable(path: Path | None, held: str) -> Iterator[None]:
    """Reading a state file back at the start: a damaged one stops it, named, left as it is
    (:class:`StateFileUnreadable`)."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if path is None or not unreadable_file(exc):
            raise
        raise StartupError(str(StateFileUnreadable(path, held, exc))) from None


def forwarder(config: Config, metrics: ForwardMetrics) -> Forwarder | None:
    """The forwarder ``config`` asks for, or None: without ``forward_endpoint`` its module is
    never loaded."""
    if config.forward_endpoint is None:
        return None
    from watchdog.shell.receivers.forward import Forwarder

    return Forwarder.from_config(config, metrics)


def webhook_targets(config: Config) -> list[WebhookTarget]:
    """The webhooks ``config`` lists; without one their module is never loaded."""
    if not config.webhooks:
        return []
    from watchdog.shell.directives.webhooks import targets_from_config

    return targets_from_config(config.webhooks)


LISTEN_KEYS = ("otlp_grpc_address", "otlp_http_address", "api_address", "metrics_address")


def listen_failure(key: str, address: str, reason: str, code: int | None = None) -> str:
    """One line: the key and address, the OS's reason, and what to do about it."""
    env = "WATCHDOG_" + key.upper()
    flag = "--" + key.replace("_", "-")
    if code == errno.EADDRINUSE:
        cause = "another process (another watchdog?) holds the port: stop it"
    elif code is not None:
        cause = "is that address this machine's, and the port one this user may bind?"
    else:
        cause = "a port in use, or an address this machine does not have?"
    return (f"{key}={address!r}: cannot listen ({reason}); {cause} — or choose another "
            f"address with {env} or {flag}")


def check_port_free(key: str, address: str) -> None:
    """Bind ``address`` once and let go, so a port in use is reported with the OS's reason in
    one line; grpcio only says "Failed to bind" after logging its own error line to stderr."""
    host, port = split_address(key, address)
    if port == 0:
        return
    try:
        infos = listen_addresses(host, port)
    except OSError as exc:
        raise StartupError(listen_failure(key, address, str(exc))) from None
    failures: list[OSError] = []
    for family, kind, proto, _name, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc binds
            try:
                probe.bind(sockaddr)
                return  # grpc listens if any resolved address binds
            except OSError as exc:
                failures.append(exc)
    first = failures[0] if failures else OSError(errno.EADDRNOTAVAIL, "no address")
    raise StartupError(listen_failure(key, address, first.strerror or str(first), first.errno))


def settle_collector() -> None:
    """Keep the cyclic garbage collector's pauses short, once the server has started.

    A full collection walks every object the collector tracks, and the event loop answers
    nothing meanwhile: with a thousand runs open under load that took 60-110 ms (measured with
    ``bench/sync_latency.py --gap 0.02``), the worst sync latency. Two changes, the rest of the
    collector as CPython has it: what startup loaded (modules, rules, the server itself:
    ~50,000 objects, alive for the life of the process) is frozen out of every collection; and
    a full collection comes after ``FULL_COLLECTION_EVERY`` generation-1 collections instead of
    10 (at 10,000 spans/s about every 13 minutes; CPython also waits until the long-lived
    objects grew by a quarter). Young collections are unchanged, and reference counting frees
    everything that is not a cycle; the cycles that outlive two young collections, the only
    garbage left waiting longer, were 0-300 objects per full collection in that measurement.
    """
    gc.collect()
    gc.freeze()
    young, middle, _full = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


async def serve(config: Config, hangups: Sequence[int] = ()) -> None:
    """Run until SIGINT/SIGTERM, then shut down cleanly; SIGHUP reloads the rules, and
    ``hangups`` (SIGHUPs caught while the sidecar started) asks for a reload once it has."""
    asyncio.get_running_loop().set_exception_handler(open_files.AcceptFailures())
    server = Server(config)
    try:
        await server.start()
    except BaseException:  # what did start is stopped before the error is reported
        with contextlib.suppress(Exception):  # the error that stopped the start is the news
            await server.stop()
        raise
    settle_collector()  # the process's own: in-process servers (tests) leave it alone
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    reloads: set[asyncio.Task[tuple[bool, str]]] = set()

    def reload() -> None:
        task = loop.create_task(server.reload_rules())
        reloads.add(task)  # keep a reference until it is done
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, reload)
    if hangups:  # (the rules were read before it came, maybe before the files it announced)
        reload()
    try:
        await stop.wait()
    finally:
        log.info("shutting down")

        def hurry() -> None:
            if not server.hurry.is_set():
                log.info("stopping at once: the model requests in flight are cut")
                server.hurry.set()

        for sig in (signal.SIGINT, signal.SIGTERM):  # a second one: no more grace
            loop.add_signal_handler(sig, hurry)
        await server.stop()
