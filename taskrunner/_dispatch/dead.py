"""Dead letters as an operator sees them, and what replaying one dispatches.

Theory of operation. A dead letter (:class:`~taskrunner.backends.DeadLetter`)
keeps the entry's ``payload`` field as it was read; :func:`dead_letter_info`
decodes what it can of it for a listing (the task, its payload, its task id)
and never raises: a poison entry is listed as it is. :func:`replay_of` is what
replaying it dispatches: the same message with a fresh attempt count (a new
stream entry, whose delivery count starts at 1), the same task id (the
message's ``id``, else the stream id it had, so ``get_task`` and a waiting
``result`` follow it), and, for a unique task, a fresh lock token, the lock
taken again for the message's ``unique_for`` as the replay adds it. A dead
letter whose payload does not decode as a message is replayed byte for byte;
one without a payload cannot be replayed.

Pure but for the fresh token: no I/O, table-tested in tests/test_dead_letters.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs

from taskrunner import _wire
from taskrunner.backends import DeadLetter, Replay, Replayed
from taskrunner.errors import InvalidTaskPayload

__all__ = ["DeadLetterInfo", "ReplayResult", "dead_letter_info", "replay_of", "replay_result"]

DEFAULT_LOCK_TTL = 60.0
"""Lock lifetime for a replayed unique message that carries no ``unique_for``."""


@attrs.frozen(kw_only=True)
class DeadLetterInfo:
    """One dead letter: what failed, why and when (see ``taskrunner.admin.dead_letters``)."""

    id: str
    """Its id in the dead-letter stream (what ``replay`` and ``purge`` take)."""
    task_id: str
    """The task's id: the dead letter's ``task_id``, else the message's ``id``, else
    the stream id it had."""
    task_name: str | None
    """The task it names, when its payload decodes as a message."""
    reason: str
    """Why it failed (the error's type and text)."""
    payload: Any
    """The task's payload (JSON form), when it decodes."""
    raw: bytes | None
    """The entry's ``payload`` field exactly as it was read (``None``: it had none)."""
    dead_at: float
    """When it was dead-lettered, in unix seconds (from its id's time, through the
    backend's :meth:`~taskrunner.backends.SharedState.unix_time`)."""
    message_id: str
    """The stream id it had."""
    group: str
    """The consumer group that dead-lettered it."""
    queue: str | None = None
    """The queue whose dead-letter stream holds it (what ``replay`` and ``purge`` take
    as ``queue=``); ``None`` when not known."""


def _decoded(raw: bytes | None) -> _wire.TaskMessage | None:
    try:
        return _wire.decode_message(raw)
    except (InvalidTaskPayload, RecursionError):
        return None


def _same(t: float) -> float:
    return t


def dead_letter_info(
    dead: DeadLetter, *, queue: str | None = None, unix_time: Callable[[float], float] = _same
) -> DeadLetterInfo:
    """What a listing shows of ``dead``, read from ``queue``'s dead letters (pure,
    never raises); ``unix_time`` turns its id's time (the backend's clock) into
    unix seconds (:meth:`~taskrunner.backends.SharedState.unix_time`)."""
    message = _decoded(dead.payload)
    return DeadLetterInfo(
        id=dead.id,
        task_id=dead.task_id or (message.id if message is not None else "") or dead.message_id,
        task_name=message.task_name if message is not None else None,
        reason=dead.error,
        payload=message.payload if message is not None else None,
        raw=dead.payload,
        dead_at=unix_time(int(dead.id.partition("-")[0]) / 1000),
        message_id=dead.message_id,
        group=dead.group,
        queue=queue,
    )


def replay_of(
    dead: DeadLetter, *, token: str | None = None, lock_prefix: str = _wire.UNIQUE_LOCK_PREFIX
) -> Replay | None:
    """The replay of ``dead``, or ``None`` when it has no payload to dispatch.

    Args:
        dead: The dead letter.
        token: A unique task's new lock token; a random one by default.
    """
    if dead.payload is None:
        return None
    message = _decoded(dead.payload)
    if message is None:  # not ours to rewrite: dispatched again as it was
        return Replay(dead_id=dead.id, task_id=dead.message_id, message=dead.payload)
    task_id = message.id or dead.message_id
    # A fresh attempt count (attempts 0); the task id, first dispatch time, trace and
    # keep_result stay.
    extras = _wire.MessageExtras(
        id=task_id,
        dispatched_at=message.dispatched_at,
        trace=message.trace,
        keep_result=message.keep_result,
    )
    if not (message.unique and message.unique_lock_value):
        fresh = attrs.evolve(message, extras=extras)
        return Replay(dead_id=dead.id, task_id=task_id, message=_wire.encode_message(fresh))
    token = uuid.uuid4().hex if token is None else token
    fresh = attrs.evolve(message, extras=extras, unique_lock_value=token)
    return Replay(
        dead_id=dead.id,
        task_id=task_id,
        message=_wire.encode_message(fresh),
        lock_key=_wire.unique_lock(message.task_name, message.unique_key, lock_prefix),
        lock_token=token,
        lock_ttl=float(message.unique_for) if message.unique_for > 0 else DEFAULT_LOCK_TTL,
    )


@attrs.frozen(kw_only=True)
class ReplayResult:
    """What became of one dead letter asked to be replayed."""

    id: str
    """The dead letter's id."""
    task_id: str | None
    """The replayed task's id (``None`` when the dead letter was not found)."""
    entry_id: str | None
    """The new stream entry, or ``None`` when it was not replayed."""
    reason: str = ""
    """Why not: ``"gone"`` (no such dead letter), ``"locked"`` (its unique task is
    queued or running already), ``"no payload"`` (nothing to dispatch)."""

    @property
    def replayed(self) -> bool:
        return self.entry_id is not None


def replay_result(replay: Replay, done: Replayed) -> ReplayResult:
    """The result of one replay as the backend reported it."""
    return ReplayResult(
        id=done.dead_id,
        task_id=replay.task_id if done.reason != "gone" else None,
        entry_id=done.entry_id,
        reason=done.reason,
    )
