"""A connection shared by many concurrent callers, with automatic pipelining.

Theory of operation: callers never touch the socket. :meth:`SharedConnection.submit`
appends the caller's encoded request to an output buffer and a :class:`Waiter` to
a FIFO, and wakes the writer task if it sleeps. The writer task runs after every
task made runnable in the same scheduling batch has submitted, so it sends all
their requests with one ``send_all`` of the joined buffer (this is the automatic
pipelining). The reader task feeds received bytes to ``hiredis`` and hands each
complete reply to the FIFO's oldest waiter: Redis answers in request order, so
the n-th reply belongs to the n-th request written.

Waiting uses ``trio.lowlevel.wait_task_rescheduled`` rather than a
``trio.Event`` per request. A caller cancelled while waiting only marks its
waiter abandoned (``task = None``); the waiter stays in the FIFO, so the reply
that eventually arrives for it is discarded and every later reply still reaches
its own caller. A request already in the output buffer is sent even if its
caller went away.

When the connection breaks (read or write error, EOF, protocol error, or no
reply data for ``command_timeout`` while requests are pending), every pending
waiter is woken with its own :class:`RedisConnectionError`, new submissions
are refused, and :meth:`serve` returns after closing the stream; the owner
(:mod:`._client`) opens a new connection on the next call.
"""

from __future__ import annotations

import collections
import logging
import math

import hiredis
import outcome
import trio
from trio.lowlevel import Abort, Task, current_task, reschedule, wait_task_rescheduled

from ._connection import NOT_ENOUGH_DATA, RECEIVE_SIZE, Reply, translate_errors
from ._errors import RedisConnectionError, RedisTimeoutError

logger = logging.getLogger(__name__)


class Waiter:
    """One caller's place in the reply FIFO: ``count`` replies go to ``task``.

    ``task`` is ``None`` once the caller stopped waiting (cancelled); its
    replies are then read and dropped.
    """

    __slots__ = ("count", "replies", "task")

    def __init__(self, task: Task | None, count: int) -> None:
        self.task = task
        self.count = count
        self.replies: list[Reply] = []

    def abort(self, _raise_cancel: object) -> Abort:
        self.task = None
        return Abort.SUCCEEDED


