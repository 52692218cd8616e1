"""The runner: it owns its parts (registry, dispatcher, the serve services) and
``serve``'s nursery tree.

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
        │   ├── bulk_writer      timings -> metrics hash, once a second
        │   ├── aggregator       stats, resets, tuner, long_queue_hook
        │   ├── sharing          other groups on the stream (checked at start too)
        │   ├── acker            batched acks (and unique-lock releases, results)
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

The runner composes its parts: a :class:`~taskrunner._registry.Registry`
and a :class:`~taskrunner._dispatch.dispatcher.Dispatcher` (its public registering and
dispatching methods delegate to them), and the services' objects. They all
read the configuration from one :class:`~taskrunner._config.ConfigHolder`,
which :meth:`TaskRunner.configure` replaces.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar, overload

import attrs
import trio

from taskrunner._codec import ExtraKeys
from taskrunner._config import ConfigHolder, TaskRunnerConfig
from taskrunner._dispatch.dispatcher import Dispatcher
from taskrunner._dispatch.guards import check_runner_arguments, require_trio
from taskrunner._dispatch.handle import TaskHandle, TaskInfo
from taskrunner._dispatch.tracker import Tracker
from taskrunner._execution.inflight import InFlight
from taskrunner._execution.lifespan import Lifespan, check_lifespan, open_lifespan
from taskrunner._execution.middleware import Middleware, check_middleware
from taskrunner._execution.retry import DEFAULT_BACKOFF, Backoff
from taskrunner._fleet.stats import Stats
from taskrunner._fleet.timings import TimingRecorder
from taskrunner._flow.limits import RateLimit
from taskrunner._registry import Registry
from taskrunner._schedules.periodic import DEFAULT_IN_FLIGHT_TTL, Schedule
from taskrunner._schedules.ticks import CatchUp
from taskrunner._serve import (
    aggregator,
    bulk_writer,
    canceller,
    catalog,
    cleanup,
    heartbeat,
    leadership,
    refresher,
    sharing,
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
from taskrunner._task import Action, RateLimitKey, Task, UniqueKey
from taskrunner.backends import Backend
from taskrunner.errors import AlreadyServing, DuplicateHost

log = logging.getLogger(__name__)

A = TypeVar("A", bound=Action)
L = TypeVar("L", bound=Lifespan)
M = TypeVar("M", bound=Middleware)

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


class TaskRunner:
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
        self.backend = backend
        self.instance_id = uuid.uuid4().hex
        self._config = ConfigHolder(config)
        self._registry = Registry(self._config)
        tasks = self._registry.tasks
        self._pool = WorkerPool(config.num_workers)
        self._inflight = InFlight()
        self._timings = TimingRecorder()
        self._acker = Acker(backend, self._config)
        self._sharing = StreamSharing(backend, self._config)
        self._fetch_counters = FetcherCounters()
        self._scheduler = Scheduler(backend, self._config, tasks, self._timings)
        self._gate = Gate(backend, self._config, self._scheduler, self.instance_id)
        self._worker = Worker(
            self._config,
            tasks,
            self._pool,
            Outcomes(self._config, backend, self._acker, self._scheduler.nudge, tasks),
            self._sharing,
            self._inflight,
            self._timings,
            self._gate,
        )
        self._leadership = Leadership()
        self._replicas = ReplicationCounter(backend)
        self._lifespan: Lifespan | None = None
        self._middlewares: list[Middleware] = []
        self._tracker = Tracker(self._config, backend, tasks)
        self._dispatcher = Dispatcher(self._config, backend, tasks, self._scheduler, self._tracker)
        self._periodic = Periodic(backend, self._config, tasks, self.instance_id)
        self._serving = False
        self._stop = trio.Event()
        self._workers_scope: trio.CancelScope | None = None  # the workers nursery, serving

    @property
    def config(self) -> TaskRunnerConfig:
        """How this instance behaves (replace fields with :meth:`configure`)."""
        return self._config.current

    def __repr__(self) -> str:
        return f"<TaskRunner group={self.config.consumer_group!r} host={self.config.host!r}>"

    # Registry ---------------------------------------------------------------
    @property
    def tasks(self) -> dict[str, Task]:
        """Registered tasks by name (a copy)."""
        return dict(self._registry.tasks)

    @property
    def task_names(self) -> list[str]:
        """Names of the registered tasks."""
        return list(self._registry.tasks)

    def register(self, task: Task) -> Task:
        """Register ``task``; a ``reservation_timeout`` of ``None`` becomes a third
        of ``reclaim_delay``.

        Returns:
            The task as registered.

        Raises:
            ValueError: a task with that name is registered already (or the name
                is reserved: ``delayed_tasks_schedule``, or Go's
                ``taskrunner:<group>:delayed_tasks_schedule``), or its
                ``reservation_timeout`` is not below the runner's ``reclaim_delay``
                (the message could be reclaimed while it runs).
        """
        return self._registry.register(task)

    @overload
    def task(self, action: A, /) -> A: ...

    @overload
    def task(
        self,
        name: str | None = None,
        *,
        max_retry: int = 1,
        reservation_timeout: float | None = None,
        unique: bool = False,
        unique_key: UniqueKey | None = None,
        unique_for: float = 0.0,
        extra_keys: ExtraKeys = "forbid",
        queue: str | None = None,
        max_concurrency: int | None = None,
        rate_limit: RateLimit | None = None,
        rate_limit_key: RateLimitKey | None = None,
        timeout: float | None = None,
        retry: Backoff | None = DEFAULT_BACKOFF,
        permanent: type[BaseException] | tuple[type[BaseException], ...] = (),
        keep_result: float | None = None,
    ) -> Callable[[A], A]: ...

    def task(
        self,
        name: str | A | None = None,
        *,
        max_retry: int = 1,
        reservation_timeout: float | None = None,
        unique: bool = False,
        unique_key: UniqueKey | None = None,
        unique_for: float = 0.0,
        extra_keys: ExtraKeys = "forbid",
        queue: str | None = None,
        max_concurrency: int | None = None,
        rate_limit: RateLimit | None = None,
        rate_limit_key: RateLimitKey | None = None,
        timeout: float | None = None,
        retry: Backoff | None = DEFAULT_BACKOFF,
        permanent: type[BaseException] | tuple[type[BaseException], ...] = (),
        keep_result: float | None = None,
    ) -> A | Callable[[A], A]:
        """Decorator form of :meth:`register`; the name defaults to the function's.

        Used bare (``@runner.task``) it registers the function with the defaults;
        called (``@runner.task(...)``) it takes the options of :class:`Task`.
        The action may be ``async def`` or a plain ``def`` (run in a worker
        thread), and may take the run's :class:`~taskrunner.TaskContext` as a
        second positional parameter or as a parameter annotated ``TaskContext``.

        Example::

            @runner.task
            async def send_email(payload: dict) -> None: ...

            @runner.task(name="resize", max_retry=3, timeout=30.0)
            async def resize_image(payload: dict, ctx: TaskContext) -> None: ...

            @runner.task(max_retry=5, retry=Backoff(initial=2.0), permanent=ValueError)
            def thumbnail(payload: dict) -> None: ...

            @runner.task(name="charge", queue="critical", max_concurrency=5,
                         rate_limit=RateLimit(100, per=1.0))
            async def charge(payload: dict) -> None: ...

        Raises:
            ValueError: as :meth:`register`, or an option is invalid (as for
                :class:`Task`).
        """
        if callable(name):  # used bare: @runner.task
            return self.task()(name)
        return self._registry.decorator(
            name,
            max_retry=max_retry,
            reservation_timeout=reservation_timeout,
            unique=unique,
            unique_key=unique_key,
            unique_for=unique_for,
            extra_keys=extra_keys,
            queue=queue,
            max_concurrency=max_concurrency,
            rate_limit=rate_limit,
            rate_limit_key=rate_limit_key,
            timeout=timeout,
            retry=retry,
            permanent=permanent if isinstance(permanent, tuple) else (permanent,),
            keep_result=keep_result,
        )

    # Periodic schedules -----------------------------------------------------
    @property
    def schedules(self) -> dict[str, Schedule]:
        """Declared periodic schedules by name (a copy)."""
        return dict(self._periodic.schedules)

    def add_schedule(
        self,
        name: str,
        *,
        task: str,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str = "UTC",
        payload: Any = None,
        catch_up: CatchUp = "latest",
        overlap: bool = True,
        in_flight_ttl: float | timedelta = DEFAULT_IN_FLIGHT_TTL,
    ) -> Schedule:
        """Run task ``task`` with ``payload`` on every tick of a schedule.

        Declare every schedule on every instance, before :meth:`serve`: the
        leader fires the ones it declares, each tick exactly once (see the
        "Periodic tasks" page of the docs). The run knows its tick: ``ctx.tick``
        (and ``ctx.schedule``) of its :class:`~taskrunner.TaskContext`.

        Example::

            runner.add_schedule("nightly-report", task="report", cron="0 3 * * *",
                                timezone="Europe/Berlin", payload={"kind": "daily"})
            runner.add_schedule("heartbeat", task="ping", every=30.0)

        Args:
            name: The schedule's name, unique in the group.
            task: A registered task (not a unique one: use ``overlap=False``).
            cron: A cron expression (5 fields, or 6 with seconds first), read in
                ``timezone``. Give this or ``every``.
            every: Seconds (or a timedelta, at least 1 s) between ticks, which
                fall on its multiples since the epoch.
            timezone: The IANA zone of ``cron`` (default UTC).
            payload: The payload of every run.
            catch_up: Missed ticks (the fleet was down): ``"latest"`` runs once,
                for the most recent; ``"none"`` runs none; ``"all"`` runs each,
                the newest 100 at most.
            overlap: ``False`` skips a tick while the previous run is still
                queued or running.
            in_flight_ttl: With ``overlap=False``, how long a run counts as in
                flight at most (when its outcome is never recorded).

        Returns:
            The schedule as declared.

        Raises:
            ValueError: an option is invalid, the name is taken, or the task is unique.
            TaskNotFound: no task ``task`` is registered.
            InvalidTaskPayload: ``payload`` does not encode for the task.
            AlreadyServing: the runner is serving.
        """
        if self._serving:
            raise AlreadyServing(f"{self!r} is serving; add schedules before serve()")
        schedule = Schedule(
            name=name,
            task=task,
            cron=cron,
            every=every,
            timezone=timezone,
            payload=payload,
            catch_up=catch_up,
            overlap=overlap,
            in_flight_ttl=in_flight_ttl,
        )
        return self._periodic.add(schedule)

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        name: str | None = None,
        timezone: str = "UTC",
        payload: Any = None,
        catch_up: CatchUp = "latest",
        overlap: bool = True,
        in_flight_ttl: float | timedelta = DEFAULT_IN_FLIGHT_TTL,
        max_retry: int = 1,
        reservation_timeout: float | None = None,
        extra_keys: ExtraKeys = "forbid",
        timeout: float | None = None,
        retry: Backoff | None = DEFAULT_BACKOFF,
        permanent: type[BaseException] | tuple[type[BaseException], ...] = (),
        queue: str | None = None,
        max_concurrency: int | None = None,
        rate_limit: RateLimit | None = None,
    ) -> Callable[[A], A]:
        """Decorator: register the function as a task and run it on a schedule, both
        named ``name`` (default: the function's name).

        Example::

            @runner.periodic(cron="*/5 * * * *", name="cleanup")
            async def cleanup(payload: None) -> None: ...

        The schedule options are :meth:`add_schedule`'s; ``max_retry``,
        ``reservation_timeout``, ``extra_keys``, ``timeout``, ``retry``,
        ``permanent``, ``queue`` (the queue its ticks fire into),
        ``max_concurrency`` and ``rate_limit`` are the task's (:meth:`task`).
        A retry of a run serves the same tick (``ctx.tick``); an
        ``overlap=False`` schedule's run is in flight until its last attempt ends.

        Raises:
            ValueError, TaskNotFound, InvalidTaskPayload, AlreadyServing: as
                :meth:`add_schedule` and :meth:`register`; nothing is registered then.
        """

        def decorate(action: A) -> A:
            task_name = name or action.__name__
            self.task(
                task_name,
                max_retry=max_retry,
                reservation_timeout=reservation_timeout,
                extra_keys=extra_keys,
                timeout=timeout,
                retry=retry,
                permanent=permanent,
                queue=queue,
                max_concurrency=max_concurrency,
                rate_limit=rate_limit,
            )(action)
            try:
                self.add_schedule(
                    task_name,
                    task=task_name,
                    cron=cron,
                    every=every,
                    timezone=timezone,
                    payload=payload,
                    catch_up=catch_up,
                    overlap=overlap,
                    in_flight_ttl=in_flight_ttl,
                )
            except BaseException:
                self._registry.remove(task_name)
                raise
            return action

        return decorate

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

    # Dispatch ---------------------------------------------------------------
    async def dispatch(
        self, name: str, payload: Any = None, *, queue: str | None = None
    ) -> TaskHandle:
        """Queue one run of task ``name``.

        Args:
            queue: The queue to add it to, instead of the task's own (its
                ``queue``, else the backend's).

        Returns:
            Its handle: ``handle.id`` (also ``str(handle)``) is the task id, the
            stream id of the entry added; ``await handle.result(timeout)`` waits
            for the outcome of a task that keeps results.

        Raises:
            TaskNotFound: no task ``name`` is registered.
            InvalidTaskPayload: ``payload`` cannot be encoded (or its unique or
                rate-limit key cannot be computed); nothing was queued.
            ValueError: ``queue`` is not a valid queue name.
            TaskAlreadyDispatched: ``name`` is unique and its lock is held.
            BackendError: the backend could not be reached.
            WrongAsyncLibrary: awaited outside trio (under asyncio, say).

        Cancellation: the message may or may not have been queued. A unique
        task's lock is given back only when the add certainly did not happen
        (a ``BackendError`` with ``maybe_applied`` false); otherwise it is kept,
        so no duplicate gets in, and expires after ``unique_for`` (or is released
        by the worker, if the message was queued after all).
        """
        require_trio("TaskRunner.dispatch")
        return await self._dispatcher.dispatch(name, payload, queue=queue)

    async def dispatch_many(
        self, name: str, payloads: Iterable[Any], *, queue: str | None = None
    ) -> list[TaskHandle]:
        """Queue one run of task ``name`` per payload, in one backend call.

        Every payload is encoded before anything is queued, so an invalid one
        queues none.

        Returns:
            Their handles, in order.

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: the task is unique (dispatch those one by one, so each
                duplicate can be refused on its own), or ``queue`` is invalid.
        """
        require_trio("TaskRunner.dispatch_many")
        return await self._dispatcher.dispatch_many(name, payloads, queue=queue)

    async def dispatch_delayed(
        self,
        name: str,
        payload: Any = None,
        delay: float | timedelta = 0.0,
        *,
        queue: str | None = None,
    ) -> TaskHandle:
        """Queue one run of task ``name`` after ``delay`` (seconds, or a timedelta).

        The task waits in the group's delayed set; the leader moves it to the
        stream when due. A unique task takes its lock when it is moved, not
        now; while the lock is held it stays in the set.

        Returns:
            Its handle; its id is the delayed member's, which the entry it becomes
            keeps, so it stays the task's id throughout.

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: ``delay`` is negative or not finite, or ``queue`` is invalid.
        """
        require_trio("TaskRunner.dispatch_delayed")
        return await self._dispatcher.dispatch_delayed(name, payload, delay, queue=queue)

    async def schedule_for(
        self, name: str, payload: Any, when: datetime | float, *, queue: str | None = None
    ) -> TaskHandle:
        """Queue one run of task ``name`` at ``when``.

        Args:
            when: A timezone-aware datetime, or unix seconds. A time in the
                past runs at the next scheduler pass.

        Returns:
            Its handle (as :meth:`dispatch_delayed`).

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: ``when`` is a naive datetime or not finite, or ``queue`` is
                invalid.
        """
        require_trio("TaskRunner.schedule_for")
        return await self._dispatcher.schedule_for(name, payload, when, queue=queue)

    # Tasks by id -------------------------------------------------------------
    async def get_task(self, task_id: str | TaskHandle) -> TaskInfo | None:
        """Where a task is now, and, once done, what it did.

        Read in one atomic step from the backend, so it answers for a task run by
        any instance: queued (in the stream, not delivered), running (delivered,
        not acknowledged), scheduled (in the delayed set, dispatched with a
        delay or waiting for a retry), and, for a task that keeps results, its
        final state (succeeded, failed, cancelled) until ``keep_result`` runs out.

        Args:
            task_id: A task id (``handle.id``), or the handle.

        Returns:
            ``None`` for an id the backend does not know now: never dispatched,
            done without a kept result (or its result expired), or a delayed
            task the Go library dispatched (it does not index its members).

        Raises:
            BackendError: the backend could not be reached.
        """
        require_trio("TaskRunner.get_task")
        return await self._tracker.get_task(str(task_id))

    async def cancel(self, task_id: str | TaskHandle) -> bool:
        """Cancel a task, wherever it is in the fleet.

        - queued: its entry is deleted from the stream in one atomic step, so it
          never runs (a fetcher that read it first holds it: it is running);
        - scheduled: its member is removed from the delayed set;
        - running: the instance that runs it cancels that run within about a
          second (its cancel scope), then acknowledges it as cancelled, never
          to be retried. A sync action in a thread cannot be interrupted: its
          outcome is discarded and it is recorded as cancelled.

        A cancelled task releases its unique lock and, when it keeps results,
        is recorded as cancelled (``handle.result`` raises
        :class:`~taskrunner.errors.TaskCancelled`).

        Args:
            task_id: A task id (``handle.id``), or the handle.

        Returns:
            ``True`` if it was cancelled (or, running, asked to stop: a run that
            finishes first keeps its outcome); ``False`` for a task that is done
            or unknown.

        Raises:
            BackendError: the backend could not be reached.

        Cancellation: the task may have been cancelled; a repeat returns
        ``False`` once it is gone.
        """
        require_trio("TaskRunner.cancel")
        return await self._tracker.cancel(str(task_id))

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
        paused = self._gate.paused.queues
        return await aggregator.timing_statistics(
            self.backend,
            self.config.consumer_group,
            self._registry.tasks,
            self._pool.capacity,
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
        return self._pool.capacity

    # Serving ----------------------------------------------------------------
    def _refresh_tick(self) -> float:
        timeouts = [t.reservation for t in self._registry.tasks.values()]
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
        self._registry.follow(config)
        self._config.current = config  # every part reads it from here
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
            if self._workers_scope is not None and self._stop.is_set():
                self._workers_scope.deadline = trio.current_time() + grace
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
        self._warn_unread_queues()
        log.info(
            "serving group %s as host %s (instance %s): %d fetcher(s), %d worker(s), tasks: %s",
            cfg.consumer_group,
            cfg.host,
            self.instance_id,
            cfg.num_fetchers,
            self._pool.capacity,
            ", ".join(sorted(self._registry.tasks)) or "(none)",
        )
        ready = trio.Event()
        try:
            await self._sharing.check_start()
            async with open_lifespan(self._lifespan, self, cfg.shutdown_grace) as state:
                await heartbeat.claim(self.backend, cfg.host, self.instance_id)
                self._prepare_worker(state)
                async with trio.open_nursery() as top:
                    # start_soon, not start: a serve cancelled while starting must
                    # still reach the finally below (the stop event), or the
                    # shielded child would wait for it forever.
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

    def _warn_unread_queues(self) -> None:
        default = self.backend.stream_keys(self.config.consumer_group).queue
        served = set(self.queues)
        for task in self._registry.tasks.values():
            queue = task.queue or default
            if queue not in served:
                log.warning(
                    "task %s goes to queue %s, which this runner does not read (it reads %s); "
                    "other runners of the group must",
                    task.name,
                    queue,
                    ", ".join(self.queues),
                )

    async def _run_shielded(self, ready: trio.Event) -> None:
        # Shielded: outside cancellation reaches serve() only through the stop
        # event, so the drain below always runs to its (bounded) end.
        cfg = self.config
        backend, group = self.backend, cfg.consumer_group
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as services:
                await services.start(
                    heartbeat.run, backend, cfg.host, self.instance_id, self._lost_host
                )
                await services.start(
                    catalog.run, backend, group, cfg.host, self.instance_id, self._registry.tasks
                )
                await services.start(
                    partial(
                        leadership.run,
                        backend,
                        group,
                        self.instance_id,
                        self._leadership,
                        ttl=cfg.leader_lease_ttl,
                    )
                )
                await services.start(self._leadership.run_as_leader, self._scheduler.run)
                await services.start(self._scheduler.run_local, lambda: self.is_leader)
                if self._periodic.schedules:
                    await services.start(self._periodic.announce)
                    await services.start(self._leadership.run_as_leader, self._periodic.run)
                await services.start(
                    self._leadership.run_as_leader, partial(cleanup.run, backend, group)
                )
                await services.start(bulk_writer.run, backend, group, self._timings)
                await services.start(aggregator.run, self)
                await services.start(sharing.run, self._sharing, backend, group)
                await services.start(self._acker.run)
                await services.start(
                    refresher.run, backend, group, self._inflight, self._refresh_tick
                )
                await services.start(canceller.run, backend, group, self._inflight)
                await services.start(self._gate.run)
                fetching = FetcherContext(
                    config=cfg,
                    backend=backend,
                    pool=self._pool,
                    execute=self._worker.execute,
                    counters=self._fetch_counters,
                    gate=self._gate,
                    queues=self.queues,
                    weights=cfg.queue_weights,
                )
                async with trio.open_nursery() as core:
                    self._workers_scope = await core.start(
                        worker.run, fetching, self._stop, self._current_grace
                    )
                    ready.set()
                self._workers_scope = None
                services.cancel_scope.cancel()

    def _prepare_worker(self, state: Any) -> None:
        # What every run of this serve shares: taken once here, not per run.
        worker = self._worker
        worker.state = state
        worker.middlewares = tuple(self._middlewares)
        threads = self.config.sync_threads
        worker.thread_limiter = trio.CapacityLimiter(math.inf if threads is None else threads)

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
            cancelled=self._worker.outcomes.finishing.cancelled_count,
            acked=self._acker.acked,
            ack_backlog=self._acker.backlog,
            deferred=self._gate.counters.deferred,
            parked=self._gate.counters.parked,
        )
