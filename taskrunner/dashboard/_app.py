"""The dashboard's ASGI app: routes, pages and their ``/api/`` twins, actions.

Theory of operation. :func:`create_app` builds a Starlette app around one
backend. Each page is a GET route that reads its value from the data layer
(:mod:`._data`, :mod:`._features`) and renders a Jinja2 template (autoescape
on: every string from a payload, an error or a name is escaped); its twin under
``/api/`` serves the same value as JSON. The pages poll their twin every
``refresh`` seconds (``static/live.js``) and write the new values into the page
as text, so the page stays current without a reload.

Actions (cancel, replay, purge, pause and resume of a queue or a task) are POSTs
checked by
:mod:`._safety` (enabled, logged in with the token, CSRF field matching its
cookie, same origin); each answers with a redirect back to its page (303) and a
``done`` code the page turns into a fixed message. The app's lifespan runs the
:class:`~._sampler.Sampler`; mounted inside another app (whose lifespan
Starlette does not pass on to mounts), run ``app.state.sampler.run()`` from the
outer app's lifespan instead.

Why Starlette: it runs on anyio, so on trio with the backends' own trio
clients, it is small, and it is what FastAPI users mount into. Served by
hypercorn's trio worker (``taskrunner dashboard``), or any trio-capable ASGI
server.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import jinja2
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from taskrunner._config import queue_name_problem
from taskrunner._dispatch.guards import require_inspection
from taskrunner.backends import Backend
from taskrunner.dashboard import _charts, _data, _dead, _features, _fleet, _workflows
from taskrunner.dashboard._safety import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    Sessions,
    new_token,
    origin_matches,
    same_secret,
)
from taskrunner.dashboard._sampler import Sampler
from taskrunner.errors import BackendError

__all__ = ["DONE", "create_app"]

log = logging.getLogger("taskrunner.dashboard")

DONE = {
    "cancelled": "Cancel requested.",
    "not-cancelled": "Nothing to cancel: the task is done or unknown.",
    "replayed": "Dead letters dispatched again.",
    "none-replayed": (
        "Nothing was replayed: gone already, without a payload, or its unique task is "
        "queued or running."
    ),
    "purged": "Dead letters deleted.",
    "none-purged": "Nothing was deleted: none of them was there.",
    "paused": "Queue paused: runners stop reading it within about a second.",
    "resumed": "Queue resumed.",
    "task-paused": "Task paused: runners park its runs within about a second.",
    "task-resumed": "Task resumed: its parked runs are due again.",
    "workflow-cancelled": "Workflow cancelled: its steps stop within about a second.",
    "workflow-not-cancelled": "Nothing to cancel: the workflow is over or unknown.",
    "logged-in": "Logged in: actions are enabled.",
    "logged-out": "Logged out.",
}
"""The messages an action's redirect may show (by code: no text travels in the URL)."""
MAX_FORM = 65536
"""Largest form body accepted (bytes)."""
SECURITY_HEADERS = {
    # No inline script or style anywhere: what escaping might miss cannot run.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    # Not no-referrer: under it browsers send "Origin: null" with the dashboard's own
    # form posts, which the origin check must refuse. same-origin tells other sites
    # nothing (no page URL leaks, and none holds a secret anyway).
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def fmt(value: Any, kind: str = "text") -> str:
    """A value as a page shows it (``static/live.js`` has the same rules)."""
    if value is None:
        return "\u2013"  # an en dash: nothing to show
    if kind == "int":
        return f"{int(value):,}"
    if kind == "ms":
        return f"{float(value):.1f} ms"
    if kind == "s":
        return f"{float(value):.1f} s"
    if kind == "rate":
        return f"{float(value):.1f}/s"
    if kind == "time":
        return datetime.fromtimestamp(float(value), UTC).strftime("%Y-%m-%d %H:%M:%S")
    if kind == "bool":
        return "yes" if value else "no"
    if kind == "paused":
        return "paused" if value else "active"
    if kind == "list":
        return ", ".join(map(str, value))
    return str(value)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("taskrunner.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["fmt"] = fmt
    env.globals["polyline"] = _charts.polyline
    env.globals["top_of"] = _charts.top_of
    env.globals["chart"] = {"width": _charts.WIDTH, "height": _charts.HEIGHT}
    return env


class _Forbidden(Exception):
    pass


class Dashboard:
    """What the routes share: the backend, the sampler, the settings, the sessions."""

    def __init__(
        self,
        backend: Backend,
        *,
        server: str,
        allow_actions: bool,
        token: str | None,
        refresh: float,
        sampler: Sampler,
    ) -> None:
        self.backend = backend
        self.inspection = require_inspection(backend, "taskrunner.dashboard")
        self.server = server
        self.allow_actions = allow_actions
        self.sessions = Sessions(token if allow_actions else None)
        self.refresh = refresh
        self.sampler = sampler
        self.templates = _environment()

    # Rendering --------------------------------------------------------------

    def base(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def logged_in(self, request: Request) -> bool:
        return self.allow_actions and self.sessions.valid(request.cookies.get(SESSION_COOKIE))

    def page(
        self, request: Request, template: str, *, api: str | None, status: int = 200, **ctx: Any
    ) -> Response:
        csrf = request.cookies.get(CSRF_COOKIE) or new_token()
        base = self.base(request)
        done = request.query_params.get("done")
        html = self.templates.get_template(template).render(
            base=base,
            api=None if api is None else base + "/api" + api,
            refresh_ms=int(self.refresh * 1000),
            server=self.server,
            csrf=csrf,
            actions=self.allow_actions,
            logged_in=self.logged_in(request),
            notice=DONE.get(done or ""),
            quote=lambda text: urllib.parse.quote(str(text), safe=""),
            **ctx,
        )
        response = HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
        if request.cookies.get(CSRF_COOKIE) != csrf:
            self._cookie(request, response, CSRF_COOKIE, csrf, http_only=False)
        return response

    def _cookie(
        self, request: Request, response: Response, name: str, value: str, *, http_only: bool
    ) -> None:
        response.set_cookie(
            name,
            value,
            path=self.base(request) or "/",
            httponly=http_only,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def problem(self, request: Request, status: int, message: str) -> Response:
        return self.page(request, "problem.html", api=None, status=status, message=message)

    # Actions ----------------------------------------------------------------

    async def form(self, request: Request, *, login: bool = False) -> dict[str, list[str]]:
        """The POST's form, once it passed the checks.

        Raises:
            _Forbidden: actions are off, not logged in, bad CSRF field, other origin.
        """
        if not self.allow_actions:
            raise _Forbidden("actions are disabled (start the dashboard with --allow-actions)")
        if not origin_matches(request.headers.get("origin"), request.headers.get("host")):
            raise _Forbidden("the request came from another site")
        body = await request.body()
        if len(body) > MAX_FORM:
            raise _Forbidden(f"form body of {len(body)} bytes is over the {MAX_FORM}-byte limit")
        fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        if not same_secret((fields.get("csrf") or [""])[0], request.cookies.get(CSRF_COOKIE)):
            raise _Forbidden("the form's CSRF token does not match (reload the page)")
        if not login and not self.logged_in(request):
            raise _Forbidden("log in with the action token first")
        return fields

    def back(self, request: Request, path: str, done: str) -> Response:
        url = f"{self.base(request)}{path}?done={done}"
        return RedirectResponse(url, status_code=303, headers=SECURITY_HEADERS)


def _path(*parts: str) -> str:
    return "".join("/" + urllib.parse.quote(part, safe="") for part in parts)


Handler = Callable[[Request], Awaitable[Response]]


def _routes(d: Dashboard) -> list[Route | Mount]:
    def api(read: Callable[[Request], Awaitable[Any]]) -> Handler:
        async def handler(request: Request) -> Response:
            try:
                value = await read(request)
            except BackendError as exc:
                return JSONResponse({"error": str(exc)}, status_code=503, headers=SECURITY_HEADERS)
            if value is None:
                return JSONResponse(
                    {"error": "not found"}, status_code=404, headers=SECURITY_HEADERS
                )
            return JSONResponse(_data.as_json(value), headers=SECURITY_HEADERS)

        return handler

    def group_of(request: Request) -> str:
        return str(request.path_params["group"])

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
        return d.page(request, "group.html", api=_path("groups", value.group), g=value)

    async def task_lookup(request: Request) -> Response:
        task_id = request.query_params.get("id", "").strip()
        if not task_id:
            return d.problem(request, 400, "give a task id to look up")
        url = d.base(request) + _path("groups", group_of(request), "tasks", task_id)
        return RedirectResponse(url, status_code=303, headers=SECURITY_HEADERS)

    # A task
    async def task_data(request: Request) -> _features.TaskView | None:
        return await _features.read_task(d.backend, group_of(request), request.path_params["id"])

    async def task(request: Request) -> Response:
        group, task_id = group_of(request), str(request.path_params["id"])
        api_path = _path("groups", group, "tasks", task_id)
        try:
            value = await task_data(request)
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        status = 200 if value is not None else 404
        return d.page(
            request,
            "task.html",
            api=api_path if value else None,
            status=status,
            group=group,
            task_id=task_id,
            t=value,
        )

    async def cancel(request: Request) -> Response:
        group, task_id = group_of(request), str(request.path_params["id"])
        try:
            await d.form(request)
            done = await _features.cancel_task(d.backend, group, task_id)
        except _Forbidden as exc:
            return d.problem(request, 403, str(exc))
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.back(
            request,
            _path("groups", group, "tasks", task_id),
            "cancelled" if done else "not-cancelled",
        )

    # Dead letters
    # A workflow
    async def workflow_data(request: Request) -> _workflows.WorkflowView | None:
        workflow_id = str(request.path_params["id"])
        return await _workflows.read_workflow(d.backend, group_of(request), workflow_id)

    async def workflow(request: Request) -> Response:
        group, workflow_id = group_of(request), str(request.path_params["id"])
        try:
            value = await workflow_data(request)
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.page(
            request,
            "workflow.html",
            api=_path("groups", group, "workflows", workflow_id) if value else None,
            status=200 if value else 404,
            group=group,
            workflow_id=workflow_id,
            w=value,
        )

    async def cancel_workflow(request: Request) -> Response:
        group, workflow_id = group_of(request), str(request.path_params["id"])
        try:
            await d.form(request)
            done = await _workflows.cancel_workflow(d.backend, group, workflow_id)
        except _Forbidden as exc:
            return d.problem(request, 403, str(exc))
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.back(
            request,
            _path("groups", group, "workflows", workflow_id),
            "workflow-cancelled" if done else "workflow-not-cancelled",
        )

    async def dead_data(request: Request) -> _dead.DeadPage:
        return await _dead.read_dead(d.backend, group_of(request))

    async def dead(request: Request) -> Response:
        try:
            value = await dead_data(request)
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.page(request, "dead.html", api=_path("groups", value.group, "dead"), dead=value)

    def dead_action(
        run: Callable[[Backend, str, list[str] | None], Awaitable[int]], done: str
    ) -> Handler:
        async def handler(request: Request) -> Response:
            group = group_of(request)
            try:
                fields = await d.form(request)
                ids = None if fields.get("all") == ["1"] else fields.get("ids", [])
                count = await run(d.backend, group, ids)
            except _Forbidden as exc:
                return d.problem(request, 403, str(exc))
            except BackendError as exc:
                return d.problem(request, 503, str(exc))
            return d.back(
                request, _path("groups", group, "dead"), done if count else "none-" + done
            )

        return handler

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
            api=_path("groups", group, "schedules"),
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
            except _Forbidden as exc:
                return d.problem(request, 403, str(exc))
            except BackendError as exc:
                return d.problem(request, 503, str(exc))
            return d.back(request, _path("groups", group), done)

        return handler

    # Logging in with the token
    async def login_page(request: Request) -> Response:
        if not d.allow_actions:
            return d.problem(request, 403, "actions are disabled (start with --allow-actions)")
        return d.page(request, "login.html", api=None, failed=False)

    async def login(request: Request) -> Response:
        try:
            fields = await d.form(request, login=True)
        except _Forbidden as exc:
            return d.problem(request, 403, str(exc))
        session = d.sessions.open((fields.get("token") or [""])[0])
        if session is None:
            return d.page(request, "login.html", api=None, status=403, failed=True)
        response = d.back(request, "/", "logged-in")
        d._cookie(request, response, SESSION_COOKIE, session, http_only=True)
        return response

    async def logout(request: Request) -> Response:
        try:
            await d.form(request)
        except _Forbidden as exc:
            return d.problem(request, 403, str(exc))
        d.sessions.close(request.cookies.get(SESSION_COOKIE))
        response = d.back(request, "/", "logged-out")
        response.delete_cookie(SESSION_COOKIE, path=d.base(request) or "/")
        return response

    static = StaticFiles(packages=[("taskrunner.dashboard", "static")])
    g = "/groups/{group}"
    return [
        Route("/", fleet),
        Route("/api/", api(fleet_data)),
        Route(g, group),
        Route("/api" + g, api(group_data)),
        Route(g + "/tasks", task_lookup),
        Route(g + "/tasks/{id}", task),
        Route("/api" + g + "/tasks/{id}", api(task_data)),
        Route(g + "/tasks/{id}/cancel", cancel, methods=["POST"]),
        Route(g + "/workflows/{id}", workflow),
        Route("/api" + g + "/workflows/{id}", api(workflow_data)),
        Route(g + "/workflows/{id}/cancel", cancel_workflow, methods=["POST"]),
        Route(g + "/dead", dead),
        Route("/api" + g + "/dead", api(dead_data)),
        Route(g + "/dead/replay", dead_action(_features.replay_dead, "replayed"), methods=["POST"]),
        Route(g + "/dead/purge", dead_action(_features.purge_dead, "purged"), methods=["POST"]),
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
        Route("/login", login_page),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", app=static, name="static"),
    ]


def create_app(
    backend: Backend,
    *,
    allow_actions: bool = False,
    token: str | None = None,
    server: str = "",
    refresh: float = 2.0,
    sample_interval: float = 5.0,
    history: float = 3600.0,
) -> Starlette:
    """The dashboard of the store ``backend`` reads, as an ASGI app (Starlette, on trio).

    Args:
        backend: The store; it must implement
            :class:`~taskrunner.backends.Inspection` (both shipped backends do).
        allow_actions: Enable the actions (cancel, replay, purge, pause, resume);
            read-only otherwise.
        token: The action token a user logs in with. With ``allow_actions`` and
            no token, one is generated and logged once (warning level).
        server: How the store is named on the pages (give a URL through
            :func:`~taskrunner.dashboard.redact_url`: it is shown as is).
        refresh: Seconds between a page's polls of its ``/api/`` twin.
        sample_interval: Seconds between the sampler's reads (the charts).
        history: Seconds of samples kept (the charts span the last hour).

    Returns:
        The app. Its lifespan runs the sampler; when it is mounted in another app,
        run ``app.state.sampler.run()`` in the outer app's lifespan.

    Raises:
        TypeError: ``backend`` does not implement Inspection.
        ValueError: a number is out of range (the message names it).
    """
    if not 0 < refresh < float("inf"):
        raise ValueError(f"refresh must be a number of seconds > 0, got {refresh!r}")
    if allow_actions and token is None:
        token = new_token()
        log.warning("dashboard: actions are enabled; log in with the token %s", token)
    if token is not None and len(token) < 8:
        raise ValueError(f"token must be at least 8 characters, got {len(token)}")
    sampler = Sampler(backend, interval=sample_interval, history=history)
    dashboard = Dashboard(
        backend,
        server=server,
        allow_actions=allow_actions,
        token=token,
        refresh=refresh,
        sampler=sampler,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sampler.run)
            yield
            nursery.cancel_scope.cancel()

    app = Starlette(routes=_routes(dashboard), lifespan=lifespan)
    app.state.sampler = sampler
    app.state.dashboard = dashboard
    return app
