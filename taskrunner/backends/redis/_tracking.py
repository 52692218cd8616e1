"""The :class:`~taskrunner.backends.Tracking` protocol on Redis.

Theory of operation: every step that must be atomic is one Lua script beside
this module, whose header is its specification (a producer on redis-py loads
the same files): ``lua/finish.lua`` acknowledges a batch and records what its
runs leave; ``lua/track.lua`` finds a task by id and, in ``cancel`` mode,
cancels it; ``lua/replay_dead.lua`` and ``lua/purge_dead.lua`` replay and delete
dead letters. Only reads that need no atomicity are plain commands:
``ZMSCORE`` of the stop requests for a runner's running entries, ``XRANGE``
of dead letters by id, and the result wait.

Waiting for a result: ``lua/wait.lua`` reads the result key and, when there is
none yet, registers the task among the group's result waiters (until the end
of this wait's next slice and a margin), in one step; then ``BLMOVE`` of the
task's notice onto itself on a dedicated connection (taken from a small pool,
so waiters do not hold up the shared, pipelined connection). ``finish`` pushes
a notice only for a task registered so: a kept result nobody waits for costs
its one ``SET``. The notice holds a copy of the document: moving the list onto
itself hands it to this waiter and leaves it for every other one, so any
number of processes can wait on one task. A waiter that times out or is
cancelled leaves only its registration, which ends by itself when its time is
over. A long wait blocks in slices of :data:`WAIT_SLICE`, each bounded on the
client side by its reply timeout and each starting with ``lua/wait.lua`` again,
and looks at the result key once more at the end.

``finish`` rides in the ack's pipeline (the claim-delay ring push goes with
it), and its acknowledgements are inside the script, so an ``EVALSHA`` the
server does not know (``NOSCRIPT``) acknowledged nothing and is simply sent
again as ``EVAL``. The common finish, kept results of tasks dispatched without
an ``id`` and no workflow's steps, needs no script on the native client: it is
one ``MULTI``/``EXEC`` block instead, and ``lua/finish.lua`` pushes only the
notices of the tasks that block found waited for (the ordering that keeps every
waiter woken is in :mod:`~taskrunner.backends.redis._kept_results`).

Redis Cluster: like ``move_delayed``, these scripts touch keys of several
hash slots (and ``track.lua`` a unique lock it reads from the entry); they
need a single server.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Any

import trio

from taskrunner import _keys
from taskrunner.backends._protocols.events import EventBatch
from taskrunner.backends._protocols.queue import DeadLetter
from taskrunner.backends._protocols.tracking import (
    CANCEL_TRIES,
    CANCELLED_STATES,
    Cancellation,
    Outcome,
    Replay,
    Replayed,
    TaskSnapshot,
    cancel_arguments,
    is_stream_id,
    lock_to_give,
    track_keys,
)
from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._connection import CommandArg
from taskrunner.backends.redis._detect import DetectingRedisClient
from taskrunner.backends.redis._errors import NoScriptError, ResponseError
from taskrunner.backends.redis._kept_results import (
    Keys,
    plainly_written,
    transaction,
    waited_outcomes,
)
from taskrunner.backends.redis._protocol import DedicatedRedisConnection
from taskrunner.backends.redis._queue import READ_TIMEOUT_MARGIN, RedisQueue, dead_letter_of
from taskrunner.backends.redis._scripts import load_script
from taskrunner.backends.redis._state import RedisState, _ms
from taskrunner.errors import BackendError

__all__ = [
    "FINISH",
    "PURGE_DEAD",
    "REPLAY_DEAD",
    "TRACK",
    "WAIT",
    "RedisTracking",
    "cancellation_of",
]

FINISH = load_script("finish.lua")
"""Acknowledge a batch and record each run's result, index and stop-request changes."""
TRACK = load_script("track.lua")
"""Find a task by id (``lookup``) or cancel it (``cancel``)."""
WAIT = load_script("wait.lua")
"""Read a task's result, or register its waiter when there is none yet, in one step."""
REPLAY_DEAD = load_script("replay_dead.lua")
"""Dispatch dead letters again, each at most once."""
PURGE_DEAD = load_script("purge_dead.lua")
"""Delete some or all dead letters."""

WAIT_SLICE = 30.0
"""Longest single blocking wait for a result notice (a longer wait takes several)."""
WAITER_MARGIN = 10.0
"""Seconds a waiter's registration outlives the slice it was made for: room for the
round trips between registering and blocking, on a loaded client or server."""
IDLE_WAITERS = 4
"""Dedicated connections kept open for result waits between calls."""


def _text(value: bytes | str) -> str:
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def _raw(value: Any) -> bytes | None:
    # Lua false arrives as a nil reply.
    return bytes(value) if isinstance(value, bytes | bytearray) else None


