"""``taskrunner dispatch app.tasks:runner TASK --payload JSON``: queue one run.

The runner is imported from the user's module exactly as ``taskrunner
worker`` does, so dispatching from the shell goes through the same task
registry, payload validation and unique locks as ``runner.dispatch`` in code.
Prints the message id (or, with ``--delay`` / ``--at``, the delayed task's
id) on stdout; every refusal is one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
import math
from datetime import datetime
from typing import Any

import trio

from taskrunner._runner import TaskRunner
from taskrunner.cli.base import Command, fail
from taskrunner.cli.imports import ImportTargetError, load_runner
from taskrunner.errors import BackendError, TaskRunnerError

PROG = "taskrunner dispatch"


def non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


def aware_datetime(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2026-01-31T09:30:00+00:00, got {text!r}"
        ) from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no timezone; add one (e.g. +00:00 or Z)")
    return value


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runner",
        metavar="MODULE:RUNNER",
        help="the TaskRunner whose tasks to use, as 'package.module:attribute'",
    )
    parser.add_argument("task", metavar="TASK", help="the registered task name")
    parser.add_argument(
        "--payload",
        default="null",
        metavar="JSON",
        help="the payload as JSON (default: null)",
    )
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--delay",
        type=non_negative_seconds,
        metavar="SECONDS",
        help="run after this many seconds (a delayed task; the leader moves it when due)",
    )
    when.add_argument(
        "--at",
        type=aware_datetime,
        metavar="ISO8601",
        help="run at this time (timezone required, e.g. 2026-01-31T09:30:00Z)",
    )


def _run(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        return fail(PROG, f"--payload is not valid JSON: {exc}")
    try:
        runner = load_runner(args.runner)
    except ImportTargetError as exc:
        return fail(PROG, str(exc))
    try:
        ident = trio.run(_dispatch, runner, args.task, payload, args.delay, args.at)
    except BackendError as exc:
        return fail(PROG, f"{runner.backend!r}: {exc}")
    except TaskRunnerError as exc:
        return fail(PROG, str(exc))
    except ValueError as exc:  # a delay or time dispatch refuses
        return fail(PROG, str(exc))
    print(ident)
    return 0


async def _dispatch(
    runner: TaskRunner, task: str, payload: Any, delay: float | None, at: datetime | None
) -> str:
    try:
        if at is not None:
            return str(await runner.schedule_for(task, payload, at))
        if delay is not None:
            return str(await runner.dispatch_delayed(task, payload, delay))
        return str(await runner.dispatch(task, payload))
    finally:
        with trio.move_on_after(5, shield=True):
            await runner.backend.aclose()


COMMAND = Command(
    name="dispatch",
    help="queue one run of a task (now, after --delay, or --at a time); prints its id",
    add_arguments=_arguments,
    run=_run,
)
