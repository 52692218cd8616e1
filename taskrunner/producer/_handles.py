"""The handles of the tasks a producer dispatched: the task's id and name, and the way
to its result and its cancel (its producer's :meth:`~taskrunner.producer.Producer.result`
and :meth:`~taskrunner.producer.Producer.cancel`, or the asyncio producer's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from taskrunner.producer._async import AsyncProducer
    from taskrunner.producer._sync import Producer


@attrs.frozen
class ProducerHandle:
    """A task a :class:`Producer` dispatched. ``str(handle)`` is its id."""

    id: str
    """The task's id: its stream id, or a delayed task's id (``<shard>.<id>`` in a
    sharded group)."""
    task_name: str
    _producer: Producer = attrs.field(repr=False, eq=False)

    def __str__(self) -> str:
        return self.id

    def result(self, timeout: float | None = None, *, type: type[Any] | None = None) -> Any:
        """Wait for the task's outcome and return its value (the task must keep
        results: ``keep_result``): :meth:`Producer.result`."""
        return self._producer.result(self.id, timeout, type=type, task_name=self.task_name)

    def cancel(self) -> bool:
        """Cancel the task: :meth:`Producer.cancel`."""
        return self._producer.cancel(self.id)


@attrs.frozen
class AsyncProducerHandle:
    """A task an :class:`AsyncProducer` dispatched. ``str(handle)`` is its id."""

    id: str
    """The task's id: its stream id, or a delayed task's id."""
    task_name: str
    _producer: AsyncProducer = attrs.field(repr=False, eq=False)

    def __str__(self) -> str:
        return self.id

    # The contract names the bound (``await h.result(timeout=10)``), as TaskHandle's.
    async def result(
        self,
        timeout: float | None = None,  # noqa: ASYNC109
        *,
        type: type[Any] | None = None,
    ) -> Any:
        """Wait for the task's outcome and return its value (the task must keep
        results: ``keep_result``): :meth:`AsyncProducer.result`."""
        return await self._producer.result(self.id, timeout, type=type, task_name=self.task_name)

    async def cancel(self) -> bool:
        """Cancel the task: :meth:`AsyncProducer.cancel`."""
        return await self._producer.cancel(self.id)
