"""The runner: it owns its parts (registry, dispatcher, the serve services) and serves.

Theory of operation. The runner composes its parts and owns ``serve``. Its
public API is its own methods and those of its bases, each kept with the
concept it belongs to, its docstring the contract:
:class:`~taskrunner._registry.Registering` (``register``, ``task``),
:class:`~taskrunner._schedules.api.Scheduling` (``add_schedule``, ``periodic``)
and :class:`~taskrunner._dispatch.api.Dispatching` (``dispatch`` and the
rest, ``get_task``, ``cancel``); this module holds the fleet's and serving's.
``serve`` checks (no other group on a stream deleted on ack, no other live
instance of this host), opens the lifespan, then runs the nursery tree of
:mod:`taskrunner._serve.tree` (drawn there) until cancelled or
:meth:`TaskRunner.shutdown`.

The parts: a :class:`~taskrunner._registry.Registry`, a
:class:`~taskrunner._dispatch.dispatcher.Dispatcher` and a
:class:`~taskrunner._dispatch.tracker.Tracker` (the bases' methods delegate to
them), and the services' objects (:class:`~taskrunner._serve.tree.ServeParts`). They all
read the configuration from one :class:`~taskrunner._config.ConfigHolder`,
which :meth:`TaskRunner.configure` replaces.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import attrs
import trio

from taskrunner._config import ConfigHolder, TaskRunnerConfig
from taskrunner._dispatch.api import Dispatching
from taskrunner._dispatch.dispatcher import Dispatcher
from taskrunner._dispatch.guards import check_runner_arguments, require_trio
from taskrunner._dispatch.shard_count import check_shard_count
from taskrunner._dispatch.tracker import Tracker
from taskrunner._dispatch.workflows import Workflows, WorkflowTracker
from taskrunner._execution.lifespan import Lifespan, check_lifespan, open_lifespan
from taskrunner._execution.middleware import Middleware, check_middleware
from taskrunner._fleet.stats import Stats
from taskrunner._registry import Registering, Registry
from taskrunner._schedules.api import Scheduling
from taskrunner._serve import aggregator, heartbeat, tree
from taskrunner._serve.tree import ServeParts
from taskrunner.backends import Backend
from taskrunner.backends._key_layout import learn_key_layout
from taskrunner.errors import AlreadyServing, DuplicateHost

log = logging.getLogger(__name__)

L = TypeVar("L", bound=Lifespan)
M = TypeVar("M", bound=Middleware)


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
    """Attempts whose action raised (or ran past its timeout)."""
    retried: int
    """Failed attempts given another try: re-queued through the delayed set, or
    left pending for reclaim (``retry=None``)."""
    dead_lettered: int
    """Messages moved to the dead-letter stream."""
    handled: int
    """Messages handed to ``failed_task_handler`` that it accepted."""
    cancelled: int
    """Runs stopped by :meth:`TaskRunner.cancel` (or dropped, cancelled, before they ran)."""
    acked: int
    """Messages acknowledged."""
    ack_backlog: int
    """Finished messages waiting for their ack."""
    deferred: int = 0
    """Runs sent back through the delayed set to wait for a concurrency slot or a
    rate limit (not attempts)."""
    parked: int = 0
    """Runs of a paused task parked until it is resumed."""


class TaskRunner(Registering, Scheduling, Dispatching, Workflows):
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
        backend.use_key_layout(config.requested_layout)  # refuses a layout the backend cannot use
        self.backend = backend
        self.instance_id = uuid.uuid4().hex
        self._config = ConfigHolder(config)
        self._registry = Registry(self._config)
        tasks = self._registry.tasks
        self._parts = parts = ServeParts(self._config, backend, tasks, self.instance_id)
        self._worker = parts.worker  # (the observers' home; taskrunner.otel's too)
        self._periodic = parts.periodic  # (Scheduling's schedule book)
        self._lifespan: Lifespan | None = None
        self._middlewares: list[Middleware] = []
        self._tracker = Tracker(self._config, backend, tasks)
        self._dispatcher = Dispatcher(self._config, backend, tasks, parts.scheduler, self._tracker)
        self._workflows = WorkflowTracker(self._config, backend, tasks)
        self._serving = False
        self._stop = trio.Event()

    @property
    def config(self) -> TaskRunnerConfig:
        """How this instance behaves (replace fields with :meth:`configure`)."""
        return self._config.current

    def __repr__(self) -> str:
        return f"<TaskRunner group={self.config.consumer_group!r} host={self.config.host!r}>"

    def lifespan(self, fn: L) -> L:
        """Register the runner's lifespan (a decorator): resources opened once per
        :meth:`serve`, before anything is fetched, and closed after the workers
        have drained.

        ``fn(runner)`` is an async generator function, or returns an async
        context manager (an ``@asynccontextmanager`` function); what it yields
        (a mapping, or ``None``) is every run's ``ctx.state``::

            @runner.lifespan
            async def resources(runner):
                async with open_http_client() as http:
                    yield {"http": http}

        It exits normally however ``serve`` stops, shielded from cancellation
        for at most ``shutdown_grace`` seconds. Registering another replaces it.

        Returns:
            ``fn``.

        Raises:
            TypeError: ``fn`` is neither (a plain ``async def`` cannot yield).
            AlreadyServing: the runner is serving.
        """
        check_lifespan(fn)
        if self._serving:
            raise AlreadyServing(f"{self!r} is serving; register its lifespan before serve()")
        self._lifespan = fn
        return fn

    def middleware(self, fn: M) -> M:
        """Wrap every run in ``fn`` (also usable as a decorator).

        ``async def fn(ctx, call_next)`` gets the run's
        :class:`~taskrunner.TaskContext`; ``await call_next()`` runs the inner
        middlewares and the action (in its thread, for a plain ``def`` one)
        and returns the action's result. Middlewares run in registration
        order, the first registered outermost. One that raises fails the
        attempt exactly as the action raising would. A middleware registered
        while serving applies from the next :meth:`serve`.

        Returns:
            ``fn``.

        Raises:
            TypeError: ``fn`` is not an async function.
        """
        check_middleware(fn)
        self._middlewares.append(fn)
        return fn

    # Fleet ------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """Whether this instance leads its group right now."""
        return self._parts.leadership.is_leader

    async def wait_leadership_changed(self) -> bool:
        """Wait until this instance is promoted or demoted; returns :attr:`is_leader`."""
        require_trio("TaskRunner.wait_leadership_changed")
        await self._parts.leadership.wait_changed()
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
        return await self._parts.replicas.get(serving=self._serving, refresh=refresh)

    async def get_timing_statistics(self) -> Stats:
        """The group's timing statistics (see docs/timing-metrics.md).

        Reads the metrics hash and the stream length (two backend calls) and
        counts replicas (cached); cheap, but not for a hot loop.

        Raises:
            BackendError: the backend could not be reached.
        """
        require_trio("TaskRunner.get_timing_statistics")
        replication = await self.get_number_of_replications()
        paused = self._parts.gate.paused.queues
        return await aggregator.timing_statistics(
            self.backend,
            self.config.consumer_group,
            self._registry.tasks,
            self._parts.pool.capacity,
            replication,
            queues=[q for q in self.queues if q not in paused],
        )

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues this runner reads, in priority order: ``config.queues``, or the
        backend's one queue."""
        names = self.config.queue_names
        if names is not None:
            return names
        return (self.backend.stream_keys(self.config.consumer_group).queue,)

    @property
    def capacity(self) -> int:
        """Current worker-pool capacity."""
        return self._parts.pool.capacity

    # Serving ----------------------------------------------------------------
    def configure(self, **changes: Any) -> None:
        """Replace configuration fields before serving (e.g. from command-line flags).

        Raises:
            ValueError, TypeError: a new value is invalid (as for
                :class:`TaskRunnerConfig`), or a registered task's explicit
                ``reservation_timeout`` is not below the new ``reclaim_delay``.
                Nothing changes then.
            KeyLayoutError: ``shards > 1`` on a backend given ``key_layout="go"``.
            AlreadyServing: the runner is serving.
        """
        if self._serving:
            raise AlreadyServing(f"{self!r} is serving; configure it before serve()")
        config = attrs.evolve(self.config, **changes)
        if config.shards != self.config.shards:  # a sharded group's keys: cluster layout
            self.backend.use_key_layout(config.requested_layout)
        # Registered tasks follow a new reclaim_delay: defaulted reservation
        # timeouts are recomputed, explicit ones must stay below it.
        self._registry.follow(config)
        self._config.current = config  # every part reads it from here
        if "num_workers" in changes:
            self._parts.pool.resize(config.num_workers)

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
        old = self._parts.pool.capacity
        self._parts.pool.resize(capacity)
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
            if self._parts.workers_scope is not None and self._stop.is_set():
                self._parts.workers_scope.deadline = trio.current_time() + grace
        self._stop.set()

    _grace_override: float | None = None
    _host_taken: DuplicateHost | None = None

    def _lost_host(self, error: DuplicateHost) -> None:
        # Another instance holds this host's heartbeat key: stop gracefully, and
        # serve raises the error once drained (see _serve/heartbeat.py).
        self._host_taken = error
        self.shutdown()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fetch and run tasks until cancelled or :meth:`shutdown`.

        Calls ``task_status.started()`` once fetchers and workers are running.

        Raises:
            AlreadyServing: ``serve`` is already running on this runner.
            LifespanError: the lifespan failed to start (nothing was started).
            WrongAsyncLibrary: awaited outside trio (under asyncio, say).
            ShardCountError: the group is laid out in another shard count and is
                not empty (nothing was started; docs/sharding.md).
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
        own = self.backend.stream_keys(cfg.consumer_group).queue
        default_queue = cfg.default_queue(own) or own  # where a task without a queue goes
        tasks = self._registry.tasks.values()
        for name, queue in tree.unread_queues(tasks, default_queue, self.queues):
            log.warning(
                "task %s goes to queue %s, which this runner does not read (it reads %s); "
                "other runners of the group must",
                name,
                queue,
                ", ".join(self.queues),
            )
        log.info(
            "serving group %s as host %s (instance %s): %d fetcher(s), %d worker(s), tasks: %s",
            cfg.consumer_group,
            cfg.host,
            self.instance_id,
            cfg.num_fetchers,
            self._parts.pool.capacity,
            ", ".join(sorted(self._registry.tasks)) or "(none)",
        )
        ready = trio.Event()
        try:
            await self._parts.sharing.check_start()
            async with open_lifespan(self._lifespan, self, cfg.shutdown_grace) as state:
                # The layout again: a cluster is found at connect, "go" there is refused.
                await learn_key_layout(self.backend)
                self.backend.use_key_layout(cfg.requested_layout)
                await check_shard_count(
                    self.backend, cfg.consumer_group, cfg.shards, self._tracker.queues()
                )
                await heartbeat.claim(
                    self.backend, cfg.host, self.instance_id, group=cfg.consumer_group
                )
                self._parts.prepare(state, self._middlewares, cfg.sync_threads)
                services = partial(
                    tree.run,
                    self._parts,
                    self,
                    self._registry.tasks,
                    instance_id=self.instance_id,
                    queues=self.queues,
                    stop=self._stop,
                    grace=self._current_grace,
                    lost_host=self._lost_host,
                    ready=ready,
                )
                async with trio.open_nursery() as top:
                    # start_soon, not start: a serve cancelled while starting must
                    # still reach the finally below (the stop event), or the
                    # shielded child would wait for it forever.
                    top.start_soon(services)
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

    def _current_grace(self) -> float:
        if self._grace_override is not None:
            return self._grace_override
        return self.config.shutdown_grace

    def statistics(self) -> RunnerStatistics:
        """A frozen snapshot of this runner's local counters and pool state."""
        w = self._worker.counters
        return RunnerStatistics(
            serving=self._serving,
            capacity=self._parts.pool.capacity,
            running=len(self._parts.inflight),
            fetched=self._parts.fetch_counters.fetched,
            reclaimed=self._parts.fetch_counters.reclaimed,
            completed=w.completed,
            failed=w.failed,
            retried=w.retried,
            dead_lettered=w.dead_lettered,
            handled=w.handled,
            cancelled=self._worker.outcomes.finishing.cancelled_count,
            acked=self._parts.acker.acked,
            ack_backlog=self._parts.acker.backlog,
            deferred=self._parts.gate.counters.deferred,
            parked=self._parts.gate.counters.parked,
        )
