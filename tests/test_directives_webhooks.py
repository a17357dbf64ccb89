"""Signed webhook delivery to a real aiohttp receiver on 127.0.0.1 that verifies every request
with :func:`verify`: exactly once across a receiver outage and a restart of the outbox, no retry
of a refusal, Retry-After, filters, and the signing scheme itself (the published test vector)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError

from tests.harness import eventually
from tests.test_directives_api import Sidecar, sidecar
from watchdog.core.durations import parse_retry_after
from watchdog.core.rules.decision import Action
from watchdog.shell.clock import ManualClock
from watchdog.shell.config import Config
from watchdog.shell.directives.store import DeliveryState
from watchdog.shell.directives.webhooks import (
    RetryPolicy,
    WebhookTarget,
    classify,
    sign,
    targets_from_config,
    verify,
)
from watchdog.shell.errors import ConfigError

SECRET = "whsec_" + "c2VjcmV0LWtleS1ieXRlcy1mb3ItdGVzdHMtMDAwMQ=="
FAST = RetryPolicy(initial_delay=0.02, max_delay=0.1, jitter=0.1, max_attempts=50)


# -- signing ------------------------------------------------------------------------------------

def test_signature_matches_the_standard_webhooks_test_vector() -> None:
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, secret) == expected
    headers = {"Webhook-Id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "Webhook-Timestamp": "1614265330",
               "Webhook-Signature": "v1,bm9wZQ== " + expected}  # rotation: any may match
    assert verify(body, headers, secret, now=1614265330 + 10)
    reference = Webhook(secret).sign("msg_p5jXN8AQM9LWM0D4loKWxJek",
                                     datetime.fromtimestamp(1614265330, UTC), body.decode())
    assert reference == expected  # the Standard Webhooks reference library agrees


def reference_verifies(body: bytes, headers: Mapping[str, str], secret: str) -> bool:
    """What a receiver using the Standard Webhooks reference library concludes (a raw,
    non-``whsec_`` secret is given to it as its UTF-8 bytes, as the sidecar signs with)."""
    key: str | bytes = secret if secret.startswith("whsec_") else secret.encode()
    try:
        Webhook(key).verify(body, dict(headers), json_parse=False)
    except WebhookVerificationError:
        return False
    return True


def test_verify_rejects_tampering_wrong_secret_and_stale_timestamps() -> None:
    body = b'{"seq":1}'
    headers = {"webhook-id": "abc", "webhook-timestamp": "1000",
               "webhook-signature": sign("abc", 1000, body, SECRET)}
    assert verify(body, headers, SECRET, now=1000)
    assert not verify(b'{"seq":2}', headers, SECRET, now=1000)  # tampered body
    assert not verify(body, {**headers, "webhook-id": "abd"}, SECRET, now=1000)
    assert not verify(body, headers, "another-secret-of-16+", now=1000)
    assert not verify(body, headers, SECRET, now=1000 + 301)  # replayed too late
    assert not verify(body, {"webhook-id": "abc"}, SECRET, now=1000)
    raw = "a-raw-secret-string"  # not whsec_: its UTF-8 bytes are the key
    assert verify(body, {**headers, "webhook-signature": sign("abc", 1000, body, raw)}, raw,
                  now=1000)


def test_status_classes_backoff_and_retry_after() -> None:
    assert [classify(s) for s in (200, 204, 301, 400, 404, 408, 410, 429, 500, 503)] == [
        "delivered", "delivered", "failed", "failed", "failed", "retry", "failed", "retry",
        "retry", "retry"]
    policy = RetryPolicy(jitter=0.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 12)] == [1.0, 2.0, 4.0, 8.0, 300.0]
    assert policy.delay(1, retry_after=30.0) == 30.0
    jittered = RetryPolicy(jitter=0.2)
    assert jittered.delay(3, rand=0.0) == pytest.approx(3.2)
    assert jittered.delay(3, rand=0.999) == pytest.approx(4.8, abs=0.01)
    assert policy.gives_up(300, 0.0, 10.0) and policy.gives_up(5, 0.0, 24 * 3600 + 1)
    assert parse_retry_after("7", 0.0) == 7.0
    assert parse_retry_after("Thu, 01 Jan 1970 00:01:40 GMT", 40.0) == 60.0
    assert parse_retry_after("soon", 0.0) is None
    assert parse_retry_after("²", 0.0) is None  # a digit to str.isdigit, not to float


def test_webhook_config_is_validated_with_the_key_named() -> None:
    good = {"url": "https://hooks.example/watchdog", "secret": SECRET,
            "actions": ["abort"], "agents": ["explorer-*"]}
    Config(webhooks=(good,)).validate()
    (target,) = targets_from_config([good])
    assert target.actions == frozenset({"abort"}) and SECRET not in repr(target)
    assert SECRET not in repr(Config(webhooks=(good,)))
    cases: list[tuple[dict[str, Any], str]] = [
        ({**good, "url": "ftp://x"}, "webhooks[0].url"),
        ({**good, "secret": "short"}, "webhooks[0].secret"),
        ({**good, "secret": "whsec_!!!"}, "not valid base64"),
        ({**good, "actions": ["stop"]}, "webhooks[0].actions='stop'"),
        ({**good, "agents": "explorer"}, "webhooks[0].agents"),
        ({**good, "retries": 3}, "unknown key 'retries'"),
    ]
    for hook, message in cases:
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            Config(webhooks=(hook,)).validate()
    with pytest.raises(ConfigError, match="already used"):
        Config(webhooks=(good, good)).validate()
    with pytest.raises(ConfigError) as refused:
        Config(webhooks=({**good, "secret": "tooshort-secret"},)).validate()
    assert "tooshort-secret" not in str(refused.value)


# -- a real receiver ------------------------------------------------------------------------------

class Receiver:
    """Verifies each POST; answers from ``script`` (then ``status``); counts accepted ids."""

    def __init__(self, secret: str = SECRET) -> None:
        self.secret = secret
        self.status = 200
        self.script: list[int] = []
        self.headers: dict[str, str] = {}
        self.attempts: Counter[str] = Counter()
        self.accepted: Counter[str] = Counter()
        self.bodies: dict[str, dict[str, Any]] = {}
        self.bad_signatures = 0
        self.reference_accepted = 0  # deliveries the reference library verified too
        self.url = ""
        self.gate: asyncio.Event | None = None  # set: answers only once it is set
        self.waiting = 0  # requests held at the gate

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.gate is not None and not self.gate.is_set():
            self.waiting += 1
            await self.gate.wait()
        if not verify(body, request.headers, self.secret):
            self.bad_signatures += 1
            assert not reference_verifies(body, request.headers, self.secret)
            return web.Response(status=401)
        self.reference_accepted += reference_verifies(body, request.headers, self.secret)
        msg_id = request.headers["webhook-id"]
        self.attempts[msg_id] += 1
        status = self.script.pop(0) if self.script else self.status
        if 200 <= status < 300:
            self.accepted[msg_id] += 1
            self.bodies[msg_id] = json.loads(body)
        return web.Response(status=status, headers=self.headers)

    def target(self, **options: Any) -> WebhookTarget:
        return WebhookTarget(name=options.pop("name", "receiver"), url=self.url,
                             secret=self.secret, **options)


@asynccontextmanager
async def receiver(secret: str = SECRET) -> AsyncIterator[Receiver]:
    hook = Receiver(secret)
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    hook.url = f"http://{host}:{port}/hook"
    try:
        yield hook
    finally:
        await runner.cleanup()


def sent_ids(car: Sidecar) -> list[str]:
    return [d.id for d in car.outbox.store.list_after(0, 1000)]


# -- delivery -------------------------------------------------------------------------------------

async def test_each_directive_exactly_once_across_an_outage_and_a_restart(tmp_path: Path
                                                                          ) -> None:
    state = str(tmp_path / "state")
    async with receiver() as hook:
        hook.status = 503  # the receiver is down
        async with sidecar(state, webhooks=[hook.target()], retry=FAST) as car:
            for _ in range(3):
                car.submit("run-1")
            await eventually(lambda: len(hook.attempts) == 3 and min(hook.attempts.values()) >= 2)
            assert not hook.accepted
            hook.status = 200  # back: every directive arrives, once
            await eventually(lambda: len(hook.accepted) == 3)
            for _ in range(2):
                car.submit("run-1")  # fine weather
            await eventually(lambda: len(hook.accepted) == 5)
            hook.status = 503  # down again; the sidecar restarts meanwhile
            car.submit("run-2")
            car.submit("run-2")
            await eventually(lambda: len(hook.attempts) == 7)
            # the sender counts an attempt once it has read the answer: after the receiver
            await eventually(lambda: car.metrics.count("webhook", "retry") >= 8)
        hook.status = 200
        async with sidecar(state, webhooks=[hook.target()], retry=FAST) as car:
            await eventually(lambda: len(hook.accepted) == 7)  # the persisted outbox resumes
            ids = sent_ids(car)
            # marked delivered once the sender has read the answer: after the receiver
            await eventually(lambda: all(row.state is DeliveryState.DELIVERED
                                         for row in car.outbox.store.deliveries()))
            await eventually(lambda: car.metrics.count("webhook", "delivered") == 2)
        assert sorted(hook.accepted) == sorted(ids)
        assert set(hook.accepted.values()) == {1}  # exactly once each
        assert hook.bad_signatures == 0
        assert hook.reference_accepted == sum(hook.attempts.values())
        seqs = sorted((body["run_id"], body["seq"]) for body in hook.bodies.values())
        assert seqs == [("run-1", n) for n in range(1, 6)] + [("run-2", 1), ("run-2", 2)]


async def test_a_refusal_is_not_retried_but_408_and_429_are() -> None:
    async with receiver() as hook, sidecar(webhooks=[hook.target()], retry=FAST) as car:
        hook.script = [404]
        car.submit("run-1")
        await eventually(lambda: car.metrics.count("webhook", "failed") == 1)
        hook.script = [408, 429]
        car.submit("run-1")
        await eventually(lambda: len(hook.accepted) == 1)
        await asyncio.sleep(0.2)  # time for retries that must not happen
        first, second = car.outbox.store.deliveries()
        assert (first.state, first.attempts, first.last_error) == (
            DeliveryState.FAILED, 1, "HTTP 404")
        assert (second.state, second.attempts) == (DeliveryState.DELIVERED, 3)
        assert sum(hook.attempts.values()) == 4
        assert car.metrics.count("webhook", "retry") == 2


async def test_retry_after_is_honoured_and_failures_are_bounded() -> None:
    policy = RetryPolicy(initial_delay=0.01, max_delay=0.01, jitter=0.0, max_attempts=3)
    async with receiver() as hook, sidecar(webhooks=[hook.target()], retry=policy) as car:
        hook.status = 503
        car.submit("run-1")
        await eventually(lambda: car.metrics.count("webhook", "failed") == 1)
        (row,) = car.outbox.store.deliveries()
        assert row.attempts == 3 and "gave up after 3 attempts" in (row.last_error or "")

        hook.headers = {"Retry-After": "1"}
        car.submit("run-1")
        await eventually(lambda: sum(hook.attempts.values()) == 4)
        retry = car.outbox.store.deliveries()[1]
        assert retry.next_attempt_at - time.time() > 0.5  # 1 s, not the 10 ms backoff


async def test_filters_and_a_wrong_secret() -> None:
    async with receiver() as aborts, receiver() as everything, \
            receiver("a-different-secret-1234") as mismatched:
        targets = [aborts.target(name="aborts", actions=frozenset({"abort"})),
                   everything.target(name="explorers", agents=("expl*",)),
                   WebhookTarget("mismatched", mismatched.url, SECRET)]
        async with sidecar(webhooks=targets, retry=FAST) as car:
            car.submit("run-1")  # wind_down by explorer
            car.submit("run-1", rule="error-loop", action=Action.ABORT)
            await eventually(lambda: len(everything.accepted) == 2 and len(aborts.accepted) == 1)
            await eventually(lambda: mismatched.bad_signatures == 2)
            assert everything.reference_accepted == 2 and aborts.reference_accepted == 1
            (body,) = aborts.bodies.values()
            assert body["action"] == "abort" and "Stop calling tools now" in body["report_prompt"]
            # 401: refused, not retried (counted once the sender has read the answer)
            await eventually(lambda: car.metrics.count("webhook", "failed") == 2)


async def test_a_slow_receiver_does_not_hold_up_the_others() -> None:
    """A receiver that does not answer holds at most its webhook's share of the attempts at
    once (16 over the webhooks): another webhook's deliveries go on meanwhile, all of them."""
    async with receiver() as slow, receiver() as fast:
        slow.gate = asyncio.Event()
        async with sidecar(webhooks=[slow.target(name="slow"), fast.target(name="fast")],
                           retry=FAST) as car:
            for _ in range(40):
                car.submit("run-1")
            await eventually(lambda: len(fast.accepted) == 40)
            assert slow.waiting == 8 and not slow.accepted  # its share, held
            slow.gate.set()
            await eventually(lambda: len(slow.accepted) == 40)


async def test_a_frozen_rules_clock_does_not_freeze_webhook_retries() -> None:
    frozen = ManualClock(start=1_000.0)  # what end-to-end tests inject for the rules
    async with receiver() as hook, \
            sidecar(webhooks=[hook.target()], retry=FAST, clock=frozen) as car:
        hook.script = [503, 503]
        car.submit("run-1")
        await eventually(lambda: len(hook.accepted) == 1)  # verify() checks the real time
        assert sum(hook.attempts.values()) == 3
