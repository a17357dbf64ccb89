"""Issue 10's findings, each reproduced against a real sidecar: hostile JSON, non-finite and
huge numbers, poisoned state, ids with odd characters, unsupported codings, short tokens,
slow uploaders and gRPC overload. Every refusal is a documented 4xx/503 with a message, every
answer is valid JSON, and a good run sent before is intact after."""

from __future__ import annotations

import gzip
import json
import re
import socket
import sqlite3
import tempfile
import threading
import time
import urllib.parse
import zlib
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.harness import (
    RunningServer,
    http_request,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.otel import export_http
from tests.ports import free_port
from tests.processes import fresh_ports, running_sidecar, serve_env
from tests.spans import SpanMaker, chat_attrs, encode, tool_attrs
from tests.test_bad_input import (
    MIB,
    Guarded,
    SlowUpload,
    grpc_export,
    gzip_bomb,
    start_guarded,
    status_message,
    valid_body,
)
from tests.test_otlp_http import JSON, PROTOBUF, post, post_full, request_json
from watchdog.shell.config import Config
from watchdog.shell.errors import ConfigError
from watchdog.shell.receivers import admission as admission_module
from watchdog.shell.state.store import Store


def strict_json(raw: bytes) -> Any:
    """JSON as a strict client parses it: ``Infinity``/``NaN`` are errors."""
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in an API answer: {raw[:200]!r}")
    return json.loads(raw, parse_constant=refuse)


def api(sidecar: RunningServer, method: str, target: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, Any]:
    status, raw = http_request(method, sidecar.api + target, body,
                               {"Content-Type": "application/json", **(headers or {})})
    return status, strict_json(raw)


def run_path(run_id: str, suffix: str = "") -> str:
    return "/v1/runs/" + urllib.parse.quote(run_id, safe="") + suffix


def export(sidecar: RunningServer, maker: SpanMaker) -> ExportTraceServiceResponse:
    status, body = post(sidecar, encode(maker.take()).SerializeToString())
    assert status == 200, body
    return ExportTraceServiceResponse.FromString(body)


# -- OTLP/JSON that used to crash the decoder ------------------------------------------------

DEEP = 1000


@pytest.mark.parametrize(("body", "message"), [
    (b'{"\\ud800": 1}', "unpaired UTF-16 surrogate"),
    (b'{"resourceSpans": [{"resource": {"attributes": [{"key": "\\udc00x", "value": '
     b'{"stringValue": "x"}}]}}]}', "unpaired UTF-16 surrogate"),
    (b'{"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": '
     b'{"stringValue": "\\ud800"}}]}}]}', "unpaired UTF-16 surrogate"),
    (b"[" * DEEP + b"]" * DEEP, "nested too deeply"),
    (b'{"a":' * DEEP + b"1" + b"}" * DEEP, "nested too deeply"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"x": ' + b"[" * DEEP + b"]" * DEEP
     + b"}]}]}]}", "nested too deeply"),
    (b'{"resourceSpans": [], "x": 1e999}', "out of range"),
    (b'{"resourceSpans": [], "x": NaN}', "NaN is not a JSON number"),
    # a surrogate encoded as UTF-8 bytes (ED A0 80), not escaped: protobuf's JSON parser raised
    # SystemError on such a field name (HTTP 500)
    (b'{"\xed\xa0\x80": 1}', "not UTF-8"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"\xed\xb0\x80name": "x"}]}]}]}',
     "not UTF-8"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "\xed\xa0\x80"}]}]}]}',
     "not UTF-8"),
    (b'{"resourceSpans": [{"\xff": 1}]}', "not UTF-8"),
    ('{"\ud800": 1}'.encode("utf-16-le", "surrogatepass"), "not UTF-8"),
], ids=["surrogate key", "surrogate attribute key", "surrogate value", "deep array",
        "deep object", "deep inside a span", "1e999", "NaN literal", "UTF-8 surrogate key",
        "UTF-8 surrogate span field", "UTF-8 surrogate value", "invalid byte in a key",
        "UTF-16 with a surrogate key"])
def test_hostile_otlp_json_is_a_400_with_a_message(guarded: Guarded, body: bytes,
                                                   message: str) -> None:
    status, _, answer = post_full(guarded.sidecar, body, JSON)
    assert status == 400, answer
    assert message in status_message(answer, JSON).message
    guarded.assert_intact()


# what fuzz/otlp_json.py splices into strings: UTF-8-encoded surrogates, stray and overlong
# bytes, code points past U+10FFFF, escaped surrogates and NUL, quotes and backslashes
SPLICED = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\x80", b"\xff", b"\xc0\xaf",
           b"\xf4\x90\x80\x80", b"\\ud800", b"\\u0000", b'\\"', b"\\", b"\xf0\x9f\x98\x80"]


def test_every_field_name_and_string_spliced_is_never_a_5xx(guarded: Guarded) -> None:
    """A real export as OTLP/JSON, each fragment spliced in at the start of each of its strings
    (every field name and string value), each sent on its own: 200 or 400 with a message,
    never 5xx."""
    maker = SpanMaker()
    t = time.time()
    with maker.agent("invoke_agent a", {"gen_ai.agent.name": "a"}, start=t, end=t + 3):
        maker.span("execute_tool f", tool_attrs("f", "{}"), start=t + 1, error="boom")
    body = request_json(encode(maker.take()))
    quotes = [match.start() + 1 for match in re.finditer(b'"', body)]
    statuses: Counter[int] = Counter()
    for at in quotes[::2]:  # the opening quote of every string
        for fragment in SPLICED:
            status, _, answer = post_full(guarded.sidecar, body[:at] + fragment + body[at:], JSON)
            statuses[status] += 1
            assert status in (200, 400), (status, body[:at] + fragment + body[at:], answer)
            if status == 400:
                assert status_message(answer, JSON).message
    assert statuses[400] and statuses[200], statuses
    guarded.assert_intact()


@pytest.fixture
def guarded(tmp_path: Path) -> Any:
    with start_guarded(tmp_path) as guarded:
        yield guarded


# -- numbers at the edge ---------------------------------------------------------------------

