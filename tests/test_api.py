"""The control API over real HTTP, against a real sidecar fed by the OTel SDK's OTLP exporter."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    RunningServer,
    http_request,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.otel import SECRET, explorer_run, export_http
from tests.spans import SpanMaker, tool_attrs

ACTIVE_ID = "job:42/a b?c"  # ':' '/' ' ' '?' all survive the round trip in one path segment
ENDED_ID = "job:43"


def path(run_id: str, suffix: str = "") -> str:
    return "/v1/runs/" + urllib.parse.quote(run_id, safe="") + suffix


def request(sidecar: RunningServer, method: str, target: str, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    status, raw = http_request(method, sidecar.api + target, data, headers)
    return status, json.loads(raw)


@pytest.fixture
def fed(sidecar: RunningServer) -> Iterator[RunningServer]:
    """One active run of ``explorer`` and one ended run of ``writer``."""
    export_http(sidecar, explorer_run(ACTIVE_ID))
    export_http(sidecar, explorer_run(ENDED_ID, agent="writer", end=True))
    yield sidecar


def ids(sidecar: RunningServer, query: str = "") -> list[str]:
    return [run["id"] for run in sidecar.get_json("/v1/runs" + query)["runs"]]


def test_list_and_filter_runs(fed: RunningServer) -> None:
    assert sorted(ids(fed)) == sorted([ACTIVE_ID, ENDED_ID])
    assert ids(fed, "?state=active") == [ACTIVE_ID]
    assert ids(fed, "?state=ended") == [ENDED_ID]
    assert ids(fed, "?agent=writer") == [ENDED_ID]
    assert ids(fed, "?agent=nobody") == []
    assert len(ids(fed, "?limit=1")) == 1
    (run,) = fed.get_json("/v1/runs?state=active")["runs"]
    assert run["agent"] == "explorer" and run["state"] == "active"
    assert (run["iterations"], run["tool_calls"], run["errors"]) == (2, 4, 1)
    assert run["total_tokens"] == 490


def test_run_detail(fed: RunningServer) -> None:
    detail = fed.get_json(path(ACTIVE_ID))
    assert detail["id"] == ACTIVE_ID and detail["agent"] == "explorer"
    assert detail["state"] == "active" and detail["terminal_state"] is None
    signals = detail["signals"]
    assert signals["tools"] == {"search_docs": 2, "read_env": 1, "read_file": 1}
    assert signals["repeated_tool_call"] == 2  # key order and spacing do not matter
    assert signals["last_error"].startswith("FileNotFoundError")
    assert detail["budget"] == {} and detail["directives"] == []

    ended = fed.get_json(path(ENDED_ID))
    assert ended["state"] == "ended"
    assert ended["terminal_state"] == "completed" and ended["has_final_answer"] is True
    assert ended["final_output"] == "The retry policy is exponential backoff."
    assert ended["ended_at"] is not None


def test_trace_keyed_run_is_found_by_its_id(sidecar: RunningServer) -> None:
    maker = SpanMaker()
    span = maker.span("execute_tool ls", tool_attrs("ls", '{"dir": "."}', "a.py b.py"))
    export_http(sidecar, maker.take())
    run_id = "trace:" + format(span.get_span_context().trace_id, "032x")
    assert sidecar.get_json(path(run_id))["id"] == run_id
    assert sidecar.get_json(f"/v1/runs/{run_id}")["id"] == run_id  # ':' unescaped works too


def test_unknown_run_and_endpoint_are_json_404(sidecar: RunningServer) -> None:
    status, body = request(sidecar, "GET", path("no-such-run"))
    assert status == 404
    assert body == {"error": {"code": "not_found", "message": 'no run "no-such-run"'}}
    status, body = request(sidecar, "GET", path("no-such-run", "/report"))
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = request(sidecar, "GET", "/v1/nothing-here")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = request(sidecar, "DELETE", "/v1/runs")
    assert status == 405 and body["error"]["code"] == "method_not_allowed"
    # another listener's path, asked of this port: the answer says where it is
    status, body = request(sidecar, "GET", "/metrics")
    assert (status, body["error"]["message"]) == (404, (
        "no such endpoint: GET /metrics on the control API: metrics and health are served on "
        "metrics_address (default 0.0.0.0:9464)"))
    status, body = request(sidecar, "POST", "/v1/traces")
    assert status == 404 and body["error"]["message"].endswith(
        "OTLP/HTTP is received on otlp_http_address (default 127.0.0.1:4318)")


@pytest.mark.parametrize(("query", "named"), [
    ("state=foo", 'state="foo" is not allowed: expected one of active, ended'),
    ("limit=abc", 'limit="abc" is not allowed: expected an integer from 1 to 1000'),
    ("limit=0", 'limit="0"'),
    ("limit=100000", 'limit="100000"'),
])
def test_bad_query_values_are_400(sidecar: RunningServer, query: str, named: str) -> None:
    status, body = request(sidecar, "GET", "/v1/runs?" + query)
    assert status == 400
    assert body["error"]["code"] == "bad_request" and named in body["error"]["message"]


def test_report_markdown(fed: RunningServer) -> None:
    status, raw = http_request("GET", fed.api + path(ACTIVE_ID, "/report"))
    assert status == 200
    text = raw.decode("utf-8")
    assert text.startswith(f"# Progress report: {ACTIVE_ID}\n")
    for expected in ("search_docs", "read_env", "read_file",  # tool names
                     '{"query":"retry policy"}', '{"path":"src/app.py"}',  # argument briefs
                     "docs/retry.md: exponential backoff, max 5 attempts",  # result brief
                     "FileNotFoundError", "No such file: src/app.py",  # the error
                     "`search_docs` was called 2 times with the same arguments"):
        assert expected in text, expected
    assert SECRET not in text and "value: [REDACTED]" in text


def test_report_content_type_and_json(fed: RunningServer) -> None:
    import urllib.request

    with urllib.request.urlopen(fed.api + path(ACTIVE_ID, "/report"), timeout=10) as response:
        assert response.headers["Content-Type"] == "text/markdown; charset=utf-8"
    status, report = request(fed, "GET", path(ACTIVE_ID, "/report"),
                             headers={"Accept": "application/json"})
    assert status == 200
    assert report["run"]["id"] == ACTIVE_ID and report["run"]["tool_calls"] == 4
    tools = [(step["name"], step["detail"], step["result"]) for step in report["steps"]
             if step["kind"] == "tool"]
    assert tools[0] == ("search_docs", '{"query":"retry policy"}',
                        "docs/retry.md: exponential backoff, max 5 attempts")
    assert tools[1] == ("read_env", '{"name":"OPENAI_API_KEY"}', "value: [REDACTED]")
    assert {t["name"]: t["errors"] for t in report["tools"]}["read_file"] == 1
    assert SECRET not in json.dumps(report)
    # Markdown wins when the client prefers it.
    status, raw = http_request("GET", fed.api + path(ACTIVE_ID, "/report"),
                               headers={"Accept": "text/markdown, application/json;q=0.5"})
    assert status == 200 and raw.startswith(b"# Progress report")


def test_ended_run_report_has_final_output(fed: RunningServer) -> None:
    status, raw = http_request("GET", fed.api + path(ENDED_ID, "/report"))
    assert status == 200
    text = raw.decode()
    assert "- **State:** ended: completed" in text
    assert "**Final output:** The retry policy is exponential backoff." in text


def test_heartbeat(fed: RunningServer) -> None:
    status, body = request(fed, "POST", path("no-such-run", "/heartbeat"), {"messages": 3})
    assert status == 404 and body["error"]["code"] == "not_found"

    status, body = request(fed, "POST", path(ACTIVE_ID, "/heartbeat"), {"messages": 12})
    assert status == 200 and body["id"] == ACTIVE_ID and body["messages"] == 12
    assert fed.get_json(path(ACTIVE_ID))["signals"]["messages"] == 12
    status, body = request(fed, "POST", path(ACTIVE_ID, "/heartbeat"), {"messages": 5})
    assert status == 200 and body["messages"] == 12  # a count never shrinks
    assert fed.get_json(path(ACTIVE_ID))["signals"]["messages"] == 12
    assert "ignored" not in body
    # a field it does not read (a misspelt one, or a newer client's): taken, and named
    status, body = request(fed, "POST", path(ACTIVE_ID, "/heartbeat"),
                           {"messages": 13, "in_fligth": 2, "z" * 100: 1})
    assert status == 200 and body["messages"] == 13 and body["in_flight"] == 0, body
    assert body["ignored"] == ["in_fligth", "z" * 64]


@pytest.mark.parametrize(("body", "fragment"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"messages": "many"}', 'messages="many" is not allowed'),
    (b'{"messages": -1}', "messages=-1 is not allowed"),
    (b'{"messages": true}', "messages=true is not allowed"),
    (b'{"messages": null}', "messages=null is not allowed"),
    (b'{"messages": [false, {"a": null}]}', 'messages=[false, {"a": null}] is not allowed'),
    (b'{"messages": "\\u0007 \\u00e4"}', 'messages="\\u0007 \u00e4" is not allowed'),
])
def test_heartbeat_bad_bodies_are_400(fed: RunningServer, body: bytes, fragment: str) -> None:
    status, answer = request(fed, "POST", path(ACTIVE_ID, "/heartbeat"), body,
                             {"Content-Type": "application/json"})
    assert status == 400 and answer["error"]["code"] == "bad_request"
    assert fragment in answer["error"]["message"]


def test_request_body_is_bounded(fed: RunningServer) -> None:
    big = b'{"messages": 1, "pad": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    status, body = request(fed, "POST", path(ACTIVE_ID, "/heartbeat"), big)
    assert status == 413 and body["error"]["code"] == "payload_too_large"


def test_unexpected_failure_is_a_generic_500(sidecar: RunningServer,
                                             monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    def broken(**_: object) -> list[dict[str, Any]]:
        raise RuntimeError("database exploded at /secret/path")

    assert sidecar.server.service is not None
    monkeypatch.setattr(sidecar.server.service.queries, "list_runs", broken)
    with caplog.at_level(logging.ERROR, logger="watchdog.shell.api"):
        status, raw = http_request("GET", sidecar.api + "/v1/runs")
    assert status == 500
    assert json.loads(raw) == {"error": {"code": "internal", "message":
                                         "internal error; the watchdog log has details"}}
    assert b"Traceback" not in raw and b"exploded" not in raw
    assert any("exploded" in (r.exc_text or "") or r.exc_info for r in caplog.records)


def test_token_auth(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "state", api_token="s3cret")
    with running_server(config) as sidecar:
        export_http(sidecar, explorer_run("job:auth"), token="s3cret")
        for target in ("/v1/runs", path("job:auth"), path("job:auth", "/report"),
                       "/v1/unknown"):
            status, raw = http_request("GET", sidecar.api + target)
            assert status == 401, target
            assert json.loads(raw)["error"]["code"] == "unauthorized"
        status, _ = http_request("GET", sidecar.api + "/v1/runs",
                                 headers={"Authorization": "Bearer wrong"})
        assert status == 401
        status, _ = http_request("GET", sidecar.api + "/v1/runs",
                                 headers={"Authorization": "Basic s3cret"})
        assert status == 401
        status, _ = http_request("POST", sidecar.api + path("job:auth", "/heartbeat"),
                                 b'{"messages": 4}')
        assert status == 401
        good = {"Authorization": "Bearer s3cret"}
        assert [r["id"] for r in sidecar.get_json("/v1/runs", good)["runs"]] == ["job:auth"]
        status, _ = http_request("POST", sidecar.api + path("job:auth", "/heartbeat"),
                                 b'{"messages": 4}', good)
        assert status == 200
        assert sidecar.get_json(path("job:auth"), good)["signals"]["messages"] == 4


def test_bytes_at_the_control_api_put_syncs_first_until_their_request_is_dispatched(
        sidecar: RunningServer) -> None:
    """The API's connections tell the priority gate when bytes arrive (DESIGN §8): bulk work
    steps aside from a request's first byte, not from the loop turn its handler starts in."""
    assert sidecar.server.service is not None
    priority = sidecar.server.service.priority
    host, port = sidecar.server.addresses["api"]
    with socket.create_connection((host, port), timeout=10) as conn:
        assert not sidecar.call(lambda: priority.holding)
        conn.sendall(b"GET /v1/runs?limit=1 HTTP/1.1\r\nHost: watchdog\r\n")  # half a request
        wait_until(lambda: sidecar.call(lambda: priority.holding), what="bulk work held")
        conn.sendall(b"\r\n")
        assert conn.recv(65536).startswith(b"HTTP/1.1 200")
        assert not sidecar.call(lambda: priority.holding)  # dispatched: nothing held any more


