"""The routes of the fleet page and a group's page (and the task lookup on it), and their
``/api/`` twins.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from taskrunner.dashboard import _data, _fleet
from taskrunner.dashboard._pages import GROUP, SECURITY_HEADERS, Dashboard, api, group_of, path
from taskrunner.errors import BackendError


def routes(d: Dashboard) -> list[Route]:
    """The fleet's and a group's pages, in the order they are matched."""

    async def known_group(request: Request) -> Response | None:
        group = group_of(request)
        if group not in await d.inspection.list_groups():
            return d.problem(request, 404, f"no group {group!r} on this server")
        return None

    # The fleet
    async def fleet_data(request: Request) -> _fleet.FleetPage:
        return await _fleet.read_fleet(d.backend, d.inspection, server=d.server)

    async def fleet(request: Request) -> Response:
        try:
            value = await fleet_data(request)
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.page(request, "fleet.html", api="/", fleet=value)

    # A group
    async def group_data(request: Request) -> _data.GroupPage:
        return await _data.read_group(d.backend, d.inspection, d.sampler, group_of(request))

    async def group(request: Request) -> Response:
        try:
            missing = await known_group(request)
            if missing is not None:
                return missing
            value = await group_data(request)
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.page(request, "group.html", api=path("groups", value.group), g=value)

    async def task_lookup(request: Request) -> Response:
        task_id = request.query_params.get("id", "").strip()
        if not task_id:
            return d.problem(request, 400, "give a task id to look up")
        url = d.base(request) + path("groups", group_of(request), "tasks", task_id)
        return RedirectResponse(url, status_code=303, headers=SECURITY_HEADERS)

    g = GROUP
    return [
        Route("/", fleet),
        Route("/api/", api(fleet_data)),
        Route(g, group),
        Route("/api" + g, api(group_data)),
        Route(g + "/tasks", task_lookup),
    ]
