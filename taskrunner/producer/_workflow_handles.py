"""A workflow a producer follows: ``producer.workflow(workflow_id)``.

Theory of operation. ``dispatch_workflow`` returns the workflow's id (a string, as
before); ``producer.workflow(id)`` gives its handle, with what the runner's
``WorkflowHandle`` has: ``status()`` (``HGETALL`` of its record, read by the runner's
own :func:`~taskrunner.backends.redis._workflow_reads.record_of`, and, when a step is
queued, one pipeline of its queued steps' progress hashes), ``result(timeout)``
(the record read; while it runs, a wait for its end, which the runners keep as a
result under the workflow's id, then the record read again) and ``cancel()`` (the
runner's ``lua/finish.lua`` ``cancel`` call, with the same ``KEYS`` and ``ARGV``:
:func:`~taskrunner.backends.redis._step_cancel.cancel_workflow_call`). The sync and
the asyncio handles differ only in their awaits.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from taskrunner import _keys
from taskrunner._dispatch.workflows import WorkflowStatus, result_of, status_of
from taskrunner._workflows import WorkflowState
from taskrunner._workflows.keys import workflow_key
from taskrunner.backends._protocols.workflows import WorkflowRecord
from taskrunner.backends.redis._step_cancel import cancel_workflow_call
from taskrunner.backends.redis._workflow_reads import queued_task_ids, record_of, with_progress
from taskrunner.errors import ResultTimeout
from taskrunner.producer._core import ProducerCore, check_timeout, translated
from taskrunner.producer._plan import DEFAULT_QUEUE

if TYPE_CHECKING:
    from taskrunner.producer._async import AsyncProducer
    from taskrunner.producer._sync import Producer

__all__ = ["AsyncProducerWorkflow", "ProducerWorkflow"]


def _record_key(core: ProducerCore, workflow_id: str) -> str:
    return workflow_key(core.destination.consumer_group, workflow_id, core.destination.key_layout)


def _progress_keys(core: ProducerCore, record: WorkflowRecord) -> dict[str, str]:
    group, layout = core.destination.consumer_group, core.destination.key_layout
    return {s: _keys.progress(group, t, layout) for s, t in queued_task_ids(record).items()}


def _cancel_call(core: ProducerCore, record: WorkflowRecord) -> tuple[list[str], list[Any]]:
    own = core.destination_of(DEFAULT_QUEUE).stream
    streams = {
        own if s.queue is None else core.destination_of(s.queue).stream for s in record.steps
    }
    keys, args = cancel_workflow_call(
        core.destination.consumer_group,
        core.destination.key_layout,
        record.workflow_id,
        own,
        streams,
        time.time(),
    )
    return [str(k) for k in keys], args


def _missing(workflow_id: str) -> LookupError:
    return LookupError(f"no workflow {workflow_id} (never dispatched, or expired)")


class ProducerWorkflow:
    """A workflow a :class:`~taskrunner.producer.Producer` follows (``str()`` is its id)."""

    def __init__(self, workflow_id: str, producer: Producer) -> None:
        self.id = workflow_id
        self._producer = producer

    def __repr__(self) -> str:
        return f"ProducerWorkflow(id={self.id!r})"

    def __str__(self) -> str:
        return self.id

    def _record(self) -> WorkflowRecord | None:
        core, client = self._producer._core, self._producer._redis()
        with translated():
            record = record_of(self.id, client.hgetall(_record_key(core, self.id)))
            keys = {} if record is None else _progress_keys(core, record)
            if record is None or not keys:
                return record
            with client.pipeline(transaction=False) as pipe:
                for key in keys.values():
                    pipe.hgetall(key)
                replies = pipe.execute()
        return with_progress(record, dict(zip(keys, replies, strict=True)))

    def status(self) -> WorkflowStatus | None:
        """As ``WorkflowHandle.status``: its state, counts per state and each step's
        state and progress; ``None`` once its record has expired.

        Raises:
            BackendError: Redis could not be reached.
        """
        record = self._record()
        return None if record is None else status_of(record)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the workflow to end and return its result, as ``WorkflowHandle.result``:
        its last step's result, or a dict of its last steps' results by step id.

        Raises:
            WorkflowFailed: it failed (the step, its error's type and text).
            WorkflowCancelled: it was cancelled.
            ResultTimeout: it did not end within ``timeout`` seconds (it runs on).
            LookupError: no such workflow (never dispatched, or expired).
            BackendError: Redis could not be reached.
            ValueError: a bad ``timeout``.
        """
        limit = check_timeout(timeout)
        deadline = time.monotonic() + limit
        while True:
            record = self._record()
            if record is None:
                raise _missing(self.id)
            if record.state.final:
                return result_of(record)
            left = deadline - time.monotonic()
            if left <= 0:
                raise ResultTimeout(self.id, record.name, limit)
            self._producer._wait_document(self.id, left)  # its end, kept under its id

    def cancel(self) -> bool:
        """Cancel it, as ``WorkflowHandle.cancel`` (one call of the runner's
        ``lua/finish.lua``): it ends ``CANCELLED``, running steps stopped fleet-wide.

        Returns:
            Whether it was running.

        Raises:
            BackendError: Redis could not be reached.
        """
        record = self._record()
        if record is None or record.state.final:
            return False
        keys, args = _cancel_call(self._producer._core, record)
        with translated():
            self._producer._conn.finish(keys=keys, args=args, client=self._producer._redis())
        after = self._record()
        return after is not None and after.state is WorkflowState.CANCELLED


class AsyncProducerWorkflow:
    """A workflow an :class:`~taskrunner.producer.AsyncProducer` follows (``str()`` is
    its id): :class:`ProducerWorkflow`'s calls, awaited."""

    def __init__(self, workflow_id: str, producer: AsyncProducer) -> None:
        self.id = workflow_id
        self._producer = producer

    def __repr__(self) -> str:
        return f"AsyncProducerWorkflow(id={self.id!r})"

    def __str__(self) -> str:
        return self.id

    async def _record(self) -> WorkflowRecord | None:
        core, client = self._producer._core, await self._producer._redis()
        with translated():
            record = record_of(self.id, await client.hgetall(_record_key(core, self.id)))
            keys = {} if record is None else _progress_keys(core, record)
            if record is None or not keys:
                return record
            async with client.pipeline(transaction=False) as pipe:
                for key in keys.values():
                    pipe.hgetall(key)
                replies = await pipe.execute()
        return with_progress(record, dict(zip(keys, replies, strict=True)))

    async def status(self) -> WorkflowStatus | None:
        """As :meth:`ProducerWorkflow.status`."""
        record = await self._record()
        return None if record is None else status_of(record)

    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """As :meth:`ProducerWorkflow.result`.

        Cancellation: waiting leaves only a waiter's registration, which ends by itself.
        """
        limit = check_timeout(timeout)
        deadline = time.monotonic() + limit
        while True:
            record = await self._record()
            if record is None:
                raise _missing(self.id)
            if record.state.final:
                return result_of(record)
            left = deadline - time.monotonic()
            if left <= 0:
                raise ResultTimeout(self.id, record.name, limit)
            await self._producer._wait_document(self.id, left)

    async def cancel(self) -> bool:
        """As :meth:`ProducerWorkflow.cancel`."""
        record = await self._record()
        if record is None or record.state.final:
            return False
        keys, args = _cancel_call(self._producer._core, record)
        with translated():
            await self._producer._conn.finish(
                keys=keys, args=args, client=await self._producer._redis()
            )
        after = await self._record()
        return after is not None and after.state is WorkflowState.CANCELLED
