"""The runner: registry, dispatch, and the nursery tree of ``serve``.

Theory of operation. ``serve`` owns every subsystem through nurseries::

    serve                        checks first, then waits for the stop event
    │                            (cancel or shutdown()); the checks, before anything
    │                            starts: no other group on a stream deleted on ack
    │                            (_sharing), no other live instance of this host
    │                            (heartbeat.claim)
    └── shielded scope           outside cancellation cannot reach below here
        ├── services nursery     stops last, each service ending with a bounded flush
        │   ├── heartbeat        replication key, deleted at the end; another
        │   │                    instance in it stops serve (DuplicateHost)
        │   ├── lease keeper     acquire / renew / resign; one cancel scope per term
        │   ├── scheduler        leader only: due delayed tasks -> stream
        │   ├── local scheduler  delayed tasks dispatched here, when another leads
        │   ├── cleanup          leader only: consumers idle for 10 minutes
        │   ├── bulk writer      timings -> metrics hash, once a second
        │   ├── aggregator       stats, resets, tuner, long_queue_hook
        │   ├── sharing          other groups on the stream (checked at start too)
        │   ├── acker            batched acks (and unique-lock releases)
        │   └── refresher        keeps long runs from being reclaimed
        └── workers nursery      one task per message, bounded by the pool
            └── fetchers         reserve slots -> claim/read -> start

Cancelling ``serve`` (or calling :meth:`TaskRunner.shutdown`) sets the stop
event. The fetchers nursery is cancelled at once; the workers nursery gets a
deadline of ``shutdown_grace`` (tasks still running then are cancelled and
stay pending for reclaim); only when it has drained is the services nursery
cancelled, so the acker's final flush sees every finished message. Every
step after the stop is bounded, so the shield never makes ``serve`` hang.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs
import trio

from taskrunner._config import TaskRunnerConfig
from taskrunner._dispatch import Dispatching
from taskrunner._guards import check_runner_arguments, require_trio
from taskrunner._inflight import InFlight
from taskrunner._registry import Registering, check_reservation
from taskrunner._serve import (
    aggregator,
    bulk_writer,
    cleanup,
    fetcher,
    heartbeat,
    leadership,
    refresher,
    sharing,
)
from taskrunner._serve.acker import Acker
from taskrunner._serve.heartbeat import ReplicationCounter
from taskrunner._serve.leadership import Leadership
from taskrunner._serve.pool import WorkerPool
from taskrunner._serve.scheduler import Scheduler
from taskrunner._serve.worker import Worker
from taskrunner._stats import Stats
from taskrunner._task import Task
from taskrunner._timings import TimingRecorder
from taskrunner.backends import Backend
from taskrunner.errors import AlreadyServing, DuplicateHost

log = logging.getLogger("taskrunner")

DEFAULT_REFRESH_TICK = 30.0


@attrs.frozen(kw_only=True)
class RunnerStatistics:
    """A snapshot of one runner's local state (see :meth:`TaskRunner.statistics`)."""

    serving: bool
    capacity: int
    """Current worker-pool capacity."""
    running: int
    """Tasks running now."""
    fetched: int
    """Messages handed to workers (new and reclaimed)."""
    reclaimed: int
    """Messages claimed from idle consumers."""
    completed: int
    """Actions that returned."""
    failed: int
    """Attempts whose action raised."""
    retried: int
    """Failed attempts left pending for another try."""
    dead_lettered: int
    """Messages moved to the dead-letter stream."""
    handled: int
    """Messages handed to ``failed_task_handler`` that it accepted."""
    acked: int
    """Messages acknowledged."""
    ack_backlog: int
    """Finished messages waiting for their ack."""


