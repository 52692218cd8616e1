"""What every route of the dashboard shares: the :class:`Dashboard` (the backend, the
sampler, the settings, the sessions), a page's rendering and its JSON twin, and the
checks every action passes (:meth:`Dashboard.form`).

A page is rendered from a Jinja2 template (autoescape on) with the security headers
and the CSRF cookie; an action answers with a redirect back to its page and a
``done`` code (:data:`DONE`) the page turns into a fixed message.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from taskrunner._dispatch.guards import require_inspection
from taskrunner.backends import Backend
from taskrunner.dashboard import _charts, _data
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


class Forbidden(Exception):
    """An action refused by :meth:`Dashboard.form`: its route answers 403 with the message."""


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
            self.set_cookie(request, response, CSRF_COOKIE, csrf, http_only=False)
        return response

    def set_cookie(
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
            Forbidden: actions are off, not logged in, bad CSRF field, other origin.
        """
        if not self.allow_actions:
            raise Forbidden("actions are disabled (start the dashboard with --allow-actions)")
        if not origin_matches(request.headers.get("origin"), request.headers.get("host")):
            raise Forbidden("the request came from another site")
        body = await request.body()
        if len(body) > MAX_FORM:
            raise Forbidden(f"form body of {len(body)} bytes is over the {MAX_FORM}-byte limit")
        fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        if not same_secret((fields.get("csrf") or [""])[0], request.cookies.get(CSRF_COOKIE)):
            raise Forbidden("the form's CSRF token does not match (reload the page)")
        if not login and not self.logged_in(request):
            raise Forbidden("log in with the action token first")
        return fields

    def back(self, request: Request, path: str, done: str) -> Response:
        url = f"{self.base(request)}{path}?done={done}"
        return RedirectResponse(url, status_code=303, headers=SECURITY_HEADERS)


def path(*parts: str) -> str:
    """The URL path of ``parts``, each quoted as one segment."""
    return "".join("/" + urllib.parse.quote(part, safe="") for part in parts)


Handler = Callable[[Request], Awaitable[Response]]
"""A route's handler."""
GROUP = "/groups/{group}"
"""The path of a group's pages, under which its tasks', workflows' and dead letters' are."""


def api(read: Callable[[Request], Awaitable[Any]]) -> Handler:
    """The ``/api/`` twin of a page whose value ``read`` returns: that value as JSON,
    404 when it is ``None``, 503 when the store could not be read."""

    async def handler(request: Request) -> Response:
        try:
            value = await read(request)
        except BackendError as exc:
            return JSONResponse({"error": str(exc)}, status_code=503, headers=SECURITY_HEADERS)
        if value is None:
            return JSONResponse({"error": "not found"}, status_code=404, headers=SECURITY_HEADERS)
        return JSONResponse(_data.as_json(value), headers=SECURITY_HEADERS)

    return handler


def group_of(request: Request) -> str:
    """The group a route under :data:`GROUP` names."""
    return str(request.path_params["group"])
