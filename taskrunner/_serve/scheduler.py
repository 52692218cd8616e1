"""The delayed-task scheduler (leader only).

Theory of operation. Delayed tasks wait in the group's delayed set, scored by
run-at time in the backend's clock. During its term the leader repeatedly:
reads a batch of due members, turns each into the stream message it becomes
(a unique task gets a fresh lock token), and has the backend move the batch
atomically (one Lua script on Redis: a member is removed and its message
added together, or neither). A unique task whose lock is still held stays in
the set for the next pass. Then it sleeps until the earliest run-at time, at
most ``delayed_poll_interval``, or until this instance adds a delayed task
(so a 200 ms delay fires in about 200 ms, not at the next poll).

A follower cannot wake the leader, so every serving instance also keeps the
run-at times of the delayed tasks it dispatched itself and, when one falls due
while another instance leads, runs a pass of its own. The move being atomic,
two passes at once never move a member twice. (A process that dispatches but
does not serve relies on the leader's poll.)

A member that cannot be decoded (whatever the decoder raises), names an
unknown task, or would need a lock key with no UTF-8 form, is still moved,
as it is and without a lock: the worker that reads it sends it down the
failure path (dead letter or ``failed_task_handler``), so nothing disappears
silently and no bad member holds up the batch it is in.
"""

from __future__ import annotations

import heapq
import logging
import uuid
from collections.abc import Callable, Mapping

import trio

from taskrunner import _wire
from taskrunner._backoff import backoff_delay
from taskrunner._codec import decode_payload
from taskrunner._config import is_utf8_text
from taskrunner._task import Task
from taskrunner._timings import TimingRecorder
from taskrunner.backends import Backend, DelayedMove
from taskrunner.errors import BackendError, InvalidTaskPayload

log = logging.getLogger("taskrunner.scheduler")

BATCH = 500
MAX_BATCHES_PER_PASS = 20
HELD_RECHECK = 1.0
"""Seconds between looks at due unique tasks whose lock is still held."""
LOCAL_RETRY_BASE = 0.1
LOCAL_RETRY_CAP = 5.0
"""Backoff bounds (seconds) for retrying a failed local pass."""


def sleep_time(now: float, next_at: float | None, poll_interval: float, *, held: bool) -> float:
    """How long to sleep before the next pass (pure).

    Until the earliest run-at time, at most ``poll_interval``. A member already
    due after a pass is either new (pass again at once) or a unique task whose
    lock is held (``held``: look again in :data:`HELD_RECHECK`, not in a loop).
    """
    if next_at is None:
        return poll_interval
    if next_at <= now and held:
        return min(poll_interval, HELD_RECHECK)
    return min(poll_interval, max(0.0, next_at - now))


def _undeliverable(raw: bytes, why: str) -> DelayedMove:
    # Moved as it is: the worker cannot decode it as a task message either, so it
    # goes down the failure path (dead letter or failed_task_handler) with the raw
    # member attached, never silently away and never stuck in the set.
    log.error(
        "delayed member %r cannot be scheduled (%s); moving it to the failure path", raw[:200], why
    )
    return DelayedMove(member=raw, message=raw)


def build_move(raw: bytes, tasks: Mapping[str, Task], *, token: str | None = None) -> DelayedMove:
    """The stream message a delayed member becomes (pure but for a fresh lock token).

    Only the member's task, payload and (ours) precomputed ``unique_key`` are
    used; its ``time`` is Go's and the run-at time is the score.

    Args:
        raw: The member as stored.
        tasks: The registered tasks.
        token: The lock token of a unique task; a random one by default.

    Never raises: a member that cannot be turned into a message is moved as it
    is, for the worker's failure path to report.
    """
    try:
        delayed = _wire.decode_delayed(raw)
    except InvalidTaskPayload as exc:
        return _undeliverable(raw, f"not a delayed task: {exc}")
    except Exception as exc:  # RecursionError too: JSON nested 100,000 deep
        return _undeliverable(raw, f"not a delayed task: {type(exc).__name__}: {exc}")
    task = tasks.get(delayed.task)
    if task is None:
        # Go's zero values: the worker that knows the task (another deployment,
        # a Go fleet) runs it with its own settings, or dead-letters it.
        message = _wire.TaskMessage(task_name=delayed.task, payload=delayed.payload)
        return DelayedMove(member=raw, message=_encode(message, raw))
    if not task.unique:
        message = _wire.new_message(task, delayed.payload)
        return DelayedMove(member=raw, message=_encode(message, raw))
    unique_key = delayed.unique_key
    if unique_key is None:  # written by the Go library: compute it
        try:
            payload = decode_payload(delayed.payload, task.payload_type, task.name, task.extra_keys)
            unique_key = _wire.unique_key_for(task, payload)
        except InvalidTaskPayload as exc:
            return _undeliverable(raw, str(exc))
        except Exception as exc:  # whatever else decoding raised (a RecursionError)
            return _undeliverable(raw, f"{type(exc).__name__}: {exc}")
    if not is_utf8_text(unique_key):  # the lock key could never be sent to the backend
        return _undeliverable(raw, f"unique_key {unique_key!r} is not valid UTF-8 text")
    token = uuid.uuid4().hex if token is None else token
    message = _wire.new_message(task, delayed.payload, unique_key=unique_key, token=token)
    return DelayedMove(
        member=raw,
        message=_encode(message, raw),
        lock_key=_wire.unique_lock(task.name, unique_key),
        lock_token=token,
        lock_ttl=task.unique_for,
    )


