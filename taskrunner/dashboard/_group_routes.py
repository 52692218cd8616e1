"""The routes of what a group runs by: its schedules' page (and ``/api/`` twin), and the
pause and resume actions of a queue or a task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from taskrunner._config import queue_name_problem
from taskrunner.backends import Backend
from taskrunner.dashboard import _data, _features
from taskrunner.dashboard._pages import GROUP, Dashboard, Forbidden, Handler, api, group_of, path
from taskrunner.errors import BackendError


def routes(d: Dashboard) -> list[Route]:
    """The schedules page and the pause actions, in the order they are matched."""

    # Schedules
    async def schedules_data(request: Request) -> dict[str, Any]:
        group = group_of(request)
        rows = await _features.read_schedules(d.backend, group)
        return {"group": group, "schedules": [_data.as_json(r) for r in rows]}

    async def schedules(request: Request) -> Response:
        group = group_of(request)
        try:
            value = await schedules_data(request)
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.page(
            request,
            "schedules.html",
            api=path("groups", group, "schedules"),
            group=group,
            rows=value["schedules"],
        )

    # Pauses, of a queue or of a task
    def pause_action(
        run: Callable[[Backend, str, str], Awaitable[bool]], param: str, done: str
    ) -> Handler:
        async def handler(request: Request) -> Response:
            group, name = group_of(request), str(request.path_params[param])
            problem = queue_name_problem(name) if param == "queue" else None
            try:
                await d.form(request)
                if problem is not None:
                    return d.problem(request, 400, f"queue {name!r} {problem}")
                await run(d.backend, group, name)
            except Forbidden as exc:
                return d.problem(request, 403, str(exc))
            except BackendError as exc:
                return d.problem(request, 503, str(exc))
            return d.back(request, path("groups", group), done)

        return handler

    g = GROUP
    return [
        Route(g + "/schedules", schedules),
        Route("/api" + g + "/schedules", api(schedules_data)),
        Route(
            g + "/queues/{queue}/pause",
            pause_action(_features.pause_queue, "queue", "paused"),
            methods=["POST"],
        ),
        Route(
            g + "/queues/{queue}/resume",
            pause_action(_features.resume_queue, "queue", "resumed"),
            methods=["POST"],
        ),
        Route(
            g + "/task-names/{task}/pause",
            pause_action(_features.pause_task, "task", "task-paused"),
            methods=["POST"],
        ),
        Route(
            g + "/task-names/{task}/resume",
            pause_action(_features.resume_task, "task", "task-resumed"),
            methods=["POST"],
        ),
    ]
