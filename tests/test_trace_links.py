"""Links to the trace (DESIGN §13): config ``trace_url`` puts each run's link into the tracing
UI in the API (list, detail, heartbeat), the report (Markdown and JSON) and ``watchdog runs -o
wide``; a bad template is refused at load. Spans reach a real sidecar through the OTel SDK's
own OTLP/HTTP exporter."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import RunningServer, http_request, running_server, sidecar_config
from tests.otel import explorer_run, export_http
from tests.spans import SpanMaker
from watchdog.shell.cli import main
from watchdog.shell.config import load
from watchdog.shell.errors import ConfigError

TEMPLATE = "https://grafana.example/explore?trace={trace_id}&span={span_id}"
RUN_ID = "job:linked"


@pytest.fixture
def linked(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(sidecar_config(tmp_path / "state", trace_url=TEMPLATE)) as server:
        yield server


def ids(span: object) -> tuple[str, str]:
    context = span.get_span_context()  # type: ignore[attr-defined]
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def test_every_view_of_a_run_carries_the_link_to_its_first_trace(
        linked: RunningServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = SpanMaker()
    spans = explorer_run(RUN_ID, maker=first)
    export_http(linked, spans)
    trace_id, first_span = ids(min(spans, key=lambda span: span.start_time or 0))
    # the root has not ended yet: the link names the run's first span
    expected = TEMPLATE.format(trace_id=trace_id, span_id=first_span)
    assert linked.get_json(f"/v1/runs/{RUN_ID}")["trace_url"] == expected
    status, body = http_request("POST", f"{linked.api}/v1/runs/{RUN_ID}/heartbeat",
                                json.dumps({"messages": 3}).encode(),
                                {"Content-Type": "application/json"})
    assert status == 200 and json.loads(body)["trace_url"] == expected

    # more traces of the run (it was resumed), one with its agent span: the link stays
    # with the first trace
    spans = explorer_run(RUN_ID, maker=first, end=True)
    root = next(span for span in spans if span.name.startswith("invoke_agent"))
    assert ids(root)[0] != trace_id
    export_http(linked, explorer_run(RUN_ID, maker=SpanMaker()))
    export_http(linked, spans)
    detail = linked.get_json(f"/v1/runs/{RUN_ID}")
    assert detail["trace_id"] == trace_id
    assert detail["trace_url"] == expected

    listed = {run["id"]: run for run in linked.get_json("/v1/runs")["runs"]}
    assert listed[RUN_ID]["trace_url"] == expected

    status, body = http_request("GET", f"{linked.api}/v1/runs/{RUN_ID}/report")
    assert status == 200 and f"- **Trace:** <{expected}>" in body.decode()
    status, body = http_request("GET", f"{linked.api}/v1/runs/{RUN_ID}/report",
                                headers={"Accept": "application/json"})
    assert json.loads(body)["run"]["trace_url"] == expected


    monkeypatch.delenv("WATCHDOG_URL", raising=False)
    monkeypatch.delenv("WATCHDOG_API_TOKEN", raising=False)
    assert main(["runs", "--url", linked.api, "-o", "wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "TRACE"
    assert next(line.split() for line in lines if line.startswith(RUN_ID))[-1] == expected


def test_the_root_span_names_the_link_once_it_has_come(linked: RunningServer) -> None:
    maker = SpanMaker()
    spans = explorer_run("job:rooted", maker=maker, end=True)
    export_http(linked, spans)
    root = next(span for span in spans if span.name.startswith("invoke_agent"))
    trace_id, span_id = ids(root)
    assert linked.get_json("/v1/runs/job:rooted")["trace_url"] == TEMPLATE.format(
        trace_id=trace_id, span_id=span_id)


def test_without_a_template_runs_have_no_link(sidecar: RunningServer) -> None:
    export_http(sidecar, explorer_run(RUN_ID))
    assert sidecar.get_json(f"/v1/runs/{RUN_ID}")["trace_url"] is None
    assert [run["trace_url"] for run in sidecar.get_json("/v1/runs")["runs"]] == [None]


@pytest.mark.parametrize(("template", "problem"), [
    ("https://x.example/{trace}", "unknown placeholder {trace}: the placeholders are "
                                  "{trace_id} and {span_id}"),
    ("https://x.example/{span_id}", "it must contain {trace_id}"),
    ("https://x.example/{trace_id", "expected '}' before end of string"),
    ("https://x.example/{}/{trace_id}", "unknown placeholder {}"),
    ("tempo/{trace_id}", "it must be an http:// or https:// URL"),
])
def test_a_bad_template_is_refused_at_load(template: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(env={"WATCHDOG_TRACE_URL": template})
    assert f"trace_url={template!r} is not allowed: {problem}" in caught.value.message


def test_a_good_template_loads() -> None:
    config = load(env={"WATCHDOG_TRACE_URL": "https://jaeger.example/trace/{trace_id}"})
    assert config.trace_url == "https://jaeger.example/trace/{trace_id}"
    assert load(env={"WATCHDOG_FLEET_WINDOW": "2m"}).fleet_window == 120.0
    with pytest.raises(ConfigError, match=r"fleet_window='0' is not allowed"):
        load(env={"WATCHDOG_FLEET_WINDOW": "0"})
