"""``taskrunner top --url URL --group G``: a fleet's state, refreshed live in the terminal.

Theory of operation: every ``--interval`` seconds :func:`read_snapshot` reads
what ``taskrunner stats`` reads (the metrics hash, the published tuning
capacity, what is paused, the heartbeats through the backend's
:class:`~taskrunner.backends.Inspection`, the leader lease, the queue metrics) into a
:class:`~taskrunner.cli.views.FleetSnapshot`, computes :class:`~taskrunner.Stats`
from the hash (task names from its ``<task>_sum``/``_count`` fields, by
:func:`taskrunner._wire.task_names_in` as ``stats`` reads them; the pool size is
the published tuning capacity, else ``--workers``), and adds a sample to a
:class:`~taskrunner.cli.views.History` ring, from which the view draws throughput
(the change of the hash's run counts, over at least two seconds) and queue length over
the last minutes, and the group's periodic schedules (:func:`taskrunner.admin.schedules`,
shown when there are any). Rendering is :func:`taskrunner.cli.views.top_view`, pure; here
is only the loop: ``rich.live.Live`` on a terminal, one plain line per refresh
otherwise, one frame with ``--once``. A failed refresh keeps the last frame on
screen with the error under it and tries again at the next tick. Before the
first one, a ``--group`` the server does not hold (see
:mod:`taskrunner.cli.groups`) is one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import attrs
import trio

from taskrunner import _wire, admin
from taskrunner._fleet.shard_counts import ShardCounts, queue_sizes, read_shard_counts
from taskrunner._fleet.stats import compute_stats
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.base import (
    DEFAULT_WORKERS,
    EXIT_FAILURE,
    Command,
    MissingExtra,
    fail,
    import_extra,
    positive_int,
    positive_seconds,
)
from taskrunner.cli.groups import UnknownGroup, require_group
from taskrunner.cli.stats import redis_arguments
from taskrunner.errors import BackendError

if TYPE_CHECKING:
    from rich.console import Console

    from taskrunner.cli.views import FleetSnapshot
HISTORY_SECONDS = 300.0
"""How far back the trends reach."""
READ_TIMEOUT = 10.0
"""Longest one refresh may take before it counts as failed."""
PROG = "taskrunner top"


async def read_snapshot(
    backend: RedisBackend, group: str, *, workers: int | None = None
) -> FleetSnapshot:
    """One refresh of ``group``'s state.

    Args:
        workers: Pool size per instance for the estimates when no tuning
            capacity is published (default :data:`DEFAULT_WORKERS`).

    Raises:
        BackendError: Redis could not be read.
    """
    from taskrunner.cli.views import FleetSnapshot  # rich: the cli extra

    metrics = await backend.read_metrics(group)
    published = await backend.read_tuning(group)
    desired = await backend.read_desired_instances(group)
    instances = tuple((beat.host, beat.instance_id) for beat in await backend.list_heartbeats())
    owner = await backend.lease_owner(group)
    queue = await backend.get_metrics(group)
    paused = await backend.paused(group)
    count = (await admin.shards_of(backend, group)).count
    shards: tuple[ShardCounts, ...] = ()
    if count > 1:  # its entries are in its shards too
        own = backend.stream_keys(group).queue
        size = await queue_sizes(backend, group, count, {own: queue.queue_size})
        queue = attrs.evolve(queue, queue_size=size[own])
        shards = await read_shard_counts(backend, group, count, await admin.queues(backend, group))
    pool = published if published is not None else (workers or DEFAULT_WORKERS)
    stats = compute_stats(
        metrics=metrics,
        group=group,
        task_names=_wire.task_names_in(metrics, group),
        queue_len=queue.queue_size,
        workers=pool,
        replication=max(1, len(instances)),
    )
    return FleetSnapshot(
        group=group,
        stream=backend.stream_keys(group).stream,
        taken_at=backend.now(),
        metrics=metrics,
        stats=stats,
        queue=queue,
        leader=owner,
        leader_host=next((h for h, i in instances if i == owner), None),
        instances=instances,
        tuning_capacity=published,
        desired_instances=desired,
        workers=pool,
        paused=paused,
        schedules=tuple(await admin.schedules(backend, group)),
        shards=shards,
    )


async def run_top(args: argparse.Namespace, console: Console) -> int:
    """The command's loop; returns the exit code."""
    from rich.console import Group  # the cli extra
    from rich.live import Live
    from rich.text import Text

    from taskrunner.cli.views import History, top_line, top_view

    try:
        backend = RedisBackend.from_url(
            args.url,
            prefix=args.prefix,
            queue=args.queue,
            key_layout=getattr(args, "key_layout", None),
        )
    except ValueError as exc:
        return fail(PROG, f"invalid --url: {exc}")
    history = History(size=max(10, int(HISTORY_SECONDS / args.interval)))
    spark_width = max(10, min(60, console.width - 50))

    async def refresh() -> FleetSnapshot:
        with trio.fail_after(READ_TIMEOUT):
            snapshot = await read_snapshot(backend, args.group, workers=args.workers)
        history.add(snapshot.taken_at, snapshot.total_runs, snapshot.queue.queue_size)
        return snapshot

    async with backend:
        try:
            with trio.fail_after(READ_TIMEOUT):
                await require_group(backend, args.group)
        except UnknownGroup as exc:
            return fail(PROG, str(exc))
        except (BackendError, trio.TooSlowError) as exc:
            return fail(PROG, f"Redis at {args.url}: {exc or 'timed out'}")
        if args.once:
            try:
                snapshot = await refresh()
            except (BackendError, trio.TooSlowError) as exc:
                return fail(PROG, f"Redis at {args.url}: {exc or 'timed out'}")
            console.print(top_view(snapshot, history, width=spark_width))
            return 0
        live = console.is_terminal
        screen_context = Live(console=console, auto_refresh=False) if live else nullcontext()
        with screen_context as screen:
            last: Any = Text("reading...")
            while True:
                try:
                    snapshot = await refresh()
                except (BackendError, trio.TooSlowError) as exc:
                    error = f"refresh failed: {exc or 'timed out'}; retrying"
                    if screen is None:
                        print(f"{PROG}: {error}", file=sys.stderr, flush=True)
                    else:
                        screen.update(Group(last, Text(error, style="red")), refresh=True)
                else:
                    if screen is None:
                        print(top_line(snapshot, history), flush=True)
                    else:
                        last = top_view(snapshot, history, width=spark_width)
                        screen.update(last, refresh=True)
                await trio.sleep(args.interval)


def _arguments(parser: argparse.ArgumentParser) -> None:
    redis_arguments(parser, json_option=False)
    parser.add_argument(
        "--interval",
        type=positive_seconds,
        default=2.0,
        metavar="SECONDS",
        help="seconds between refreshes (default: %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help=f"pool size per instance for the estimates when no tuning capacity is "
        f"published (default: {DEFAULT_WORKERS})",
    )
    parser.add_argument("--once", action="store_true", help="print one frame and exit")


def _run(args: argparse.Namespace) -> int:
    try:
        console = import_extra("rich.console", "cli").Console()
    except MissingExtra as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return trio.run(run_top, args, console)


COMMAND = Command(
    name="top",
    help="watch a group's throughput, queue, leader and timing statistics live",
    add_arguments=_arguments,
    run=_run,
)