class SharedConnection:
    """One open connection multiplexed between concurrent callers (see module doc)."""

    def __init__(self, stream: trio.abc.Stream, reader: hiredis.Reader, timeout: float) -> None:
        self._stream = stream
        self._reader = reader
        self._timeout = timeout
        self._out: list[bytes] = []
        self._waiters: collections.deque[Waiter] = collections.deque()
        self._writer_task: Task | None = None  # set while the writer sleeps
        self._watchdog = trio.CancelScope()
        self._scope = trio.CancelScope()
        self._error: RedisConnectionError | None = None

    @property
    def is_usable(self) -> bool:
        """False once the connection failed or was closed."""
        return self._error is None

    @property
    def pending(self) -> int:
        """Requests written or queued whose replies have not all arrived."""
        return len(self._waiters)

    def submit(self, data: bytes, count: int) -> Waiter:
        """Queue ``data`` (``count`` encoded commands) for writing; return its waiter.

        The caller then parks with :func:`wait_for`. Synchronous: nothing can
        interleave between queuing the bytes and the waiter, which keeps the
        FIFO in write order.

        Raises:
            RedisConnectionError: The connection already failed.
        """
        if self._error is not None:
            raise RedisConnectionError(str(self._error)) from self._error
        waiter = Waiter(current_task(), count)
        self._out.append(data)
        if not self._waiters:
            self._watchdog.deadline = trio.current_time() + self._timeout
        self._waiters.append(waiter)
        writer = self._writer_task
        if writer is not None:
            self._writer_task = None
            reschedule(writer)
        return waiter

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the reader and writer until the connection fails or :meth:`close` is called.

        Never raises (other than ``Cancelled``): connection problems, and even
        unexpected errors, are delivered to the pending callers as
        :class:`RedisConnectionError`, so it can run as a trio system task.
        The stream is closed on return.
        """
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._write_loop)
                    task_status.started()
                    await self._read_loop()
                    nursery.cancel_scope.cancel()
        finally:
            self._fail(RedisConnectionError("the connection was closed"))
            await trio.aclose_forcefully(self._stream)

    def close(self) -> None:
        """Fail pending requests and make :meth:`serve` return (it closes the stream)."""
        self._fail(RedisConnectionError("the client was closed"))

    def _fail(self, error: RedisConnectionError) -> None:
        if self._error is not None:
            return
        self._error = error
        self._scope.cancel()
        waiters, self._waiters = self._waiters, collections.deque()
        self._out.clear()
        for waiter in waiters:
            if waiter.task is not None:
                exc = type(error)(str(error))
                exc.__cause__ = error.__cause__
                reschedule(waiter.task, outcome.Error(exc))
                waiter.task = None

    async def _write_loop(self) -> None:
        out = self._out
        try:
            with translate_errors("writing to the server"):
                while True:
                    if not out:
                        self._writer_task = current_task()
                        await wait_task_rescheduled(self._abort_writer)
                    data = out[0] if len(out) == 1 else b"".join(out)
                    out.clear()
                    await self._stream.send_all(data)
        except RedisConnectionError as exc:
            logger.info("Redis connection lost: %s", exc)
            self._fail(exc)
        except Exception as exc:  # a bug: fail the callers, never crash the (system) task
            logger.exception("Unexpected error on a Redis connection")
            self._fail(_unexpected(exc))

    def _abort_writer(self, _raise_cancel: object) -> Abort:
        self._writer_task = None
        return Abort.SUCCEEDED

    async def _read_loop(self) -> None:
        try:
            with translate_errors("reading from the server"):
                with self._watchdog:
                    await self._receive_replies()
                if self._watchdog.cancelled_caught:
                    raise RedisTimeoutError(
                        f"no reply from the server within {self._timeout:.3g} s"
                    )
        except RedisConnectionError as exc:
            logger.info("Redis connection lost: %s", exc)
            self._fail(exc)
        except Exception as exc:  # a bug: fail the callers, never crash the (system) task
            logger.exception("Unexpected error on a Redis connection")
            self._fail(_unexpected(exc))

    async def _receive_replies(self) -> None:
        stream = self._stream
        reader = self._reader
        waiters = self._waiters
        watchdog = self._watchdog
        while True:
            data = await stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise RedisConnectionError("the server closed the connection")
            reader.feed(data)  # type: ignore[arg-type]  # bytearray works
            while True:
                reply = reader.gets()
                if reply is NOT_ENOUGH_DATA:
                    break
                if not waiters:
                    raise RedisConnectionError(f"received a reply nobody asked for: {reply!r}")
                waiter = waiters[0]
                if waiter.count == 1:
                    waiters.popleft()
                    if waiter.task is not None:
                        reschedule(waiter.task, outcome.Value(reply))
                else:
                    replies = waiter.replies
                    replies.append(reply)
                    count = waiter.count
                    # The rest of a pipeline's replies as they are buffered, without the
                    # tests above for each (a transaction has one more per command).
                    while len(replies) < count:
                        reply = reader.gets()
                        if reply is NOT_ENOUGH_DATA:
                            break  # the outer loop's next gets() says so again
                        replies.append(reply)
                    if len(replies) == count:
                        waiters.popleft()
                        if waiter.task is not None:
                            reschedule(waiter.task, outcome.Value(replies))
            watchdog.deadline = trio.current_time() + self._timeout if waiters else math.inf


def _unexpected(exc: Exception) -> RedisConnectionError:
    error = RedisConnectionError(f"unexpected {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


async def wait_for(waiter: Waiter) -> Reply:
    """Park until the reply (or the list of ``count`` replies) for ``waiter`` arrives.

    Raises:
        RedisConnectionError: The connection failed first.

    Cancellation: the waiter is abandoned and its reply will be discarded.
    """
    return await wait_task_rescheduled(waiter.abort)
