"""The :class:`Tracking` protocol: results, lookup by task id, cancellation, dead-letter replay.

Theory of operation. A task is known by its *task id*: the stream id of the
entry ``dispatch`` added, or, for a task dispatched with a delay, its delayed
member's id (which the entry it becomes carries in the message's ``id``
field). Where the task is now follows from the store alone, read in one
atomic step (:meth:`Tracking.lookup`):

- a kept result document (``taskrunner:<group>:result:<task id>``): done;
- else a member of the delayed set, found through the id index
  (``taskrunner:<group>:delayed_ids``, written with the member): scheduled;
- else its stream entry (the task id itself, or the entry the id index
  ``taskrunner:<group>:entry_ids`` maps it to once moved from the delayed set):
  pending in the group (delivered, not acked) is running; not delivered yet is
  queued; delivered and acked (kept in the stream when not deleting on ack) is
  done without a result, which reads as unknown.

Cancelling (:meth:`Tracking.cancel`) acts on the same places in one atomic
step: a scheduled member is removed from the delayed set; a queued entry is
deleted from the stream, so no fetcher can read it after (a read that came
first delivered it, and it is running); a running entry is only asked to stop:
its id goes into ``taskrunner:<group>:cancelled``, which every serving runner
reads for the entries it runs about once a second (:meth:`Tracking.cancel_requested`,
one round trip for all of them) and cancels that run. Removing a queued or
scheduled task also releases its unique lock and, when the task keeps results
(the message's or member's ``keep_result``), records it as cancelled.

A finished run is acknowledged together with what it leaves
(:meth:`Tracking.finish`): its result document and notice when the task keeps
results, the end of its entry-index mapping, the end of its stop request. A
task that keeps no results, was not moved and was not cancelled leaves nothing,
and its runner acknowledges it with :meth:`MessageQueue.ack
<taskrunner.backends.MessageQueue.ack>` as before.

Waiting for a result (:meth:`Tracking.wait_result`) reads the document and,
when there is none yet, registers the task among the group's result waiters
(``taskrunner:<group>:result_waiters``, each registration ending by itself), in
one atomic step; then it blocks on the task's notice
(``taskrunner:<group>:notify:<task id>``, a list holding a copy of the document
for :data:`~taskrunner._wire.NOTIFY_TTL`): ``BLMOVE`` of the list onto itself,
which leaves the notice in place for every other waiter. A finish writes the
notice only for a task that is registered so; a kept result nobody waits for is
its document alone. Reading and registering in one step is what keeps a waiter
from missing a result: a finish either came first, and the waiter read the
document, or it sees the registration.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from taskrunner import _keys, _wire
from taskrunner._keys import KeyLayout
from taskrunner._wire import TaskState
from taskrunner.backends._protocols.events import EventBatch

if TYPE_CHECKING:
    from taskrunner.backends._protocols.queue import DeadLetter

__all__ = [
    "CANCEL_TRIES",
    "STOP_REQUEST_LIFETIME",
    "Cancellation",
    "Outcome",
    "Replay",
    "Replayed",
    "TaskSnapshot",
    "Tracking",
    "cancel_arguments",
    "is_stream_id",
    "lock_to_give",
    "track_keys",
]

STOP_REQUEST_LIFETIME = 24 * 3600.0
"""Seconds a stop request (a cancelled running task) is remembered: long past any
reclaim of an entry whose runner died, short enough that requests for runs that
finished before they saw theirs do not pile up."""

_STREAM_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


def is_stream_id(text: str) -> bool:
    """Whether ``text`` has the shape of a stream id (``<ms>-<seq>``): a task id of
    that shape names its own entry."""
    return _STREAM_ID.fullmatch(text) is not None


def track_keys(
    streams: str | Sequence[str],
    group: str,
    task_id: str,
    layout: KeyLayout,
    lock: str | None = None,
) -> list[str]:
    """The ``KEYS`` of ``lua/track.lua`` for task ``task_id`` of ``group`` on ``streams``
    (one stream, or the streams of several queues, looked in in that order): with
    ``lock``, the unique lock a cancel expects the task to hold, as ``KEYS[9]`` (else
    its result key stands there: a key of the group's slot, never touched)."""
    first, *more = [streams] if isinstance(streams, str) else streams
    result = _keys.result(group, task_id, layout)
    return [
        result,
        _keys.delayed_tasks(group, layout),
        _keys.delayed_index(group, layout),
        _keys.entry_index(group, layout),
        first,
        _keys.cancelled(group, layout),
        _keys.notify(group, task_id, layout),
        _keys.catalog(group, layout),
        result if lock is None else lock,
        *more,
    ]


def cancel_arguments(group: str, task_id: str, now: float, layout: KeyLayout) -> list[str | bytes]:
    """The ``ARGV`` of ``lua/track.lua`` cancelling ``task_id`` at ``now`` (unix seconds
    on Redis): what :meth:`Tracking.cancel` sends, and what a producer sends too."""
    return [
        task_id,
        group,
        "1" if is_stream_id(task_id) else "0",
        "cancel",
        repr(now),
        repr(STOP_REQUEST_LIFETIME),
        _wire.cancelled_head(now),
        repr(_wire.NOTIFY_TTL),
        _keys.unique_prefix(group, layout),
    ]


CANCEL_TRIES = 3
"""Cancel calls of ``lua/track.lua`` before giving up on a task whose unique lock keeps
changing between them (each call but the last is told the lock the one before named)."""


def lock_to_give(reply: object) -> str | None:
    """The unique lock a cancel reply of ``lua/track.lua`` asks to be given as
    ``KEYS[9]`` (``{'lock', key}``: nothing was done), or ``None`` for any other reply."""
    if isinstance(reply, list) and len(reply) == 2 and reply[0] in (b"lock", "lock"):
        key = reply[1]
        return key.decode() if isinstance(key, bytes) else str(key)
    return None


CANCELLED_STATES = {
    b"scheduled": TaskState.SCHEDULED,
    b"queued": TaskState.QUEUED,
    b"running": TaskState.RUNNING,
}
"""What ``lua/track.lua``'s cancel reply (its first element) says was cancelled."""


@attrs.frozen(kw_only=True)
class Outcome:
    """What one finished run leaves beside its ack (see :meth:`Tracking.finish`)."""

    entry_id: str
    """The stream entry acknowledged (one of the ids given with it)."""
    task_id: str
    """The task's id (the entry's, or the message's ``id``)."""
    document: bytes | None = None
    """The result document to keep, or ``None``."""
    keep: float = 0.0
    """Seconds to keep :attr:`document` (> 0 when there is one)."""
    notify: float = 0.0
    """Seconds its notice lives (> 0 when there is a document)."""
    indexed: bool = False
    """The entry index may map :attr:`task_id` to :attr:`entry_id` (the message had an
    ``id``): that mapping ends."""
    cancelled: bool = False
    """The entry was asked to stop: its stop request ends."""
    workflow: str | None = None
    """The workflow the run is a step of: its finish is counted there, keyed by
    :attr:`step`, in the same atomic step (see :class:`~taskrunner.backends.WorkflowStore`).
    ``None`` for every other run: nothing of workflows is touched."""
    step: str = ""
    """The step's id (with :attr:`workflow`)."""
    step_state: str = ""
    """How the step ended (with :attr:`workflow`): ``succeeded``, ``failed`` or
    ``cancelled``."""


@attrs.frozen(kw_only=True)
class TaskSnapshot:
    """Where a task was found, read in one atomic step (see :meth:`Tracking.lookup`).

    Exactly one of :attr:`result`, :attr:`member` and :attr:`entry_id` is set.
    """

    task_id: str
    result: bytes | None = None
    """Its kept result document: the task is done."""
    member: bytes | None = None
    """Its member of the delayed set: the task is scheduled."""
    run_at: float | None = None
    """The member's score (when it is due)."""
    entry_id: str | None = None
    """Its stream entry: queued or running."""
    payload: bytes | None = None
    """The entry's ``payload`` field (``None`` if it has none)."""
    pending: bool = False
    """Delivered to a consumer of the group and not acknowledged: running."""
    delivery_count: int = 0
    """Deliveries so far (pending only)."""
    consumer: str | None = None
    """The consumer that holds it (pending only)."""
    stopping: bool = False
    """Asked to stop (cancelled while running), and not finished yet."""


@attrs.frozen(kw_only=True)
class Cancellation:
    """What :meth:`Tracking.cancel` did."""

    state: TaskState | None
    """The state the task was cancelled in: ``QUEUED`` (its entry was deleted),
    ``SCHEDULED`` (its member was removed) or ``RUNNING`` (its run was asked to
    stop); ``None`` when there was nothing to cancel (done, or unknown)."""
    raw: bytes | None = None
    """The entry's ``payload`` field or the member, when the task was found."""


@attrs.frozen(kw_only=True)
class Replay:
    """One dead letter to dispatch again (see :meth:`Tracking.replay_dead_letters`)."""

    dead_id: str
    """Its id in the dead-letter stream."""
    task_id: str
    """The task id the new entry keeps (mapped to it in the entry index)."""
    message: bytes
    """The ``payload`` field of the entry to add."""
    lock_key: str | None = None
    """For a unique task: the lock to take first; not replayed while it is held."""
    lock_token: str = ""
    lock_ttl: float = 0.0


@attrs.frozen(kw_only=True)
class Replayed:
    """What became of one :class:`Replay`."""

    dead_id: str
    entry_id: str | None
    """The new stream entry, or ``None`` when it was not replayed."""
    reason: str = ""
    """Why not: ``"gone"`` (no such dead letter any more) or ``"locked"`` (its unique
    lock is held)."""


@runtime_checkable
class Tracking(Protocol):
    """Results, lookup by task id, cancellation and dead-letter replay (see the module
    docstring for where each lives).

    Conventions as for every backend protocol (seconds in the backend's clock,
    :class:`~taskrunner.errors.BackendError` for failures, safe to repeat).
    """

    async def finish(
        self,
        group: str,
        ids: Sequence[str],
        outcomes: Sequence[Outcome],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> int:
        """Acknowledge ``ids`` (of ``queue``'s stream) as :meth:`MessageQueue.ack
        <taskrunner.backends.MessageQueue.ack>` does, and apply each outcome, in one
        atomic step (one round trip): keep its document for ``keep`` seconds and,
        when someone waits for its task (see :meth:`wait_result`), push its notice
        for ``notify`` seconds (waking every waiter); end the entry-index mapping of its
        task if it still names its entry; end its stop request. Outcomes are
        applied before the acks, whether or not their entry was still pending.
        ``events`` are written to the group's event stream in the same round trip,
        after the step. (A backend may push the notices in a second step right after,
        for the tasks the first found waited for: a waiter registered before the first
        step is woken by it, and one after reads the document.)

        Returns:
            How many of ``ids`` were pending and are now acknowledged.

        Cancellation: all of it may have been applied; a repeat acknowledges
        nothing more and writes the same documents again.
        """
        ...

    async def wait_result(self, group: str, task_id: str, block: float) -> bytes | None:
        """The task's kept result document, waiting up to ``block`` seconds for one
        (``0``: do not wait, and register nothing).

        Before each blocking wait the result is read and the waiter registered in one
        atomic step, so a result kept at any time during the wait is returned.

        Returns:
            The document, or ``None`` if none was kept within ``block``.

        Cancellation: only the registration is left behind, which ends by itself
        shortly after the wait would have (a finish of the task meanwhile pushes its
        notice, as for any waiter).
        """
        ...

    async def lookup(
        self, group: str, task_id: str, *, queues: Sequence[str] | None = None
    ) -> TaskSnapshot | None:
        """Where the task is now, read in one atomic step (see the module docstring).

        Args:
            queues: The queues whose streams may hold its entry, looked in in this
                order, the first holding it queued or running winning (stream ids
                are unique per stream only); ``None``: the backend's own queue.

        Returns:
            ``None`` for a task not found: never dispatched, done without a kept
            result, its result expired, or a delayed member written without the
            id index (by the Go library).
        """
        ...

    async def cancel(
        self, group: str, task_id: str, *, queues: Sequence[str] | None = None
    ) -> Cancellation:
        """Cancel the task, in one atomic step, in whichever state it is, its entry
        looked for on the streams of ``queues`` as :meth:`lookup` does:

        - scheduled: remove its member from the delayed set (and the id index);
        - queued: delete its entry from the stream (no consumer of any group
          reads it after), and end its entry-index mapping;
        - running (pending): add its entry to the group's stop requests, which
          :meth:`cancel_requested` reports (a request older than a day is
          forgotten).

        A removed task's unique lock is released (compare-and-delete with the
        token its message or member carries) and, if it has a ``keep_result``,
        it is recorded as cancelled for that long (document and notice).

        Returns:
            What was done; ``state`` is ``None`` for a task that is done or unknown.

        Cancellation: the task may have been cancelled; a repeat returns
        ``None`` for a removed task, ``RUNNING`` again for a running one.
        """
        ...

    async def cancel_requested(self, group: str, entry_ids: Sequence[str]) -> list[str]:
        """Which of ``entry_ids`` were asked to stop (and not finished since), in order:
        one round trip for all of them."""
        ...

    async def find_dead_letters(
        self, group: str, ids: Sequence[str], *, queue: str | None = None
    ) -> list[DeadLetter]:
        """The dead letters with these ids in ``queue``'s dead-letter stream (``None``:
        the backend's own queue), in the order given; ids not found are left out."""
        ...

    async def replay_dead_letters(
        self, group: str, replays: Sequence[Replay], *, queue: str | None = None
    ) -> list[Replayed]:
        """Dispatch dead letters of ``queue`` (``None``: the backend's own) again, each
        in one atomic step: if the dead letter is still there in that queue's
        dead-letter stream (and its lock, if any, can be taken), add its message to
        that queue's stream, map its task id to the new entry, drop the task's kept
        result (it runs again) and delete the dead letter. So a dead letter is
        replayed once, however many replay it at the same time.

        Returns:
            One :class:`Replayed` per replay, in order.

        Cancellation: some prefix of the replays may have been applied; a
        repeat reports those ``"gone"``.
        """
        ...

    async def purge_dead_letters(
        self, group: str, ids: Sequence[str] | None = None, *, queue: str | None = None
    ) -> int:
        """Delete the dead letters of ``queue`` (``None``: the backend's own queue) with
        these ids, or all of them (``ids=None``).

        Returns:
            How many were deleted.
        """
        ...
