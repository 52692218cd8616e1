"""Dispatching: turning a task name and a payload into a queued message.

Everything that can be refused (unknown task, payload that does not encode or
does not fit the typed payload, a bad delay) is refused before anything is
queued. A unique task's lock is taken before its message is added and given
back if the add does not happen.
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
from taskrunner._config import TaskRunnerConfig
from taskrunner._guards import require_trio
from taskrunner._serve.scheduler import Scheduler
from taskrunner._task import Task
from taskrunner.backends import Backend
from taskrunner.errors import BackendError, TaskAlreadyDispatched, TaskNotFound

log = logging.getLogger("taskrunner.dispatch")

LOCK_RELEASE_TIMEOUT = 2.0


class Dispatching:
    """The dispatch half of :class:`~taskrunner.TaskRunner`."""

    config: TaskRunnerConfig
    backend: Backend
    _tasks: Mapping[str, Task]
    _scheduler: Scheduler

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

    async def dispatch(self, name: str, payload: Any = None) -> str:
        """Queue one run of task ``name``.

        Returns:
            The message id.

        Raises:
            TaskNotFound: no task ``name`` is registered.
            InvalidTaskPayload: ``payload`` cannot be encoded; nothing was queued.
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
        task = self._get_task(name)
        message = self._message(task, payload)
        data = _wire.encode_message(message)
        if not task.unique:
            (message_id,) = await self.backend.add(self.config.consumer_group, [data])
            return message_id
        key = _wire.unique_lock(task.name, message.unique_key)
        token = message.unique_lock_value
        if not await self.backend.acquire_lock(key, token, task.unique_for):
            raise TaskAlreadyDispatched(task.name, key)
        try:
            (message_id,) = await self.backend.add(self.config.consumer_group, [data])
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
        return message_id

    async def _give_back(self, task: Task, key: str, token: str) -> None:
        with trio.move_on_after(LOCK_RELEASE_TIMEOUT, shield=True):
            try:
                await self.backend.release_lock(key, token)
            except BackendError as exc:
                log.warning(
                    "could not release unique lock %s after a failed dispatch (%s); "
                    "it expires in %ss",
                    key,
                    exc,
                    task.unique_for,
                )

    async def dispatch_many(self, name: str, payloads: Iterable[Any]) -> list[str]:
        """Queue one run of task ``name`` per payload, in one backend call.

        Every payload is encoded before anything is queued, so an invalid one
        queues none.

        Returns:
            The message ids, in order.

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: the task is unique (dispatch those one by one, so each
                duplicate can be refused on its own).
        """
        require_trio("TaskRunner.dispatch_many")
        task = self._get_task(name)
        if task.unique:
            raise ValueError(f"task {name!r} is unique; dispatch it with dispatch(), one at a time")
        data = [_wire.encode_message(self._message(task, payload)) for payload in payloads]
        return await self.backend.add(self.config.consumer_group, data) if data else []

    async def dispatch_delayed(
        self, name: str, payload: Any = None, delay: float | timedelta = 0.0
    ) -> str:
        """Queue one run of task ``name`` after ``delay`` (seconds, or a timedelta).

        The task waits in the group's delayed set; the leader moves it to the
        stream when due. A unique task takes its lock when it is moved, not
        now; while the lock is held it stays in the set.

        Returns:
            The delayed task's id.

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: ``delay`` is negative or not finite.
        """
        require_trio("TaskRunner.dispatch_delayed")
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError(f"delay must be seconds or a timedelta, got {delay!r}")
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        return await self._add_delayed(name, payload, self.backend.now() + seconds)

    async def schedule_for(self, name: str, payload: Any, when: datetime | float) -> str:
        """Queue one run of task ``name`` at ``when``.

        Args:
            when: A timezone-aware datetime, or unix seconds. A time in the
                past runs at the next scheduler pass.

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: ``when`` is a naive datetime or not finite.
        """
        require_trio("TaskRunner.schedule_for")
        if isinstance(when, datetime):
            if when.tzinfo is None or when.utcoffset() is None:
                raise ValueError(f"when must be a timezone-aware datetime, got {when!r}")
            unix = when.timestamp()
        elif isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
            unix = float(when)
        else:
            raise ValueError(f"when must be an aware datetime or unix seconds, got {when!r}")
        # Run-at times are in the backend's clock (unix on Redis, trio's in memory).
        return await self._add_delayed(name, payload, unix - time.time() + self.backend.now())

    async def _add_delayed(self, name: str, payload: Any, run_at: float) -> str:
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
        )
        await self.backend.add_delayed(
            self.config.consumer_group, _wire.encode_delayed(delayed), run_at
        )
        self._scheduler.nudge(run_at)
        return delayed.id
