"""The :class:`~taskrunner.backends.Tracking` protocol over the in-memory stream and state.

Theory of operation: the same places as on Redis (see
:mod:`taskrunner.backends._protocols.tracking`), under the same names: kept results and
their notices are strings and one-element lists with an expiry (vanishing
lazily when looked at, as everything in memory does, and swept whenever their
count doubles, so results nobody looks up do not pile up), the id indexes are
dicts per group beside the delayed set (:class:`~._memory_state.MemoryState`
keeps them, since adding and moving a member writes them), and the stop
requests a dict of stream id -> time per group. A waiter registers as on Redis
(until its wait ends, and a margin), and a finish writes a task's notice only
while someone is registered for it. Every operation is one
checkpoint followed by no other, so each is atomic like its Lua script; a
waiter parks on a per-task :class:`trio.lowlevel.ParkingLot` that recording
the task's result unparks. What a removed entry or member leaves to undo (its
lock, its cancelled record) is read with :func:`taskrunner._wire.removal_of`,
the rule the Redis script follows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import trio

from taskrunner import _keys, _wire
from taskrunner._wire import TaskState
from taskrunner.backends._protocols.queue import DeadLetter
from taskrunner.backends._protocols.tracking import (
    STOP_REQUEST_LIFETIME,
    Cancellation,
    Outcome,
    Replay,
    Replayed,
    TaskSnapshot,
    is_stream_id,
)
from taskrunner.backends.memory._queue import MemoryStream, _Stream
from taskrunner.backends.memory._state import MemoryState, check_text

WAITER_MARGIN = 10.0
"""Seconds a waiter's registration outlives its wait (as on Redis)."""

SWEEP_FLOOR = 4096
"""Kept entries below which expired ones are left to vanish when looked at."""


