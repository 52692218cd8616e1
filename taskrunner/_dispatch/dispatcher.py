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
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

import trio

from taskrunner import _wire
from taskrunner._codec import encode_payload
from taskrunner._config import ConfigHolder, queue_name_problem
from taskrunner._dispatch.enqueue import (
    Enqueue,
    LockRequest,
    delay_seconds,
    delayed_member,
    enqueue,
    give_back_lock,
    unix_seconds,
)
from taskrunner._dispatch.handle import TaskHandle
from taskrunner._dispatch.tracker import Tracker
from taskrunner._task import Task
from taskrunner.backends import Backend
from taskrunner.backends._protocols.replication import ReplicatedAdd
from taskrunner.errors import BackendError, TaskAlreadyDispatched, TaskNotFound

log = logging.getLogger(__name__)

LOCK_RELEASE_TIMEOUT = 2.0


class Nudged(Protocol):
    """What a dispatcher tells of every delayed task it adds: the runner's delayed-task
    scheduler (:class:`taskrunner._serve.scheduler.Scheduler`), so that it moves it on
    time. A protocol, so that this layer does not import the serve services."""

    def nudge(self, run_at: float) -> None: ...


Tracer = Callable[[str], AbstractContextManager[dict[str, str] | None]]
"""``tracer(task_name)``: a context manager around one dispatch (``dispatch_many``:
one for the batch), yielding the trace context to carry, if any."""


