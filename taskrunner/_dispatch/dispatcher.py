"""Dispatching: turning a task name and a payload into a queued message.

The :class:`Dispatcher` is the part of a :class:`~taskrunner.TaskRunner` that
its ``dispatch``, ``dispatch_many``, ``dispatch_delayed`` and
``schedule_for`` delegate to (their docstrings there are the contract).
Everything that can be refused (unknown task, payload that does not encode or
does not fit the typed payload, a bad delay) is refused before anything is
queued. A unique task's lock is taken before its message is added and given
back if the add certainly did not happen. The decisions are the pure rules of
:mod:`taskrunner._dispatch.enqueue`, which the producers (``taskrunner.producer``)
follow too; this class is their trio shell over a backend. Every dispatch
returns a :class:`~taskrunner.TaskHandle`: the stream id of the entry added,
or the id of the delayed member (indexed under it, so it can be looked up and
cancelled).

Tracing (``taskrunner.otel``) sets :attr:`Dispatcher.tracer`: each dispatch
then runs inside the context manager it returns, and the trace context it
yields is written into the message (or the delayed member) as ``trace``.
Without it nothing is added to the message and nothing is called.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol, cast

import attrs
import trio

from taskrunner import _keys, _shards
from taskrunner._config import ConfigHolder, TaskRunnerConfig, queue_name_problem
from taskrunner._dispatch.enqueue import (
    LockRequest,
    Planner,
    delay_seconds,
    give_back_lock,
    unix_seconds,
)
from taskrunner._dispatch.handle import TaskHandle
from taskrunner._dispatch.shard_count import check_shard_count
from taskrunner._dispatch.tracker import Tracker
from taskrunner._task import Task
from taskrunner.backends import Backend, EventBatch, EventLog, TaskEvent
from taskrunner.backends._key_layout import learn_key_layout
from taskrunner.backends._protocols.replication import ReplicatedAdd
from taskrunner.errors import BackendError, TaskAlreadyDispatched, TaskNotFound

log = logging.getLogger(__name__)

LOCK_RELEASE_TIMEOUT = 2.0


def dispatched_event(task_name: str, queue: str, at: float) -> TaskEvent:
    """The ``dispatched`` event of an entry about to be added (its id, still unknown,
    is filled in by the backend) (pure)."""
    return TaskEvent(
        kind="dispatched", task_id="", task_name=task_name, queue=queue, attempt=0, at=at
    )


class Nudged(Protocol):
    """What a dispatcher tells of every delayed task it adds: the runner's delayed-task
    scheduler (:class:`taskrunner._serve.scheduler.Scheduler`), so that it moves it on
    time. A protocol, so that this layer does not import the serve services."""

    def nudge(self, run_at: float) -> None: ...


Tracer = Callable[[str], AbstractContextManager[dict[str, str] | None]]
"""``tracer(task_name)``: a context manager around one dispatch (``dispatch_many``:
one for the batch), yielding the trace context to carry, if any."""

_UNTRACED: AbstractContextManager[None] = nullcontext()
"""What an untraced dispatch enters instead (reusable: it holds no state)."""


def _queue_of(task: Task, queue: str | None, default: str | None) -> str | None:
    """The queue a dispatch goes to: the one given, else the task's, else ``default``
    (see ``TaskRunnerConfig.default_queue``; ``None``: the backend's).

    Raises:
        ValueError: ``queue`` cannot name a queue.
    """
    if queue is None:
        return task.queue if task.queue is not None else default
    problem = queue_name_problem(queue)
    if problem is not None:
        raise ValueError(f"queue {problem}, got {queue!r}")
    return queue


class Dispatcher:
    """Queues runs of a runner's registered tasks.

    Args:
        config: The runner's configuration (the group to dispatch to).
        backend: Where the stream and the delayed set live.
        tasks: The registered tasks by name, read as it is.
        scheduler: Told of every delayed task added here, so it moves it on time.
        tracker: Makes the handles returned.
    """

    def __init__(
        self,
        config: ConfigHolder,
        backend: Backend,
        tasks: Mapping[str, Task],
        scheduler: Nudged,
        tracker: Tracker,
    ) -> None:
        self._config = config
        self._backend = backend
        self._tasks = tasks
        self._scheduler = scheduler
        self._tracker = tracker
        self.tracer: Tracer | None = None
        """Set by ``taskrunner.otel.instrument``; ``None``: dispatches are not traced."""
        self._planner = Planner()
        self._queues_of: tuple[object, str | None, str] | None = None
        self._ready_for: TaskRunnerConfig | None = None
        """The configuration the layout and the shard count were checked for."""

    def _queues(self) -> tuple[str | None, str]:
        """``(default, own)``: where a task without a queue of its own goes (see
        ``TaskRunnerConfig.default_queue``; ``None``: the backend's queue) and the
        backend's queue's name (what a handle of a dispatch with ``queue=None`` keeps,
        so that its lookups look on that queue alone). Worked out once per
        configuration: the per-dispatch path only compares it."""
        config = self._config.current
        cached = self._queues_of
        if cached is None or cached[0] is not config:
            own = self._backend.stream_keys(config.consumer_group).queue
            cached = self._queues_of = (config, config.default_queue(own), own)
        return cached[1], cached[2]

    async def _learn_layout(self) -> None:
        # A backend that finds a cluster at its first call names keys by what it finds:
        # ask before the first dispatch names any (a message in the other layout's
        # stream would never be read). Then the group's shard count: a message in
        # another count's shard would never be read either.
        config = self._config.current
        await learn_key_layout(self._backend)
        queues = self._tracker.queues()
        await check_shard_count(self._backend, config.consumer_group, config.shards, queues)
        self._ready_for = config

    def _get_task(self, name: str) -> Task:
        try:
            return self._tasks[name]
        except KeyError:
            raise TaskNotFound(name) from None

    async def dispatch(
        self, name: str, payload: Any = None, *, queue: str | None = None
    ) -> TaskHandle:
        """See :meth:`TaskRunner.dispatch <taskrunner.TaskRunner.dispatch>`."""
        if self._ready_for is not self._config.current:  # the first call (of a config)
            await self._learn_layout()
        if self.tracer is None:  # (no context manager entered for nothing: every dispatch)
            return await self._dispatch(name, payload, None, queue)
        with self.tracer(name) as trace:
            return await self._dispatch(name, payload, trace, queue)

    async def _dispatch(
        self, name: str, payload: Any, trace: dict[str, str] | None, queue: str | None
    ) -> TaskHandle:
        task = self._get_task(name)
        default, own = self._queues()
        queue = _queue_of(task, queue, default)
        handle_queue = own if queue is None else queue
        config = self._config.current
        group = config.consumer_group
        add: Callable[..., Awaitable[list[str]]] = self._backend.add
        if config.min_replicas or config.events:
            add = self._adder(config, task.name, handle_queue, 1)
        # One way: the payload's wire form (_task), encoded once into the plan
        # (_dispatch.enqueue, _wire), handed to the backend; nothing in this
        # module touches it in between (tests/test_dispatch_path.py).
        wire, key = task.dispatch_form(payload)
        shard = 0
        if config.shards > 1:  # one integer test for an unsharded group
            shard, group = self._shard_of(task, payload)
        if task.unique:
            plan = self._planner.entry(
                task,
                wire,
                key=key,
                token=uuid.uuid4().hex,
                trace=trace,
                lock_prefix=_keys.unique_prefix(group, self._backend.key_layout),
            )
        else:
            plan = self._planner.entry(task, wire, trace=trace)
        lock = plan.lock
        if lock is None:
            (message_id,) = await add(group, [plan.data], queue=queue)
            if config.shards > 1:
                message_id = self._tracker.router.task_id(shard, message_id)
            return self._tracker.handle(message_id, task.name, handle_queue)
        if not await self._backend.acquire_lock(lock.key, lock.token, lock.ttl):
            raise TaskAlreadyDispatched(task.name, lock.key)
        try:
            (message_id,) = await add(group, [plan.data], queue=queue)
        except BackendError as exc:
            if give_back_lock(exc.maybe_applied):
                await self._give_back(lock)
            else:
                log.warning(
                    "dispatch of unique task %s may or may not have queued it (%s); "
                    "keeping lock %s until it expires in %ss",
                    task.name,
                    exc,
                    lock.key,
                    lock.ttl,
                )
            raise
        if config.shards > 1:
            message_id = self._tracker.router.task_id(shard, message_id)
        return self._tracker.handle(message_id, task.name, handle_queue)

    def _shard_of(self, task: Task, payload: Any) -> tuple[int, str]:
        """``(shard, its group name)`` of one dispatch of ``task`` with ``payload`` in a
        sharded group (:mod:`taskrunner._dispatch.routing`).

        Raises:
            InvalidTaskPayload: the task's ``shard_key`` or ``unique_key`` refused it.
        """
        router = self._tracker.router
        unique = task.message_unique_key(payload) if task.unique else None
        shard = router.pick(task.shard_key_for(payload), unique)
        return shard, router.group_of(shard)

    def _replicated_add(self, config: TaskRunnerConfig) -> Callable[..., Awaitable[list[str]]]:
        """``backend.add`` followed by a wait for ``min_replicas`` replicas: chosen before
        the payload is planned, so the plan goes straight to the backend's one call."""
        backend = cast(ReplicatedAdd, self._backend)  # checked when the runner was made
        return partial(
            backend.add_replicated,
            replicas=config.min_replicas,
            wait_timeout=config.replica_timeout,
        )

    def _adder(
        self, config: TaskRunnerConfig, task_name: str, queue: str, count: int
    ) -> Callable[..., Awaitable[list[str]]]:
        """``backend.add`` for ``count`` entries of ``task_name`` on ``queue``: replicated
        with ``min_replicas``, carrying their ``dispatched`` events with ``events``."""
        if not config.events:
            return self._replicated_add(config)
        event = dispatched_event(task_name, queue, self._backend.unix_time(self._backend.now()))
        batch = EventBatch(events=(event,) * count, maxlen=config.events_maxlen)
        if config.shards > 1:  # a shard's add would write them in the shard's slot
            add = self._replicated_add(config) if config.min_replicas else self._backend.add
            return partial(self._add_then_events, add, batch)
        if not config.min_replicas:
            return partial(self._backend.add, events=batch)
        return partial(self._replicated_with_events, self._replicated_add(config), batch)

    async def _add_then_events(
        self,
        add: Callable[..., Awaitable[list[str]]],
        batch: EventBatch,
        group: str,
        payloads: list[bytes],
        *,
        queue: str | None,
    ) -> list[str]:
        # A sharded group's events stream is the group's, not in the shard's slot:
        # the events follow the add in a call of their own, naming the sharded ids.
        ids = await add(group, payloads, queue=queue)
        await self._events_apart(batch, [_shards.run_task_id(group, i) for i in ids], ids)
        return ids

    async def _events_apart(self, batch: EventBatch, task_ids: list[str], ids: list[str]) -> None:
        """Write ``batch``'s events, for the entries ``ids`` of tasks ``task_ids``, to the
        group's events stream, after a sharded add. The add stands whatever happens
        here: a failed write loses the events (logged), never the dispatch (which a
        caller told of a failure might repeat)."""
        pairs = zip(batch.events, task_ids, ids, strict=True)
        events = tuple(e._replace(task_id=t, message_id=i) for e, t, i in pairs)
        try:
            await cast(EventLog, self._backend).write_events(
                self._config.current.consumer_group, attrs.evolve(batch, events=events)
            )
        except BackendError as exc:
            log.warning("could not write %d dispatched event(s) (%s)", len(events), exc)

    async def _replicated_with_events(
        self,
        add: Callable[..., Awaitable[list[str]]],
        batch: EventBatch,
        group: str,
        payloads: list[bytes],
        *,
        queue: str | None,
    ) -> list[str]:
        # A replicated add is a pipeline ending in WAIT, not a script that can write
        # events with the ids it makes: its events follow, in a call of their own.
        ids = await add(group, payloads, queue=queue)
        pairs = zip(batch.events, ids, strict=True)
        events = [e._replace(task_id=i, message_id=i) for e, i in pairs]
        await cast(EventLog, self._backend).write_events(
            group, attrs.evolve(batch, events=tuple(events))
        )
        return ids

    async def _give_back(self, lock: LockRequest) -> None:
        with trio.move_on_after(LOCK_RELEASE_TIMEOUT, shield=True):
            try:
                await self._backend.release_lock(lock.key, lock.token)
            except BackendError as exc:
                log.warning(
                    "could not release unique lock %s after a failed dispatch (%s); "
                    "it expires in %ss",
                    lock.key,
                    exc,
                    lock.ttl,
                )

    async def dispatch_many(
        self, name: str, payloads: Iterable[Any], *, queue: str | None = None
    ) -> list[TaskHandle]:
        """See :meth:`TaskRunner.dispatch_many <taskrunner.TaskRunner.dispatch_many>`."""
        if self._ready_for is not self._config.current:  # the first call (of a config)
            await self._learn_layout()
        task = self._get_task(name)
        if task.unique:
            raise ValueError(f"task {name!r} is unique; dispatch it with dispatch(), one at a time")
        queue = _queue_of(task, queue, self._queues()[0])
        with _UNTRACED if self.tracer is None else self.tracer(name) as trace:
            return await self._add_many(task, payloads, trace, queue)

    async def _add_many(
        self, task: Task, payloads: Iterable[Any], trace: dict[str, str] | None, queue: str | None
    ) -> list[TaskHandle]:
        form = task.dispatch_form
        payloads = list(payloads)  # read twice when sharded (the shard keys)
        data = self._planner.entries(task, [form(payload)[0] for payload in payloads], trace)
        if not data:
            return []
        config = self._config.current
        kept = self._queues()[1] if queue is None else queue
        add: Callable[..., Awaitable[list[str]]] = self._backend.add
        if config.shards > 1:
            if config.min_replicas:
                add = self._replicated_add(config)
            ids = await self._add_to_shards(add, task, payloads, data, queue)
            if config.events:  # after every shard's add, to the group's events stream
                unix = self._backend.unix_time(self._backend.now())
                event = dispatched_event(task.name, kept, unix)
                batch = EventBatch(events=(event,) * len(ids), maxlen=config.events_maxlen)
                inner = [task_id.partition(".")[2] for task_id in ids]
                await self._events_apart(batch, ids, inner)
        else:
            if config.min_replicas or config.events:
                add = self._adder(config, task.name, kept, len(data))
            ids = await add(config.consumer_group, data, queue=queue)
        tracker, name = self._tracker, task.name
        return [TaskHandle(message_id, name, tracker, kept) for message_id in ids]

    async def _add_to_shards(
        self,
        add: Callable[..., Awaitable[list[str]]],
        task: Task,
        payloads: list[Any],
        data: list[bytes],
        queue: str | None,
    ) -> list[str]:
        """Add each of ``data`` (the messages of ``payloads``) to its shard, one add per
        shard (in the order of the shards' first messages), and return their task ids
        in the order of ``data``. A failed add leaves those of other shards added."""
        router = self._tracker.router
        shards = [router.pick(task.shard_key_for(p), None) for p in payloads]
        by_shard: dict[int, list[int]] = {}
        for at, shard in enumerate(shards):
            by_shard.setdefault(shard, []).append(at)
        ids = [""] * len(data)
        for shard, positions in by_shard.items():
            added = await add(router.group_of(shard), [data[at] for at in positions], queue=queue)
            for at, message_id in zip(positions, added, strict=True):
                ids[at] = router.task_id(shard, message_id)
        return ids

    async def dispatch_delayed(
        self,
        name: str,
        payload: Any = None,
        delay: float | timedelta = 0.0,
        *,
        queue: str | None = None,
    ) -> TaskHandle:
        """See :meth:`TaskRunner.dispatch_delayed <taskrunner.TaskRunner.dispatch_delayed>`."""
        if self._ready_for is not self._config.current:  # the first call (of a config)
            await self._learn_layout()
        seconds = delay_seconds(delay)
        return await self._add_delayed(name, payload, self._backend.now() + seconds, queue)

    async def schedule_for(
        self, name: str, payload: Any, when: datetime | float, *, queue: str | None = None
    ) -> TaskHandle:
        """See :meth:`TaskRunner.schedule_for <taskrunner.TaskRunner.schedule_for>`."""
        if self._ready_for is not self._config.current:  # the first call (of a config)
            await self._learn_layout()
        unix = unix_seconds(when)
        # Run-at times are in the backend's clock (unix on Redis, trio's in memory).
        run_at = unix - time.time() + self._backend.now()
        return await self._add_delayed(name, payload, run_at, queue)

    async def _add_delayed(
        self, name: str, payload: Any, run_at: float, queue: str | None
    ) -> TaskHandle:
        with _UNTRACED if self.tracer is None else self.tracer(name) as trace:
            return await self._add_delayed_traced(name, payload, run_at, trace, queue)

    async def _add_delayed_traced(
        self,
        name: str,
        payload: Any,
        run_at: float,
        trace: dict[str, str] | None,
        queue: str | None,
    ) -> TaskHandle:
        task = self._get_task(name)
        queue = _queue_of(task, queue, self._queues()[0])
        delayed_id = str(uuid.uuid4())
        config = self._config.current
        group = config.consumer_group
        shard = 0
        if config.shards > 1:
            shard, group = self._shard_of(task, payload)
        add_delayed: Callable[..., Awaitable[None]] = self._backend.add_delayed
        if config.min_replicas:  # the delayed set's add, then the wait for the replicas
            add_delayed = partial(
                cast(ReplicatedAdd, self._backend).add_delayed_replicated,
                replicas=config.min_replicas,
                wait_timeout=config.replica_timeout,
            )
        wire, key = task.dispatch_form(payload)
        member = self._planner.member(
            task,
            wire,
            run_at,
            id=delayed_id,
            key=key,
            # The default queue's member has no field: it is what it always was.
            queue=None if queue == self._backend.stream_keys(group).queue else queue,
            dispatched_at=self._backend.now(),
            trace=trace,
        )
        if config.events:
            unix = self._backend.unix_time(self._backend.now())
            event = dispatched_event(task.name, self._queues()[1] if queue is None else queue, unix)
            batch = EventBatch(
                events=(event._replace(task_id=delayed_id),), maxlen=config.events_maxlen
            )
            if config.shards == 1:
                add_delayed = partial(add_delayed, events=batch)
        await add_delayed(group, member, run_at, task_id=delayed_id)
        self._scheduler.nudge(run_at)
        task_id = (
            delayed_id if config.shards == 1 else self._tracker.router.task_id(shard, delayed_id)
        )
        if config.events and config.shards > 1:  # the group's events stream: apart
            await self._events_apart(batch, [task_id], [""])  # as an unsharded one: no entry yet
        return self._tracker.handle(
            task_id, task.name, self._queues()[1] if queue is None else queue
        )
