"""The end of a run that is not the hot path's: stopped, past its timeout, or failed.

Theory of operation (the worker whose runs end here is :mod:`taskrunner._serve.worker`).
A plain run that returned is acknowledged by the worker itself; every other
ending is one method here. A run stopped by ``TaskRunner.cancel``
(:meth:`Endings.stopped`) or past its timeout (:meth:`Endings.timed_out`) was
cut short by the cancellation of its worker's scope, in which any await would
be cancelled too, so the crew awaits these once its worker left that scope
(:mod:`taskrunner._serve.crew`). :meth:`Endings.outcome` carries out the rest:
cancelled, ack (with the result), retry or the failure path; and a thread past
its timeout or stop keeps the run's pool slot (and concurrency slot) until it
returns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import trio

from taskrunner._execution.inflight import InFlight
from taskrunner._fleet.timings import TimingRecorder
from taskrunner._serve.attempt import Thread
from taskrunner._serve.gate import NO_HOLD, Gate, Hold
from taskrunner._serve.intake import delivery_of
from taskrunner._serve.outcome import Outcomes, dispatched_at
from taskrunner._task import Task
from taskrunner._wire import TaskMessage
from taskrunner.backends import QueueEntry
from taskrunner.errors import InvalidTaskResult, TaskTimeout

log = logging.getLogger(__name__)


@attrs.frozen
class Ending:
    """What the outcome of a run that is not the hot path's needs to know."""

    keep: float | None
    """Seconds its task keeps results for, if it does."""
    started_at: float
    """When it started (the backend's clock; for a kept result)."""
    value: Any
    """What the action returned."""
    stopped: bool
    """It was asked to stop (``TaskRunner.cancel``)."""


class Endings:
    """The endings of one runner's runs (see the module docstring).

    Args:
        outcomes: Where each run's outcome is carried out.
        inflight: Running messages (a run's entry goes when it ends).
        gate: Where a run's concurrency slot is given back.
        timings: Where every run's duration is recorded.
        observers: Told of every run's duration (the worker's list, as it is).
    """

    def __init__(
        self,
        outcomes: Outcomes,
        inflight: InFlight,
        gate: Gate,
        timings: TimingRecorder,
        observers: list[Callable[[str, float, bool], object]],
    ) -> None:
        self._outcomes = outcomes
        self._inflight = inflight
        self._gate = gate
        self._timings = timings
        self.observers = observers

    async def stopped(
        self,
        entry: QueueEntry,
        task: Task,
        message: TaskMessage,
        thread: Thread | None,
        ending: Ending,
        hold: Hold,
        started: float,
    ) -> None:
        """The end of a run stopped by ``TaskRunner.cancel`` (awaited outside the worker's
        spent scope): acked as cancelled; a thread, which runs on, keeps the run's pool
        and concurrency slots until it returns."""
        try:
            self._outcomes.cancelled(entry, message, ending.keep, ending.started_at)
            elapsed = trio.current_time() - started
            self._timings.record(task.name, elapsed)
            if self.observers:
                self.notify(task.name, elapsed, False)
            if thread is not None and not thread.returned:
                log.info(
                    "task %s (message %s) was cancelled in a thread that is still running: "
                    "its pool slot frees when it returns",
                    task.name,
                    entry.id,
                )
                await thread.done.wait()
        finally:
            self._inflight.of(entry.group).release(entry.id, queue=entry.queue)  # kept until acked
            if hold is not NO_HOLD:
                await self._gate.release(hold)

    async def timed_out(
        self,
        entry: QueueEntry,
        consumer: str,
        task: Task,
        message: TaskMessage,
        error: TaskTimeout,
        thread: Thread | None,
        ending: Ending,
        hold: Hold,
    ) -> None:
        """The end of a run past its timeout (awaited outside the worker's spent scope):
        its concurrency slot given back (a thread's once it returned), then the
        outcome of the failed attempt."""
        if thread is None and hold is not NO_HOLD:
            await self._gate.release(hold)
        await self.outcome(entry, consumer, task, message, error, thread, ending, hold)

    async def outcome(
        self,
        entry: QueueEntry,
        consumer: str,
        task: Task,
        message: TaskMessage,
        error: Exception | None,
        thread: Thread | None,
        ending: Ending,
        hold: Hold,
    ) -> None:
        """Cancelled, ack (with the result), retry or the failure path; then wait for a
        thread past its timeout."""
        try:
            # A thread's run is tracked until it returns: its stop request is read here.
            stopped = ending.stopped or (
                thread is not None
                and self._inflight.of(entry.group).stop_requested(entry.id, queue=entry.queue)
            )
            if stopped:
                self._outcomes.cancelled(entry, message, ending.keep, ending.started_at)
            elif error is not None:
                await self._outcomes.attempt_failed(
                    task,
                    delivery_of(entry, consumer, message),
                    error,
                    dispatched_at=dispatched_at(entry.id, message),
                    started_at=ending.started_at if ending.keep is not None else None,
                )
            elif ending.keep is None:
                self._outcomes.done(
                    entry.id, message, entry.queue, entry.delivery_count, group=entry.group
                )
            else:
                try:
                    self._outcomes.succeeded(
                        entry, task, message, ending.keep, ending.started_at, ending.value
                    )
                except InvalidTaskResult as invalid:
                    await self._outcomes.fail(
                        delivery_of(entry, consumer, message), invalid, started_at=ending.started_at
                    )
            if thread is not None and not thread.returned:
                log.warning(
                    "task %s (message %s) ran past its timeout in a thread that is still "
                    "running: its pool slot frees when it returns",
                    task.name,
                    entry.id,
                )
                await thread.done.wait()
        finally:
            # Kept until its ack lands, if one was queued; else gone (left pending).
            self._inflight.of(entry.group).release(entry.id, queue=entry.queue)
            if thread is not None and hold is not NO_HOLD:  # the thread's end
                await self._gate.release(hold)

    def notify(self, task_name: str, elapsed: float, succeeded: bool) -> None:
        for observer in list(self.observers):
            try:
                observer(task_name, elapsed, succeeded)
            except Exception:
                log.exception("timing observer %r raised; removing it", observer)
                self.observers.remove(observer)
