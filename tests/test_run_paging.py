"""``GET /v1/runs`` page after page (``after=`` the answer's ``next``, key set): every run once,
past the 1,000 a page holds and past the ended runs memory keeps (the rest are read from the
store), and still so while runs start, change and end between the pages. A real sidecar fed
real OTLP/HTTP; the command line follows the pages too."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterable
from typing import Any

from tests.harness import RunningServer, http_request, wait_until
from tests.otel import export_http
from tests.spans import SpanMaker, chat_attrs
from watchdog.core.runs.book import MAX_ENDED_IN_MEMORY

ACTIVE = 1_100  # more than a page
ENDED = MAX_ENDED_IN_MEMORY + 300  # more than memory keeps: the oldest come from the store


def export_runs(sidecar: RunningServer, keys: Iterable[str], end: bool,
                agent: str = "pager", session: str | None = None) -> None:
    """One span per run: a model call in its agent's span (the run is active), or the
    agent's whole span with its answer (the run has ended); ``session``: the runs'."""
    maker = SpanMaker()
    for key in keys:
        t = time.time() - 2
        ids = {"watchdog.run.id": key, "gen_ai.agent.name": agent,
               **({"watchdog.session.id": session} if session else {})}
        if end:
            maker.span(f"invoke_agent {agent}", {"gen_ai.operation.name": "invoke_agent",
                                                 "final_result": "done", **ids},
                       start=t, end=t + 1)
        else:  # (its agent's span, still open, is never sent)
            root = maker.open(f"invoke_agent {agent}",
                              {"gen_ai.operation.name": "invoke_agent", **ids}, start=t)
            maker.span("chat gpt-4o", chat_attrs(10, 5, "tool_calls", **ids), parent=root,
                       start=t, end=t + 1)
        if len(maker.finished()) >= 500:
            export_http(sidecar, maker.take())
    if maker.finished():
        export_http(sidecar, maker.take())


def page(sidecar: RunningServer, **query: Any) -> dict[str, Any]:
    status, raw = http_request("GET", sidecar.api + "/v1/runs?"
                               + urllib.parse.urlencode(query))
    assert status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


def every_page(sidecar: RunningServer, after: str | None = None, **query: Any
               ) -> list[list[dict[str, Any]]]:
    pages = []
    while True:
        answer = page(sidecar, **query, **({"after": after} if after else {}))
        pages.append(answer["runs"])
        after = answer["next"]
        if after is None:
            return pages
        assert len(pages) < 100, "the pages never end"


def stored_ended(sidecar: RunningServer) -> int:
    service = sidecar.server.service
    assert service is not None
    return len(service.store.list_runs(True, None, None, 100_000))


def test_the_list_pages_through_every_run_in_its_order(sidecar: RunningServer) -> None:
    ended = [f"ended-{i:05d}" for i in range(ENDED)]
    active = [f"active-{i:05d}" for i in range(ACTIVE)]
    export_runs(sidecar, ended, end=True)
    export_runs(sidecar, active, end=False)
    wait_until(lambda: stored_ended(sidecar) == ENDED, what="the ended runs stored")

    pages = every_page(sidecar, limit=1000)
    assert [len(runs) for runs in pages] == [1000, 1000, 1000, 400]
    listed = [run["id"] for runs in pages for run in runs]
    assert len(listed) == len(set(listed)) == ACTIVE + ENDED
    assert set(listed) == {*active, *ended}
    states = [run["state"] for runs in pages for run in runs]
    assert states == ["active"] * ACTIVE + ["ended"] * ENDED  # the active runs first
    # a page of any size lists the same runs in the same order
    assert [run["id"] for runs in every_page(sidecar, limit=333) for run in runs] == listed
    # the state and agent filters page too
    assert [run["id"] for runs in every_page(sidecar, state="ended", limit=1000)
            for run in runs] == listed[ACTIVE:]
    assert [run["id"] for runs in every_page(sidecar, state="active", limit=1000)
            for run in runs] == listed[:ACTIVE]
    assert every_page(sidecar, agent="nobody") == [[]]
    assert page(sidecar, limit=1000)["next"] is not None
    first = page(sidecar, state="active", limit=1000)
    last = page(sidecar, state="active", limit=1000, after=first["next"])
    assert (len(last["runs"]), last["next"]) == (ACTIVE - 1000, None)

    # the command line follows the pages
    done = subprocess.run([sys.executable, "-m", "watchdog", "runs", "--url", sidecar.api,
                           "--all", "-o", "json"], capture_output=True, text=True, timeout=60,
                          check=True)
    assert [run["id"] for run in json.loads(done.stdout)["runs"]] == listed
    done = subprocess.run([sys.executable, "-m", "watchdog", "runs", "--url", sidecar.api,
                           "--limit", "2500", "-o", "json"], capture_output=True, text=True,
                          timeout=60, check=True)
    assert [run["id"] for run in json.loads(done.stdout)["runs"]] == listed[:2500]


def test_runs_that_change_between_pages_never_shift_the_next_page(
        sidecar: RunningServer) -> None:
    before = [f"run-{i:04d}" for i in range(600)]
    export_runs(sidecar, before, end=False)
    export_runs(sidecar, [f"done-{i:04d}" for i in range(300)], end=True)
    first = page(sidecar, limit=200)
    seen = [run["id"] for run in first["runs"]]
    assert len(seen) == 200
    # meanwhile: new runs start, runs on the first page and runs after it get new calls, some
    # of each end
    export_runs(sidecar, [f"new-{i:04d}" for i in range(50)], end=False)
    later = [key for key in before if key not in seen]
    export_runs(sidecar, seen[:20] + later[:20], end=False)
    export_runs(sidecar, seen[20:30] + later[20:30], end=True)
    rest = every_page(sidecar, limit=200, after=first["next"])
    listed = first["runs"] + [run for runs in rest for run in runs]
    by_state: dict[str, list[str]] = {}
    for run in listed:
        by_state.setdefault(run["state"], []).append(run["id"])
    for ids in by_state.values():  # never twice in one state
        assert len(ids) == len(set(ids))
    # every run there before the listing began is listed: the ones that ended meanwhile
    # perhaps twice (active on the first page, ended later), the others once
    ids = [run["id"] for run in listed]
    assert set(before) <= set(ids)
    assert {key for key in ids if ids.count(key) > 1} <= set(seen[20:30])
    assert all(f"done-{i:04d}" in ids for i in range(300))


def test_a_cursor_that_is_not_one_and_a_page_too_large_are_refused(
        sidecar: RunningServer) -> None:
    for query, expected in (("after=bogus", 'after="bogus" is not allowed'),
                            ("after=", 'after="" is not allowed'),
                            ("after=WzEsMSwiYSJd&after=WzEsMSwiYSJd", "is given more than once"),
                            ("limit=1001", 'limit="1001" is not allowed'),
                            ("offset=10", 'query parameter "offset" is not allowed')):
        status, raw = http_request("GET", sidecar.api + "/v1/runs?" + query)
        assert status == 400, (query, raw)
        assert expected in json.loads(raw)["error"]["message"], (query, raw)
    # a well-formed cursor of a run no longer there still places the page
    status, raw = http_request("GET", sidecar.api + "/v1/runs?after=WzEsMSwiYSJd")
    assert status == 200 and json.loads(raw) == {"runs": [], "next": None}


def test_the_session_filter_pages_through_the_sessions_runs_in_memory_and_stored(
        sidecar: RunningServer) -> None:
    """``session=``: only that session's runs, active and ended, those memory no longer
    holds read from the store, page after page; with ``agent=`` both must hold."""
    ended = [f"ended-{i:05d}" for i in range(MAX_ENDED_IN_MEMORY + 300)]
    mine = set(ended[::50])
    for start in range(0, len(ended), 500):  # (in order: the oldest leave memory first)
        chunk = ended[start:start + 500]
        export_runs(sidecar, [key for key in chunk if key in mine], end=True, session="s/1")
        export_runs(sidecar, [key for key in chunk if key not in mine], end=True,
                    session="other")
    active = [f"active-{i:03d}" for i in range(30)]
    export_runs(sidecar, active[:10], end=False, session="s/1", agent="helper")
    export_runs(sidecar, active[10:], end=False)
    wait_until(lambda: stored_ended(sidecar) == len(ended), what="the ended runs stored")

    everything = [run["id"] for runs in every_page(sidecar, limit=1000) for run in runs]
    want = [key for key in everything if key in mine or key in active[:10]]
    assert len(want) == len(mine) + 10
    assert any(key in mine for key in everything[30 + MAX_ENDED_IN_MEMORY:])  # (stored ones)
    pages = every_page(sidecar, session="s/1", limit=7)
    assert [run["id"] for runs in pages for run in runs] == want
    assert {run["session"] for runs in pages for run in runs} == {"s/1"}
    assert [run["id"] for runs in every_page(sidecar, session="s/1", state="ended", limit=1000)
            for run in runs] == [key for key in want if key in mine]
    assert [run["id"] for runs in every_page(sidecar, session="s/1", agent="helper")
            for run in runs] == want[:10]
    assert set(want[:10]) == set(active[:10])
    assert every_page(sidecar, session="s/1", agent="pager", state="active") == [[]]
    assert every_page(sidecar, session="nobody") == [[]]
    status, raw = http_request("GET", sidecar.api + "/v1/runs?session=" + "x" * 201)
    assert status == 400 and "session=" in json.loads(raw)["error"]["message"], raw

    done = subprocess.run([sys.executable, "-m", "watchdog", "runs", "--url", sidecar.api,
                           "--session", "s/1", "--all", "-o", "json"], capture_output=True,
                          text=True, timeout=60, check=True)
    assert [run["id"] for run in json.loads(done.stdout)["runs"]] == want