def cancellation_of(reply: Any) -> Cancellation:
    """What ``lua/track.lua``'s cancel reply (other than ``{'lock', key}``) says."""
    state = CANCELLED_STATES.get(bytes(reply[0]))
    if state is None:
        return Cancellation(state=None)
    return Cancellation(state=state, raw=_raw(reply[1]))


class RedisTracking(RedisQueue, RedisState):
    """A :class:`~taskrunner.backends.Tracking` on Redis (see the module docstring)."""

    def _init_tracking(self) -> None:
        self._idle_waiters: list[DedicatedRedisConnection] = []
        self._transaction_keys: dict[tuple[str, str | None, str], Keys] = {}

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
        self, group: str, task_id: str, queues: Sequence[str] | None, lock: str | None = None
    ) -> list[CommandArg]:
        streams = [self.stream_keys(group, queue).stream for queue in queues or (None,)]
        return list(track_keys(streams, group, task_id, self.key_layout, lock))

    # Finishing ------------------------------------------------------------
    async def finish(
        self,
        group: str,
        ids: Sequence[str],
        outcomes: Sequence[Outcome],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> int:
        """Acknowledge ``ids`` and apply ``outcomes``: one ``MULTI``/``EXEC`` block where
        nothing needs a script (:mod:`~taskrunner.backends.redis._kept_results`), else one
        ``lua/finish.lua`` call, in the pipeline that also pushes the claim delays and
        writes ``events`` (one round trip; a second only to push the notices of tasks
        someone waits for)."""
        if self._transactions() and plainly_written(outcomes):
            return await self._finish_in_transaction(group, ids, outcomes, queue, events)
        return await self._finish_by_script(group, ids, outcomes, queue, events)

    async def _finish_by_script(
        self,
        group: str,
        ids: Sequence[str],
        outcomes: Sequence[Outcome],
        queue: str | None,
        events: EventBatch | None = None,
    ) -> int:
        """:meth:`finish` as one ``lua/finish.lua`` call."""
        keys: list[CommandArg] = [
            self.stream_keys(group, queue).stream,
            _keys.entry_index(group, self.key_layout),
            _keys.cancelled(group, self.key_layout),
            _keys.result_waiters(group, self.key_layout),
        ]
        args: list[CommandArg] = [group, "1" if self.delete_on_ack else "0", len(ids), *ids]
        # Once per call, not per outcome: the key heads and the (few) lifetimes.
        result_head = _keys.result(group, "", self.key_layout)
        notify_head = _keys.notify(group, "", self.key_layout)
        lifetimes: dict[float, int] = {}
        for outcome in outcomes:
            task_id, document = outcome.task_id, outcome.document
            keys += [result_head + task_id, notify_head + task_id]
            keep = notify = 0
            if document is not None:
                keep = lifetimes.get(outcome.keep) or lifetimes.setdefault(
                    outcome.keep, _ms(outcome.keep)
                )
                notify = lifetimes.get(outcome.notify) or lifetimes.setdefault(
                    outcome.notify, _ms(outcome.notify)
                )
            args += [
                task_id,
                outcome.entry_id,
                b"" if document is None else document,
                keep,
                notify,
                "1" if outcome.indexed else "0",
                "1" if outcome.cancelled else "0",
            ]
        if outcomes and any(o.workflow is not None for o in outcomes):
            # Steps of workflows: counted in this same script (lua/finish.lua's block).
            more_keys, more_args = self.step_section(group, outcomes, 6 + len(ids), queue)
            keys += more_keys
            args += more_args
        before = [] if events is None else self._progress_commands(group, events)
        commands = [*before, FINISH.evalsha_command(keys, args)]
        if events is not None:  # after the script, in its round trip
            commands += self._event_commands(group, events)
        try:
            acked = (await self._with_ring(group, commands))[len(before)]
        except NoScriptError:
            # The script (acks included) did not run: send it with its source.
            acked = await FINISH(self._client, keys, args)
        return int(acked)

    def _transactions(self) -> bool:
        """Whether the client carries a ``MULTI``/``EXEC`` block in a pipeline: the native
        one (alone or behind Sentinel), which sends a pipeline in one write on one
        connection; not a cluster's, nor redis-py's."""
        client: object = self._client
        if isinstance(client, DetectingRedisClient):
            client = client.chosen
        return isinstance(client, NativeRedisClient)

    async def _finish_in_transaction(
        self,
        group: str,
        ids: Sequence[str],
        outcomes: Sequence[Outcome],
        queue: str | None,
        events: EventBatch | None,
    ) -> int:
        """:meth:`finish` as one transaction, then the notices of the tasks it found
        waited for (see :mod:`~taskrunner.backends.redis._kept_results`)."""
        named = (group, queue, self.key_layout)
        keys = self._transaction_keys.get(named)
        if keys is None:
            keys = self._transaction_keys[named] = Keys(
                group,
                self.stream_keys(group, queue).stream,
                _keys.result(group, "", self.key_layout),
                _keys.cancelled(group, self.key_layout),
                _keys.result_waiters(group, self.key_layout),
            )
        keep_ms: dict[float, int] = {}
        for outcome in outcomes:
            if outcome.keep not in keep_ms:
                keep_ms[outcome.keep] = _ms(outcome.keep)
        block = transaction(keys, ids, outcomes, keep_ms, delete=self.delete_on_ack)
        before = [] if events is None else self._progress_commands(group, events)
        commands = [*before, *block]
        if events is not None:  # after the transaction, in its round trip
            commands += self._event_commands(group, events)
        executed = (await self._with_ring(group, commands))[len(before) + len(block) - 1]
        # The test in C (map, isinstance, any): one reply per command, and seldom an error.
        if any(map(isinstance, executed, repeat(ResponseError))):
            raise next(reply for reply in executed if isinstance(reply, ResponseError))
        acked, waited = waited_outcomes(ids, outcomes, executed)
        if waited:
            await self._finish_by_script(group, [], waited, queue)  # their notices
        return acked

    def step_section(
        self, group: str, outcomes: Sequence[Outcome], first_document: int, queue: str | None
    ) -> tuple[list[CommandArg], list[CommandArg]]:
        """What ``lua/finish.lua``'s workflow block reads for the steps among
        ``outcomes`` (:class:`~taskrunner.backends.redis._workflows.RedisWorkflows`)."""
        return [], []

    # Waiting ----------------------------------------------------------------
    async def wait_result(self, group: str, task_id: str, block: float) -> bytes | None:
        """``GET`` the result; else, registered as its waiter (``lua/wait.lua``),
        ``BLMOVE`` its notice onto itself for up to ``block`` seconds (see the module
        docstring)."""
        key = _keys.result(group, task_id, self.key_layout)
        if block <= 0:
            return _raw(await self._client.execute("GET", key))
        waiters = _keys.result_waiters(group, self.key_layout)
        notice = _keys.notify(group, task_id, self.key_layout)
        deadline = trio.current_time() + block
        connection = self._waiter()
        try:
            while (left := deadline - trio.current_time()) > 0:
                wait = min(left, WAIT_SLICE)
                # Registered before blocking, with the read in the same step: a finish
                # either came first (the document is here) or pushes the notice.
                document = _raw(
                    await WAIT(self._client, [key, waiters], [task_id, _ms(wait + WAITER_MARGIN)])
                )
                if document is not None:
                    return document
                wait = deadline - trio.current_time()
                if wait <= 0:
                    break
                wait = min(wait, WAIT_SLICE)
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
        """One ``lua/track.lua`` call in ``cancel`` mode over every stream of ``queues``;
        two when the task holds a unique lock (the first, which does nothing, names it,
        so the second has every key it touches in ``KEYS``). A workflow's step is
        removed uncounted here; ``RedisWorkflows.cancel`` counts it."""
        return cancellation_of(await self._track_cancel(group, task_id, queues, ()))

    async def _track_cancel(
        self,
        group: str,
        task_id: str,
        queues: Sequence[str] | None,
        flag: Sequence[CommandArg],
    ) -> Any:
        """The reply of ``lua/track.lua`` cancelling ``task_id`` (``flag``: its optional
        ``ARGV[10]``), the task's unique lock named and given when it holds one."""
        args: list[CommandArg] = list(cancel_arguments(group, task_id, self.now(), self.key_layout))
        args += flag
        lock: str | None = None
        for _ in range(CANCEL_TRIES):
            keys = self._track_keys(group, task_id, queues, lock)
            reply = await TRACK(self._client, keys, args)
            lock = lock_to_give(reply)
            if lock is None:
                return reply
        raise BackendError(
            f"cancel of task {task_id!r} gave up: its unique lock changed on every try",
            maybe_applied=False,
        )

    async def cancel_requested(self, group: str, entry_ids: Sequence[str]) -> list[str]:
        """``ZMSCORE`` of the stop requests, for all of ``entry_ids`` at once."""
        if not entry_ids:
            return []
        scores = await self._client.execute(
            "ZMSCORE", _keys.cancelled(group, self.key_layout), *entry_ids
        )
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
            _keys.entry_index(group, self.key_layout),
            *(_keys.result(group, r.task_id, self.key_layout) for r in replays),
            *(_keys.notify(group, r.task_id, self.key_layout) for r in replays),
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