class MemoryTracking(MemoryStream, MemoryState):
    """A :class:`~taskrunner.backends.Tracking` of the in-memory stream and state."""

    def _init_tracking(self) -> None:
        self._results: dict[str, tuple[bytes, float]] = {}  # result key -> (doc, expires)
        self._notices: dict[str, tuple[bytes, float]] = {}  # notify key -> (doc, expires)
        self._result_lots: dict[str, trio.lowlevel.ParkingLot] = {}
        self._heads: dict[str, tuple[_keys.KeyLayout, str, str]] = {}  # group -> its key heads
        self._waiting: dict[str, float] = {}  # result key -> until when someone waits
        self._stop_requests: dict[str, dict[str, float]] = {}  # group -> entry id -> time
        # The queue of the queued entry _find found last: cancel reads it right after,
        # with no checkpoint between, to delete the entry from that stream.
        self._found_on: str | None = None
        self._sweep_at = SWEEP_FLOOR  # kept entries (all kinds) at which to sweep

    def _sweep_if_grown(self) -> None:
        """Drop expired results, notices and waits once their count doubled since
        the last sweep: amortized O(1) per kept result, and a runner whose results
        nobody looks up holds at most about twice the live ones (Redis expires keys
        by itself; here nothing else would)."""
        count = len(self._results) + len(self._notices) + len(self._waiting)
        if count < self._sweep_at:
            return
        now = trio.current_time()
        for store in (self._results, self._notices):
            for key in [k for k, (_, expires) in store.items() if expires <= now]:
                del store[key]
        for key in [k for k, until in self._waiting.items() if until < now]:
            del self._waiting[key]
        count = len(self._results) + len(self._notices) + len(self._waiting)
        self._sweep_at = max(SWEEP_FLOOR, 2 * count)

    # Expiring values ------------------------------------------------------
    @staticmethod
    def _live(store: dict[str, tuple[bytes, float]], key: str) -> bytes | None:
        item = store.get(key)
        if item is None:
            return None
        if item[1] <= trio.current_time():
            del store[key]
            return None
        return item[0]

    def _keep(
        self,
        group: str,
        task_id: str,
        document: bytes,
        keep: float,
        notify: float,
        *,
        waited_only: bool = False,
    ) -> None:
        """Keep ``document``, and its notice (``waited_only``: only while someone is
        registered as waiting for the task, as ``lua/finish.lua`` does)."""
        now = trio.current_time()
        layout = self.key_layout
        heads = self._heads.get(group)
        if heads is None or heads[0] != layout:
            # The keys' heads, named once per group (a finish keeps every result of a
            # batch): what _keys.result and _keys.notify of ``task_id`` would give.
            heads = self._heads[group] = (
                layout,
                _keys.result(group, "", layout),
                _keys.notify(group, "", layout),
            )
        key = heads[1] + task_id
        self._results[key] = (document, now + keep)
        if len(self._results) >= self._sweep_at:
            self._sweep_if_grown()
        until = self._waiting.pop(key, None) if self._waiting else None
        if not waited_only or (until is not None and until >= now):
            self._notices[heads[2] + task_id] = (document, now + notify)
        if self._result_lots:
            lot = self._result_lots.pop(key, None)
            if lot is not None:
                lot.unpark_all()

    def result_keys(self, group: str) -> list[str]:
        """Live result keys of ``group`` (for inspection and tests)."""
        head = _keys.result(group, "", self.key_layout)
        return [k for k in list(self._results) if k.startswith(head) and self._live_result(k)]

    def notify_keys(self, group: str) -> list[str]:
        """Live result-notice keys of ``group`` (for inspection and tests)."""
        head = _keys.notify(group, "", self.key_layout)
        return [k for k in list(self._notices) if k.startswith(head) and self._live_notice(k)]

    def _live_result(self, key: str) -> bool:
        return self._live(self._results, key) is not None

    def _live_notice(self, key: str) -> bool:
        return self._live(self._notices, key) is not None

    # Finishing ------------------------------------------------------------
    async def finish(
        self,
        group: str,
        ids: Sequence[str],
        outcomes: Sequence[Outcome],
        *,
        queue: str | None = None,
    ) -> int:
        await trio.lowlevel.checkpoint()
        check_text("finish", "id", *ids)
        check_text("finish", "task_id", *(o.task_id for o in outcomes))
        index = self._entry_index.get(group, {})
        stops = self._stop_requests.get(group, {})
        for outcome in outcomes:  # no checkpoint from here on: one atomic step
            if outcome.document is not None:
                self._keep(
                    group,
                    outcome.task_id,
                    outcome.document,
                    outcome.keep,
                    outcome.notify,
                    waited_only=True,
                )
            if outcome.indexed and index.get(outcome.task_id) == outcome.entry_id:
                del index[outcome.task_id]
            if outcome.cancelled:
                stops.pop(outcome.entry_id, None)
            if outcome.workflow is not None:  # a step of a workflow: counted here
                self._step_finished(group, outcome)
        return self._ack_now(group, ids, queue)

    def _step_finished(self, group: str, outcome: Outcome) -> None:
        """Count a workflow step's finish (:class:`~._workflows.MemoryWorkflows`)."""

    def _step_removed(self, group: str, raw: bytes | None) -> None:
        """Count a queued or delayed workflow step removed by a cancel as cancelled
        (:class:`~._workflows.MemoryWorkflows`)."""

    def _ack_now(self, group: str, ids: Sequence[str], queue: str | None = None) -> int:
        """:meth:`MemoryStream.ack` without its checkpoint."""
        s = self._stream(group, queue)
        g = s.groups.get(group)
        acked = 0
        for entry_id in ids:
            if g is not None and g.pending.pop(entry_id, None) is not None:
                acked += 1
            if self.delete_on_ack:
                self._delete_entry(s, entry_id)
        return acked

    @staticmethod
    def _delete_entry(s: _Stream, entry_id: str) -> None:
        seq = s.seq_of.pop(entry_id, None)
        if seq is not None:
            del s.entries[seq]

    # Waiting ----------------------------------------------------------------
    async def wait_result(self, group: str, task_id: str, block: float) -> bytes | None:
        await trio.lowlevel.checkpoint()
        key, notice = (
            _keys.result(group, task_id, self.key_layout),
            _keys.notify(group, task_id, self.key_layout),
        )
        with trio.move_on_after(block):
            while True:
                # As on Redis: the result, else (while it lives) the notice's copy.
                document = self._live(self._results, key)
                if document is None and block > 0:
                    document = self._live(self._notices, notice)
                if document is not None:
                    return document
                if block <= 0:
                    return None
                # Registered with the read, no checkpoint between: as lua/wait.lua.
                now = trio.current_time()
                if len(self._waiting) > 1000:  # drop the ended ones, as lua/wait.lua does
                    self._waiting = {k: t for k, t in self._waiting.items() if t >= now}
                until = now + block + WAITER_MARGIN
                self._waiting[key] = max(until, self._waiting.get(key, until))
                if len(self._waiting) >= self._sweep_at:
                    self._sweep_if_grown()
                lot = self._result_lots.setdefault(key, trio.lowlevel.ParkingLot())
                await lot.park()
        return None

    # Lookup -----------------------------------------------------------------
    def _entry_of(self, group: str, task_id: str) -> str | None:
        entry_id = self._entry_index.get(group, {}).get(task_id)
        if entry_id is not None:
            return entry_id
        return task_id if is_stream_id(task_id) else None

    def _find(
        self, group: str, task_id: str, queues: Sequence[str] | None = None
    ) -> TaskSnapshot | None:
        result = self._live(self._results, _keys.result(group, task_id, self.key_layout))
        if result is not None:
            return TaskSnapshot(task_id=task_id, result=result)
        member = self._delayed_index.get(group, {}).get(task_id)
        if member is not None:
            score = self._delayed.get(group, {}).get(member)
            if score is not None:
                return TaskSnapshot(task_id=task_id, member=member, run_at=score)
        entry_id = self._entry_of(group, task_id)
        if entry_id is None:
            return None
        queue: str | None
        for queue in queues or (None,):
            s = self._streams.get(self.stream_keys(group, queue).stream)
            if s is None:
                continue
            seq = s.seq_of.get(entry_id)
            g = s.groups.get(group)
            pending = g.pending.get(entry_id) if g is not None else None
            if pending is not None:
                return TaskSnapshot(
                    task_id=task_id,
                    entry_id=entry_id,
                    payload=s.entries[seq][1] if seq is not None else None,
                    pending=True,
                    delivery_count=pending.count,
                    consumer=pending.consumer,
                    stopping=entry_id in self._stop_requests.get(group, {}),
                )
            if seq is not None and (g is None or seq > g.cursor):
                self._found_on = queue
                return TaskSnapshot(task_id=task_id, entry_id=entry_id, payload=s.entries[seq][1])
            # Else gone, or delivered and acknowledged (done, nothing kept): the next queue.
        return None

    async def lookup(
        self, group: str, task_id: str, *, queues: Sequence[str] | None = None
    ) -> TaskSnapshot | None:
        await trio.lowlevel.checkpoint()
        check_text("lookup", "task_id", task_id)
        return self._find(group, task_id, queues)

    # Cancelling -------------------------------------------------------------
    async def cancel(
        self, group: str, task_id: str, *, queues: Sequence[str] | None = None
    ) -> Cancellation:
        await trio.lowlevel.checkpoint()
        check_text("cancel", "task_id", task_id)
        return self._cancel_now(group, task_id, queues)

    def _cancel_now(
        self, group: str, task_id: str, queues: Sequence[str] | None = None
    ) -> Cancellation:
        """:meth:`cancel` without its checkpoint (a workflow's cancel cascade runs it
        inside its own atomic step)."""
        # No checkpoint from here on: the step is atomic, like lua/track.lua.
        found = self._find(group, task_id, queues)
        if found is None or found.result is not None:
            return Cancellation(state=None)
        if found.member is not None:
            del self._delayed[group][found.member]
            del self._delayed_index[group][task_id]
            self._undo(group, task_id, found.member)
            self._step_removed(group, found.member)
            return Cancellation(state=TaskState.SCHEDULED, raw=found.member)
        assert found.entry_id is not None
        if found.pending:
            now = trio.current_time()
            stops = self._stop_requests.setdefault(group, {})
            for entry_id, at in list(stops.items()):
                if at < now - STOP_REQUEST_LIFETIME:
                    del stops[entry_id]
            stops[found.entry_id] = now
            return Cancellation(state=TaskState.RUNNING, raw=found.payload)
        self._delete_entry(self._stream(group, self._found_on), found.entry_id)
        self._entry_index.get(group, {}).pop(task_id, None)
        self._undo(group, task_id, found.payload)
        self._step_removed(group, found.payload)
        return Cancellation(state=TaskState.QUEUED, raw=found.payload)

    def catalog_keep_result(self, group: str, name: str) -> float | None:
        """How long the group's task catalog says task ``name`` keeps results (the
        backend that holds the catalog says: see :class:`MemoryInspection
        <taskrunner.backends.memory._inspect.MemoryInspection>`)."""
        return None

    def _undo(self, group: str, task_id: str, raw: bytes | None) -> None:
        """Release the lock of a removed task and record it as cancelled if it keeps
        results (its message says, else the catalog: as lua/track.lua does)."""
        removal = _wire.removal_of(raw, _keys.unique_prefix(group, self.key_layout))
        if removal.lock is not None:
            self._delete_if(*removal.lock)
        keep = removal.keep_result
        if keep is None and removal.task:
            keep = self.catalog_keep_result(group, removal.task)
        if keep is not None:
            head = _wire.cancelled_head(trio.current_time())
            document = head + json.dumps(removal.task).encode() + b"}"
            self._keep(group, task_id, document, keep, _wire.notify_ttl(keep))

    async def cancel_requested(self, group: str, entry_ids: Sequence[str]) -> list[str]:
        await trio.lowlevel.checkpoint()
        stops = self._stop_requests.get(group, {})
        return [entry_id for entry_id in entry_ids if entry_id in stops]

    # Dead letters -----------------------------------------------------------
    async def find_dead_letters(
        self, group: str, ids: Sequence[str], *, queue: str | None = None
    ) -> list[DeadLetter]:
        await trio.lowlevel.checkpoint()
        by_id = {d.id: d for d in self._stream(group, queue).dead}
        return [by_id[i] for i in ids if i in by_id]

    async def replay_dead_letters(
        self, group: str, replays: Sequence[Replay], *, queue: str | None = None
    ) -> list[Replayed]:
        await trio.lowlevel.checkpoint()
        for replay in replays:  # all refused before any is replayed, as one script call
            check_text("replay_dead_letters", "task_id", replay.task_id)
            check_text("replay_dead_letters", "lock_key", replay.lock_key or "")
            check_text("replay_dead_letters", "lock_token", replay.lock_token)
        s = self._stream(group, queue)
        done = []
        for replay in replays:  # no checkpoint inside: atomic, like the Lua script
            index = next((i for i, d in enumerate(s.dead) if d.id == replay.dead_id), None)
            if index is None:
                done.append(Replayed(dead_id=replay.dead_id, entry_id=None, reason="gone"))
                continue
            if replay.lock_key is not None and not self._set_nx(
                replay.lock_key, replay.lock_token, replay.lock_ttl
            ):
                done.append(Replayed(dead_id=replay.dead_id, entry_id=None, reason="locked"))
                continue
            del s.dead[index]
            entry_id = self.add_raw(group, {"payload": replay.message}, queue=queue)
            if entry_id != replay.task_id:
                self._entry_index.setdefault(group, {})[replay.task_id] = entry_id
            self._results.pop(_keys.result(group, replay.task_id, self.key_layout), None)
            self._notices.pop(_keys.notify(group, replay.task_id, self.key_layout), None)
            done.append(Replayed(dead_id=replay.dead_id, entry_id=entry_id))
        return done

    async def purge_dead_letters(
        self, group: str, ids: Sequence[str] | None = None, *, queue: str | None = None
    ) -> int:
        await trio.lowlevel.checkpoint()
        s = self._stream(group, queue)
        before = len(s.dead)
        if ids is None:
            s.dead.clear()
        else:
            doomed = set(ids)
            s.dead[:] = [d for d in s.dead if d.id not in doomed]
        return before - len(s.dead)
