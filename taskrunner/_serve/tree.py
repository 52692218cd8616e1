"""``serve``'s nursery tree: the parts it runs, made once per runner, and the tree itself.

Theory of operation. ``serve`` owns every service through nurseries; each
node of the tree is one module of :mod:`taskrunner._serve`, named after it::

    serve                        checks first, then waits for the stop event
    │                            (cancel or shutdown()); the checks, before anything
    │                            starts: no other group on a stream deleted on ack
    │                            (sharing.py), no other live instance of this host
    │                            (heartbeat.py, claim)
    └── shielded scope           outside cancellation cannot reach below here
        ├── services nursery     stops last, each service ending with a bounded flush
        │   ├── heartbeat        replication key, deleted at the end; another
        │   │                    instance in it stops serve (DuplicateHost)
        │   ├── leadership       the lease keeper: acquire / renew / resign; one
        │   │                    cancel scope per term
        │   ├── scheduler        leader: due delayed tasks -> stream; every
        │   │                    instance: those dispatched here, when another leads
        │   ├── periodic         with schedules only; leader: fires each due tick,
        │   │                    fenced; every instance: publishes its specs at start
        │   ├── cleanup          leader only: consumers idle for 10 minutes
        │   ├── uncounted        leader only, workflows' backends: steps a Go worker
        │   │                    acked without counting fail their workflow
        │   ├── bulk_writer      timings -> metrics hash, once a second
        │   ├── aggregator       stats, resets, tuner, long_queue_hook
        │   ├── sharing          other groups on the stream (checked at start too)
        │   ├── acker            batched acks (and unique-lock releases, results,
        │   │                    the events of the runs they end)
        │   ├── progress         ctx.progress reports and loose events, once a second
        │   ├── refresher        keeps long runs from being reclaimed (and their
        │   │                    concurrency slots held)
        │   ├── canceller        stops the runs TaskRunner.cancel asked to stop
        │   └── gate             what is paused, read every second; admits each
        │                        run of a limited or paused task (worker.py asks it)
        └── worker               the workers nursery: one task per message,
            │                    bounded by the pool (pool.py)
            └── fetcher          one per num_fetchers: reserve slots -> claim/read
                                 -> start

Cancelling ``serve`` (or calling :meth:`TaskRunner.shutdown`) sets the stop
event. The fetchers are cancelled at once; the workers nursery gets a
deadline of ``shutdown_grace`` (tasks still running then are cancelled and
stay pending for reclaim); only when it has drained is the services nursery
cancelled, so the acker's final flush sees every finished message. Every
step after the stop is bounded, so the shield never makes ``serve`` hang.

:class:`ServeParts` holds the services' objects (made when the runner is, so
its statistics, observers and resizes work before and between serves);
:func:`run` is the shielded part of the tree, everything below ``serve``
itself, which :meth:`TaskRunner.serve <taskrunner.TaskRunner.serve>` starts
once its checks have passed and its lifespan is open.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import trio

from taskrunner._config import ConfigHolder
from taskrunner._execution.inflight import InFlight
from taskrunner._execution.middleware import Middleware
from taskrunner._execution.progress import Reports
from taskrunner._fleet.timings import TimingRecorder
from taskrunner._serve import (
    aggregator,
    bulk_writer,
    canceller,
    catalog,
    cleanup,
    heartbeat,
    leadership,
    progress,
    refresher,
    sharing,
    uncounted,
    worker,
)
from taskrunner._serve.acker import Acker
from taskrunner._serve.fetcher import FetcherContext, FetcherCounters
from taskrunner._serve.gate import Gate
from taskrunner._serve.heartbeat import ReplicationCounter
from taskrunner._serve.leadership import Leadership
from taskrunner._serve.outcome import Outcomes
from taskrunner._serve.periodic import Periodic
from taskrunner._serve.pool import WorkerPool
from taskrunner._serve.scheduler import Scheduler
from taskrunner._serve.sharing import StreamSharing
from taskrunner._serve.worker import Worker
from taskrunner._task import Task
from taskrunner.backends import Backend, StepAudit
from taskrunner.errors import DuplicateHost

DEFAULT_REFRESH_TICK = 30.0
"""Seconds between two refreshes of long runs when no task is registered."""


def unix_clock(backend: Backend) -> Callable[[], float]:
    """Now in unix seconds, on ``backend``'s clock: an event's time, taken two or three
    times per run when events are on, so one call and one addition (``unix_time`` is
    the backend's clock plus a fixed offset: 0 on Redis, ``wall_origin`` in memory),
    the offset learnt at the first call (a memory backend made outside ``trio.run``
    fixes its origin only then)."""
    now = backend.now
    offset: list[float] = []

    def clock() -> float:
        if not offset:
            offset.append(backend.unix_time(0.0))
        return now() + offset[0]

    return clock


class ServeParts:
    """The services' objects of one runner, wired to each other.

    Args:
        config: The runner's configuration.
        backend: Its backend.
        tasks: The registered tasks by name, read as it is.
        instance_id: The runner's instance id.
    """

    def __init__(
        self, config: ConfigHolder, backend: Backend, tasks: Mapping[str, Task], instance_id: str
    ) -> None:
        self.pool = WorkerPool(config.current.num_workers)
        self.inflight = InFlight()
        self.timings = TimingRecorder()
        self.config = config
        self.reports = Reports(
            clock=unix_clock(backend),
            own_queue=lambda: backend.stream_keys(config.current.consumer_group).queue,
        )
        self.acker = Acker(backend, config, self.inflight, self.reports)
        self.sharing = StreamSharing(backend, config)
        self.fetch_counters = FetcherCounters()
        self.scheduler = Scheduler(backend, config, tasks, self.timings)
        self.gate = Gate(backend, config, self.scheduler, self.inflight, instance_id)
        outcomes = Outcomes(config, backend, self.acker, self.scheduler.nudge, tasks, self.reports)
        self.worker = Worker(
            config,
            tasks,
            self.pool,
            outcomes,
            self.sharing,
            self.inflight,
            self.timings,
            self.gate,
        )
        self.leadership = Leadership()
        self.replicas = ReplicationCounter(backend, config.current.consumer_group)
        self.periodic = Periodic(backend, config, tasks, instance_id)
        self.workers_scope: trio.CancelScope | None = None
        """The workers nursery's scope, while serving (its deadline is the drain's)."""

    def prepare(
        self, state: Any, middlewares: Sequence[Middleware], sync_threads: int | None
    ) -> None:
        """What every run of one serve shares: taken once, at its start, not per run."""
        self.worker.state = state
        self.worker.middlewares = tuple(middlewares)
        limit = math.inf if sync_threads is None else sync_threads
        self.worker.thread_limiter = trio.CapacityLimiter(limit)
        self.worker.clock = trio.lowlevel.current_clock().current_time


def refresh_tick(tasks: Mapping[str, Task]) -> float:
    """How often long runs are refreshed: half the shortest reservation timeout."""
    timeouts = [t.reservation for t in tasks.values()]
    return min(timeouts) / 2 if timeouts else DEFAULT_REFRESH_TICK


def unread_queues(
    tasks: Iterable[Task], default: str, served: Sequence[str]
) -> list[tuple[str, str]]:
    """``(task, queue)`` for each task whose queue a runner reading ``served`` does not
    read (other runners of the group must); ``default`` is where a task without a queue
    of its own goes (``TaskRunnerConfig.default_queue``, else the backend's) (pure)."""
    found = []
    for task in tasks:
        queue = task.queue or default
        if queue not in served:
            found.append((task.name, queue))
    return found


async def run(
    parts: ServeParts,
    host: aggregator.AggregatorHost,
    tasks: Mapping[str, Task],
    *,
    instance_id: str,
    queues: tuple[str, ...],
    stop: trio.Event,
    grace: Callable[[], float],
    lost_host: Callable[[DuplicateHost], None],
    ready: trio.Event,
) -> None:
    """Run the services, then the workers and fetchers, until ``stop`` is set and the
    workers have drained; set ``ready`` once the fetchers run.

    Shielded: outside cancellation reaches ``serve`` only through the stop event, so
    the drain always runs to its (bounded) end.
    """
    cfg = host.config
    backend, group = host.backend, cfg.consumer_group
    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as services:
            await services.start(
                partial(heartbeat.run, group=group), backend, cfg.host, instance_id, lost_host
            )
            own = backend.stream_keys(group).queue
            await services.start(
                partial(
                    catalog.run,
                    backend,
                    group,
                    cfg.host,
                    instance_id,
                    tasks,
                    default_queue=cfg.default_queue(own),
                )
            )
            keeper = partial(
                leadership.run,
                backend,
                group,
                instance_id,
                parts.leadership,
                ttl=cfg.leader_lease_ttl,
            )
            await services.start(keeper)
            as_leader = parts.leadership.run_as_leader
            await services.start(as_leader, parts.scheduler.run)
            await services.start(parts.scheduler.run_local, lambda: parts.leadership.is_leader)
            if parts.periodic.schedules:
                await services.start(parts.periodic.announce)
                await services.start(as_leader, parts.periodic.run)
            await services.start(as_leader, partial(cleanup.run, backend, group, shards=cfg.shards))
            if isinstance(backend, StepAudit):
                await services.start(as_leader, partial(uncounted.run, backend, group))
            await services.start(bulk_writer.run, backend, group, parts.timings)
            await services.start(aggregator.run, host)
            await services.start(sharing.run, parts.sharing, backend, group)
            await services.start(parts.acker.run)
            await services.start(progress.run, backend, parts.config, parts.reports)
            tick = partial(refresh_tick, tasks)
            await services.start(refresher.run, backend, group, parts.inflight, tick)
            await services.start(canceller.run, backend, group, parts.inflight)
            await services.start(parts.gate.run)
            fetching = FetcherContext(
                config=cfg,
                backend=backend,
                pool=parts.pool,
                execute=parts.worker.execute,
                counters=parts.fetch_counters,
                gate=parts.gate,
                queues=queues,
                weights=cfg.queue_weights,
            )
            async with trio.open_nursery() as core:
                parts.workers_scope = await core.start(
                    partial(worker.run, acker=parts.acker), fetching, stop, grace
                )
                ready.set()
            parts.workers_scope = None
            services.cancel_scope.cancel()
