"""The task registry a :class:`~taskrunner.TaskRunner` owns: ``register`` and the
``task`` decorator, with the checks that keep a task safe to run.

Theory of operation. Registered tasks live in one dict, :attr:`Registry.tasks`,
which the worker and the scheduler read as it is (no copy per message). A
task registered without a ``reservation_timeout`` gets a third of the
runner's ``reclaim_delay``, and is remembered as defaulted: when
``configure`` changes ``reclaim_delay``, :meth:`Registry.follow` recomputes the
defaulted timeouts and checks that the explicit ones stay below it, all before
anything changes. The public methods are :class:`~taskrunner.TaskRunner`'s,
which delegate here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import attrs

from taskrunner import _wire
from taskrunner._codec import ExtraKeys
from taskrunner._config import ConfigHolder, TaskRunnerConfig
from taskrunner._execution.retry import Backoff
from taskrunner._flow.limits import RateLimit
from taskrunner._task import Action, RateLimitKey, Task, UniqueKey

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

    def decorator(
        self,
        name: str | None,
        *,
        max_retry: int,
        reservation_timeout: float | None,
        unique: bool,
        unique_key: UniqueKey | None,
        unique_for: float,
        extra_keys: ExtraKeys,
        timeout: float | None,
        retry: Backoff | None,
        permanent: tuple[type[BaseException], ...],
        keep_result: float | None,
        queue: str | None = None,
        max_concurrency: int | None = None,
        rate_limit: RateLimit | None = None,
        rate_limit_key: RateLimitKey | None = None,
    ) -> Callable[[A], A]:
        """The decorator that registers an action with these options (see
        :meth:`TaskRunner.task <taskrunner.TaskRunner.task>`)."""

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
                    timeout=timeout,
                    retry=retry,
                    permanent=permanent,
                    keep_result=keep_result,
                    queue=queue,
                    max_concurrency=max_concurrency,
                    rate_limit=rate_limit,
                    rate_limit_key=rate_limit_key,
                )
            )
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
