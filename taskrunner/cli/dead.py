"""``taskrunner dead list|show|replay|purge``: the dead-letter stream of a group.

Theory of operation: :mod:`taskrunner.admin`'s dead-letter functions from the
shell, with the Redis options of the other operator commands (see
:mod:`taskrunner.cli.stats`). ``list`` pages through the oldest dead letters
(``--count``, ``--after``); ``show`` prints one with its original entry.
Every subcommand acts on every queue of the group unless ``--queue`` names one
(each dead letter says its queue). ``replay ID...`` dispatches those again (a
fresh attempt count, the same task id, removed from the dead-letter stream in
one atomic step), and ``replay
--all`` every one of them; ``purge ID...`` or ``purge --all`` deletes them.
What cannot be undone asks for ``--yes``: ``replay --all`` and every
``purge``; without it they refuse with one line and exit code 2. ``--json``
prints :func:`dead_document` per dead letter (the stable interface).
A replay that leaves some dead letters where they were (gone, locked) exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from taskrunner import admin
from taskrunner._dispatch.dead import DeadLetterInfo, ReplayResult
from taskrunner.cli.base import EXIT_FAILURE, EXIT_USAGE, Command, fail, positive_int
from taskrunner.cli.stats import redis_arguments, run_on_redis

__all__ = ["COMMAND", "dead_document", "replay_document"]

PROG = "taskrunner dead"


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def dead_document(dead: DeadLetterInfo) -> dict[str, Any]:
    """One dead letter for ``--json``: ids, task, reason, payload, when (unix seconds),
    and the original entry's ``payload`` field as text (``raw``)."""
    return {
        "id": dead.id,
        "task_id": dead.task_id,
        "task": dead.task_name,
        "reason": dead.reason,
        "payload": dead.payload,
        "dead_at": dead.dead_at,
        "message_id": dead.message_id,
        "group": dead.group,
        "queue": dead.queue,
        "raw": _text(dead.raw),
    }


def replay_document(result: ReplayResult) -> dict[str, Any]:
    """One replay for ``--json``: the dead letter, its task, the new entry (or ``null``)
    and why not (``""`` when replayed)."""
    return {
        "id": result.id,
        "task_id": result.task_id,
        "entry_id": result.entry_id,
        "reason": result.reason,
    }


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def _line(dead: DeadLetterInfo) -> str:
    return (
        f"{dead.id}  {_when(dead.dead_at)}  {dead.queue or '?'}  {dead.task_name or '?'}  "
        f"{dead.reason}"
    )


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True))


def _refuse(what: str) -> int:
    print(f"{PROG}: error: refusing to {what} without --yes", file=sys.stderr)
    return EXIT_USAGE


# The subcommands ----------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    found, code = run_on_redis(
        f"{PROG} list",
        args,
        lambda backend: admin.dead_letters(
            backend, args.group, count=args.count, after=args.after, queue=args.queue
        ),
    )
    if found is None:
        return code
    if args.json:
        _print_json([dead_document(d) for d in found])
    elif not found:
        print(f"no dead letters in group {args.group}")
    else:
        for dead in found:
            print(_line(dead))
    return 0


def _show(args: argparse.Namespace) -> int:
    prog = f"{PROG} show"
    found, code = run_on_redis(
        prog,
        args,
        lambda backend: admin.dead_letter(backend, args.group, args.dead_id, queue=args.queue),
    )
    if code:
        return code
    if found is None:
        return fail(prog, f"no dead letter {args.dead_id!r} in group {args.group!r}")
    if args.json:
        _print_json(dead_document(found))
        return 0
    rows = [
        ("id", found.id),
        ("dead at", _when(found.dead_at)),
        ("task", found.task_name or "? (the entry does not decode as a task message)"),
        ("task id", found.task_id),
        ("message id", found.message_id),
        ("group", found.group),
        ("reason", found.reason),
        ("payload", json.dumps(found.payload)),
        ("entry", _text(found.raw) or "(no payload field)"),
    ]
    print("\n".join(f"{name + ':':<11} {value}" for name, value in rows))
    return 0


