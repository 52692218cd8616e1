"""The demo's workload: its tasks, the mix of runs it dispatches, and the run's counts.

Five plain tasks and a unique one, registered the same way on every runner of the
demo (:meth:`DemoTasks.register_on`): ``fast``, ``slow``, ``flaky`` (fails
:data:`FLAKY_FAILURE_RATE` of its attempts on purpose), ``order`` (a typed payload,
structured by cattrs on the worker), ``report`` (delayed, due over
:data:`DELAY_RANGE`) and ``sync`` (unique per account). :func:`plan` splits the
``--tasks`` total among them; :func:`dispatch_all` dispatches that plan from a
producer in :data:`ROUNDS` rounds, counting what was accepted and refused in a
:class:`RunState`, which the screen (:mod:`taskrunner.cli.demo_screen`) shows.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from taskrunner._fleet.stats import Stats
from taskrunner._runner import RunnerStatistics, TaskRunner
from taskrunner._task import Task
from taskrunner.errors import TaskAlreadyDispatched

FLAKY_FAILURE_RATE = 0.3
RESERVATION_TIMEOUT = 0.3
"""Kept below the runners' ``reclaim_delay``, as ``register`` requires."""
ROUNDS, ROUND_PAUSE = 10, 0.3
"""Dispatching takes ``ROUNDS`` rounds ``ROUND_PAUSE`` seconds apart (~3 s)."""
DELAY_RANGE = (0.5, 4.0)
"""Seconds after dispatch at which the delayed ``report`` tasks fall due."""

GROUP = "demo"
"""The demo's consumer group."""


def snapshot(runners: Sequence[TaskRunner]) -> list[RunnerStatistics]:
    """Every runner's statistics, now."""
    return [r.statistics() for r in runners]


def outcomes(stats: Sequence[RunnerStatistics]) -> int:
    """How many tasks reached a final outcome (completed, dead-lettered or handled)."""
    return sum(s.completed + s.dead_lettered + s.handled for s in stats)


# The tasks -----------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Order:
    """The typed payload of the ``order`` task: structured by cattrs on the worker."""

    order_id: int
    sku: str
    quantity: int


class SimulatedFailure(Exception):
    """Raised on purpose by the ``flaky`` task."""


class DemoTasks:
    """The demo's actions; one instance is shared by every runner."""

    def __init__(self, rng: random.Random, clock: Callable[[], float]) -> None:
        self.rng = rng
        self.clock = clock
        self.orders = 0
        self.items = 0
        self.reports = 0
        self.lateness = 0.0
        """Sum of seconds by which delayed reports ran after they fell due."""
        self.synced = 0

    async def fast(self, payload: dict[str, int]) -> int:
        return payload["n"] * 2

    async def slow(self, payload: dict[str, int]) -> None:
        await trio.sleep(self.rng.uniform(0.002, 0.010))

    async def flaky(self, payload: dict[str, int]) -> None:
        await trio.sleep(0.001)
        if self.rng.random() < FLAKY_FAILURE_RATE:
            raise SimulatedFailure(f"flaky #{payload['n']} failed on purpose")

    async def order(self, payload: Order) -> None:
        if not isinstance(payload, Order):  # the typed-payload contract, checked live
            raise TypeError(f"expected an Order, got {payload!r}")
        self.orders += 1
        self.items += payload.quantity

    async def report(self, payload: dict[str, float]) -> None:
        self.reports += 1
        self.lateness += max(0.0, self.clock() - payload["due"])

    async def sync(self, payload: dict[str, int]) -> None:
        await trio.sleep(self.rng.uniform(0.005, 0.02))
        self.synced += 1

    def register_on(self, runner: TaskRunner) -> None:
        # Three attempts each, so a task cut off when its runner leaves runs again
        # once reclaimed (with one attempt it would be dead-lettered instead).
        common: dict[str, Any] = {"reservation_timeout": RESERVATION_TIMEOUT, "max_retry": 3}
        runner.register(Task(name="fast", action=self.fast, **common))
        runner.register(Task(name="slow", action=self.slow, **common))
        runner.register(Task(name="flaky", action=self.flaky, **common))
        runner.register(Task(name="order", action=self.order, **common))
        runner.register(Task(name="report", action=self.report, **common))
        runner.register(
            Task(
                name="sync",
                action=self.sync,
                unique=True,
                unique_key=lambda payload: str(payload["account"]),
                unique_for=30.0,
                **common,
            )
        )


def plan(total: int) -> dict[str, int]:
    """How many runs (dispatch attempts, for ``sync``) of each task make up ``total``."""
    counts = {
        "slow": total // 5,
        "flaky": total * 3 // 20,
        "order": total // 10,
        "report": total // 10,
        "sync": total // 10,
    }
    counts["fast"] = total - sum(counts.values())
    return counts


# The run ---------------------------------------------------------------------
@attrs.define
class RunState:
    planned: int
    sent: int = 0
    """Accepted dispatches so far (delayed included): the outcomes to wait for."""
    delayed: int = 0
    refused: int = 0
    dispatching: bool = True
    interrupted: bool = False
    elapsed: float = 0.0
    """Seconds from the first dispatch to the last outcome (or to the stop)."""
    leaders: list[str] = attrs.Factory(list)
    """Hosts that led, in order."""
    events: list[str] = attrs.Factory(list)
    stats: Stats | None = None


async def dispatch_all(
    producer: TaskRunner, counts: dict[str, int], state: RunState, rng: random.Random
) -> None:
    """Dispatch the planned runs in rounds, counting them in ``state``."""
    for r in range(ROUNDS):
        for name, total in counts.items():
            numbers = range(total * r // ROUNDS, total * (r + 1) // ROUNDS)
            if name == "flaky":
                for n in numbers:  # one by one, as an application would
                    await producer.dispatch("flaky", {"n": n})
            elif name == "order":
                orders = [
                    Order(order_id=n, sku=f"SKU-{n % 7}", quantity=1 + n % 3) for n in numbers
                ]
                await producer.dispatch_many("order", orders)
            elif name == "report":
                for n in numbers:
                    delay = rng.uniform(*DELAY_RANGE)
                    due = producer.backend.now() + delay
                    await producer.dispatch_delayed("report", {"n": n, "due": due}, delay)
                    state.delayed += 1
            elif name == "sync":
                for n in numbers:
                    # Accounts 0, 0, 1, 2, 2, 3...: every third dispatch repeats the one
                    # just before it, whose lock is still held, and is refused.
                    try:
                        await producer.dispatch("sync", {"account": n * 2 // 3})
                    except TaskAlreadyDispatched:
                        state.refused += 1
                        continue
                    state.sent += 1
                continue
            else:
                await producer.dispatch_many(name, [{"n": n} for n in numbers])
            state.sent += len(numbers)
        await trio.sleep(ROUND_PAUSE)
    state.dispatching = False