BAD_COUNTS = [float("inf"), float("-inf"), float("nan"), "inf", "1e999", "nan", "-5", "lots"]


def test_non_finite_and_huge_token_counts_count_as_nothing(sidecar: RunningServer) -> None:
    maker = SpanMaker()
    for index, bad in enumerate(BAD_COUNTS):
        maker.span("chat m", {**chat_attrs(), "watchdog.run.id": "tokens",
                              "gen_ai.usage.input_tokens": bad,
                              "gen_ai.usage.output_tokens": 1}, start=time.time() + index)
    maker.span("chat m", {**chat_attrs(), "watchdog.run.id": "tokens",
                          "gen_ai.usage.input_tokens": 2**62,
                          "gen_ai.usage.output_tokens": "1e30"}, start=time.time() + 20)
    response = export(sidecar, maker)
    assert response.partial_success.rejected_spans == 0
    status, detail = api(sidecar, "GET", run_path("tokens"))
    assert status == 200
    signals = detail["signals"]
    assert signals["iterations"] == len(BAD_COUNTS) + 1
    # every bad count is 0; a huge one is cut to the bound (10**9 tokens per call)
    assert signals["input_tokens"] == 10**9
    assert signals["output_tokens"] == len(BAD_COUNTS) + 10**9


@pytest.mark.parametrize("limit", [float("inf"), float("nan"), -1.0, 1e300])
def test_an_unusable_budget_attribute_is_ignored(sidecar: RunningServer, limit: float) -> None:
    maker = SpanMaker()
    maker.span("execute_tool t", {**tool_attrs("t", "{}", "ok"), "watchdog.run.id": "budget",
                                  "watchdog.budget.max_tool_calls": limit,
                                  "watchdog.budget.max_iterations": 7}, start=time.time())
    export(sidecar, maker)
    status, detail = api(sidecar, "GET", run_path("budget"))
    assert status == 200
    assert detail["budget"] == {"max_iterations": 7.0, "remaining_iterations": 7.0}


CONTROL_BODIES: list[tuple[str, str, bytes, str]] = [
    ("heartbeat", "/heartbeat", b'{"messages": ' + b"[" * DEEP + b"]" * DEEP + b"}",
     "nested too deeply"),
    ("heartbeat", "/heartbeat", b'{"\\ud800": 1}', "unpaired UTF-16 surrogate"),
    ("heartbeat", "/heartbeat", b'{"messages": NaN}', "NaN is not a JSON number"),
    ("heartbeat", "/heartbeat", b'{"messages": 1, "oldest_call_started": Infinity}',
     "Infinity is not a JSON number"),
    ("heartbeat", "/heartbeat", b'{"messages": 1e999}', "out of range"),
    ("heartbeat", "/heartbeat", b'{"messages": 100000000000000000000000000000}',
     "messages=100000000000000000000000000000 is not allowed"),
    ("heartbeat", "/heartbeat", b'{"messages": 1, "oldest_call_started": 1e200}',
     "oldest_call_started=1e+200 is not allowed"),
    ("heartbeat", "/heartbeat", b'{"messages": 1, "oldest_call_started": 0}',
     "oldest_call_started=0 is not allowed: expected epoch seconds from 946684800 (2000)"),
    ("heartbeat", "/heartbeat",
     b'{"announce": {"agent": "a", "budget": {"max_tool_calls": 1e300}}}',
     "announce.budget.max_tool_calls=1e+300 is not allowed"),
    ("heartbeat", "/heartbeat", b'{"announce": {"session": "a\\u0000b"}}',
     "must not contain control characters"),
    ("heartbeat", "/heartbeat", b'{"announce": {"agent": "a"}, "trace_id": "AB' + b"0" * 30
     + b'"}', 'trace_id="AB000000000000000000000000000000" is not allowed: expected the run\'s'),
    ("heartbeat", "/heartbeat", b'{"announce": {"trace_id": "' + b"0" * 32 + b'"}}',
     'announce.trace_id="00000000000000000000000000000000" is not allowed'),
    ("ack", "/ack", b'{"seq": ' + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"}",
     "nested too deeply"),
    ("ack", "/ack", b'{"seq": 99999999999999999999999999}', "is not allowed"),
    ("checkpoint", "", b'{"remaining": ' + b"[" * DEEP + b"]" * DEEP + b"}",
     "nested too deeply"),
    ("checkpoint", "", b'{"remaining": "x", "state": {"\\udfff": 1}}',
     "unpaired UTF-16 surrogate"),
    ("checkpoint", "", b'{"remaining": 1e999}', "out of range"),
    ("checkpoint", "", b'{"remaining": "x", "state": {"n": ' + b"9" * 30 + b"}}",
     "state.n is not allowed"),
]


@pytest.mark.parametrize(("route", "suffix", "body", "message"), CONTROL_BODIES,
                         ids=[f"{c[0]}: {c[3]}" for c in CONTROL_BODIES])
def test_hostile_control_bodies_are_400(sidecar: RunningServer, route: str, suffix: str,
                                        body: bytes, message: str) -> None:
    target = ("/v1/sessions/s-1/checkpoints" if route == "checkpoint"
              else run_path("r-1", suffix))
    status, answer = api(sidecar, "POST", target, body)
    assert status == 400, answer
    assert answer["error"]["code"] == "bad_request"
    assert message in answer["error"]["message"]


CONTROL_POSTS = {"heartbeat": run_path("r-1", "/heartbeat"), "sync": run_path("r-1", "/sync"),
                 "ack": run_path("r-1", "/ack"), "checkpoint": "/v1/sessions/s-1/checkpoints"}
# (case, body factory, Content-Encoding, status, error code, message fragment)
CODED_BODIES: list[tuple[str, Callable[[], bytes], str, int, str, str]] = [
    ("not gzip", lambda: b'{"messages": 1}', "gzip", 400, "bad_request", "not valid gzip data"),
    ("not deflate", lambda: b"\x00\x01\x02", "deflate", 400, "bad_request",
     "not valid deflate data"),
    ("cut gzip", lambda: gzip.compress(b'{"messages": 1}')[:-9], "gzip", 400, "bad_request",
     "not valid gzip data"),
    ("unsupported coding", lambda: b'{"messages": 1}', "br", 415, "unsupported_media_type",
     'unsupported Content-Encoding "br"'),
    ("gzip bomb", lambda: gzip_bomb(32 * MIB), "gzip", 413, "payload_too_large",
     "(after decompression)"),
]


