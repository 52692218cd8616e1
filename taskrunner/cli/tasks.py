"""``taskrunner inspect ID`` and ``taskrunner cancel ID``: one task (or, for ``inspect``,
one workflow: :mod:`taskrunner.cli.workflows`), by its id.

Theory of operation: like the other operator commands (see
:mod:`taskrunner.cli.stats`), these need no user code, only the Redis URL and
the names that make up the keys (``--group``, ``--prefix``, ``--queue``).
``inspect`` is :func:`taskrunner.admin.get_task`: it prints where the task is
(queued, scheduled, running, or, for a task that keeps results, how it ended),
and ``--json`` prints :func:`info_document`, the stable interface. ``cancel``
is :func:`taskrunner.admin.cancel`. A task the backend does not know (never
dispatched, done without a kept result, expired) is one line on stderr and
exit 1 for both, as is a task that cannot be cancelled any more.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from taskrunner import admin
from taskrunner._dispatch.handle import TaskInfo
from taskrunner._dispatch.workflows import WorkflowStatus
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.base import Command, fail
from taskrunner.cli.stats import redis_arguments, run_on_redis
from taskrunner.cli.workflows import render_workflow, workflow_document

__all__ = ["CANCEL", "INSPECT", "info_document", "render_info"]


def info_document(info: TaskInfo) -> dict[str, Any]:
    """``inspect --json``: every field of :class:`~taskrunner.TaskInfo`, the error as
    ``{"type", "message"}`` (or ``null``), times in unix seconds (or ``null``)."""
    return {
        "id": info.id,
        "state": info.state.value,
        "task": info.task_name,
        "attempts": info.attempts,
        "error": (
            None if info.error is None else {"type": info.error.type, "message": info.error.message}
        ),
        "result": info.result,
        "payload": info.payload,
        "enqueued_at": info.enqueued_at,
        "started_at": info.started_at,
        "finished_at": info.finished_at,
        "run_at": info.run_at,
        "entry_id": info.entry_id,
        "consumer": info.consumer,
        "cancelling": info.cancelling,
        "progress": (
            None
            if info.progress is None
            else {
                "fraction": info.progress.fraction,
                "note": info.progress.note,
                "at": info.progress.at,
            }
        ),
    }


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


def render_info(info: TaskInfo) -> str:
    """``inspect`` for people: one ``name: value`` line per field that is set."""
    rows: list[tuple[str, str]] = [
        ("id", info.id),
        ("state", info.state.value + (" (asked to stop)" if info.cancelling else "")),
    ]
    if info.task_name is not None:
        rows.append(("task", info.task_name))
    rows.append(("attempts", str(info.attempts)))
    if info.entry_id is not None and info.entry_id != info.id:
        rows.append(("entry", info.entry_id))
    if info.consumer is not None:
        rows.append(("consumer", info.consumer))
    for name in ("run_at", "enqueued_at", "started_at", "finished_at"):
        moment = getattr(info, name)
        if moment is not None:
            rows.append((name, _when(moment)))
    if info.progress is not None:
        rows.append(("progress", f"{info.progress} at {_when(info.progress.at)}"))
    if info.error is not None:
        rows.append(("error", str(info.error)))
    if info.state.value == "succeeded":
        rows.append(("result", json.dumps(info.result)))
    elif info.payload is not None:
        rows.append(("payload", json.dumps(info.payload)))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name + ':':<{width + 1}} {value}" for name, value in rows)


def _id_arguments(parser: argparse.ArgumentParser, *, json_option: bool) -> None:
    parser.add_argument(
        "id",
        metavar="ID",
        help="the task id (what dispatch printed: a stream id or a uuid) or a workflow id",
    )
    redis_arguments(parser, json_option=json_option, every_queue=True)


async def _task_or_workflow(
    backend: RedisBackend, args: argparse.Namespace
) -> TaskInfo | WorkflowStatus | None:
    # The workflow first: its end is kept as a result under its id, a "task" too.
    flow = await admin.get_workflow(backend, args.group, args.id)
    if flow is not None:
        return flow
    return await admin.get_task(backend, args.group, args.id, queue=args.queue)


def _inspect(args: argparse.Namespace) -> int:
    prog = "taskrunner inspect"
    found, code = run_on_redis(prog, args, lambda backend: _task_or_workflow(backend, args))
    if code:
        return code
    if found is None:
        return fail(
            prog,
            f"no task or workflow {args.id!r} in group {args.group!r} (never dispatched, "
            "finished without keep_result, or its result expired)",
        )
    if isinstance(found, WorkflowStatus):
        print(
            json.dumps(workflow_document(found), indent=2, sort_keys=True)
            if args.json
            else render_workflow(found)
        )
        return 0
    print(
        json.dumps(info_document(found), indent=2, sort_keys=True)
        if args.json
        else render_info(found)
    )
    return 0


def _cancel(args: argparse.Namespace) -> int:
    prog = "taskrunner cancel"
    done, code = run_on_redis(
        prog, args, lambda backend: admin.cancel(backend, args.group, args.id, queue=args.queue)
    )
    if code:
        return code
    if not done:
        return fail(
            prog, f"task {args.id!r} of group {args.group!r} is finished or unknown: not cancelled"
        )
    print(f"cancelled task {args.id}")
    return 0


INSPECT = Command(
    name="inspect",
    help=(
        "show where a task is (queued, scheduled, running, or how it ended), or a "
        "workflow's steps and their states, by its id"
    ),
    add_arguments=lambda parser: _id_arguments(parser, json_option=True),
    run=_inspect,
)
CANCEL = Command(
    name="cancel",
    help="cancel a task by its id, queued, scheduled or running, wherever it runs",
    add_arguments=lambda parser: _id_arguments(parser, json_option=False),
    run=_cancel,
)
