"""A group's dead letters: listing them, every queue's or one's, replaying them (each
in one atomic step: the new entry added and the dead letter deleted together, so a
dead letter is replayed once) and purging them.
"""

from __future__ import annotations

from collections.abc import Sequence

from taskrunner import _keys
from taskrunner._dispatch.dead import (
    DeadLetterInfo,
    ReplayResult,
    dead_letter_info,
    replay_of,
    replay_result,
)
from taskrunner.admin._tasks import queue_names
from taskrunner.backends import Backend, Replay

PAGE = 100
"""Dead letters read (and replayed) per backend call when going through them all."""


async def dead_letters(
    backend: Backend,
    group: str,
    *,
    count: int = 100,
    after: str | None = None,
    queue: str | None = None,
) -> list[DeadLetterInfo]:
    """The oldest ``count`` dead letters of ``group`` (after the id ``after``, to page
    through them): each task, why it failed, its payload, when, and its queue.

    Args:
        queue: One queue's dead letters; by default every queue's (:func:`queues`),
            merged oldest first (ids are unique per queue only: page one queue to
            be exact).

    The dead-letter stream belongs to the stream: with an explicit shared prefix,
    every group reading it sees the same dead letters.

    Raises:
        ValueError: ``queue`` is not a queue name.
        BackendError: the store could not be read.
    """
    found: list[DeadLetterInfo] = []
    for name in await queue_names(backend, group, queue):
        letters = await backend.dead_letters(group, count, after=after, queue=name)
        found += [dead_letter_info(d, queue=name, unix_time=backend.unix_time) for d in letters]
    found.sort(key=lambda d: _id_order(d.id))
    return found[:count]


def _id_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return (int(ms), int(seq)) if ms.isdigit() and seq.isdigit() else (0, 0)


async def dead_letter(
    backend: Backend, group: str, dead_id: str, *, queue: str | None = None
) -> DeadLetterInfo | None:
    """The dead letter ``dead_id`` of ``group``, or ``None``: in ``queue``, by default
    in the first queue (of :func:`queues`) that holds one of that id."""
    for name in await queue_names(backend, group, queue):
        found = await backend.find_dead_letters(group, [dead_id], queue=name)
        if found:
            return dead_letter_info(found[0], queue=name, unix_time=backend.unix_time)
    return None


async def replay_dead_letters(
    backend: Backend, group: str, ids: Sequence[str], *, queue: str | None = None
) -> list[ReplayResult]:
    """Dispatch the dead letters ``ids`` again, one result per id, in order.

    Each is re-dispatched to its own queue with a fresh attempt count (a new stream
    entry) and its task id (so :func:`get_task` and a waiting ``result`` follow it;
    a result it kept is dropped) and deleted from the dead-letter stream, in one
    atomic step: however many replay it at once, it runs again once. A unique task
    takes its lock again with a fresh token; while the lock is held (the task is
    queued or running already) it is not replayed (``"locked"``) and stays a dead
    letter. On a shared stream a replayed entry reaches every group that reads it.

    Args:
        queue: The queue whose dead letters these are; by default each id is looked
            for in every queue (:func:`queues`), the first holding it winning.

    Raises:
        ValueError: ``queue`` is not a queue name.
        BackendError: the backend could not be reached (some of the dead
            letters may have been replayed: a repeat reports them ``"gone"``).
    """
    results: dict[str, ReplayResult] = {}
    left = list(dict.fromkeys(ids))
    lock_prefix = _keys.unique_prefix(group, backend.key_layout)
    for name in await queue_names(backend, group, queue):
        if not left:
            break
        found = {d.id: d for d in await backend.find_dead_letters(group, left, queue=name)}
        replays: list[Replay] = []
        for dead_id in [i for i in left if i in found]:
            dead = found[dead_id]
            replay = replay_of(dead, lock_prefix=lock_prefix)
            if replay is None:
                results[dead_id] = ReplayResult(
                    id=dead_id, task_id=dead.message_id, entry_id=None, reason="no payload"
                )
            else:
                replays.append(replay)
        done = await backend.replay_dead_letters(group, replays, queue=name)
        for replay, outcome in zip(replays, done, strict=True):
            results[replay.dead_id] = replay_result(replay, outcome)
        left = [i for i in left if i not in found]
    for dead_id in left:
        results[dead_id] = ReplayResult(id=dead_id, task_id=None, entry_id=None, reason="gone")
    return [results[dead_id] for dead_id in ids]


async def replay_all_dead_letters(
    backend: Backend, group: str, *, confirm: bool = False, queue: str | None = None
) -> list[ReplayResult]:
    """Replay every dead letter of ``group`` (as :func:`replay_dead_letters`), queue by
    queue (``queue``: that one only), oldest first, :data:`PAGE` at a time.

    Args:
        confirm: Must be ``True``: every dead letter runs again.

    Raises:
        ValueError: ``confirm`` is not ``True``, or ``queue`` is not a queue name.
    """
    if confirm is not True:
        raise ValueError(
            f"replay_all_dead_letters dispatches every dead letter of group {group!r} "
            "again; call it with confirm=True"
        )
    results: list[ReplayResult] = []
    for name in await queue_names(backend, group, queue):
        after: str | None = None
        while page := await backend.dead_letters(group, PAGE, after=after, queue=name):
            after = page[-1].id  # the ones not replayed stay: page past them
            results += await replay_dead_letters(backend, group, [d.id for d in page], queue=name)
    return results


async def purge_dead_letters(
    backend: Backend,
    group: str,
    ids: Sequence[str] | None = None,
    *,
    confirm: bool = False,
    queue: str | None = None,
) -> int:
    """Delete the dead letters ``ids`` of ``group``, or all of them (``None``).

    Args:
        confirm: Must be ``True``: what is deleted is gone.
        queue: The queue whose dead letters to delete; by default every queue's
            (:func:`queues`), each id from the first queue holding it.

    Returns:
        How many were deleted.

    Raises:
        ValueError: ``confirm`` is not ``True``, or ``queue`` is not a queue name.
    """
    if confirm is not True:
        what = "every dead letter" if ids is None else f"{len(ids)} dead letter(s)"
        raise ValueError(
            f"purge_dead_letters deletes {what} of group {group!r}; call it with confirm=True"
        )
    names = await queue_names(backend, group, queue)
    if ids is None:
        return sum([await backend.purge_dead_letters(group, None, queue=name) for name in names])
    deleted, left = 0, list(dict.fromkeys(ids))
    for name in names:
        if not left:
            break
        found = {d.id for d in await backend.find_dead_letters(group, left, queue=name)}
        if found:
            deleted += await backend.purge_dead_letters(group, sorted(found), queue=name)
        left = [i for i in left if i not in found]
    return deleted