def _replay(args: argparse.Namespace) -> int:
    prog = f"{PROG} replay"
    if args.all and args.ids:
        return fail(prog, "give dead-letter ids or --all, not both")
    if not args.all and not args.ids:
        return fail(prog, "give the dead-letter ids to replay, or --all")
    if args.all and not args.yes:
        return _refuse(f"replay every dead letter of group {args.group!r}")
    if args.all:
        results, code = run_on_redis(
            prog,
            args,
            lambda backend: admin.replay_all_dead_letters(
                backend, args.group, confirm=True, queue=args.queue
            ),
        )
    else:
        results, code = run_on_redis(
            prog,
            args,
            lambda backend: admin.replay_dead_letters(
                backend, args.group, args.ids, queue=args.queue
            ),
        )
    if results is None:
        return code
    if args.json:
        _print_json([replay_document(r) for r in results])
    else:
        for result in results:
            if result.replayed:
                print(f"{result.id}: replayed as {result.entry_id} (task {result.task_id})")
            else:
                print(f"{result.id}: not replayed ({result.reason})")
        replayed = sum(r.replayed for r in results)
        print(f"replayed {replayed} of {len(results)} dead letter(s)")
    return 0 if all(r.replayed for r in results) else EXIT_FAILURE


def _purge(args: argparse.Namespace) -> int:
    prog = f"{PROG} purge"
    if args.all and args.ids:
        return fail(prog, "give dead-letter ids or --all, not both")
    if not args.all and not args.ids:
        return fail(prog, "give the dead-letter ids to delete, or --all")
    if not args.yes:
        what = "every dead letter" if args.all else f"{len(args.ids)} dead letter(s)"
        return _refuse(f"delete {what} of group {args.group!r}")
    ids = None if args.all else args.ids
    deleted, code = run_on_redis(
        prog,
        args,
        lambda backend: admin.purge_dead_letters(
            backend, args.group, ids, confirm=True, queue=args.queue
        ),
    )
    if deleted is None:
        return code
    if args.json:
        _print_json({"deleted": deleted})
    else:
        print(f"deleted {deleted} dead letter(s) of group {args.group}")
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="dead_command", metavar="ACTION", required=True)

    listing = commands.add_parser("list", help="the oldest dead letters, one line each")
    redis_arguments(listing, every_queue=True)
    listing.add_argument(
        "--count", type=positive_int, default=100, help="at most this many (default: %(default)s)"
    )
    listing.add_argument(
        "--after", metavar="ID", default=None, help="only those after this dead-letter id (paging)"
    )
    listing.set_defaults(dead_run=_list)

    show = commands.add_parser("show", help="one dead letter, with its original entry")
    show.add_argument("dead_id", metavar="ID", help="the dead-letter id (from 'dead list')")
    redis_arguments(show, every_queue=True)
    show.set_defaults(dead_run=_show)

    replay = commands.add_parser(
        "replay", help="dispatch dead letters again (fresh attempts, same task id)"
    )
    replay.add_argument("ids", metavar="ID", nargs="*", help="the dead-letter ids to replay")
    replay.add_argument("--all", action="store_true", help="replay every dead letter (needs --yes)")
    replay.add_argument("--yes", action="store_true", help="confirm --all")
    redis_arguments(replay, every_queue=True)
    replay.set_defaults(dead_run=_replay)

    purge = commands.add_parser("purge", help="delete dead letters (needs --yes)")
    purge.add_argument("ids", metavar="ID", nargs="*", help="the dead-letter ids to delete")
    purge.add_argument("--all", action="store_true", help="delete every dead letter")
    purge.add_argument("--yes", action="store_true", help="really delete (they are gone for good)")
    redis_arguments(purge, every_queue=True)
    purge.set_defaults(dead_run=_purge)


def _run(args: argparse.Namespace) -> int:
    run: Any = args.dead_run
    code: int = run(args)
    return code


COMMAND = Command(
    name="dead",
    help="list, show, replay or purge a group's dead letters",
    add_arguments=_arguments,
    run=_run,
)
