"""The schedules' part of :class:`~taskrunner.TaskRunner`'s API: ``schedules``,
``add_schedule`` and the ``periodic`` decorator, whose docstrings are the contract.

:class:`Scheduling` is one of the runner's bases. What it needs of the runner
it names as protocols (:class:`ScheduleBook`: the periodic service's
schedules; :class:`TaskBook`: the registry), so this package stays below the
services and the registry that implement them. ``periodic`` registers a
task and its schedule together: the task's options are checked when it is
called (one :class:`~taskrunner._options.TaskOptions`), the schedule's when
it decorates, and a refused schedule unregisters the task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from taskrunner._codec import ExtraKeys
from taskrunner._dispatch.workflows import DEFAULT_KEEP, WorkflowTracker
from taskrunner._execution.context import TaskContext
from taskrunner._execution.retry import DEFAULT_BACKOFF, Backoff
from taskrunner._flow.limits import RateLimit
from taskrunner._options import TaskOptions
from taskrunner._schedules.periodic import DEFAULT_IN_FLIGHT_TTL, Schedule
from taskrunner._schedules.ticks import CatchUp
from taskrunner._schedules.workflows import (
    WORKFLOW_TASK,
    WorkflowSource,
    build_workflow,
    scheduled_workflow_id,
)
from taskrunner._task import Task
from taskrunner.errors import AlreadyServing

A = TypeVar("A", bound=Callable[..., Any])


class ScheduleBook(Protocol):
    """The runner's declared schedules (``taskrunner._serve.periodic.Periodic``)."""

    @property
    def schedules(self) -> Mapping[str, Schedule]:
        """The declared schedules by name."""
        ...

    def add(self, schedule: Schedule) -> Schedule:
        """Declare ``schedule``.

        Raises:
            ValueError: the name is taken, or its task is unique.
            TaskNotFound: its task is not registered.
            InvalidTaskPayload: its payload does not encode for the task.
        """
        ...


class TaskBook(Protocol):
    """The runner's registry (``taskrunner._registry.Registry``)."""

    tasks: dict[str, Task]
    """The registered tasks by name."""

    def decorator(self, name: str | None, options: TaskOptions) -> Callable[[A], A]:
        """The decorator that registers an action under ``name`` with ``options``."""
        ...

    def remove(self, name: str) -> None:
        """Forget task ``name``."""
        ...


class Scheduling:
    """``schedules``, ``add_schedule`` and ``periodic`` of :class:`~taskrunner.TaskRunner`."""

    _periodic: ScheduleBook
    _serving: bool
    _workflows: WorkflowTracker

    if TYPE_CHECKING:  # the runner's registry and workflows (the runner sets them)

        @property
        def _registry(self) -> TaskBook: ...

    @property
    def schedules(self) -> dict[str, Schedule]:
        """Declared periodic schedules by name (a copy)."""
        return dict(self._periodic.schedules)

    def add_schedule(
        self,
        name: str,
        *,
        task: str | None = None,
        workflow: WorkflowSource | None = None,
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

        With ``workflow=`` instead of ``task=``, each tick starts a workflow, exactly
        once, under the id ``"<name>@<tick in ms>"`` (see the "Workflows" page)::

            runner.add_schedule("nightly", workflow=dag, cron="0 3 * * *")

        Args:
            name: The schedule's name, unique in the group.
            task: A registered task (not a unique one: use ``overlap=False``).
            workflow: Instead of ``task``: a ``Workflow``, chain, group, chord or step
                (its steps' tasks registered before), or a callable returning one
                (called at each tick).
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
            ValueError: an option is invalid, the name is taken, the task is unique,
                or not exactly one of ``task`` and ``workflow`` is given.
            TaskNotFound: no task ``task`` (or a step's task) is registered.
            InvalidWorkflow: ``workflow``, built once, is invalid.
            InvalidTaskPayload: ``payload`` does not encode for the task.
            AlreadyServing: the runner is serving.
        """
        if self._serving:
            raise AlreadyServing(f"{self!r} is serving; add schedules before serve()")
        if (task is None) == (workflow is None):
            raise ValueError(
                f"schedule {name!r} needs exactly one of task and workflow, "
                f"got task={task!r}, workflow={workflow!r}"
            )
        registered = False
        if workflow is not None:
            task = WORKFLOW_TASK
            if WORKFLOW_TASK not in self._registry.tasks:
                self._register_workflow_task()
                registered = True
        assert task is not None
        try:
            return self._add(name, task, workflow, cron, every, timezone, payload,
                             catch_up, overlap, in_flight_ttl)  # fmt: skip
        except BaseException:
            if registered:
                self._registry.remove(WORKFLOW_TASK)
            raise

    def _add(
        self,
        name: str,
        task: str,
        workflow: WorkflowSource | None,
        cron: str | None,
        every: float | timedelta | None,
        timezone: str,
        payload: Any,
        catch_up: CatchUp,
        overlap: bool,
        in_flight_ttl: float | timedelta,
    ) -> Schedule:
        schedule = Schedule(
            name=name,
            task=task,
            workflow=workflow,
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
        workflow: WorkflowSource | None = None,
    ) -> Callable[[A], A]:
        """Decorator: register the function as a task and run it on a schedule, both
        named ``name`` (default: the function's name).

        With ``workflow=`` (a ``Workflow``, chain, group, chord or step, or a callable
        returning one), each tick starts that workflow instead, exactly once
        (:meth:`add_schedule`'s ``workflow``): the schedule is declared at once, under
        ``name`` (required), and there is no function to decorate::

            runner.periodic(cron="0 3 * * *", name="nightly", workflow=dag)

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

        if workflow is not None:
            if name is None:
                raise ValueError("runner.periodic(workflow=...) needs a name, got name=None")
            self.add_schedule(
                name, workflow=workflow, cron=cron, every=every, timezone=timezone,
                catch_up=catch_up, overlap=overlap, in_flight_ttl=in_flight_ttl,
            )  # fmt: skip
            return _unchanged
        options = TaskOptions(
            max_retry=max_retry,
            reservation_timeout=reservation_timeout,
            extra_keys=extra_keys,
            timeout=timeout,
            retry=retry,
            permanent=permanent,
            queue=queue,
            max_concurrency=max_concurrency,
            rate_limit=rate_limit,
        )

        def decorate(action: A) -> A:
            task_name = name or action.__name__
            self._registry.decorator(task_name, options)(action)
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
                self._registry.remove(task_name)  # nothing is registered then
                raise
            return action

        return decorate

    def _register_workflow_task(self) -> None:
        """Register the built-in task a workflow schedule's ticks run."""

        async def start_scheduled_workflow(payload: None, ctx: TaskContext) -> str:
            schedule = self._periodic.schedules.get(ctx.schedule or "")
            if schedule is None or schedule.workflow is None or ctx.tick is None:
                raise LookupError(
                    f"no workflow schedule {ctx.schedule!r} is declared on this instance "
                    "(declare every schedule on every instance)"
                )
            workflow_id = scheduled_workflow_id(schedule.name, ctx.tick)
            work = build_workflow(schedule.workflow)
            await self._workflows.dispatch(work, DEFAULT_KEEP, workflow_id)
            return workflow_id

        self._registry.decorator(WORKFLOW_TASK, WORKFLOW_TASK_OPTIONS)(start_scheduled_workflow)


WORKFLOW_TASK_OPTIONS = TaskOptions(max_retry=5)
"""The built-in task's: a start that fails (the backend unreachable) is tried again."""


def _unchanged(action: A) -> A:
    return action
