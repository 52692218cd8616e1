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

Where things live: what every route shares (the :class:`~._pages.Dashboard`, a page's
rendering, its JSON twin, the action checks) in :mod:`._pages`; the routes by
subject, in :mod:`._fleet_routes` (the fleet and a group), :mod:`._task_routes` (a task,
a workflow), :mod:`._dead_routes`, :mod:`._group_routes` (schedules, pauses) and
:mod:`._login_routes`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from taskrunner.backends import Backend
from taskrunner.dashboard import (
    _dead_routes,
    _fleet_routes,
    _group_routes,
    _login_routes,
    _task_routes,
)
from taskrunner.dashboard._pages import Dashboard
from taskrunner.dashboard._safety import new_token
from taskrunner.dashboard._sampler import Sampler

__all__ = ["create_app"]

log = logging.getLogger("taskrunner.dashboard")


def _routes(d: Dashboard) -> list[Route | Mount]:
    # Subject by subject, in the order they are matched (no two paths overlap).
    static = StaticFiles(packages=[("taskrunner.dashboard", "static")])
    return [
        *_fleet_routes.routes(d),
        *_task_routes.routes(d),
        *_dead_routes.routes(d),
        *_group_routes.routes(d),
        *_login_routes.routes(d),
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