@pytest.mark.parametrize("route", list(CONTROL_POSTS))
@pytest.mark.parametrize(("case", "body", "encoding", "status", "code", "message"), CODED_BODIES,
                         ids=[case[0] for case in CODED_BODIES])
def test_control_bodies_in_a_content_coding(sidecar: RunningServer, route: str, case: str,
                                            body: Callable[[], bytes], encoding: str,
                                            status: int, code: str, message: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """A control request whose body is not the coding its header names is refused with a
    message, as an OTLP export is (it was a 500 and two tracebacks in the log), a coding the
    sidecar does not read is a 415, and a body is bounded once inflated too."""
    answered, answer = api(sidecar, "POST", CONTROL_POSTS[route], body(),
                           {"Content-Encoding": encoding})
    assert (answered, answer["error"]["code"]) == (status, code), answer
    assert message in answer["error"]["message"]
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_control_bodies_may_be_compressed(sidecar: RunningServer, encoding: str) -> None:
    body = b'{"messages": 3, "announce": {"agent": "zipped"}}'
    sent = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    status, answer = api(sidecar, "POST", run_path("r-zip", "/heartbeat"), sent,
                         {"Content-Encoding": encoding})
    assert status == 200, answer
    assert (answer["agent"], answer["messages"]) == ("zipped", 3)


# -- one bad run cannot stop the others --------------------------------------------------------

QUIET_PACK = """apiVersion: agent-watchdog/v1
kind: RulePack
name: quiet
rules:
  - name: quiet
    when: "!run.ended && run.idle_seconds > 0.2"
    action: notify
    message: quiet
"""


def metric_values(sidecar: RunningServer, name: str) -> dict[str, float]:
    metrics = sidecar.server.metrics
    assert metrics is not None
    return {",".join(f"{k}={v}" for k, v in sorted(sample.labels.items())): sample.value
            for family in metrics.registry.collect() for sample in family.samples
            if sample.name == name}


def test_a_poisoned_stored_run_does_not_stop_the_timer_for_the_others(tmp_path: Path) -> None:
    state = tmp_path / "state"
    maker = SpanMaker()
    root = maker.open("invoke_agent a", start=time.time())  # never ends: the runs stay active
    for key in ("healthy-1", "poisoned", "damaged", "unreadable", "nested", "healthy-2"):
        maker.span("chat m", {**chat_attrs(), "watchdog.run.id": key}, parent=root,
                   start=time.time())
    with running_server(sidecar_config(state)) as sidecar:
        export(sidecar, maker)
    # What an older build could store: a budget of Infinity / NaN (json.dumps allows them),
    # a value of the wrong type, and a row that cannot be read back at all.
    with sqlite3.connect(state / "watchdog.sqlite3") as db:
        def poison(key: str, change: dict[str, Any]) -> None:
            data = json.loads(db.execute("SELECT data FROM runs WHERE key=?",
                                         (key,)).fetchone()[0])
            data.update(change)
            db.execute("UPDATE runs SET data=? WHERE key=?", (json.dumps(data), key))
        poison("poisoned", {"budget": {"max_tool_calls": float("inf"),
                                       "max_iterations": float("nan"), "max_tokens": 50}})
        poison("damaged", {"first_start_ns": "not a number"})
        poison("unreadable", {"key_source": "no such source"})
        # JSON nested past the recursion limit (its session unread too: a schema-6 file)
        db.execute("UPDATE runs SET data=?, session=NULL WHERE key='nested'",
                   ("[" * 100_000 + "]" * 100_000,))
        db.execute("PRAGMA user_version=6")
    pack = tmp_path / "quiet.yaml"
    pack.write_text(QUIET_PACK)
    config = sidecar_config(state, rules=(str(pack),), default_rules=False, eval_interval=0.05)
    with running_server(config) as sidecar:
        for key in ("healthy-1", "healthy-2", "poisoned"):
            wait_until(lambda key=key: [d for d in api(sidecar, "GET", run_path(key))[1]
                                        ["directives"] if d["rule"] == "quiet"],
                       what=f"the quiet rule firing for {key}")
        status, detail = api(sidecar, "GET", run_path("poisoned"))
        assert status == 200 and detail["budget"] == {"max_tokens": 50.0,
                                                      "remaining_tokens": 35.0}
        failures = metric_values(sidecar, "agent_watchdog_run_failures_total")
        assert failures["stage=restore"] >= 2, failures  # "unreadable", "nested": skipped
        assert failures["stage=rules"] >= 1  # "damaged", on every tick, alone
        for key in ("unreadable", "nested"):
            status, answer = api(sidecar, "GET", run_path(key))
            assert status == 404 and "cannot be read" in answer["error"]["message"]
        status, listing = api(sidecar, "GET", "/v1/runs")
        assert status == 200
        assert {"healthy-1", "healthy-2", "poisoned"} <= {r["id"] for r in listing["runs"]}


def test_a_stored_session_that_cannot_be_read_is_answered_and_started_afresh(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    damaged = {"not-json": "{", "nested": "[" * 100_000 + "]" * 100_000,
               "a-list": "[1, 2]", "wrong-types": json.dumps({"id": "wrong-types",
                                                              "facts": "a string", "runs": []})}
    with running_server(sidecar_config(state)) as sidecar:
        for session in ("intact", *damaged):
            status, _ = api(sidecar, "POST", f"/v1/sessions/{session}/checkpoints",
                            json.dumps({"remaining": 3, "state": {"repo": "/src"}}).encode())
            assert status == 200
    with sqlite3.connect(state / "watchdog.sqlite3") as db:
        for session, data in damaged.items():
            db.execute("UPDATE sessions SET data=? WHERE id=?", (data, session))
    with running_server(sidecar_config(state)) as sidecar:
        status, context = api(sidecar, "GET", "/v1/sessions/intact/context")
        assert status == 200 and context["facts"] == {"repo": "/src"}
        for session in damaged:
            status, answer = api(sidecar, "GET", f"/v1/sessions/{session}/context")
            assert status == 404, answer
            assert answer["error"]["message"] == (
                f"session \"{session}\" is stored but cannot be read (see the log)")
        # a run of such a session, and a checkpoint, start it afresh (its row replaced)
        maker = SpanMaker()
        root = maker.open("invoke_agent a", start=time.time())
        maker.span("chat m", {**chat_attrs(), "watchdog.run.id": "r1",
                              "watchdog.session.id": "not-json"}, parent=root,
                   start=time.time())
        export(sidecar, maker)
        wait_until(lambda: api(sidecar, "GET", "/v1/sessions/not-json/context")[0] == 200,
                   what="the session started afresh by its run")
        assert api(sidecar, "GET", "/v1/sessions/not-json/context")[1]["runs"] == 1
        status, context = api(sidecar, "POST", "/v1/sessions/a-list/checkpoints",
                              json.dumps({"remaining": 2}).encode())
        assert status == 200 and context["checkpoints"] == 1, context
        assert metric_values(sidecar, "agent_watchdog_run_failures_total"
                             ).get("stage=session", 0) >= 2


# -- ids -------------------------------------------------------------------------------------

@pytest.mark.parametrize("run_id", ["{braces}", "a/b", "percent%41", "space d", "ünï€ode",
                                    "trace:{x}?#"])
def test_any_id_the_ingest_accepts_works_in_every_route(sidecar: RunningServer,
                                                        run_id: str) -> None:
    maker = SpanMaker()
    root = maker.open("invoke_agent a", {"watchdog.run.id": run_id}, start=time.time())
    maker.span("execute_tool t", {**tool_attrs("t", "{}", "ok"), "watchdog.run.id": run_id},
               parent=root, start=time.time())  # the run stays active: its root is open
    assert export(sidecar, maker).partial_success.rejected_spans == 0
    for method, suffix, body in (("GET", "", None), ("GET", "/report", None),
                                 ("GET", "/directives", None),
                                 ("POST", "/heartbeat", b'{"messages": 3}'),
                                 ("POST", "/ack", b'{"seq": 0}')):
        status, raw = http_request(method, sidecar.api + run_path(run_id, suffix), body,
                                   {"Accept": "application/json"})
        assert status == 200, (suffix, raw)
    status, detail = api(sidecar, "GET", run_path(run_id))
    assert detail["id"] == run_id


def test_ids_breaking_the_rule_are_refused_at_ingest_and_in_routes(
        sidecar: RunningServer) -> None:
    maker = SpanMaker()
    maker.span("chat m", {**chat_attrs(), "watchdog.run.id": "bad\x01id"}, start=time.time())
    maker.span("chat m", {**chat_attrs(), "watchdog.run.id": "ok",
                          "watchdog.session.id": "s\x7f"}, start=time.time())
    maker.span("chat m", {**chat_attrs(), "watchdog.run.id": "fine"}, start=time.time())
    # ids too long are refused whole, never cut (two cut to one prefix would be one run)
    for suffix in ("a", "b"):
        maker.span("chat m", {**chat_attrs(), "watchdog.run.id": "x" * 250 + suffix},
                   start=time.time())
        maker.span("chat m", {**chat_attrs(), "watchdog.run.id": "ok-" + suffix,
                              "watchdog.session.id": "s" * 250 + suffix}, start=time.time())
    response = export(sidecar, maker)
    assert response.partial_success.rejected_spans == 6
    assert "3 invalid_run_id, 3 invalid_session_id" in response.partial_success.error_message
    assert not [run for run in sidecar.get_json("/v1/runs")["runs"] if len(run["id"]) >= 200]
    assert api(sidecar, "GET", run_path("fine"))[0] == 200
    for target in (run_path("bad\x01id"), "/v1/sessions/s%7F/context", run_path("x" * 201)):
        status, answer = api(sidecar, "GET", target)
        assert status == 400 and "is not allowed" in answer["error"]["message"], answer


# -- codings and tokens ----------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, br"])
@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
def test_unsupported_content_encoding_is_415_with_a_status(guarded: Guarded, encoding: str,
                                                           content_type: str) -> None:
    status, headers, body = post_full(guarded.sidecar, valid_body(), content_type,
                                      {"Content-Encoding": encoding})
    assert status == 415
    assert headers["Content-Type"].startswith(content_type)
    assert f"unsupported Content-Encoding {encoding!r}" in status_message(
        body, content_type).message
    guarded.assert_intact()


def test_a_short_token_is_refused_for_a_non_loopback_bind() -> None:
    config = Config(api_token="x", otlp_http_address="0.0.0.0:4318")
    with pytest.raises(ConfigError, match=r"api_token is 1 characters: .* needs at least 16"):
        config.validate()
    Config(api_token="x").validate()  # loopback only: the pod's own processes
    Config(api_token="0123456789abcdef", otlp_http_address="0.0.0.0:4318").validate()


# -- admission -------------------------------------------------------------------------------

def test_slow_uploaders_do_not_starve_other_exporters(tmp_path: Path) -> None:
    """A stalled upload gives its processing slot back within a rate window, so 100 of them
    (with 2 slots) cannot keep a normal exporter out (OTel's exporter retries a 503)."""
    with start_guarded(tmp_path, max_pending_requests=2) as guarded:
        sidecar = guarded.sidecar
        slow = [SlowUpload(sidecar, valid_body()) for _ in range(100)]
        try:
            maker = SpanMaker()
            for index in range(10):  # real exporters (they retry a 503), while the 100 stall
                maker.span("chat m", {**chat_attrs(), "watchdog.run.id": f"fast-{index}"},
                           start=time.time())
                export_http(sidecar, maker.take())
            # Each slow upload was either admitted (and parked while slow: it completes now)
            # or refused at once with 503 + Retry-After; none hangs, none failed.
            answers = Counter(upload.finish()[0] for upload in slow)
            assert set(answers) <= {200, 503} and answers[200] >= 2, answers
        finally:
            for upload in slow:
                upload.sock.close()
        for index in range(10):
            assert api(sidecar, "GET", run_path(f"fast-{index}"))[0] == 200
        guarded.assert_intact()


def test_slow_uploaders_arriving_all_the_time_never_refuse_an_exporter(tmp_path: Path) -> None:
    """Slow uploads keep arriving (100 in all, a dozen just before each export): each takes a
    free slot as it comes, and used to keep it for its first rate window, so an exporter that
    sends once (no retry) was refused with 503. A newcomer now takes the slot of an upload that
    is behind the minimum rate at once: every one of the 8 exporters is served."""
    with start_guarded(tmp_path, max_pending_requests=2) as guarded:
        sidecar = guarded.sidecar
        slow: list[SlowUpload] = []
        statuses = []
        try:
            maker = SpanMaker()
            for index in range(8):
                slow += [SlowUpload(sidecar, valid_body()) for _ in range(13 if index else 9)]
                time.sleep(0.05)  # they are received, and have sent 10 bytes in 50 ms
                maker.span("chat m", {**chat_attrs(), "watchdog.run.id": f"once-{index}"},
                           start=time.time())
                statuses.append(post(sidecar, encode(maker.take()).SerializeToString())[0])
            assert len(slow) == 100
            assert statuses == [200] * 8, statuses
            answers = Counter(upload.finish()[0] for upload in slow)
            assert set(answers) <= {200, 503} and answers[200] >= 2, answers
        finally:
            for upload in slow:
                upload.sock.close()
        for index in range(8):
            assert api(sidecar, "GET", run_path(f"once-{index}"))[0] == 200
        guarded.assert_intact()


def test_uploads_are_bounded_per_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission_module, "MAX_UPLOADS_PER_CLIENT", 3)
    with start_guarded(tmp_path) as guarded:
        held = [SlowUpload(guarded.sidecar, valid_body()) for _ in range(3)]
        status, headers, body = post_full(guarded.sidecar, valid_body())
        assert status == 503 and headers["Retry-After"] == "1"
        assert "at most 3 per client" in status_message(body, PROTOBUF).message
        for upload in held:
            assert upload.finish()[0] == 200
        assert post(guarded.sidecar, b"")[0] == 200


def test_grpc_refuses_past_its_bound_instead_of_queueing(tmp_path: Path) -> None:
    """Calls past ``max_pending_requests`` that arrive while the event loop is busy are
    refused UNAVAILABLE with a RetryInfo (every OTLP exporter retries it) once it is free,
    before their message is read (past ``CALLS_PER_SLOT`` times that many in progress, gRPC
    refuses them itself with RESOURCE_EXHAUSTED); the admitted ones are served."""
    bodies = []
    for index in range(8):  # distinct bodies (a repeated one is a retry), applied in slices
        maker = SpanMaker()
        for span in range(300):
            maker.span("chat m", {**chat_attrs(), "watchdog.run.id": f"g-{index}-{span}"},
                       start=time.time())
        bodies.append(encode(maker.take()).SerializeToString())
    with start_guarded(tmp_path, max_pending_requests=2) as guarded:
        sidecar = guarded.sidecar
        blocked = threading.Event()

        def busy_loop() -> None:  # every call below arrives while the loop is busy
            blocked.set()
            # The stimulus, not a wait for a result: grpc.aio answers (and refuses) calls only
            # through this loop, so nothing observable happens until the hold ends.
            time.sleep(1.0)

        hold = threading.Thread(target=sidecar.call, args=(busy_loop,))
        hold.start()
        blocked.wait(10)
        results: list[grpc.StatusCode] = []
        retry_after: set[int] = set()  # RetryInfo delays of the calls refused UNAVAILABLE
        with grpc.insecure_channel(sidecar.grpc_target) as channel:
            call = channel.unary_unary("/opentelemetry.proto.collector.trace.v1."
                                       "TraceService/Export")
            futures = [call.future(body, timeout=30) for body in bodies]
            for future in futures:
                try:
                    future.result()
                    results.append(grpc.StatusCode.OK)
                except grpc.RpcError as exc:
                    error: grpc.Call = exc  # type: ignore[assignment]
                    results.append(error.code())
                    trailers = dict(error.trailing_metadata() or ())
                    if error.code() is grpc.StatusCode.UNAVAILABLE:
                        retry_after.add(error_details_pb2.RetryInfo.FromString(
                            trailers["google.rpc.retryinfo-bin"]).retry_delay.seconds)
        hold.join()
        assert results.count(grpc.StatusCode.OK) >= 2, results
        assert grpc.StatusCode.UNAVAILABLE in results and retry_after == {1}, results
        assert set(results) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                grpc.StatusCode.UNAVAILABLE}, results
        assert grpc_export(sidecar, b"") == b""
        guarded.assert_intact()


