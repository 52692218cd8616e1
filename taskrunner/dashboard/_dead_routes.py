"""The routes of a group's dead letters: the page, its ``/api/`` twin, and the replay and
purge actions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from taskrunner.backends import Backend
from taskrunner.dashboard import _dead, _features
from taskrunner.dashboard._pages import GROUP, Dashboard, Forbidden, Handler, api, group_of, path
from taskrunner.errors import BackendError


def routes(d: Dashboard) -> list[Route]:
    """The dead-letter page and actions, in the order they are matched."""

    async def dead_data(request: Request) -> _dead.DeadPage:
        return await _dead.read_dead(d.backend, group_of(request))

    async def dead(request: Request) -> Response:
        try:
            value = await dead_data(request)
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.page(request, "dead.html", api=path("groups", value.group, "dead"), dead=value)

    def dead_action(
        run: Callable[[Backend, str, list[str] | None], Awaitable[int]], done: str
    ) -> Handler:
        async def handler(request: Request) -> Response:
            group = group_of(request)
            try:
                fields = await d.form(request)
                ids = None if fields.get("all") == ["1"] else fields.get("ids", [])
                count = await run(d.backend, group, ids)
            except Forbidden as exc:
                return d.problem(request, 403, str(exc))
            except BackendError as exc:
                return d.problem(request, 503, str(exc))
            return d.back(request, path("groups", group, "dead"), done if count else "none-" + done)

        return handler

    g = GROUP
    return [
        Route(g + "/dead", dead),
        Route("/api" + g + "/dead", api(dead_data)),
        Route(g + "/dead/replay", dead_action(_features.replay_dead, "replayed"), methods=["POST"]),
        Route(g + "/dead/purge", dead_action(_features.purge_dead, "purged"), methods=["POST"]),
    ]
