"""``/v1/sessions/{id}``: checkpoints in, the context for the next run out (DESIGN §7).
"""

from __future__ import annotations

from aiohttp import web

from watchdog.core.sessions import Checkpoint, CheckpointError, check_session_id
from watchdog.shell.api.http import _json_object, json_response
from watchdog.shell.api.interface import Watchdog
from watchdog.shell.errors import BadRequest


class SessionRoutes:
    """``/v1/sessions/{id}``: checkpoints in, the context for the next run out (DESIGN §7)."""

    def __init__(self, service: Watchdog) -> None:
        self.service = service

    async def checkpoint(self, request: web.Request) -> web.Response:
        """``POST /v1/sessions/{id}/checkpoints {"remaining", "state", "failed_approaches",
        "run_id"}``: answered once the checkpoint is stored, with the session's context."""
        body = await _json_object(request)
        try:
            session_id = check_session_id(request.match_info["id"])
            checkpoint = Checkpoint.parse(body, self.service.now())
        except CheckpointError as exc:
            raise BadRequest(str(exc)) from None
        return json_response(await self.service.checkpoint(session_id, checkpoint))

    async def context(self, request: web.Request) -> web.Response:
        """``GET /v1/sessions/{id}/context``: facts (verbatim), failed approaches, zero-progress
        state and note. An unknown session answers an empty context, not 404."""
        try:
            session_id = check_session_id(request.match_info["id"])
        except CheckpointError as exc:
            raise BadRequest(str(exc)) from None
        return json_response(self.service.session_context(session_id))