# -- redaction everywhere ----------------------------------------------------------------------

LEAK_ARGS = json.dumps({"payload": json.dumps({"user": "alice", "password": "hunter2-leak"})})
LEAK_RESULT = json.dumps({"config": json.dumps({"api_key": "leak-key-9876"}),
                          "env": "DB_PASSWORD=leak-env-5555\nMODE=prod"})
LEAKS = ("hunter2-leak", "leak-key-9876", "leak-env-5555")


def test_secrets_in_json_encoded_strings_are_never_stored_or_shown(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with running_server(sidecar_config(state)) as sidecar:
        maker = SpanMaker()
        root = maker.open("invoke_agent a", {"watchdog.run.id": "leaky"}, start=time.time())
        for index in range(4):  # the same call 4 times: repeated-tool-call winds it down
            maker.span("execute_tool fetch", tool_attrs("fetch", LEAK_ARGS, LEAK_RESULT,
                                                         **{"watchdog.run.id": "leaky"}),
                       parent=root, start=time.time() + index)
        export(sidecar, maker)
        poll = wait_until(lambda: strict_json(http_request(
            "GET", sidecar.api + run_path("leaky", "/directives"))[1])["directives"],
            what="the wind-down directive")
        assert poll[0]["report_prompt"] and "[REDACTED]" in poll[0]["report_prompt"]
        shown = [  # where the tool calls are shown: redacted
            http_request("GET", sidecar.api + run_path("leaky", "/report"))[1],
            http_request("GET", sidecar.api + run_path("leaky", "/report"),
                         headers={"Accept": "application/json"})[1],
            json.dumps(poll).encode(),  # the same JSON SSE and webhooks carry
        ]
        for body in shown:
            assert b"[REDACTED]" in body, body[:300]
        shown.append(http_request("GET", sidecar.api + run_path("leaky"))[1])
        for body in shown:
            for secret in LEAKS:
                assert secret.encode() not in body, body[:300]
    for path in state.iterdir():  # the SQLite files, WAL included
        data = path.read_bytes()
        for secret in LEAKS:
            assert secret.encode() not in data, path


def test_a_run_that_cannot_be_encoded_does_not_stop_the_flush(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "state"))
    good = {"key": "good", "agent": "a", "ended": False, "last_seen": 1.0}
    bad = {"key": "bad", "agent": "a", "ended": False, "last_seen": 1.0,
           "budget": {"max_tokens": float("nan")}}
    assert store.save([bad, good], []) == ["bad"]  # skipped and named; the rest is written
    assert store.get_run("good") == good
    assert store.get_run("bad") is None
    store.close()


