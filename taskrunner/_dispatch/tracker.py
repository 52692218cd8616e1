"""Following tasks by id: the runner's ``get_task``, ``cancel`` and its handles' ``result``.

Theory of operation. Everything about a task id is in the backend
(:class:`~taskrunner.backends.Tracking`), so the :class:`Tracker` holds no
state: it asks the backend, and turns its answers into what the caller gets
(:func:`taskrunner._dispatch.handle.task_info`; the value, or :class:`TaskFailed` /
:class:`TaskCancelled`, for a kept result). The backend cancels atomically
and records a queued or scheduled task as cancelled itself; a running one is
stopped by the runner that runs it (see :mod:`taskrunner._serve.canceller`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import trio

from taskrunner._config import ConfigHolder
from taskrunner._dispatch.handle import TaskHandle, TaskInfo, task_info
from taskrunner._dispatch.results import outcome_of
from taskrunner._task import Task
from taskrunner.backends import Backend
from taskrunner.backends._key_layout import learn_key_layout

log = logging.getLogger(__name__)

FOREVER_SLICE = 3600.0
"""How long one backend wait lasts when the caller waits without a timeout."""


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

    @property
    def _group(self) -> str:
        return self._config.current.consumer_group

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
        snapshot = await self._backend.lookup(self._group, task_id, queues=self.queues(queue))
        return None if snapshot is None else task_info(snapshot, self._backend.unix_time)

    async def cancel(self, task_id: str, queue: str | None = None) -> bool:
        """See :meth:`TaskRunner.cancel <taskrunner.TaskRunner.cancel>`."""
        await learn_key_layout(self._backend)  # its keys in the layout the server takes
        done = await self._backend.cancel(self._group, task_id, queues=self.queues(queue))
        if done.state is None:
            return False
        log.info("task %s cancelled while %s", task_id, done.state.value)
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
        while True:
            left = deadline - trio.current_time()
            raw = await self._backend.wait_result(
                self._group, task_id, max(0.0, min(left, FOREVER_SLICE))
            )
            if raw is not None:
                return outcome_of(task_id, raw, result_type)
            if trio.current_time() >= deadline:
                raise trio.TooSlowError(
                    f"no outcome for task {task_id} ({task_name}) within {limit}s"
                )
