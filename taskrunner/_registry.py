"""The task registry a :class:`~taskrunner.TaskRunner` owns: ``register`` and the
``task`` decorator, with the checks that keep a task safe to run.

Theory of operation. Registered tasks live in one dict, :attr:`Registry.tasks`,
which the worker and the scheduler read as it is (no copy per message). A
task registered without a ``reservation_timeout`` gets a third of the
runner's ``reclaim_delay``, and is remembered as defaulted: when
``configure`` changes ``reclaim_delay``, :meth:`Registry.follow` recomputes the
defaulted timeouts and checks that the explicit ones stay below it, all before
anything changes. The public methods are :class:`~taskrunner.TaskRunner`'s: :class:`Registering`,
one of its bases, holds them (their docstrings are the contract) and
delegates here. ``task()`` spells its keyword arguments out, for the reader
and the type checker, and gathers them into one
:class:`~taskrunner._options.TaskOptions` at once: that is where they are
checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, overload

import attrs

from taskrunner import _wire
from taskrunner._codec import ExtraKeys
from taskrunner._config import ConfigHolder, TaskRunnerConfig
from taskrunner._execution.retry import DEFAULT_BACKOFF, Backoff
from taskrunner._flow.limits import RateLimit
from taskrunner._options import DEFAULT_OPTIONS, RateLimitKey, ShardKey, TaskOptions, UniqueKey
from taskrunner._task import Action, Task

A = TypeVar("A", bound=Action)


def check_reservation(task: Task, reclaim_delay: float) -> None:
    """Refuse a task whose reservation timeout is not below ``reclaim_delay``.

    Raises:
        ValueError: it is not (the message could be reclaimed while it runs).
    """
    if task.reservation >= reclaim_delay:
        raise ValueError(
            f"Task.reservation_timeout ({task.reservation!r}s) must be below "
            f"reclaim_delay ({reclaim_delay!r}s) for task {task.name!r}"
        )


class Registry:
    """A runner's registered tasks.

    Args:
        config: The runner's configuration (group and ``reclaim_delay``).
    """

    def __init__(self, config: ConfigHolder) -> None:
        self._config = config
        self.tasks: dict[str, Task] = {}
        """Registered tasks by name (read as it is by the worker and the scheduler)."""
        self._defaulted: set[str] = set()  # tasks whose reservation timeout we chose

    def register(self, task: Task) -> Task:
        """Register ``task`` (see :meth:`TaskRunner.register <taskrunner.TaskRunner.register>`).

        Raises:
            ValueError: the name is taken or reserved, or the reservation
                timeout is not below ``reclaim_delay``.
        """
        config = self._config.current
        group = config.consumer_group
        if task.name in (_wire.SCHEDULE_TIMING_NAME, _wire.schedule_timing_name(group)):
            raise ValueError(
                f"Task.name {task.name!r} is reserved for the scheduler's timing metrics"
            )
        if task.name in self.tasks:
            raise ValueError(f"a task named {task.name!r} is already registered")
        if task.reservation_timeout is None:
            self._defaulted.add(task.name)
            task = attrs.evolve(task, reservation_timeout=config.reclaim_delay / 3)
        else:
            check_reservation(task, config.reclaim_delay)
        self.tasks[task.name] = task
        return task

    def decorator(self, name: str | None, options: TaskOptions) -> Callable[[A], A]:
        """The decorator that registers an action with ``options`` (see
        :meth:`TaskRunner.task <taskrunner.TaskRunner.task>`), under ``name`` or
        the action's own."""

        def decorate(action: A) -> A:
            self.register(Task.with_options(name or action.__name__, action, options))
            return action

        return decorate

    def remove(self, name: str) -> None:
        """Forget the task ``name`` (a registration undone: ``@runner.periodic``
        whose schedule was refused)."""
        self.tasks.pop(name, None)
        self._defaulted.discard(name)

    def follow(self, config: TaskRunnerConfig) -> None:
        """Make the registered tasks fit ``config``'s ``reclaim_delay``: defaulted
        reservation timeouts are recomputed, explicit ones must stay below it.

        Raises:
            ValueError: an explicit reservation timeout is not below the new
                ``reclaim_delay``; nothing changed.
        """
        tasks = {}
        for name, task in self.tasks.items():
            if name in self._defaulted:
                task = attrs.evolve(task, reservation_timeout=config.reclaim_delay / 3)
            else:
                check_reservation(task, config.reclaim_delay)
            tasks[name] = task
        self.tasks.update(tasks)


class Registering:
    """``tasks``, ``task_names``, ``register`` and the ``task`` decorator of
    :class:`~taskrunner.TaskRunner`."""

    _registry: Registry

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
        shard_key: ShardKey | None = None,
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
        shard_key: ShardKey | None = None,
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
            return self._registry.decorator(None, DEFAULT_OPTIONS)(name)
        options = TaskOptions(
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
            permanent=permanent,
            keep_result=keep_result,
            shard_key=shard_key,
        )
        return self._registry.decorator(name, options)