@pytest.mark.parametrize("depth", [50, 2000])
def test_deeply_nested_attribute_values_over_grpc(guarded: Guarded, depth: int) -> None:
    """An AnyValue nested ``depth`` deep: applied (within the parser's recursion limit) or
    refused with INVALID_ARGUMENT — never INTERNAL."""
    request = ExportTraceServiceRequest.FromString(valid_body())
    span = request.resource_spans[0].scope_spans[0].spans[0]
    value = span.attributes.add(key="gen_ai.tool.call.arguments").value
    for _ in range(depth):
        value = value.kvlist_value.values.add(key="k").value
    value.string_value = "leaf"
    body = request.SerializeToString()
    try:
        grpc_export(guarded.sidecar, body)
    except grpc.RpcError as exc:
        assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT, exc
        assert "invalid OTLP protobuf payload" in (exc.details() or "")
    else:
        assert depth < 100  # upb's recursion limit: deeper is refused
    guarded.assert_intact()


@pytest.mark.parametrize("relay", ["python", "native"])
def test_a_header_the_http_parser_refuses_is_not_shown(tmp_path: Path, relay: str) -> None:
    """A header the parser refuses (past its limit, a control character in it) is refused
    without its value: an `Authorization` bearing an API key is neither logged nor echoed, on
    every HTTP port, the model endpoint's on both relays (aiohttp's own messages quote the
    line: its first 100 bytes, or the bytes around the character)."""
    ports = {**fresh_ports(), "model": free_port()}
    secret = "sk-proj-" + "Q7" * 40
    env = serve_env(tmp_path / "state", ports, WATCHDOG_MODEL_RELAY=relay,
                    WATCHDOG_MODEL_UPSTREAM="http://127.0.0.1:9/v1")
    answered = []
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        with running_sidecar(env, ports["metrics"], log):
            # (aiohttp reads a header line up to 8,190 bytes, the compiled relay a head up to
            # some 400 KiB)
            long = 600_000 if relay == "native" else 9000
            for port, path, size in ((ports["api"], b"/v1/runs", 9000),
                                     (ports["otlp_http"], b"/v1/traces", 9000),
                                     (ports["model"], b"/v1/chat/completions", long)):
                for rest in (b"x" * size, b"\x01"):  # too long; a control character in it
                    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                        with suppress(OSError):  # (the server may close before it has all)
                            sock.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n"
                                         b"Authorization: Bearer " + secret.encode() + rest
                                         + b"\r\nContent-Length: 2\r\n\r\n{}")
                        answer = b""
                        with suppress(OSError):
                            while chunk := sock.recv(65536):
                                answer += chunk
                    answered.append(answer)
                    status = answer.split(b"\r\n")[0].split(b" ")[1]
                    assert status in (b"400", b"431"), answer[:300]
        log.seek(0)
        text = log.read()
    assert secret[:20] not in text, text[-3000:]
    for answer in answered:
        assert secret[:20].encode() not in answer, answer[:300]


