"""Dispatching: turning a task name and a payload into a queued message.

The :class:`Dispatcher` is the part of a :class:`~taskrunner.TaskRunner` that
its ``dispatch``, ``dispatch_many``, ``dispatch_delayed`` and
``schedule_for`` delegate to (their docstrings there are the contract).
Everything that can be refused (unknown task, payload that does not encode or
does not fit the typed payload, a bad delay) is refused before anything is
queued. A unique task's lock is taken before its message is added and given
back if the add does not happen. Every dispatch returns a
:class:`~taskrunner.TaskHandle`: the stream id of the entry added, or the id
of the delayed member (indexed under it, so it can be looked up and cancelled).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import trio

from taskrunner import _wire
from taskrunner._codec import encode_payload
from taskrunner._config import ConfigHolder
from taskrunner._handle import TaskHandle
from taskrunner._serve.scheduler import Scheduler
from taskrunner._task import Task
from taskrunner._tracker import Tracker
from taskrunner.backends import Backend
from taskrunner.errors import BackendError, TaskAlreadyDispatched, TaskNotFound

log = logging.getLogger(__name__)

LOCK_RELEASE_TIMEOUT = 2.0


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
        scheduler: Scheduler,
        tracker: Tracker,
    ) -> None:
        self._config = config
        self._backend = backend
        self._tasks = tasks
        self._scheduler = scheduler
        self._tracker = tracker

    def _message(self, task: Task, payload: Any) -> _wire.TaskMessage:
        wire_payload = encode_payload(payload, task.payload_type, task.name, task.extra_keys)
        if not task.unique:
            return _wire.new_message(task, wire_payload)
        return _wire.new_message(
            task,
            wire_payload,
            unique_key=_wire.unique_key_for(task, payload),
            token=uuid.uuid4().hex,
        )

    def _get_task(self, name: str) -> Task:
        try:
            return self._tasks[name]
        except KeyError:
            raise TaskNotFound(name) from None

    async def dispatch(self, name: str, payload: Any = None) -> TaskHandle:
        """See :meth:`TaskRunner.dispatch <taskrunner.TaskRunner.dispatch>`."""
        task = self._get_task(name)
        message = self._message(task, payload)
        data = _wire.encode_message(message)
        if not task.unique:
            (message_id,) = await self._backend.add(self._config.current.consumer_group, [data])
            return self._tracker.handle(message_id, task.name)
        key = _wire.unique_lock(task.name, message.unique_key)
        token = message.unique_lock_value
        if not await self._backend.acquire_lock(key, token, task.unique_for):
            raise TaskAlreadyDispatched(task.name, key)
        try:
            (message_id,) = await self._backend.add(self._config.current.consumer_group, [data])
        except BackendError as exc:
            if not exc.maybe_applied:
                await self._give_back(task, key, token)
            else:
                log.warning(
                    "dispatch of unique task %s may or may not have queued it (%s); "
                    "keeping lock %s until it expires in %ss",
                    task.name,
                    exc,
                    key,
                    task.unique_for,
                )
            raise
        return self._tracker.handle(message_id, task.name)

    async def _give_back(self, task: Task, key: str, token: str) -> None:
        with trio.move_on_after(LOCK_RELEASE_TIMEOUT, shield=True):
            try:
                await self._backend.release_lock(key, token)
            except BackendError as exc:
                log.warning(
                    "could not release unique lock %s after a failed dispatch (%s); "
                    "it expires in %ss",
                    key,
                    exc,
                    task.unique_for,
                )

    async def dispatch_many(self, name: str, payloads: Iterable[Any]) -> list[TaskHandle]:
        """See :meth:`TaskRunner.dispatch_many <taskrunner.TaskRunner.dispatch_many>`."""
        task = self._get_task(name)
        if task.unique:
            raise ValueError(f"task {name!r} is unique; dispatch it with dispatch(), one at a time")
        data = [_wire.encode_message(self._message(task, payload)) for payload in payloads]
        if not data:
            return []
        ids = await self._backend.add(self._config.current.consumer_group, data)
        return [self._tracker.handle(message_id, task.name) for message_id in ids]

    async def dispatch_delayed(
        self, name: str, payload: Any = None, delay: float | timedelta = 0.0
    ) -> TaskHandle:
        """See :meth:`TaskRunner.dispatch_delayed <taskrunner.TaskRunner.dispatch_delayed>`."""
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError(f"delay must be seconds or a timedelta, got {delay!r}")
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        return await self._add_delayed(name, payload, self._backend.now() + seconds)

    async def schedule_for(self, name: str, payload: Any, when: datetime | float) -> TaskHandle:
        """See :meth:`TaskRunner.schedule_for <taskrunner.TaskRunner.schedule_for>`."""
        if isinstance(when, datetime):
            if when.tzinfo is None or when.utcoffset() is None:
                raise ValueError(f"when must be a timezone-aware datetime, got {when!r}")
            unix = when.timestamp()
        elif isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
            unix = float(when)
        else:
            raise ValueError(f"when must be an aware datetime or unix seconds, got {when!r}")
        # Run-at times are in the backend's clock (unix on Redis, trio's in memory).
        return await self._add_delayed(name, payload, unix - time.time() + self._backend.now())

    async def _add_delayed(self, name: str, payload: Any, run_at: float) -> TaskHandle:
        task = self._get_task(name)
        wire_payload = encode_payload(payload, task.payload_type, task.name, task.extra_keys)
        _wire.encode_message(_wire.new_message(task, wire_payload))  # refuse it now
        delayed = _wire.new_delayed(
            name,
            wire_payload,
            run_at,
            id=str(uuid.uuid4()),
            # Computed now, on the payload as given: the scheduler only has its JSON.
            unique_key=_wire.unique_key_for(task, payload) if task.unique else None,
            keep_result=task.keep_result,
        )
        await self._backend.add_delayed(
            self._config.current.consumer_group,
            _wire.encode_delayed(delayed),
            run_at,
            task_id=delayed.id,
        )
        self._scheduler.nudge(run_at)
        return self._tracker.handle(delayed.id, task.name)
