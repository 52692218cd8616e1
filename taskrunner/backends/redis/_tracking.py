"""The :class:`~taskrunner.backends.Tracking` protocol on Redis.

Theory of operation: every step that must be atomic is one Lua script beside
this module, whose header is its specification (a producer on redis-py loads
the same files): ``lua/finish.lua`` acknowledges a batch and records what its
runs leave; ``lua/track.lua`` finds a task by id and, in ``cancel`` mode,
cancels it; ``lua/replay_dead.lua`` and ``lua/purge_dead.lua`` replay and delete
dead letters. Only reads that need no atomicity are plain commands:
``ZMSCORE`` of the stop requests for a runner's running entries, ``XRANGE``
of dead letters by id, and the result wait.

Waiting for a result: ``GET`` of the result key, then ``BLMOVE`` of the
task's notice onto itself on a dedicated connection (taken from a small pool,
so waiters do not hold up the shared, pipelined connection). The notice holds
a copy of the document: moving the list onto itself hands it to this waiter
and leaves it for every other one, so any number of processes can wait on one
task, and a waiter that times out or is cancelled has written nothing. A long
wait blocks in slices of :data:`WAIT_SLICE`, each bounded on the client side
by its reply timeout, and looks at the result key once more at the end.

``finish`` rides in the ack's pipeline (the claim-delay ring push goes with
it), and its acknowledgements are inside the script, so an ``EVALSHA`` the
server does not know (``NOSCRIPT``) acknowledged nothing and is simply sent
again as ``EVAL``.

Redis Cluster: like ``move_delayed``, these scripts touch keys of several
hash slots (and ``track.lua`` a unique lock it reads from the entry); they
need a single server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from taskrunner import _keys
from taskrunner.backends._protocols.queue import DeadLetter
from taskrunner.backends._protocols.tracking import (
    CANCELLED_STATES,
    Cancellation,
    Outcome,
    Replay,
    Replayed,
    TaskSnapshot,
    cancel_arguments,
    is_stream_id,
    track_keys,
)
from taskrunner.backends.redis._connection import CommandArg
from taskrunner.backends.redis._errors import NoScriptError, ResponseError
from taskrunner.backends.redis._protocol import DedicatedRedisConnection
from taskrunner.backends.redis._queue import READ_TIMEOUT_MARGIN, RedisQueue, dead_letter_of
from taskrunner.backends.redis._scripts import load_script
from taskrunner.backends.redis._state import RedisState, _ms

__all__ = ["FINISH", "PURGE_DEAD", "REPLAY_DEAD", "TRACK", "RedisTracking"]

FINISH = load_script("finish.lua")
"""Acknowledge a batch and record each run's result, index and stop-request changes."""
TRACK = load_script("track.lua")
"""Find a task by id (``lookup``) or cancel it (``cancel``)."""
REPLAY_DEAD = load_script("replay_dead.lua")
"""Dispatch dead letters again, each at most once."""
PURGE_DEAD = load_script("purge_dead.lua")
"""Delete some or all dead letters."""

WAIT_SLICE = 30.0
"""Longest single blocking wait for a result notice (a longer wait takes several)."""
IDLE_WAITERS = 4
"""Dedicated connections kept open for result waits between calls."""


def _text(value: bytes | str) -> str:
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def _raw(value: Any) -> bytes | None:
    # Lua false arrives as a nil reply.
    return bytes(value) if isinstance(value, bytes | bytearray) else None