class TaskRunner(Registering, Dispatching):
    """Registers tasks, dispatches them, and serves them from a backend.

    Args:
        config: How this instance behaves.
        backend: Where messages and shared state live (``MemoryBackend``,
            ``RedisBackend``, or your own implementing
            :class:`taskrunner.backends.Backend`).

    Raises:
        TypeError: ``config`` is not a :class:`TaskRunnerConfig`, or ``backend``
            is not a backend (e.g. a URL: pass ``RedisBackend.from_url(url)``).

    Its ``async`` methods run on trio; awaited under asyncio they raise
    :class:`~taskrunner.errors.WrongAsyncLibrary`.
    """

    def __init__(self, config: TaskRunnerConfig, backend: Backend) -> None:
        check_runner_arguments(config, backend)
        self.config = config
        self.backend = backend
        self.instance_id = uuid.uuid4().hex
        self._tasks: dict[str, Task] = {}
        self._defaulted: set[str] = set()  # tasks whose reservation timeout we chose
        self._pool = WorkerPool(config.num_workers)
        self._inflight = InFlight()
        self._timings = TimingRecorder()
        self._acker = Acker(backend, config.consumer_group)
        self._fetch_counters = fetcher.FetcherCounters()
        self._worker = Worker(
            config, backend, self._tasks, self._pool, self._acker, self._inflight, self._timings
        )
        self._leadership = Leadership()
        self._replicas = ReplicationCounter(backend)
        self._scheduler = self._new_scheduler()
        self._serving = False
        self._stop = trio.Event()
        self._workers: trio.Nursery | None = None

    def _new_scheduler(self) -> Scheduler:
        return Scheduler(
            self.backend,
            self.config.consumer_group,
            lambda: self._tasks,
            self._timings,
            self.config.delayed_poll_interval,
        )

    def __repr__(self) -> str:
        return f"<TaskRunner group={self.config.consumer_group!r} host={self.config.host!r}>"

    # Fleet ------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """Whether this instance leads its group right now."""
        return self._leadership.is_leader

    async def wait_leadership_changed(self) -> bool:
        """Wait until this instance is promoted or demoted; returns :attr:`is_leader`."""
        require_trio("TaskRunner.wait_leadership_changed")
        await self._leadership.wait_changed()
        return self.is_leader

    async def get_number_of_replications(self, *, refresh: bool = False) -> int:
        """Live instances of the fleet (heartbeat keys), cached 10 s; at least 1
        while this instance serves.

        Args:
            refresh: Count now instead of using a cached value.

        Raises:
            BackendError: the first count could not be read.
        """
        require_trio("TaskRunner.get_number_of_replications")
        return await self._replicas.get(serving=self._serving, refresh=refresh)

    async def get_timing_statistics(self) -> Stats:
        """The group's timing statistics (see docs/timing-metrics.md).

        Reads the metrics hash and the stream length (two backend calls) and
        counts replicas (cached); cheap, but not for a hot loop.

        Raises:
            BackendError: the backend could not be reached.
        """
        require_trio("TaskRunner.get_timing_statistics")
        replication = await self.get_number_of_replications()
        return await aggregator.timing_statistics(
            self.backend,
            self.config.consumer_group,
            self._tasks,
            self._pool.capacity,
            replication,
        )

    @property
    def capacity(self) -> int:
        """Current worker-pool capacity."""
        return self._pool.capacity

    @property
    def task_names(self) -> list[str]:
        """Names of the registered tasks."""
        return list(self._tasks)

    # Serving ----------------------------------------------------------------
    def _refresh_tick(self) -> float:
        timeouts = [t.reservation for t in self._tasks.values()]
        return min(timeouts) / 2 if timeouts else DEFAULT_REFRESH_TICK

    def configure(self, **changes: Any) -> None:
        """Replace configuration fields before serving (e.g. from command-line flags).

        Raises:
            ValueError, TypeError: a new value is invalid (as for
                :class:`TaskRunnerConfig`), or a registered task's explicit
                ``reservation_timeout`` is not below the new ``reclaim_delay``.
                Nothing changes then.
            AlreadyServing: the runner is serving.
        """
        if self._serving:
            raise AlreadyServing(f"{self!r} is serving; configure it before serve()")
        config = attrs.evolve(self.config, **changes)
        # Registered tasks follow a new reclaim_delay: defaulted reservation
        # timeouts are recomputed, explicit ones must stay below it.
        tasks = {}
        for name, task in self._tasks.items():
            if name in self._defaulted:
                task = attrs.evolve(task, reservation_timeout=config.reclaim_delay / 3)
            else:
                check_reservation(task, config.reclaim_delay)
            tasks[name] = task
        self._tasks.update(tasks)
        self.config = config
        self._worker._config = config
        self._scheduler = self._new_scheduler()
        self._acker = Acker(self.backend, config.consumer_group)
        self._worker._acker = self._acker
        self._worker.sharing = sharing.StreamSharing(self.backend, config.consumer_group)
        if "num_workers" in changes:
            self._pool.resize(config.num_workers)

    def add_observer(self, observer: Callable[[str, float, bool], object]) -> None:
        """Call ``observer(task_name, seconds, succeeded)`` after every run.

        Runs synchronously on the hot path: keep it to a counter or histogram
        update. An observer that raises is logged and removed.
        """
        self._worker.observers.append(observer)

    def remove_observer(self, observer: Callable[[str, float, bool], object]) -> None:
        """Stop calling ``observer``; nothing happens if it is not registered."""
        if observer in self._worker.observers:
            self._worker.observers.remove(observer)

    def resize(self, capacity: int) -> None:
        """Set the worker-pool capacity; running tasks are never interrupted.

        Raises:
            ValueError: ``capacity`` < 1.
        """
        old = self._pool.capacity
        self._pool.resize(capacity)
        if capacity != old:
            log.debug("worker pool resized from %d to %d", old, capacity)

    def shutdown(self, *, grace: float | None = None) -> None:
        """Ask :meth:`serve` to stop gracefully (it returns once drained).

        Args:
            grace: Override ``shutdown_grace``; ``0`` cancels running tasks now
                (a second Ctrl-C). Running tasks are never acked when cancelled.

        Called before :meth:`serve` has started, it makes that ``serve`` stop as
        soon as it has started.
        """
        if grace is not None:
            self._grace_override = grace
            if self._workers is not None and self._stop.is_set():
                self._workers.cancel_scope.deadline = trio.current_time() + grace
        self._stop.set()

    _grace_override: float | None = None
    _host_taken: DuplicateHost | None = None

    def _lost_host(self, error: DuplicateHost) -> None:
        # Another instance holds this host's heartbeat key: stop gracefully, and
        # serve raises the error once drained (see _heartbeat).
        self._host_taken = error
        self.shutdown()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fetch and run tasks until cancelled or :meth:`shutdown`.

        Calls ``task_status.started()`` once fetchers and workers are running.

        Raises:
            AlreadyServing: ``serve`` is already running on this runner.
            WrongAsyncLibrary: awaited outside trio (under asyncio, say).
            SharedStreamError: the stream is also read by other consumer groups
                and the backend deletes entries on ack (nothing was started).
            DuplicateHost: another live instance serves with this ``host``: at
                start (nothing was started; a crashed predecessor's heartbeat
                is waited out, up to its 15 s lifetime), or while serving, when
                another instance took the heartbeat key over (serve stopped
                gracefully first).

        Cancellation: cancelling ``serve`` is a graceful shutdown: fetching
        stops at once, running tasks get ``shutdown_grace`` to finish, finished
        ones are acked, and only then does ``serve`` return (re-raising the
        cancellation).
        """
        require_trio("TaskRunner.serve")
        if self._serving:
            raise AlreadyServing(f"{self!r} is already serving")
        self._serving = True
        cfg = self.config
        log.info(
            "serving group %s as host %s (instance %s): %d fetcher(s), %d worker(s), tasks: %s",
            cfg.consumer_group,
            cfg.host,
            self.instance_id,
            cfg.num_fetchers,
            self._pool.capacity,
            ", ".join(sorted(self._tasks)) or "(none)",
        )
        ready = trio.Event()
        try:
            await self._worker.sharing.check_start()
            await heartbeat.claim(self.backend, cfg.host, self.instance_id)
            async with trio.open_nursery() as top:
                # start_soon, not start: a serve cancelled while starting must still
                # reach the finally below (the stop event), or the shielded child
                # would wait for it forever.
                top.start_soon(self._run_shielded, ready)
                try:
                    await ready.wait()
                    task_status.started()
                    await self._stop.wait()
                finally:
                    self._stop.set()
            if self._host_taken is not None:
                raise self._host_taken
        finally:
            self._host_taken = None
            self._serving = False
            self._stop = trio.Event()  # a later serve starts afresh
            self._grace_override = None
            log.info("stopped serving group %s", cfg.consumer_group)

    async def _run_shielded(self, ready: trio.Event) -> None:
        # Shielded: outside cancellation reaches serve() only through the stop
        # event, so the drain below always runs to its (bounded) end.
        cfg = self.config
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as services:
                await services.start(
                    heartbeat.run, self.backend, cfg.host, self.instance_id, self._lost_host
                )
                await services.start(
                    partial(
                        leadership.run,
                        self.backend,
                        cfg.consumer_group,
                        self.instance_id,
                        self._leadership,
                        ttl=cfg.leader_lease_ttl,
                    )
                )
                services.start_soon(self._leadership.run_as_leader, self._scheduler.run)
                services.start_soon(self._scheduler.run_local, lambda: self.is_leader)
                services.start_soon(
                    self._leadership.run_as_leader,
                    partial(cleanup.run, self.backend, cfg.consumer_group),
                )
                await services.start(
                    bulk_writer.run, self.backend, cfg.consumer_group, self._timings
                )
                await services.start(aggregator.run, self)
                await services.start(
                    sharing.run, self._worker.sharing, self.backend, cfg.consumer_group
                )
                await services.start(self._acker.run)
                await services.start(
                    refresher.run,
                    self.backend,
                    cfg.consumer_group,
                    self._inflight,
                    self._refresh_tick,
                )
                await self._run_core(ready)
                services.cancel_scope.cancel()

    async def _run_core(self, ready: trio.Event) -> None:
        cfg = self.config
        async with trio.open_nursery() as workers:
            self._workers = workers
            async with trio.open_nursery() as fetchers:
                for fetcher_id in range(1, cfg.num_fetchers + 1):
                    await fetchers.start(
                        fetcher.run,
                        fetcher_id,
                        cfg,
                        self.backend,
                        self._pool,
                        workers,
                        self._worker.execute,
                        self._fetch_counters,
                    )
                ready.set()
                await self._stop.wait()
                fetchers.cancel_scope.cancel()
            grace = self._current_grace()
            running = self._pool.in_use
            if running:
                log.info(
                    "shutting down: waiting up to %.1fs for %d running task(s)", grace, running
                )
            workers.cancel_scope.deadline = trio.current_time() + grace
        if workers.cancel_scope.cancelled_caught:
            # (A hard stop may cut the body above short: read the grace again.)
            log.warning(
                "shutdown_grace (%.3gs) ran out; unfinished tasks were cancelled and "
                "stay pending for reclaim",
                self._current_grace(),
            )
        self._workers = None

    def _current_grace(self) -> float:
        if self._grace_override is not None:
            return self._grace_override
        return self.config.shutdown_grace

    def statistics(self) -> RunnerStatistics:
        """A frozen snapshot of this runner's local counters and pool state."""
        w = self._worker.counters
        return RunnerStatistics(
            serving=self._serving,
            capacity=self._pool.capacity,
            running=len(self._inflight),
            fetched=self._fetch_counters.fetched,
            reclaimed=self._fetch_counters.reclaimed,
            completed=w.completed,
            failed=w.failed,
            retried=w.retried,
            dead_lettered=w.dead_lettered,
            handled=w.handled,
            acked=self._acker.acked,
            ack_backlog=self._acker.backlog,
        )
