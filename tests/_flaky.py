"""A MemoryBackend whose shared-state calls can be made to fail or stall, for the bulk
writer's and the aggregator's tests."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from taskrunner._wire import TimingIncrement, task_fields
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError

__all__ = ["GROUP", "FlakyBackend", "add_runs"]

GROUP = "g"


class FlakyBackend(MemoryBackend):
    """A MemoryBackend whose shared-state calls can be made to fail or stall."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_increments = 0
        """Fail this many increment_metrics calls (then succeed); -1 fails forever."""
        self.increment_delay = 0.0
        self.increment_calls: list[dict[str, tuple[int, int]]] = []
        """Per call: ``{sum field: (micros, count)}``."""
        self.fail_reads = False
        self.fail_reset = False
        self.fail_publish = False
        self.reset_calls: list[tuple[float, list[str]]] = []
        self.published: list[tuple[float, int, float]] = []

    async def increment_metrics(self, group: str, increments: Sequence[TimingIncrement]) -> None:
        if self.fail_increments:
            self.fail_increments -= 1 if self.fail_increments > 0 else 0
            await trio.lowlevel.checkpoint()
            raise BackendError("connection lost")
        if self.increment_delay:
            await trio.sleep(self.increment_delay)
        self.increment_calls.append({i.fields.sum: (i.micros, i.count) for i in increments})
        await super().increment_metrics(group, increments)

    async def read_metrics(self, group: str) -> dict[str, float]:
        if self.fail_reads:
            raise BackendError("connection lost")
        return await super().read_metrics(group)

    async def read_tuning(self, group: str) -> int | None:
        if self.fail_reads:
            raise BackendError("connection lost")
        return await super().read_tuning(group)

    async def reset_metrics(self, group: str, fields: Sequence[str]) -> None:
        if self.fail_reset:
            raise BackendError("connection lost")
        self.reset_calls.append((trio.current_time(), list(fields)))
        await super().reset_metrics(group, fields)

    async def publish_tuning(self, group: str, capacity: int, ttl: float) -> None:
        if self.fail_publish:
            raise BackendError("connection lost")
        self.published.append((trio.current_time(), capacity, ttl))
        await super().publish_tuning(group, capacity, ttl)


async def add_runs(backend: MemoryBackend, **runs: tuple[float, int]) -> None:
    """Add ``name=(total ms, count)`` to the metrics hash, as a flush would."""
    increments = [
        TimingIncrement(fields=task_fields(name), micros=round(ms * 1000), count=count)
        for name, (ms, count) in runs.items()
    ]
    await backend.increment_metrics(GROUP, increments)