def raw_answer(port: int, request: bytes, byte_at_a_time: bool = False) -> bytes:
    """What a loopback port answers to these bytes, until it closes the connection
    (``byte_at_a_time``: a byte a segment, as a slow client's head comes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        with suppress(OSError):  # (the server may close before it has all)
            if byte_at_a_time:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for index in range(len(request)):
                    sock.sendall(request[index:index + 1])
                    time.sleep(0.002)  # (each byte a read of its own)
            else:
                sock.sendall(request)
        answer = b""
        with suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
    return answer


def test_a_head_the_http_parser_refuses_is_answered_an_otlp_status(tmp_path: Path) -> None:
    """OTLP: the body of every 4xx is a ``google.rpc.Status``, in the request's encoding. A head
    the HTTP parser refuses (a header past its limit, a control character) was answered
    aiohttp's text/plain; it is a Status as the receiver's own refusals are: in the encoding
    its Content-Type line names, JSON when it names none (as for a type the receiver does not
    know)."""
    ports = fresh_ports()
    with running_sidecar(serve_env(tmp_path / "state", ports), ports["metrics"]):
        for content_type, answered in ((b"application/x-protobuf", PROTOBUF),
                                       (b"Application/JSON; charset=utf-8", JSON),
                                       (None, JSON), (b"text/plain", JSON)):
            for bad in (b"X-Long: " + b"b" * 9000, b"X-Ctl: a\x01b"):
                typed = [b"Content-Type: " + content_type] if content_type else []
                head = b"\r\n".join([b"POST /v1/traces HTTP/1.1", b"Host: x", *typed, bad,
                                      b"Content-Length: 2", b"", b"{}"])
                status_code, headers, body = _raw_answer(ports["otlp_http"], head)
                assert status_code == "400", (status_code, headers)
                assert headers["content-type"] == answered, (content_type, headers)
                message = _status_of(body, answered)
                assert message.startswith("malformed HTTP request: "), message
                assert "bbbb" not in message, message  # (what it refused: not its bytes)


def _raw_answer(port: int, data: bytes, byte_at_a_time: bool = False
                ) -> tuple[str, dict[str, str], bytes]:
    """The status, headers and body the OTLP port answers ``data`` (``raw_answer``)."""
    answer = raw_answer(port, data, byte_at_a_time)
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return lines[0].split(" ")[1], headers, body


def _status_of(body: bytes, content_type: str) -> str:
    """The message of the ``google.rpc.Status`` ``body`` is, in ``content_type``'s encoding."""
    from google.rpc import status_pb2

    if content_type == PROTOBUF:
        status = status_pb2.Status()
        status.ParseFromString(body)
        return str(status.message)
    return str(json.loads(body)["message"])


