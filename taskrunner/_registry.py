"""The task registry half of :class:`~taskrunner.TaskRunner`: ``register`` and
the ``task`` decorator, with the checks that keep a task safe to run."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, overload

import attrs

from taskrunner import _wire
from taskrunner._codec import ExtraKeys
from taskrunner._config import TaskRunnerConfig
from taskrunner._task import Action, Task, UniqueKey

A = TypeVar("A", bound=Action)


def check_reservation(task: Task, reclaim_delay: float) -> None:
    if task.reservation >= reclaim_delay:
        raise ValueError(
            f"Task.reservation_timeout ({task.reservation!r}s) must be below "
            f"reclaim_delay ({reclaim_delay!r}s) for task {task.name!r}"
        )


class Registering:
    """The registry half of :class:`~taskrunner.TaskRunner`."""

    config: TaskRunnerConfig
    _tasks: dict[str, Task]
    _defaulted: set[str]

    @property
    def tasks(self) -> dict[str, Task]:
        """Registered tasks by name (a copy)."""
        return dict(self._tasks)

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
        group = self.config.consumer_group
        if task.name in (_wire.SCHEDULE_TIMING_NAME, _wire.schedule_timing_name(group)):
            raise ValueError(
                f"Task.name {task.name!r} is reserved for the scheduler's timing metrics"
            )
        if task.name in self._tasks:
            raise ValueError(f"a task named {task.name!r} is already registered")
        if task.reservation_timeout is None:
            self._defaulted.add(task.name)
            task = attrs.evolve(task, reservation_timeout=self.config.reclaim_delay / 3)
        else:
            check_reservation(task, self.config.reclaim_delay)
        self._tasks[task.name] = task
        return task

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
    ) -> A | Callable[[A], A]:
        """Decorator form of :meth:`register`; the name defaults to the function's.

        Used bare (``@runner.task``) it registers the function with the defaults;
        called (``@runner.task(...)``) it takes the options of :class:`Task`.

        Example::

            @runner.task
            async def send_email(payload: dict) -> None: ...

            @runner.task(name="resize", max_retry=3)
            async def resize_image(payload: dict) -> None: ...

        Raises:
            ValueError: as :meth:`register`, or an option is invalid (as for
                :class:`Task`).
        """

        if callable(name):  # used bare: @runner.task
            return self.task()(name)

        def decorate(action: A) -> A:
            self.register(
                Task(
                    name=name or action.__name__,
                    action=action,
                    max_retry=max_retry,
                    reservation_timeout=reservation_timeout,
                    unique=unique,
                    unique_key=unique_key,
                    unique_for=unique_for,
                    extra_keys=extra_keys,
                )
            )
            return action

        return decorate