def _encode(message: _wire.TaskMessage, raw: bytes) -> bytes:
    try:
        return _wire.encode_message(message)
    except Exception:  # not encodable (a RecursionError too): the worker reports the raw member
        return raw


class Scheduler:
    """Moves due delayed tasks; :meth:`run` is a leader-only job."""

    def __init__(
        self,
        backend: Backend,
        group: str,
        tasks: Callable[[], Mapping[str, Task]],
        timings: TimingRecorder,
        poll_interval: float,
    ) -> None:
        self._backend = backend
        self._group = group
        self._tasks = tasks
        self._timings = timings
        self._poll_interval = poll_interval
        self._wake = trio.Event()
        self._local: list[float] = []  # run-at times dispatched here, a heap
        self._local_wake = trio.Event()
        self.moved = 0

    def nudge(self, run_at: float) -> None:
        """A delayed task due at ``run_at`` was added here: the leader's loop (if it
        is this instance) re-checks at once, and :meth:`run_local` moves it on
        time if another instance leads."""
        self._wake.set()
        heapq.heappush(self._local, run_at)
        self._local_wake.set()

    async def run_local(self, is_leader: Callable[[], bool]) -> None:
        """On every serving instance: when a delayed task dispatched here falls
        due and this instance does not lead, run a pass itself.

        The leader only polls every ``delayed_poll_interval``; without this a
        200 ms delay dispatched on a follower would fire up to a poll late. The
        move is atomic (a member moves once, whoever moves it), so this is safe
        beside the leader's own passes. A run-at time is forgotten only once a
        pass after it succeeded: a failed pass is retried with backoff.
        """
        failures = 0
        while True:
            self._local_wake = trio.Event()
            if not self._local:
                await self._local_wake.wait()
                continue
            delay = self._local[0] - self._backend.now()
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._local_wake.wait()  # an earlier one: recompute
                continue
            now = self._backend.now()
            if not is_leader():
                try:
                    await self.run_pass()
                except BackendError as exc:
                    # Keep the due times: the pass is retried with backoff
                    # rather than left to the leader's next poll.
                    failures += 1
                    retry_in = backoff_delay(failures, base=LOCAL_RETRY_BASE, cap=LOCAL_RETRY_CAP)
                    log.warning(
                        "delayed-task pass for group %s failed (%s); retrying in %.2fs",
                        self._group,
                        exc,
                        retry_in,
                    )
                    await trio.sleep(retry_in)
                    continue
            failures = 0
            while self._local and self._local[0] <= now:  # moved by that pass (or the leader)
                heapq.heappop(self._local)

    async def run(self) -> None:
        """Pass, sleep, repeat, until cancelled (at the end of the term)."""
        log.info("delayed-task scheduler running for group %s", self._group)
        while True:
            self._wake = trio.Event()
            next_at: float | None = None
            held = 0
            try:
                _, held = await self.run_pass()
                next_at = await self._backend.next_delayed_at(self._group)
            except BackendError as exc:
                log.warning("delayed-task pass for group %s failed: %s", self._group, exc)
            delay = sleep_time(self._backend.now(), next_at, self._poll_interval, held=held > 0)
            with trio.move_on_after(delay):
                await self._wake.wait()

    async def run_pass(self) -> tuple[int, int]:
        """Move every due member, in batches.

        Returns:
            (moved, held): how many moved, and how many due unique tasks stayed
            because their lock is held.
        """
        started = trio.current_time()
        moved = held = 0
        for _ in range(MAX_BATCHES_PER_PASS):
            # Held members stay at the front of the due range: page past them, so
            # a crowd of them never hides the due members behind.
            due = await self._backend.due_delayed(
                self._group, self._backend.now(), BATCH, offset=held
            )
            if not due:
                break
            tasks = self._tasks()
            got = await self._backend.move_delayed(
                self._group, [build_move(raw, tasks) for raw in due]
            )
            moved += got
            held += len(due) - got
            if len(due) < BATCH:
                break
        self._timings.record_schedule(trio.current_time() - started)
        if moved:
            self.moved += moved
            log.debug("moved %d delayed task(s) to the stream", moved)
        return moved, held