def _queue_of(task: Task, queue: str | None) -> str | None:
    """The queue a dispatch goes to: the one given, else the task's (``None``: the
    backend's).

    Raises:
        ValueError: ``queue`` cannot name a queue.
    """
    if queue is None:
        return task.queue
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
        self._encoders: dict[str, tuple[Task, Callable[[Any], bytes]]] = {}

    def _plain(self, task: Task, payload: Any) -> bytes:
        """The message of a plain (not unique, not traced) dispatch of ``task``: one
        encoder per task, so only the payload is encoded per call (the bytes of
        :func:`~taskrunner._dispatch.enqueue.enqueue`)."""
        cached = self._encoders.get(task.name)
        if cached is None or cached[0] is not task:  # first use, or registered anew
            cached = self._encoders[task.name] = (task, _wire.plain_encoder(task))
        return cached[1](encode_payload(payload, task.payload_type, task.name, task.extra_keys))

    def _enqueue(self, task: Task, payload: Any, trace: dict[str, str] | None = None) -> Enqueue:
        wire_payload = encode_payload(payload, task.payload_type, task.name, task.extra_keys)
        task.rate_key_for(payload)  # refuse a payload whose limit's key cannot be computed
        if not task.unique:
            return enqueue(task, wire_payload, trace=trace)
        return enqueue(
            task,
            wire_payload,
            unique_key=task.message_unique_key(payload),
            token=uuid.uuid4().hex,
            trace=trace,
        )

    def _get_task(self, name: str) -> Task:
        try:
            return self._tasks[name]
        except KeyError:
            raise TaskNotFound(name) from None

    async def dispatch(
        self, name: str, payload: Any = None, *, queue: str | None = None
    ) -> TaskHandle:
        """See :meth:`TaskRunner.dispatch <taskrunner.TaskRunner.dispatch>`."""
        if self.tracer is not None:
            with self.tracer(name) as trace:
                return await self._dispatch(name, payload, trace, queue)
        return await self._dispatch(name, payload, None, queue)

    async def _dispatch(
        self, name: str, payload: Any, trace: dict[str, str] | None, queue: str | None
    ) -> TaskHandle:
        task = self._get_task(name)
        queue = _queue_of(task, queue)
        config = self._config.current
        group = config.consumer_group
        if not task.unique and trace is None:
            if task.rate_limit_key is not None:
                task.rate_key_for(payload)  # refuse a payload whose limit's key cannot be computed
            if config.min_replicas:
                (message_id,) = await self._add_replicated([self._plain(task, payload)], queue)
            else:
                (message_id,) = await self._backend.add(
                    group, [self._plain(task, payload)], queue=queue
                )
            return self._tracker.handle(message_id, task.name)
        entry = self._enqueue(task, payload, trace)
        lock = entry.lock
        if lock is None:
            (message_id,) = await self._add_replicated([entry.data], queue)
            return self._tracker.handle(message_id, task.name)
        if not await self._backend.acquire_lock(lock.key, lock.token, lock.ttl):
            raise TaskAlreadyDispatched(task.name, lock.key)
        try:
            (message_id,) = await self._add_replicated([entry.data], queue)
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
        return self._tracker.handle(message_id, task.name)

    async def _add_replicated(self, payloads: list[bytes], queue: str | None) -> list[str]:
        """``backend.add``, followed by a wait for ``min_replicas`` replicas when set.

        The plain dispatch tests ``min_replicas`` itself, to keep its path one call
        shorter when it is off (the default)."""
        config = self._config.current
        if not config.min_replicas:
            return await self._backend.add(config.consumer_group, payloads, queue=queue)
        backend = cast(ReplicatedAdd, self._backend)  # checked when the runner was made
        return await backend.add_replicated(
            config.consumer_group,
            payloads,
            queue=queue,
            replicas=config.min_replicas,
            wait_timeout=config.replica_timeout,
        )

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
        task = self._get_task(name)
        if task.unique:
            raise ValueError(f"task {name!r} is unique; dispatch it with dispatch(), one at a time")
        queue = _queue_of(task, queue)
        if self.tracer is not None:
            with self.tracer(name) as trace:
                return await self._add_many(task, payloads, trace, queue)
        return await self._add_many(task, payloads, None, queue)

    async def _add_many(
        self, task: Task, payloads: Iterable[Any], trace: dict[str, str] | None, queue: str | None
    ) -> list[TaskHandle]:
        if trace is None:
            if task.rate_limit_key is not None:
                payloads = list(payloads)
                for payload in payloads:
                    task.rate_key_for(payload)
            data = [self._plain(task, payload) for payload in payloads]
        else:
            data = [self._enqueue(task, payload, trace).data for payload in payloads]
        if not data:
            return []
        ids = await self._add_replicated(data, queue)
        tracker, name = self._tracker, task.name
        return [TaskHandle(message_id, name, tracker) for message_id in ids]

    async def dispatch_delayed(
        self,
        name: str,
        payload: Any = None,
        delay: float | timedelta = 0.0,
        *,
        queue: str | None = None,
    ) -> TaskHandle:
        """See :meth:`TaskRunner.dispatch_delayed <taskrunner.TaskRunner.dispatch_delayed>`."""
        seconds = delay_seconds(delay)
        return await self._add_delayed(name, payload, self._backend.now() + seconds, queue)

    async def schedule_for(
        self, name: str, payload: Any, when: datetime | float, *, queue: str | None = None
    ) -> TaskHandle:
        """See :meth:`TaskRunner.schedule_for <taskrunner.TaskRunner.schedule_for>`."""
        unix = unix_seconds(when)
        # Run-at times are in the backend's clock (unix on Redis, trio's in memory).
        run_at = unix - time.time() + self._backend.now()
        return await self._add_delayed(name, payload, run_at, queue)

    async def _add_delayed(
        self, name: str, payload: Any, run_at: float, queue: str | None
    ) -> TaskHandle:
        if self.tracer is not None:
            with self.tracer(name) as trace:
                return await self._add_delayed_traced(name, payload, run_at, trace, queue)
        return await self._add_delayed_traced(name, payload, run_at, None, queue)

    async def _add_delayed_traced(
        self,
        name: str,
        payload: Any,
        run_at: float,
        trace: dict[str, str] | None,
        queue: str | None,
    ) -> TaskHandle:
        task = self._get_task(name)
        queue = _queue_of(task, queue)
        wire_payload = encode_payload(payload, task.payload_type, task.name, task.extra_keys)
        task.rate_key_for(payload)  # refuse a payload whose limit's key cannot be computed
        delayed_id = str(uuid.uuid4())
        group = self._config.current.consumer_group
        member = delayed_member(
            task,
            wire_payload,
            run_at,
            id=delayed_id,
            # Computed now, on the payload as given: the scheduler only has its JSON.
            unique_key=task.message_unique_key(payload) if task.unique else None,
            # The default queue's member has no field: it is what it always was.
            queue=None if queue == self._backend.stream_keys(group).queue else queue,
            dispatched_at=self._backend.now(),
            trace=trace,
        )
        config = self._config.current
        if config.min_replicas:
            await cast(ReplicatedAdd, self._backend).add_delayed_replicated(
                group,
                member,
                run_at,
                task_id=delayed_id,
                replicas=config.min_replicas,
                wait_timeout=config.replica_timeout,
            )
        else:
            await self._backend.add_delayed(group, member, run_at, task_id=delayed_id)
        self._scheduler.nudge(run_at)
        return self._tracker.handle(delayed_id, task.name)
