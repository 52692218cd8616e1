"""``taskrunner flush --url URL --group G --yes``: delete every key of a group.

:func:`taskrunner.admin.flush` from the shell, for development and staging.
It drops queued and in-flight messages, forces a re-election, and deletes
every unique lock (so a duplicate unique job may get in) and, unless
``--keep-heartbeats``, every heartbeat key (live instances write theirs again
within 10 s). Without ``--yes`` it refuses with one line and exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from taskrunner import admin
from taskrunner.cli.base import EXIT_USAGE, Command
from taskrunner.cli.stats import redis_arguments, run_on_redis

PROG = "taskrunner flush"


def _arguments(parser: argparse.ArgumentParser) -> None:
    redis_arguments(parser, json_option=False)
    parser.add_argument(
        "--yes",
        action="store_true",
        help="really delete (queued and in-flight messages are lost)",
    )
    parser.add_argument(
        "--keep-heartbeats",
        action="store_true",
        help="leave the instances' heartbeat keys (taskrunner:replication:*) alone",
    )


def _run(args: argparse.Namespace) -> int:
    if not args.yes:
        print(
            f"{PROG}: error: refusing to delete every key of group {args.group!r} "
            "(queued and in-flight messages included) without --yes",
            file=sys.stderr,
        )
        return EXIT_USAGE
    deleted, code = run_on_redis(
        PROG,
        args,
        lambda backend: admin.flush(
            backend, args.group, confirm=True, replication=not args.keep_heartbeats
        ),
    )
    if deleted is None:
        return code
    print(f"deleted {len(deleted)} key(s) of group {args.group}:")
    for name in deleted:
        print(f"  {name}")
    return 0


COMMAND = Command(
    name="flush",
    help="delete every key of a group (dev/staging only; needs --yes)",
    add_arguments=_arguments,
    run=_run,
)
