"""The workers: one trio task per message, each deciding its message's outcome.

:func:`run` is the workers nursery of ``serve``: it starts the fetchers inside
it (:mod:`taskrunner._serve.fetcher`), each of which starts
:meth:`Worker.execute` once per message it read, in this nursery, so the pool
(:mod:`taskrunner._serve.pool`) bounds how many run at once. Once stopped,
the fetchers are cancelled at once and the running tasks get the grace to
finish; the nursery drains before the services around it stop.

Running one message: decode, run the action, decide its outcome. Outcomes,
exactly as docs/behaviour:

- success: ack (batched), release the unique lock after the ack;
- the action raised and attempts remain: report it (``on_error``, log) and
  leave the message pending, so it comes back after ``reclaim_delay`` with a
  higher delivery count;
- unknown task on a stream that other consumer groups also read: the entry is
  theirs; ack it for this group only (see :mod:`taskrunner._serve.sharing`);
- unknown task, undecodable entry, or attempts exhausted: the failure path.
  ``failed_task_handler(delivery, error)`` returning means handled (ack);
  raising leaves the message pending for a later try. Without a handler the
  message goes to the dead-letter stream, then is acked;
- cancelled (hard shutdown): nothing is acked; the message is reclaimed later;
- cancelled by ``TaskRunner.cancel`` (the canceller cancelled the run's own
  scope, see :mod:`taskrunner._serve.canceller`), or failed while being
  stopped: acked as cancelled, never retried, its lock released. A
  redelivered entry is checked for such a stop request first, before its
  delivery limit (it may have been cancelled while its worker was dead).

How each outcome is acknowledged (with the result of a task that keeps
results: the return value, the error of a final failure, or that it was
cancelled) is :mod:`taskrunner._serve.finishing`'s. A value that cannot be
kept fails the run for good with ``InvalidTaskResult``.

Poison entries. Any exception while decoding or validating an entry (a
``RecursionError`` from JSON nested 100,000 deep, a typed payload that does
not structure) sends it down the failure path with a short reason. An entry
that kills the whole process cannot be caught, so a redelivered entry's
delivery count is checked against its limit (:mod:`taskrunner._poison`)
before it is decoded: past it, the entry goes to the failure path without
being decoded or run again. First deliveries skip that check.

The duration of every run, failed or not, goes to the timing recorder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import trio

from taskrunner._codec import decode_payload
from taskrunner._config import ConfigHolder
from taskrunner._hooks import call_hook, call_hook_safely
from taskrunner._inflight import InFlight
from taskrunner._outcomes import keep_of
from taskrunner._poison import delivery_limit
from taskrunner._serve import fetcher
from taskrunner._serve.acker import Acker
from taskrunner._serve.fetcher import FetcherContext
from taskrunner._serve.finishing import Finishing
from taskrunner._serve.pool import WorkerPool
from taskrunner._serve.sharing import StreamSharing
from taskrunner._task import Delivery, Task
from taskrunner._timings import TimingRecorder
from taskrunner._wire import TaskMessage, decode_message
from taskrunner.backends import Backend, QueueEntry
from taskrunner.errors import (
    BackendError,
    InvalidTaskPayload,
    InvalidTaskResult,
    TaskExecutionError,
    TaskMaxRetryExceeded,
    TaskNotFound,
    TaskRunnerError,
)

log = logging.getLogger(__name__)

REASON_CHARS = 1000
"""Longest error text logged or written to a dead letter (a bad entry's own text
can be megabytes long)."""


def brief(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` cut to ``limit`` characters, with lone surrogates escaped, so it can
    be logged and stored anywhere."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text)} characters)"
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _undecodable(exc: Exception) -> InvalidTaskPayload:
    if isinstance(exc, InvalidTaskPayload):
        return exc
    error = InvalidTaskPayload(f"{type(exc).__name__} while decoding: {brief(str(exc), 200)}")
    error.__cause__ = exc
    return error


class WorkerCounters:
    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0
        self.retried = 0
        self.dead_lettered = 0
        self.handled = 0


def _delivery(entry: QueueEntry, consumer: str, message: TaskMessage | None) -> Delivery:
    return Delivery(
        id=entry.id,
        consumer=consumer,
        delivery_count=entry.delivery_count,
        raw=entry.payload,
        message=message,
    )


class Worker:
    """Executes messages for one runner; :meth:`execute` is started once per message.

    Args:
        config: The runner's configuration (hooks, handler, group).
        backend: Where failed messages are dead-lettered.
        tasks: The registered tasks by name, read as it is.
        pool: Whose slot each run frees when it ends.
        acker: Where finished messages are acked.
        sharing: The other groups on the stream (an unknown task may be theirs).
        inflight: Running messages, for the refresher.
        timings: Where every run's duration is recorded.
    """

    def __init__(
        self,
        config: ConfigHolder,
        backend: Backend,
        tasks: Mapping[str, Task],
        pool: WorkerPool,
        acker: Acker,
        sharing: StreamSharing,
        inflight: InFlight,
        timings: TimingRecorder,
    ) -> None:
        self._config = config
        self._backend = backend
        self._tasks = tasks
        self._pool = pool
        self._acker = acker
        self._inflight = inflight
        self._timings = timings
        self.counters = WorkerCounters()
        self.finishing = Finishing(config, backend, acker)
        self._sharing = sharing
        self.observers: list[Callable[[str, float, bool], object]] = []

    async def execute(self, entry: QueueEntry, consumer: str) -> None:
        """Run one message; frees its pool slot when done, whatever happens.

        Never raises but for cancellation: one entry must not stop ``serve``.
        """
        try:
            await self._execute(entry, consumer)
        except Exception:
            # Only a bug gets here (ours, or an exception whose str() raises...).
            # The entry stays pending and comes back after reclaim_delay, past its
            # delivery limit eventually, undecoded.
            log.exception(
                "unexpected error while handling message %s; leaving it pending", entry.id
            )
        finally:
            self._pool.release()

    async def _execute(self, entry: QueueEntry, consumer: str) -> None:
        if entry.delivery_count > 1 and (
            await self.finishing.cancelled_meanwhile(entry, self._tasks)
            or await self._over_limit(entry, consumer)
        ):
            return
        try:
            message = decode_message(entry.payload)
        except Exception as exc:
            await self._fail(_delivery(entry, consumer, None), _undecodable(exc))
            return
        task = self._tasks.get(message.task_name)
        if task is None:
            if await self._belongs_to_another_group(entry, message):
                return
            await self._fail(_delivery(entry, consumer, message), TaskNotFound(message.task_name))
            return
        if entry.delivery_count > task.attempts:
            # The last allowed attempt never finished (its worker died): give up.
            error = TaskMaxRetryExceeded(task.name, entry.id, task.attempts)
            await self._fail(_delivery(entry, consumer, message), error)
            return
        try:
            payload = decode_payload(message.payload, task.payload_type, task.name, task.extra_keys)
        except Exception as exc:
            await self._fail(_delivery(entry, consumer, message), _undecodable(exc))
            return

        keep = keep_of(task, message)
        begun = self.finishing.now() if keep is not None else 0.0  # a result's started_at
        run = trio.CancelScope()  # its own, which TaskRunner.cancel cancels
        self._inflight.add(entry.id, consumer, task.reservation, trio.current_time(), run)
        started = trio.current_time()
        succeeded = False
        value: Any = None
        try:
            with run:
                value = await task.action(payload)
                succeeded = True
        except Exception as exc:
            if self._inflight.remove(entry.id):  # failed while being stopped: cancelled
                self.finishing.cancelled(entry, message, keep, begun)
            else:
                await self._attempt_failed(task, _delivery(entry, consumer, message), exc)
            return
        finally:
            stopped = self._inflight.remove(entry.id)
            elapsed = trio.current_time() - started
            self._timings.record(task.name, elapsed)
            if self.observers:
                self._notify(task.name, elapsed, succeeded)
        if run.cancelled_caught:  # only TaskRunner.cancel cancels this scope
            self.finishing.cancelled(entry, message, keep, begun)
            return
        try:
            self.finishing.succeeded(
                entry, task, message, keep, begun, value, stop_requested=stopped
            )
        except InvalidTaskResult as error:
            await self._fail(_delivery(entry, consumer, message), error, started_at=begun)
            return
        self.counters.completed += 1

    async def _belongs_to_another_group(self, entry: QueueEntry, message: TaskMessage) -> bool:
        """Whether an unknown task is another group's (the stream is shared): if
        so it is acked for this group only, never dead-lettered.

        The other groups are looked up once (the failure path, not the hot
        path) and then remembered; an error leaves the entry pending.
        """
        try:
            others = self._sharing.seen or await self._sharing.others()
        except BackendError as exc:
            log.warning(
                "message %s names unknown task %s and the stream's groups could not be "
                "read (%s); leaving it pending",
                entry.id,
                message.task_name,
                exc,
            )
            return True
        if not others:
            return False
        self._sharing.skip_unknown(message.task_name, entry.id)
        self._acker.ack(entry.id, None)
        return True

    async def _over_limit(self, entry: QueueEntry, consumer: str) -> bool:
        """Send a redelivered entry past its delivery limit down the failure path,
        undecoded (it may be what killed the workers before); True if it was."""
        bound = delivery_limit(entry.payload, self._tasks)
        if entry.delivery_count <= bound.limit:
            return False
        error: TaskRunnerError
        if bound.task_name is not None:
            error = TaskMaxRetryExceeded(bound.task_name, entry.id, bound.limit)
        else:
            error = InvalidTaskPayload(
                f"delivered {entry.delivery_count} times without naming a registered task "
                f"(at most {bound.limit} deliveries); not decoded again"
            )
        log.warning(
            "message %s delivered %d times, over its limit of %d: failing it without "
            "decoding it, in case it is what killed the workers it was delivered to",
            entry.id,
            entry.delivery_count,
            bound.limit,
        )
        await self._fail(_delivery(entry, consumer, None), error)
        return True

    def _notify(self, task_name: str, elapsed: float, succeeded: bool) -> None:
        for observer in list(self.observers):
            try:
                observer(task_name, elapsed, succeeded)
            except Exception:
                log.exception("timing observer %r raised; removing it", observer)
                self.observers.remove(observer)

    async def _attempt_failed(self, task: Task, delivery: Delivery, exc: Exception) -> None:
        self.counters.failed += 1
        error = TaskExecutionError(task.name, delivery.id, delivery.delivery_count, exc)
        error.__cause__ = exc
        final = delivery.delivery_count >= task.attempts
        log.warning(
            "task %s (message %s) failed on attempt %d of %d: %s: %s%s",
            task.name,
            delivery.id,
            delivery.delivery_count,
            task.attempts,
            type(exc).__name__,
            exc,
            "" if final else "; it will be retried after reclaim_delay",
            exc_info=exc,
        )
        await call_hook_safely("on_error", self._config.current.on_error, error, delivery)
        if final:
            exhausted = TaskMaxRetryExceeded(task.name, delivery.id, task.attempts, exc)
            exhausted.__cause__ = exc
            await self._fail(delivery, exhausted, reported=True)
        else:
            self.counters.retried += 1

    async def _fail(
        self,
        delivery: Delivery,
        error: TaskRunnerError,
        *,
        reported: bool = False,
        started_at: float | None = None,
    ) -> None:
        """The failure path: handler or dead-letter, then ack (with the failure, for a
        task that keeps results); or leave pending."""
        reason = brief(f"{type(error).__name__}: {error}")
        if not reported:
            log.error(
                "message %s (task %s) cannot be processed: %s",
                delivery.id,
                brief(delivery.task_name or "?", 200),
                reason,
            )
            await call_hook_safely("on_error", self._config.current.on_error, error, delivery)
        handler = self._config.current.failed_task_handler
        if handler is not None:
            try:
                await call_hook(handler, delivery, error)
            except Exception:
                log.exception(
                    "failed_task_handler raised for message %s; leaving it pending "
                    "(it is tried again after reclaim_delay)",
                    delivery.id,
                )
                return
            self.counters.handled += 1
        else:
            try:
                dead_id = await self._backend.dead_letter(
                    self._config.current.consumer_group, delivery.id, delivery.raw, reason
                )
            except BackendError as exc:
                log.error(
                    "could not dead-letter message %s (%s); leaving it pending", delivery.id, exc
                )
                return
            self.counters.dead_lettered += 1
            log.error("message %s moved to the dead-letter stream as %s", delivery.id, dead_id)
        message = delivery.message
        task = self._tasks.get(message.task_name) if message is not None else None
        self.finishing.failed(
            delivery.id, delivery.delivery_count, message, task, error, started_at
        )


async def run(
    fetching: FetcherContext,
    stop: trio.Event,
    grace: Callable[[], float],
    *,
    task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The workers nursery: the fetchers, and one task per message they read, until
    ``stop`` is set; then drain.

    Calls ``task_status.started(scope)`` once every fetcher runs, with the
    workers nursery's cancel scope, whose deadline :meth:`TaskRunner.shutdown
    <taskrunner.TaskRunner.shutdown>` moves to cut a drain short. After the
    stop the fetchers are cancelled at once; running tasks get ``grace()``
    seconds to finish, then are cancelled and stay pending for reclaim.

    Args:
        fetching: What the fetchers share (``config.num_fetchers`` of them start).
        stop: Set to stop fetching and drain.
        grace: Seconds running tasks get once stopped (read when the drain
            starts, and again to report it).
    """
    async with trio.open_nursery() as workers:
        async with trio.open_nursery() as fetchers:
            for fetcher_id in range(1, fetching.config.num_fetchers + 1):
                await fetchers.start(fetcher.run, fetching, workers, fetcher_id)
            task_status.started(workers.cancel_scope)
            await stop.wait()
            fetchers.cancel_scope.cancel()
        seconds = grace()
        running = fetching.pool.in_use
        if running:
            log.info("shutting down: waiting up to %.1fs for %d running task(s)", seconds, running)
        workers.cancel_scope.deadline = trio.current_time() + seconds
    if workers.cancel_scope.cancelled_caught:
        # (A hard stop may cut the body above short: read the grace again.)
        log.warning(
            "shutdown_grace (%.3gs) ran out; unfinished tasks were cancelled and "
            "stay pending for reclaim",
            grace(),
        )
