"""``taskrunner dashboard --url URL --port 8000``: the web dashboard of a Redis server.

Theory of operation: the command builds a
:class:`~taskrunner.backends.redis.RedisBackend` from ``--url`` (one for every
group on the server: each group's own stream, unless ``--prefix`` names a
shared one), checks it answers (``PING``: a wrong URL is one line on stderr and
exit 1), and serves :func:`taskrunner.dashboard.create_app` with hypercorn's
trio worker in this trio program, until SIGINT or SIGTERM (exit 0).

Actions (cancel, replay, purge, pause, resume) are off unless
``--allow-actions``; their token comes from ``--token``, else
``TASKRUNNER_DASHBOARD_TOKEN``, else one is generated and logged once. The URL
is shown on the pages without its password. The ``dashboard`` extra brings
Starlette, hypercorn and Jinja2; without it the command says so in one line.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from typing import Any

import trio

from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.base import Command, MissingExtra, fail, import_extra, positive_seconds
from taskrunner.cli.stats import key_layout_argument
from taskrunner.cli.worker import port_number
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

PROG = "taskrunner dashboard"
CONNECT_TIMEOUT = 10.0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", required=True, help="Redis URL, e.g. redis://localhost:6379/0 (required)"
    )
    parser.add_argument("--port", type=port_number, default=8000, help="default: %(default)s")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: %(default)s; 0.0.0.0 for every interface)",
    )
    parser.add_argument(
        "--prefix",
        default=None,
        help="stream prefix, as given to RedisBackend (default: each group's own stream)",
    )
    parser.add_argument(
        "--queue", default="tasks", help="stream name, as given to RedisBackend (default: tasks)"
    )
    key_layout_argument(parser)
    parser.add_argument(
        "--allow-actions",
        action="store_true",
        help="enable cancel, replay, purge, pause and resume (after logging in with the token)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="the action token (default: $TASKRUNNER_DASHBOARD_TOKEN, else one is generated "
        "and logged)",
    )
    parser.add_argument(
        "--refresh",
        type=positive_seconds,
        default=2.0,
        help="seconds between a page's live updates (default: %(default)s)",
    )
    parser.add_argument(
        "--sample-interval",
        type=positive_seconds,
        default=5.0,
        help="seconds between the samples the charts are drawn from (default: %(default)s)",
    )
    parser.set_defaults(default_log_level="info")


def _run(args: argparse.Namespace) -> int:
    try:
        for module in ("starlette", "jinja2"):
            import_extra(module, "dashboard")
        hypercorn_config: Any = import_extra("hypercorn.config", "dashboard")
        hypercorn_trio: Any = import_extra("hypercorn.trio", "dashboard")
    except MissingExtra as exc:
        return fail(PROG, str(exc))
    dashboard: Any = importlib.import_module("taskrunner.dashboard")
    try:
        backend = RedisBackend.from_url(
            args.url,
            prefix=args.prefix,
            queue=args.queue,
            key_layout=getattr(args, "key_layout", None),
        )
    except ValueError as exc:
        return fail(PROG, f"invalid --url: {exc}")
    shown = dashboard.redact_url(args.url)
    token = args.token if args.token is not None else os.environ.get(dashboard.TOKEN_ENV)
    try:
        app = dashboard.create_app(
            backend,
            allow_actions=args.allow_actions,
            token=token if args.allow_actions else None,
            server=shown,
            refresh=args.refresh,
            sample_interval=args.sample_interval,
        )
    except ValueError as exc:
        return fail(PROG, str(exc))
    config = hypercorn_config.Config()
    config.bind = [f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"]
    config.accesslog = None

    async def stopped() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("dashboard: %s, stopping", signal.Signals(signum).name)
                return

    async def main() -> int:
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                await backend.ping()
        except BackendError as exc:
            return fail(PROG, f"Redis at {shown}: {exc}")
        except trio.TooSlowError:
            return fail(PROG, f"Redis at {shown} did not answer within {CONNECT_TIMEOUT:g}s")
        try:
            async with trio.open_nursery() as nursery:
                binds = await nursery.start(
                    lambda task_status: hypercorn_trio.serve(
                        app, config, shutdown_trigger=stopped, task_status=task_status
                    )
                )
                for bind in binds:
                    log.info("dashboard of %s on %s", shown, bind)
                print(f"{PROG}: serving on {' '.join(binds)}", file=sys.stderr, flush=True)
        except OSError as exc:
            return fail(PROG, f"cannot listen on {config.bind[0]}: {exc}")
        finally:
            with trio.move_on_after(5, shield=True):
                await backend.aclose()
        return 0

    return trio.run(main)


COMMAND = Command(
    name="dashboard",
    help="serve the web dashboard of a Redis server's fleets",
    add_arguments=_arguments,
    run=_run,
)
