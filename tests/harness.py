"""A real sidecar for tests: ``Server`` on 127.0.0.1 with every port 0, in a background thread
with its own event loop, so synchronous OTel SDK exporters and HTTP clients can talk to it.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import reprlib
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from watchdog.shell.clock import Clock
from watchdog.shell.config import Config
from watchdog.shell.server import Server

T = TypeVar("T")


class RunningServer:
    def __init__(self, server: Server, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop

    def url(self, name: str) -> str:
        host, port = self.server.addresses[name]
        return f"http://{host}:{port}"

    @property
    def otlp_http(self) -> str:
        return self.url("otlp_http")

    @property
    def grpc_target(self) -> str:
        host, port = self.server.addresses["otlp_grpc"]
        return f"{host}:{port}"

    @property
    def api(self) -> str:
        return self.url("api")

    @property
    def metrics(self) -> str:
        return self.url("metrics")

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop thread (the service is not thread-safe)."""

        async def wrapper() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout=30)

    def get_json(self, path: str, headers: dict[str, str] | None = None) -> Any:
        status, body = http_request("GET", self.api + path, headers=headers)
        assert status == 200, (status, body)
        return json.loads(body)

    def flush(self) -> None:
        assert self.server.service is not None
        self.call(self.server.service.flush)

    def stored(self) -> None:
        """Wait until the directives decided so far are stored (as a tick's are, moments after
        it: the API reads them from the store)."""
        assert self.server.outbox is not None
        asyncio.run_coroutine_threadsafe(self.server.outbox.flush(), self.loop).result(timeout=30)


WAIT = 20.0  # the longest any awaited condition may take before the test fails
EVERY = 0.01  # how often a condition is polled


def wait_until(condition: Callable[[], T], what: str | Callable[[], str] = "",
               timeout: float = WAIT, every: float = EVERY) -> T:
    """Poll ``condition`` every ``every`` seconds until it returns something truthy, and return
    that. After ``timeout`` seconds (checked once more at the deadline) fail naming ``what``
    was awaited (a function is called then, for diagnosis worth gathering only on failure) and
    the last value seen. The one polling helper of the tests (:func:`eventually` is its twin
    for a test's own event loop)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        left = deadline - time.monotonic()
        if left < 0:
            raise AssertionError(_not_within(timeout, what, condition, value))
        time.sleep(min(every, left))
    return value


async def eventually(condition: Callable[[], T], what: str | Callable[[], str] = "",
                     timeout: float = WAIT, every: float = EVERY) -> T:
    """:func:`wait_until` inside a running event loop: the loop is served while it waits."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        left = deadline - time.monotonic()
        if left < 0:
            raise AssertionError(_not_within(timeout, what, condition, value))
        await asyncio.sleep(min(every, left))
    return value


def _not_within(timeout: float, what: str | Callable[[], str], condition: object,
                last: object) -> str:
    awaited = (what() if callable(what) else what) or condition
    return f"not within {timeout:g} s: {awaited} (last seen: {reprlib.repr(last)})"


def run_detail(api: str, run_id: str) -> dict[str, Any] | None:
    """``GET /v1/runs/{id}``, or None while the sidecar does not know the run."""
    status, body = http_request("GET", f"{api}/v1/runs/{run_id}")
    return json.loads(body) if status == 200 else None  # type: ignore[no-any-return]


def http_request(method: str, url: str, body: bytes | None = None,
                 headers: dict[str, str] | None = None, timeout: float = 10
                 ) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


ROOT = Path(__file__).resolve().parents[1]
COMPUTED = ROOT / ".cache" / "computed"


def computed_once(name: str, inputs: Iterable[Path], compute: Callable[[], Any]) -> Any:
    """``compute()`` (JSON) for the content of the files ``inputs``, made by one test process
    and kept in ``.cache/computed/NAME-DIGEST.json``: the pytest workers that collect the same
    module at once wait for it on a lock, and a later run with the same inputs reads it. For a
    module choosing its cases by what the code reads from data (every worker collects every
    module)."""
    digest = hashlib.sha256()
    for path in sorted(inputs):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    target = COMPUTED / f"{name}-{digest.hexdigest()[:16]}.json"
    COMPUTED.mkdir(parents=True, exist_ok=True)
    with (COMPUTED / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            for stale in COMPUTED.glob(f"{name}-*.json"):
                stale.unlink()
            temporary = target.with_suffix(f".{os.getpid()}")
            temporary.write_text(json.dumps(compute()), encoding="utf-8")
            os.replace(temporary, target)
        return json.loads(target.read_text(encoding="utf-8"))


def run_owner() -> int:
    """The process of this test run: xdist's controller (a worker's parent), or pytest alone."""
    return os.getppid() if "PYTEST_XDIST_WORKER" in os.environ else os.getpid()


def run_directory(owner: int | None = None) -> Path:
    """A directory of this test run that all its pytest workers share (the framework driver
    processes' sockets, logs and CPU seconds); short, since it holds Unix sockets."""
    return Path(tempfile.gettempdir()) / f"watchdog-tests-{owner or run_owner()}"


@contextmanager
def http_served(handler: type[BaseHTTPRequestHandler],
                server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer) -> Iterator[str]:
    """``handler`` served on a free 127.0.0.1 port in a thread; yields ``http://127.0.0.1:PORT``."""
    server = server_class(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def sidecar_config(state_dir: Path | str, **overrides: Any) -> Config:
    config = Config(otlp_grpc_address="127.0.0.1:0", otlp_http_address="127.0.0.1:0",
                    api_address="127.0.0.1:0", metrics_address="127.0.0.1:0",
                    state_dir=str(state_dir),
                    # a test that ends with a model request held at its upstream does not wait
                    # the default grace for it (the shutdown's own tests set theirs)
                    model_shutdown_grace=1.0)
    return replace(config, **overrides).validate()


@contextmanager
def endpoint_with_pack(tmp: Path, pack: str, upstream: str, relay: str,
                       **overrides: Any) -> Iterator[RunningServer]:
    """A sidecar whose model endpoint (on a free port, relay ``relay``) sends to ``upstream``,
    with the rule pack ``pack`` (its text) and the rules evaluated every 0.2 s."""
    path = tmp / "pack.yaml"
    path.write_text(pack)
    config = sidecar_config(tmp / "state", model_address="127.0.0.1:0", model_upstream=upstream,
                            rules=(str(path),), eval_interval=0.2, model_relay=relay,
                            **overrides)
    with running_server(config) as server:
        yield server


@contextmanager
def running_server(config: Config, clock: Clock | None = None) -> Iterator[RunningServer]:
    loop = asyncio.new_event_loop()
    server = Server(config, clock=clock)
    started = threading.Event()
    failure: list[BaseException] = []

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as exc:  # surfaced to the test below
            failure.append(exc)
            started.set()
            return
        started.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        loop.close()

    thread = threading.Thread(target=main, name="watchdog-test-server", daemon=True)
    thread.start()
    started.wait(30)
    if failure:
        raise failure[0]
    try:
        yield RunningServer(server, loop)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