class RedisTracking(RedisQueue, RedisState):
    """A :class:`~taskrunner.backends.Tracking` on Redis (see the module docstring)."""

    def _init_tracking(self) -> None:
        self._idle_waiters: list[DedicatedRedisConnection] = []

    def _waiter(self) -> DedicatedRedisConnection:
        return self._idle_waiters.pop() if self._idle_waiters else self._client.dedicated()

    async def _done_waiting(self, connection: DedicatedRedisConnection) -> None:
        if len(self._idle_waiters) < IDLE_WAITERS:
            self._idle_waiters.append(connection)
        else:
            with trio.CancelScope(shield=True):
                await connection.aclose()

    async def _close_waiters(self) -> None:
        idle, self._idle_waiters = self._idle_waiters, []
        for connection in idle:
            await connection.aclose()

    def _track_keys(
        self, group: str, task_id: str, queues: Sequence[str] | None
    ) -> list[CommandArg]:
        streams = [self.stream_keys(group, queue).stream for queue in queues or (None,)]
        return list(track_keys(streams, group, task_id))

    # Finishing ------------------------------------------------------------
    async def finish(
        self,
        group: str,
        ids: Sequence[str],
        outcomes: Sequence[Outcome],
        *,
        queue: str | None = None,
    ) -> int:
        """Acknowledge ``ids`` and apply ``outcomes``: one ``lua/finish.lua`` call, in
        the pipeline that also pushes the claim delays (one round trip)."""
        keys: list[CommandArg] = [
            self.stream_keys(group, queue).stream,
            _keys.entry_index(group),
            _keys.cancelled(group),
        ]
        args: list[CommandArg] = [group, "1" if self.delete_on_ack else "0", len(ids), *ids]
        for outcome in outcomes:
            keys += [_keys.result(group, outcome.task_id), _keys.notify(group, outcome.task_id)]
            document = outcome.document
            args += [
                outcome.task_id,
                outcome.entry_id,
                b"" if document is None else document,
                _ms(outcome.keep) if document is not None else 0,
                _ms(outcome.notify) if document is not None else 0,
                "1" if outcome.indexed else "0",
                "1" if outcome.cancelled else "0",
            ]
        try:
            (acked,) = await self._with_ring(group, [FINISH.evalsha_command(keys, args)])
        except NoScriptError:
            # The script (acks included) did not run: send it with its source.
            acked = await FINISH(self._client, keys, args)
        return int(acked)

    # Waiting ----------------------------------------------------------------
    async def wait_result(self, group: str, task_id: str, block: float) -> bytes | None:
        """``GET`` the result; else ``BLMOVE`` its notice onto itself for up to
        ``block`` seconds (see the module docstring)."""
        key = _keys.result(group, task_id)
        document = _raw(await self._client.execute("GET", key))
        if document is not None or block <= 0:
            return document
        notice = _keys.notify(group, task_id)
        deadline = trio.current_time() + block
        connection = self._waiter()
        try:
            while (left := deadline - trio.current_time()) > 0:
                wait = min(left, WAIT_SLICE)
                reply = await connection.execute(
                    "BLMOVE", notice, notice, "RIGHT", "LEFT", f"{max(wait, 0.001):.3f}",
                    reply_timeout=wait + READ_TIMEOUT_MARGIN,
                )  # fmt: skip
                if reply is not None:
                    return bytes(reply)
        finally:
            await self._done_waiting(connection)
        # One last look: a notice can expire (or be overwritten) before a slow waiter blocks.
        return _raw(await self._client.execute("GET", key))

    # Lookup and cancel ------------------------------------------------------
    async def lookup(
        self, group: str, task_id: str, *, queues: Sequence[str] | None = None
    ) -> TaskSnapshot | None:
        """One ``lua/track.lua`` call in ``lookup`` mode, over every stream of ``queues``."""
        args = [task_id, group, "1" if is_stream_id(task_id) else "0", "lookup"]
        reply = await TRACK(self._client, self._track_keys(group, task_id, queues), args)
        if not reply:
            return None
        kind = bytes(reply[0])
        if kind == b"result":
            return TaskSnapshot(task_id=task_id, result=bytes(reply[1]))
        if kind == b"delayed":
            return TaskSnapshot(task_id=task_id, member=bytes(reply[1]), run_at=float(reply[2]))
        _, entry_id, payload, pending, count, consumer, stopping = reply
        return TaskSnapshot(
            task_id=task_id,
            entry_id=_text(entry_id),
            payload=_raw(payload),
            pending=int(pending) == 1,
            delivery_count=int(count),
            consumer=_text(consumer) if consumer is not None else None,
            stopping=int(stopping) == 1,
        )

    async def cancel(
        self, group: str, task_id: str, *, queues: Sequence[str] | None = None
    ) -> Cancellation:
        """One ``lua/track.lua`` call in ``cancel`` mode, over every stream of ``queues``."""
        args: list[CommandArg] = list(cancel_arguments(group, task_id, self.now()))
        reply = await TRACK(self._client, self._track_keys(group, task_id, queues), args)
        state = CANCELLED_STATES.get(bytes(reply[0]))
        if state is None:
            return Cancellation(state=None)
        return Cancellation(state=state, raw=_raw(reply[1]))

    async def cancel_requested(self, group: str, entry_ids: Sequence[str]) -> list[str]:
        """``ZMSCORE`` of the stop requests, for all of ``entry_ids`` at once."""
        if not entry_ids:
            return []
        scores = await self._client.execute("ZMSCORE", _keys.cancelled(group), *entry_ids)
        return [entry_id for entry_id, score in zip(entry_ids, scores, strict=True) if score]

    # Dead letters -----------------------------------------------------------
    async def find_dead_letters(
        self, group: str, ids: Sequence[str], *, queue: str | None = None
    ) -> list[DeadLetter]:
        """One ``XRANGE id id`` per id, pipelined; an id that is not one is not found."""
        wanted = [i for i in ids if is_stream_id(i)]
        if not wanted:
            return []
        dead = self.stream_keys(group, queue).dead_letter
        replies = await self._client.pipeline(
            [("XRANGE", dead, i, i) for i in wanted], raise_on_error=False
        )
        found = []
        for reply in replies:
            if isinstance(reply, ResponseError):
                continue  # an id Redis refuses (out of range): no such dead letter
            found += [dead_letter_of(raw_id, flat) for raw_id, flat in reply]
        return found

    async def replay_dead_letters(
        self, group: str, replays: Sequence[Replay], *, queue: str | None = None
    ) -> list[Replayed]:
        """One ``lua/replay_dead.lua`` call for the batch."""
        if not replays:
            return []
        keys: list[CommandArg] = [
            self.stream_keys(group, queue).dead_letter,
            self.stream_keys(group, queue).stream,
            _keys.entry_index(group),
            *(_keys.result(group, r.task_id) for r in replays),
            *(_keys.notify(group, r.task_id) for r in replays),
        ]
        args: list[CommandArg] = []
        for replay in replays:
            if replay.lock_key is None:
                lock_index = 0
            else:
                keys.append(replay.lock_key)
                lock_index = len(keys)
            args += [
                replay.dead_id,
                replay.task_id,
                replay.message,
                lock_index,
                replay.lock_token,
                _ms(replay.lock_ttl),
            ]
        reply = await REPLAY_DEAD(self._client, keys, args)
        done = []
        for replay, value in zip(replays, reply, strict=True):
            text = _text(value)
            if text in ("gone", "locked"):
                done.append(Replayed(dead_id=replay.dead_id, entry_id=None, reason=text))
            else:
                done.append(Replayed(dead_id=replay.dead_id, entry_id=text))
        return done

    async def purge_dead_letters(
        self, group: str, ids: Sequence[str] | None = None, *, queue: str | None = None
    ) -> int:
        """One ``lua/purge_dead.lua`` call."""
        if ids is not None:
            ids = [i for i in ids if is_stream_id(i)]
            if not ids:
                return 0
        dead = self.stream_keys(group, queue).dead_letter
        reply = await PURGE_DEAD(self._client, [dead], ids or [])
        return int(reply)