def _export_outcomes(metrics_port: int) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    _, text = http_request("GET", f"http://127.0.0.1:{metrics_port}/metrics")
    return {sample.labels["outcome"]: sample.value
            for family in text_string_to_metric_families(text.decode())
            if family.name == "agent_watchdog_export_requests"
            for sample in family.samples if sample.name.endswith("_total")}


def test_every_refusal_of_the_otlp_port_is_an_otlp_status_and_counted(tmp_path: Path) -> None:
    """OTLP: the body of every 4xx is a ``google.rpc.Status`` in the request's encoding. A path
    the port does not serve (404) and a method a path does not take (405, with ``Allow``) were
    aiohttp's text/plain; a head the parser refused went uncounted, and sent a byte a read it
    was answered JSON whatever its Content-Type named. Each is a Status in the request's
    encoding now, counted in ``export_requests_total``; a real exporter sent to a wrong path
    gets its 404, counted once, saying where traces and logs go (it named traces alone: an
    SDK's logs exporter pointed at the port seemed turned away too)."""
    ports = fresh_ports()
    port = ports["otlp_http"]
    with running_sidecar(serve_env(tmp_path / "state", ports), ports["metrics"]):
        for content_type, answered in ((PROTOBUF, PROTOBUF), (JSON, JSON), (None, JSON)):
            typed = f"Content-Type: {content_type}\r\n".encode() if content_type else b""
            status, headers, body = _raw_answer(
                port, b"POST /v1/trace HTTP/1.1\r\nHost: x\r\n" + typed
                + b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
            assert (status, headers["content-type"]) == ("404", answered), (status, headers)
            assert _status_of(body, answered) == (
                "no OTLP/HTTP endpoint at '/v1/trace': traces are sent to POST /v1/traces, logs "
                "to POST /v1/logs (metrics: only passed on, with forward_endpoint set)")
            status, headers, body = _raw_answer(
                port, b"GET /v1/traces HTTP/1.1\r\nHost: x\r\n" + typed
                + b"Connection: close\r\n\r\n")
            assert (status, headers["content-type"], headers["allow"]) == (
                "405", answered, "POST"), (status, headers)
            assert "GET is not allowed" in _status_of(body, answered)
            status, headers, body = _raw_answer(
                port, b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n" + typed
                + b"X-Ctl: a\x01b\r\nContent-Length: 2\r\n\r\n{}", byte_at_a_time=True)
            assert (status, headers["content-type"]) == ("400", answered), (status, headers)
            assert _status_of(body, answered).startswith("malformed HTTP request: ")
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/trace", timeout=5)
        maker = SpanMaker()
        maker.span("chat", chat_attrs())
        assert exporter.export(maker.take()) is SpanExportResult.FAILURE
        exporter.shutdown()
        outcomes = _export_outcomes(ports["metrics"])
    assert (outcomes.get("not_found"), outcomes.get("method_not_allowed"),
            outcomes.get("invalid")) == (4.0, 3.0, 3.0), outcomes


def test_a_request_the_http_parser_refuses_is_one_warning_line(tmp_path: Path) -> None:
    """A request line or a header past the HTTP parser's limit, on each HTTP port: a 400, and
    one warning line in the log naming it, never an error with the parser's traceback."""
    ports = fresh_ports()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        with running_sidecar(serve_env(tmp_path / "state", ports), ports["metrics"], log):
            for port, request in ((ports["api"], b"GET /v1/runs/" + b"a" * 9000 + b" HTTP/1.1"
                                   b"\r\nHost: x\r\n\r\n"),
                                  (ports["otlp_http"], b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n"
                                   b"X-Long: " + b"b" * 9000 + b"\r\n\r\n")):
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    sock.sendall(request)
                    assert b" 400 " in sock.recv(65536).split(b"\r\n")[0]
        log.seek(0)
        text = log.read()
    assert "Traceback" not in text and "ERROR" not in text, text[-3000:]
    assert text.count("bad HTTP request from 127.0.0.1") == 2, text[-3000:]


def test_an_idle_metrics_connection_is_closed_after_its_keep_alive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics port listens on all interfaces without a token: a connection that made one
    request and then idled held a file for aiohttp's hour. It is closed after
    ``METRICS_KEEPALIVE``; the other ports keep aiohttp's."""
    monkeypatch.setattr("watchdog.shell.server.METRICS_KEEPALIVE", 0.2)
    with running_server(sidecar_config(tmp_path / "state")) as car:
        used = {name: socket.create_connection(car.server.addresses[name], timeout=10)
                for name in ("metrics", "api")}
        for name, path in (("metrics", b"/readyz"), ("api", b"/v1/runs")):
            used[name].sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n\r\n")
            assert used[name].recv(65536).startswith(b"HTTP/1.1 200"), name
        with used["metrics"] as sock:
            assert sock.recv(4096) == b""  # closed by the sidecar once idle
        with used["api"] as sock:  # past that, the API's connection still takes a request
            sock.sendall(b"GET /v1/runs HTTP/1.1\r\nHost: t\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")


def test_a_grpc_client_on_the_otlp_http_port_is_told_where_grpc_goes(tmp_path: Path) -> None:
    """An OTLP exporter set to gRPC and given the OTLP/HTTP port (a common slip): its HTTP/2
    preface was refused as "Pause on PRI/Upgrade", aiohttp's words, in the log and the answer.
    Each HTTP port says what it is and where gRPC goes; a real gRPC exporter's attempt is one
    warning line saying so."""
    ports = fresh_ports()
    said = ("an HTTP/2 connection (a gRPC client?) on an HTTP/1.1 port: OTLP/gRPC goes to "
            "otlp_grpc_address (4317 by default)")
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        with running_sidecar(serve_env(tmp_path / "state", ports), ports["metrics"], log):
            status, _, body = _raw_answer(ports["otlp_http"], preface)
            assert (status, _status_of(body, JSON)) == ("400", f"malformed HTTP request: {said}")
            answer = raw_answer(ports["api"], preface)
            assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["message"] == (
                f"malformed HTTP request: {said}"), answer
            assert raw_answer(ports["metrics"], preface).endswith(said.encode())
            with grpc.insecure_channel(f"127.0.0.1:{ports['otlp_http']}") as channel:
                export = channel.unary_unary(
                    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                    request_serializer=ExportTraceServiceRequest.SerializeToString,
                    response_deserializer=ExportTraceServiceResponse.FromString)
                with pytest.raises(grpc.RpcError) as refused:
                    export(ExportTraceServiceRequest(), timeout=5)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        log.seek(0)
        text = log.read()
    assert "Pause on PRI" not in text and "Traceback" not in text, text[-3000:]
    assert f"bad HTTP request from 127.0.0.1: {said}" in text, text[-3000:]


def test_a_parser_refusal_is_said_whole_up_to_the_bytes_it_quotes(tmp_path: Path) -> None:
    """What aiohttp's parser refused is said up to the bytes it quotes, never cut inside its
    own words: ``Transfer-Encoding can't be present with Content-Length`` was said as
    ``Transfer-Encoding can`` (the apostrophe taken for a quote), on each HTTP port aiohttp
    serves (OTLP/HTTP, the control API, the model endpoint's Python relay); a refused header's
    bytes are still never quoted."""
    ports = {**fresh_ports(), "model": free_port()}
    env = serve_env(tmp_path / "state", ports, WATCHDOG_MODEL_RELAY="python",
                    WATCHDOG_MODEL_UPSTREAM="http://127.0.0.1:9/v1")
    smuggled = (b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    control = (b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nX-Key: sk-\x01secretkey\r\n"
               b"Content-Length: 2\r\n\r\n{}")
    with running_sidecar(env, ports["metrics"]):
        for port in ("otlp_http", "api", "model"):
            for request, said in ((smuggled, "Transfer-Encoding can't be present with "
                                             "Content-Length"),
                                  (control, "")):
                answer = raw_answer(ports[port], request)
                head, _, body = answer.partition(b"\r\n\r\n")
                assert head.split(b" ")[1] == b"400", (port, answer[:300])
                text = json.dumps(json.loads(body))
                assert said in text, (port, text)
                assert b"secretkey" not in answer, (port, answer[:300])


def test_a_long_otlp_json_export_leaves_the_loop_to_the_other_requests(tmp_path: Path) -> None:
    """OTLP/JSON is read by protobuf's JSON parser, which is Python: a body of megabytes (within
    ``max_request_bytes``) is seconds of CPU. Parsed on the event loop it held every other
    request that long (a client SDK's sync, a model request's decision, the API: one export
    stalled them all); parsed on a thread, the API answers meanwhile. Measured in the same run:
    the longest answer of the API while the export is read is a small part of the export's
    own time (it was all of it)."""
    ports = fresh_ports()
    now = time.time_ns()
    spans = [{"traceId": "0" * 30 + "77", "spanId": f"{index + 1:016x}", "name": "t",
              "startTimeUnixNano": str(now), "endTimeUnixNano": str(now + 1),
              "attributes": [
                  {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                  {"key": "watchdog.run.id", "value": {"stringValue": "wide-attrs"}},
                  *({"key": f"a{i}", "value": {"intValue": str(i)}} for i in range(25_000))]}
             for index in range(5)]
    body = json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]})
    answers: list[float] = []
    exported = threading.Event()
    with running_sidecar(serve_env(tmp_path / "state", ports), ports["metrics"]):
        api = f"http://127.0.0.1:{ports['api']}"

        def probe() -> None:
            while not exported.is_set():
                started = time.perf_counter()
                status, _ = http_request("GET", api + "/v1/rules", timeout=120)
                assert status == 200
                answers.append(time.perf_counter() - started)

        prober = threading.Thread(target=probe)
        prober.start()
        try:
            wait_until(lambda: answers, what="the API's first answer")
            started = time.perf_counter()
            status, answer = http_request(
                "POST", f"http://127.0.0.1:{ports['otlp_http']}/v1/traces", body.encode(),
                {"Content-Type": "application/json"}, timeout=120)
            took = time.perf_counter() - started
        finally:
            exported.set()
            prober.join()
    assert status == 200, answer[:300]
    assert max(answers) < 0.5 * took, (max(answers), took)


