"""``taskrunner pause|resume --url URL --group G (--queue Q | --task T)``.

:func:`taskrunner.admin.pause` and :func:`~taskrunner.admin.resume` from the
shell: stop or restart one queue (it is not read) or one task (its runs are
parked in the delayed set) for every runner of the group, which notice within
about a second (docs/flow-control.md). ``--queue`` here names the queue to
pause, a name of the runners' ``TaskRunnerConfig.queues`` (``tasks`` for a
runner of one queue), not a stream name as for ``stats``; the group's streams
are found as ``stats`` finds them (``--prefix``). Prints what is paused
afterwards. Exit 0 whether or not it was paused before (the line says which).
"""

from __future__ import annotations

import argparse

from taskrunner import admin
from taskrunner._flow.limits import Paused
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.base import Command, paused_text
from taskrunner.cli.groups import require_group
from taskrunner.cli.stats import run_on_redis


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", required=True, help="Redis URL, e.g. redis://localhost:6379/0 (required)"
    )
    parser.add_argument(
        "--group", required=True, help="the consumer group (consumer_group) (required)"
    )
    parser.add_argument(
        "--prefix",
        default=None,
        help="stream prefix, as given to RedisBackend "
        "(default: taskrunner:<group>, the group's own streams)",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--queue", metavar="Q", help="a queue of the group's runners")
    what.add_argument("--task", metavar="T", help="a task name")


def _command(pausing: bool) -> Command:
    verb = "pause" if pausing else "resume"
    prog = f"taskrunner {verb}"

    def run(args: argparse.Namespace) -> int:
        async def job(backend: RedisBackend) -> tuple[bool, Paused]:
            await require_group(backend, args.group)
            act = admin.pause if pausing else admin.resume
            changed = await act(backend, args.group, queue=args.queue, task=args.task)
            return changed, await admin.paused(backend, args.group)

        # The backend's own queue is its default: what is paused is the call's argument.
        connect = argparse.Namespace(url=args.url, prefix=args.prefix, queue="tasks")
        result, code = run_on_redis(prog, connect, job)
        if result is None:
            return code
        changed, paused = result
        what = f"queue {args.queue}" if args.queue is not None else f"task {args.task}"
        if pausing:
            state = "paused" if changed else "was paused already"
        else:
            state = "resumed" if changed else "was not paused"
        print(f"{what} of group {args.group} {state}; paused now: {paused_text(paused)}")
        return 0

    return Command(
        name=verb,
        help=(
            "pause a queue or a task for a whole group (its work stays queued)"
            if pausing
            else "resume a paused queue or task of a group"
        ),
        add_arguments=_arguments,
        run=run,
    )


PAUSE = _command(pausing=True)
RESUME = _command(pausing=False)