def test_the_apis_store_reads_run_off_the_event_loop(fed: RunningServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A report's log, a run's children and the ended runs are read on the reader lane: the
    event loop (ingest, syncs) never waits for the disk."""
    assert fed.server.service is not None
    store = fed.server.service.store
    threads: dict[str, set[str]] = {}
    for name in ("activity", "child_runs", "list_runs", "get_run"):
        read = getattr(store, name)

        def spy(*args: Any, _read: Any = read, _name: str = name) -> Any:
            threads.setdefault(_name, set()).add(threading.current_thread().name)
            return _read(*args)

        monkeypatch.setattr(store, name, spy)
    run_id = ids(fed)[0]
    assert request(fed, "GET", path(run_id, "/report"),
                   headers={"Accept": "application/json"})[0] == 200
    assert request(fed, "GET", "/v1/runs?state=ended")[0] == 200
    assert request(fed, "GET", path("run-never-seen"))[0] == 404
    assert set(threads) == {"activity", "child_runs", "list_runs", "get_run"}, threads
    assert all(name.startswith("watchdog-reader") for seen in threads.values()
               for name in seen), threads


def test_a_client_trickling_bytes_holds_bulk_work_back_once(sidecar: RunningServer) -> None:
    """Bytes that make no request hold bulk work for one pause (MAX_PAUSE) at most, and more
    bytes of the same request do not hold it again: a slow client cannot stall ingest."""
    assert sidecar.server.service is not None
    priority = sidecar.server.service.priority
    host, port = sidecar.server.addresses["api"]
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(b"G")
        wait_until(lambda: sidecar.call(lambda: priority.holding), what="bulk work held")
        asyncio.run_coroutine_threadsafe(priority.turn(), sidecar.loop).result(timeout=1)
        assert not sidecar.call(lambda: priority.holding)
        for piece in (b"ET /v1/ru", b"ns HTTP/1.1\r\n", b"Host: x\r\n"):
            conn.sendall(piece)
            time.sleep(0.05)
            assert not sidecar.call(lambda: priority.holding)


def raw_exchange(sidecar: RunningServer, data: bytes, timeout: float = 10) -> tuple[int, Any]:
    """Send ``data`` as it is to the control API; its answer's status and JSON body."""
    host, port = sidecar.server.addresses["api"]
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(data)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = conn.recv(65536)
            assert chunk, received
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = dict(line.split(": ", 1) for line in lines[1:])
        assert fields["Content-Type"].startswith("application/json"), head
        while len(body) < int(fields["Content-Length"]):
            chunk = conn.recv(65536)
            assert chunk, body
            body += chunk
    return int(lines[0].split()[1]), json.loads(body)


@pytest.mark.parametrize(("target", "message"), [
    ("/v1/runs?offset=2", 'query parameter "offset" is not allowed on GET /v1/runs: it takes '
                          "state, agent, session, limit"),
    ("/v1/runs?limit=2&page=2", 'query parameter "page" is not allowed on GET /v1/runs'),
    ("/v1/runs?state=active&state=ended", 'query parameter "state" is given more than once'),
    (path(ACTIVE_ID) + "?verbose=1", 'query parameter "verbose" is not allowed on '
                                     "GET /v1/runs/{id}: it takes none"),
    (path(ACTIVE_ID, "/report") + "?format=json", 'query parameter "format" is not allowed'),
])
def test_unknown_or_repeated_query_parameters_are_400_naming_the_allowed(
        fed: RunningServer, target: str, message: str) -> None:
    status, body = request(fed, "GET", target)
    assert status == 400, body
    assert body["error"]["code"] == "bad_request"
    assert body["error"]["message"].startswith(message), body


def test_a_number_of_thousands_of_digits_is_said_to_be_out_of_range(
        sidecar: RunningServer) -> None:
    status, body = request(sidecar, "POST", "/v1/sessions/s1/checkpoints",
                           b'{"remaining": ' + b"9" * 5000 + b"}")
    assert status == 400
    message = body["error"]["message"]
    assert "(5000 digits) is out of range" in message, message
    assert "int_max_str_digits" not in message and len(message) < 200


def test_a_request_line_over_the_limit_is_a_json_400_without_the_raw_bytes(
        sidecar: RunningServer) -> None:
    status, body = raw_exchange(sidecar, b"GET /v1/runs/" + b"y" * 100_000 + b" HTTP/1.1\r\n"
                                b"Host: x\r\n\r\n")
    assert status == 400
    assert body["error"]["code"] == "bad_request"
    message = body["error"]["message"]
    assert message.startswith("the request line or a header is longer than this server "
                              "reads"), message
    assert "yyyy" not in message and "bytearray" not in message


def test_a_declared_body_over_the_limit_is_413_before_it_is_read(sidecar: RunningServer) -> None:
    """Content-Length 10 GiB with one byte sent: refused at once, not waited for."""
    started = time.monotonic()
    status, body = raw_exchange(sidecar, b"POST " + path("r", "/heartbeat").encode()
                                + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                b"Content-Length: 10737418240\r\n\r\n{", timeout=5)
    assert status == 413 and body["error"]["code"] == "payload_too_large"
    assert "10737418240" in body["error"]["message"]
    assert time.monotonic() - started < 5


def test_a_stalled_body_is_408_after_the_read_timeout(sidecar: RunningServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from watchdog.shell.api import http

    monkeypatch.setattr(http, "BODY_READ_TIMEOUT", 0.5)
    status, body = raw_exchange(sidecar, b"POST " + path("r", "/heartbeat").encode()
                                + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                b"Content-Length: 100\r\n\r\n{", timeout=5)
    assert status == 408 and body["error"] == {
        "code": "request_timeout", "message": "the request body did not arrive within 0.5 s"}