@pytest.mark.parametrize("relay", ["native", "python"])
def test_a_connection_that_sends_no_request_is_closed(tmp_path: Path, relay: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection to an HTTP port that sends nothing (or half a head) is closed once
    ``FIRST_REQUEST_TIMEOUT`` has passed: each held a file for an hour (aiohttp's keep-alive),
    and a few thousand took every file the listeners accept with. One that has sent a request
    stays open for the next (keep-alive). The compiled relay closes its own (at 10 s, or
    ``model_body_timeout`` if shorter)."""
    monkeypatch.setattr("watchdog.shell.connections.FIRST_REQUEST_TIMEOUT", 0.2)
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream="http://127.0.0.1:9/v1", model_relay=relay)
    ports = ["otlp_http", "api", "metrics"] + (["model"] if relay == "python" else [])
    with running_server(config) as car:
        silent = {name: socket.create_connection(car.server.addresses[name], timeout=10)
                  for name in ports}
        silent["api"].sendall(b"GET /v1/runs HTTP/1.1\r\nHost: t\r\n")  # half a head
        used = socket.create_connection(car.server.addresses["metrics"], timeout=10)
        request = b"GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n"
        used.sendall(request)
        assert used.recv(4096).startswith(b"HTTP/1.1 200")
        for name, sock in silent.items():
            with sock:
                assert sock.recv(4096) == b"", name  # closed by the sidecar, without a word
        used.sendall(request)  # past the timeout, still open: it had sent a request
        assert used.recv(4096).startswith(b"HTTP/1.1 200")
        used.close()
