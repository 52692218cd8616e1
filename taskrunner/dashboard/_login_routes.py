"""The routes of logging in with the action token and out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from taskrunner.dashboard._pages import Dashboard, Forbidden
from taskrunner.dashboard._safety import SESSION_COOKIE


def routes(d: Dashboard) -> list[Route]:
    """The login page and the login and logout actions, in the order they are matched."""

    # Logging in with the token
    async def login_page(request: Request) -> Response:
        if not d.allow_actions:
            return d.problem(request, 403, "actions are disabled (start with --allow-actions)")
        return d.page(request, "login.html", api=None, failed=False)

    async def login(request: Request) -> Response:
        try:
            fields = await d.form(request, login=True)
        except Forbidden as exc:
            return d.problem(request, 403, str(exc))
        session = d.sessions.open((fields.get("token") or [""])[0])
        if session is None:
            return d.page(request, "login.html", api=None, status=403, failed=True)
        response = d.back(request, "/", "logged-in")
        d.set_cookie(request, response, SESSION_COOKIE, session, http_only=True)
        return response

    async def logout(request: Request) -> Response:
        try:
            await d.form(request)
        except Forbidden as exc:
            return d.problem(request, 403, str(exc))
        d.sessions.close(request.cookies.get(SESSION_COOKIE))
        response = d.back(request, "/", "logged-out")
        response.delete_cookie(SESSION_COOKIE, path=d.base(request) or "/")
        return response

    return [
        Route("/login", login_page),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]
