"""The rule routes: the rules and budgets loaded, and their reload.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from watchdog.core.bounds import plain_number
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.shown import readable_path
from watchdog.shell.api.http import error_response, json_response
from watchdog.shell.errors import NotFound


class RuleRoutes:
    """``GET /v1/rules`` and ``POST /-/reload`` (Prometheus' name for the same thing)."""

    def __init__(self, engine: RuleEngine,
                 reload: Callable[[], Awaitable[tuple[bool, str]]] | None) -> None:
        self.engine = engine
        self._reload = reload

    async def list_rules(self, request: web.Request) -> web.Response:
        ruleset = self.engine.ruleset
        return json_response({
            "rules": ruleset.describe(),
            "budgets": [{"agents": list(b.agents),
                         **{key: plain_number(value) for key, value in b.limits.items()}}
                        for b in ruleset.budgets],
            "sources": [readable_path(source.path) for source in ruleset.sources],
        })

    async def reload(self, request: web.Request) -> web.Response:
        if self._reload is None:
            raise NotFound("rule reload is not available here")
        ok, message = await self._reload()
        if not ok:
            return error_response(422, "rules_invalid", message)
        return json_response({"status": "reloaded", "message": message})
