"""Following tasks by id: the runner's ``get_task``, ``cancel`` and its handles' ``result``.

Theory of operation. Everything about a task id is in the backend
(:class:`~taskrunner.backends.Tracking`), so the :class:`Tracker` holds no
state: it asks the backend, and turns its answers into what the caller gets
(:func:`taskrunner._dispatch.handle.task_info`; the value, or :class:`TaskFailed` /
:class:`TaskCancelled`, for a kept result). The backend cancels atomically
and records a queued or scheduled task as cancelled itself; a running one is
stopped by the runner that runs it (see :mod:`taskrunner._serve.canceller`).

In a sharded group (``TaskRunnerConfig.shards > 1``) a task id names its shard
(:class:`~taskrunner._dispatch.routing.ShardRouter`): each question goes to that shard
alone, with the id the shard knows; an id naming no shard of the group is not found.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, cast

import attrs
import trio

from taskrunner._config import ConfigHolder
from taskrunner._dispatch.handle import TaskHandle, TaskInfo, task_info
from taskrunner._dispatch.results import outcome_of
from taskrunner._dispatch.routing import ShardRouter
from taskrunner._execution.poison import task_names_in
from taskrunner._task import Task
from taskrunner._wire import TaskState
from taskrunner.backends import Backend, Cancellation, EventBatch, EventLog, TaskEvent
from taskrunner.backends._key_layout import learn_key_layout

log = logging.getLogger(__name__)

FOREVER_SLICE = 3600.0
"""How long one backend wait lasts when the caller waits without a timeout."""


async def with_progress(backend: Backend, group: str, info: TaskInfo) -> TaskInfo:
    """``info`` with its task's last progress report (a backend without an event log
    has none)."""
    if not isinstance(backend, EventLog):
        return info
    progress = await backend.read_progress(group, info.id)
    return info if progress is None else attrs.evolve(info, progress=progress)


def cancelled_event(task_id: str, done: Cancellation, queue: str, backend: Backend) -> TaskEvent:
    """The ``cancelled`` event of a task removed while queued or scheduled."""
    names = task_names_in(done.raw or b"")
    return TaskEvent(
        kind="cancelled",
        task_id=task_id,
        task_name=names[0] if names else "",
        queue=queue,
        attempt=0,
        at=backend.unix_time(backend.now()),
        message_id=task_id if done.state is TaskState.QUEUED else "",
        detail=done.state.value if done.state is not None else "",
    )


class Tracker:
    """The part of a :class:`~taskrunner.TaskRunner` that follows tasks by id.

    Args:
        config: The runner's configuration (the group).
        backend: Where tasks are tracked.
        tasks: The registered tasks by name, read as it is.
    """

    def __init__(self, config: ConfigHolder, backend: Backend, tasks: Mapping[str, Task]) -> None:
        self._config = config
        self._backend = backend
        self._tasks = tasks
        self._router: tuple[object, ShardRouter] | None = None

    @property
    def _group(self) -> str:
        return self._config.current.consumer_group

    @property
    def router(self) -> ShardRouter:
        """The group's shards, for the current configuration (made again when it changes)."""
        config = self._config.current
        cached = self._router
        if cached is None or cached[0] is not config:
            router = ShardRouter(config.consumer_group, config.shards)
            if cached is not None and (cached[1].group, cached[1].count) == (
                router.group,
                router.count,
            ):
                router = cached[1]  # same shards: the round-robin goes on
            cached = self._router = (config, router)
        return cached[1]

    @property
    def group(self) -> str:
        """The consumer group tasks are followed in."""
        return self._config.current.consumer_group

    @property
    def backend(self) -> Backend:
        return self._backend

    def handle(self, task_id: str, task_name: str, queue: str | None = None) -> TaskHandle:
        """The handle of a task just dispatched (to ``queue``; ``None``: the backend's)."""
        return TaskHandle(id=task_id, task_name=task_name, tracker=self, queue=queue)

    def queues(self, queue: str | None = None) -> list[str]:
        """The queues whose streams a lookup looks in, in order: ``queue`` alone when
        given; else the configured queues, then those of registered tasks, then the
        backend's own (every queue this runner may have dispatched to)."""
        if queue is not None:
            return [queue]
        names = list(self._config.current.queue_names or ())
        names += sorted({t.queue for t in self._tasks.values() if t.queue is not None})
        names.append(self._backend.stream_keys(self._group).queue)
        return list(dict.fromkeys(names))

    async def get_task(self, task_id: str, queue: str | None = None) -> TaskInfo | None:
        """See :meth:`TaskRunner.get_task <taskrunner.TaskRunner.get_task>`."""
        await learn_key_layout(self._backend)  # its keys in the layout the server takes
        where = self.router.locate(task_id)
        if where is None:
            return None
        group, inner = where
        snapshot = await self._backend.lookup(group, inner, queues=self.queues(queue))
        if snapshot is None:
            return None
        info = await with_progress(
            self._backend, group, task_info(snapshot, self._backend.unix_time)
        )
        return info if inner == task_id else attrs.evolve(info, id=task_id)

    async def cancel(self, task_id: str, queue: str | None = None) -> bool:
        """See :meth:`TaskRunner.cancel <taskrunner.TaskRunner.cancel>`."""
        await learn_key_layout(self._backend)  # its keys in the layout the server takes
        where = self.router.locate(task_id)
        if where is None:
            return False
        done = await self._backend.cancel(where[0], where[1], queues=self.queues(queue))
        if done.state is None:
            return False
        log.info("task %s cancelled while %s", task_id, done.state.value)
        config = self._config.current
        if config.events and done.state is not TaskState.RUNNING:
            # A running task's event goes with its ack; a removed one has no ack.
            event = cancelled_event(task_id, done, queue or self.queues()[-1], self._backend)
            batch = EventBatch(events=(event,), maxlen=config.events_maxlen)
            await cast(EventLog, self._backend).write_events(self._group, batch)
        return True

    async def result(
        self, task_id: str, task_name: str, limit: float | None, result_type: type[Any] | None
    ) -> Any:
        """See :meth:`TaskHandle.result <taskrunner.TaskHandle.result>`."""
        task = self._tasks.get(task_name)
        if task is not None and task.keep_result is None:
            raise ValueError(
                f"Task.keep_result is None for task {task_name!r}: its results are not "
                "kept, so there is nothing to wait for (register it with keep_result=seconds)"
            )
        if result_type is None and task is not None:
            result_type = task.result_type
        if limit is not None and not (limit >= 0 and not math.isnan(limit)):
            raise ValueError(f"timeout must be seconds >= 0 or None, got {limit!r}")
        deadline = math.inf if limit is None else trio.current_time() + limit
        where = self.router.locate(task_id)
        if where is None:
            raise ValueError(
                f"task id {task_id!r} names no shard of group {self._group!r} "
                f"(shards={self.router.count})"
            )
        group, inner = where
        while True:
            left = deadline - trio.current_time()
            raw = await self._backend.wait_result(group, inner, max(0.0, min(left, FOREVER_SLICE)))
            if raw is not None:
                return outcome_of(task_id, raw, result_type)
            if trio.current_time() >= deadline:
                raise trio.TooSlowError(
                    f"no outcome for task {task_id} ({task_name}) within {limit}s"
                )
