"""The pure helpers of serve's tree (taskrunner._serve.tree), by tables."""

from __future__ import annotations

import pytest

from taskrunner import Task
from taskrunner._serve.tree import DEFAULT_REFRESH_TICK, refresh_tick, unread_queues


async def noop(payload: object) -> None:
    pass


def _task(name: str, queue: str | None = None, reservation: float = 10.0) -> Task:
    return Task(name=name, action=noop, queue=queue, reservation_timeout=reservation)


@pytest.mark.parametrize(
    ("tasks", "served", "unread"),
    [
        ([], ("tasks",), []),
        ([_task("a")], ("tasks",), []),
        ([_task("a")], ("critical",), [("a", "tasks")]),
        ([_task("a", "critical"), _task("b")], ("critical", "tasks"), []),
        ([_task("a", "bulk"), _task("b", "critical")], ("critical",), [("a", "bulk")]),
    ],
)
def test_the_tasks_whose_queue_is_not_read(
    tasks: list[Task], served: tuple[str, ...], unread: list[tuple[str, str]]
) -> None:
    assert unread_queues(tasks, "tasks", served) == unread


@pytest.mark.parametrize(
    ("reservations", "tick"),
    [([], DEFAULT_REFRESH_TICK), ([10.0], 5.0), ([10.0, 3.0, 7.0], 1.5)],
)
def test_long_runs_are_refreshed_at_half_the_shortest_reservation(
    reservations: list[float], tick: float
) -> None:
    tasks = {f"t{i}": _task(f"t{i}", reservation=r) for i, r in enumerate(reservations)}
    assert refresh_tick(tasks) == tick
