"""Fetching a sharded group: one fetcher per shard, taking turns at the pool.

Theory of operation. A sharded group (``TaskRunnerConfig.shards > 1``) keeps each
shard's streams under a hash tag of its own (:mod:`taskrunner._shards`), and a read never
spans slots, so each of a runner's ``num_fetchers`` fetchers becomes one fetcher
(:func:`taskrunner._serve.fetcher.run`, unchanged) per shard, reading that shard's
queues as the group's own fetcher reads the group's, with the same consumer name (each
shard's streams have their own consumer group), plus one for the group's own stream,
where periodic schedules fire (:func:`taskrunner._shards.served_groups`). A shard
with nothing to read waits in its blocking read, as an unsharded fetcher does, so an
idle shard costs one read per ``block_duration``, no busy loop.

The fetchers of all shards reserve from one pool; :class:`ShardSlots` is a shard's way
to it. The shards take turns (:class:`Turns`): one at a time reserves, then the turn
passes round-robin to the next waiting shard (:func:`taskrunner._flow.shard_turns.
next_turn`), so every shard with work gets its share. A shard whose last read ran it dry
(or that has not read yet) reserves a single slot for its next (maybe blocking) read
(:func:`taskrunner._flow.shard_turns.shard_slots`), so idle shards hold few slots.
A read blocks only when the slot it holds is one nobody else waits for
(:func:`taskrunner._flow.shard_turns.read_block`); else it is a probe, and a probe that
finds nothing while the pool is contended sends the shard to rest (:meth:`Turns.rest`)
without turn or slot, until ``block_duration`` has passed or a reservation leaves a
slot spare, so a shard with work is never kept waiting by an idle shard's read.

Every entry a shard's fetcher starts carries the shard's tag
(:attr:`taskrunner.backends.QueueEntry.group`), so its ack goes to the shard it came
from. ``shards=1`` never comes here: the fetchers run as they always did.
"""

from __future__ import annotations

import attrs
import trio

from taskrunner import _shards
from taskrunner._flow.shard_turns import contended, next_turn, read_block, shard_slots
from taskrunner._flow.slots import SlotRequest
from taskrunner._serve.fetcher import FetcherContext, Start
from taskrunner._serve.pool import WorkerPool
from taskrunner.backends import QueueEntry


class Turns:
    """Who of a fetcher's shards may reserve from the pool now (one at a time,
    round-robin among those waiting).

    Args:
        count: How many take turns, numbered from 0 (the shards, then the group's
            own stream).
    """

    def __init__(self, count: int) -> None:
        self._count = count
        self._holder: int | None = None
        self._last = count - 1  # so shard 0 goes first
        self._waiting: dict[int, trio.Event] = {}
        self._wanting: set[int] = set()
        """The waiting shards with known work."""
        self._rested = trio.Event()
        self._resting = 0

    async def take(self, shard: int, *, work: bool = False) -> None:
        """Wait for ``shard``'s turn; give it back with :meth:`give`. ``work``: the
        shard has known work (its last read used every slot it had).

        Cancellation: a turn granted to a cancelled waiter is passed on."""
        if self._holder is None and not self._waiting:
            self._holder = shard
            await trio.lowlevel.checkpoint()  # a checkpoint on every path
            return
        granted = self._waiting[shard] = trio.Event()
        if work:
            self._wanting.add(shard)
        try:
            await granted.wait()
        except BaseException:
            if self._waiting.pop(shard, None) is None:  # granted meanwhile: pass it on
                self.give(shard)
            raise
        finally:
            self._wanting.discard(shard)

    @property
    def wanting(self) -> bool:
        """Whether some shard with known work waits for its turn."""
        return bool(self._wanting)

    def give(self, shard: int, *, spare: bool = False) -> None:
        """End ``shard``'s turn, and grant the next; ``spare``: the pool has a free
        slot after ``shard``'s reservation, and if nobody waits, the resting shards
        come back (:meth:`rest`)."""
        self._holder, self._last = None, shard
        turn = next_turn(self._waiting, self._last, self._count)
        if turn is not None:
            self._holder = turn
            self._waiting.pop(turn).set()
        elif spare and self._resting:
            self._wake_resting()

    async def rest(self, deadline: float) -> None:
        """Wait, holding no turn, until ``deadline`` or until a turn given leaves a slot
        spare with nobody waiting (:meth:`give`).

        Cancellation: nothing to undo."""
        self._resting += 1
        try:
            with trio.move_on_at(deadline):
                await self._rested.wait()
        finally:
            self._resting -= 1

    def _wake_resting(self) -> None:
        self._rested.set()
        self._rested = trio.Event()


class ShardSlots:
    """One shard's fetcher's way to the pool: its turn, then the reservation, and how
    long the read that follows may block.

    Args:
        pool: The runner's pool.
        turns: The turns of the fetcher's shards.
        shard: This shard's number.
        block: The configured ``block_duration``.
    """

    def __init__(self, pool: WorkerPool, turns: Turns, shard: int, block: float) -> None:
        self._pool, self._turns, self._shard, self._block = pool, turns, shard, block
        self.idle = True
        """Whether the last read ran the shard dry (a slot reserved for it came back
        unused), or none was made yet: the next reserves one slot. Its read may block
        for ``block_duration``, and a batch of slots held meanwhile would keep the
        other shards from reading (they take turns at one pool): with 16 shards each
        shard's first read came a shard's blocking read after another's, up to 16 s
        after the start. A read that used every slot it had asks for a batch next."""
        self.read_block = block
        """How long the read of the slots last reserved may block
        (:func:`taskrunner._flow.shard_turns.read_block`)."""
        self._probing = False
        """Whether the last reservation was contended: if its read finds nothing, the
        shard rests before its next."""
        self._rest_until: float | None = None

    @property
    def capacity(self) -> int:
        return self._pool.capacity

    async def reserve(self, most: int, *, at_least: int = 1, linger: float = 0.0) -> int:
        """Rest if the last read was a contended probe that found nothing, take this
        shard's turn, then reserve (one slot when idle).

        Cancellation: nothing is reserved if cancelled."""
        if self._rest_until is not None:
            deadline, self._rest_until = self._rest_until, None
            await self._turns.rest(deadline)
        ask = shard_slots(SlotRequest(most=most, at_least=at_least), idle=self.idle)
        turns = self._turns
        await turns.take(self._shard, work=not self.idle)
        free = 0
        try:
            got = await self._pool.reserve(ask.most, at_least=ask.at_least, linger=linger)
            free = self._pool.capacity - self._pool.in_use
            wanting = turns.wanting
            self._probing = contended(free=free, wanting=wanting)
            self.read_block = read_block(held=got, free=free, wanting=wanting, block=self._block)
        finally:
            self._turns.give(self._shard, spare=free > 0)
        self.idle = False  # a read that uses every slot releases none
        return got

    def release(self, count: int = 1) -> None:
        """Give back ``count`` slots of the last reservation: its read ran the shard dry
        (after a contended probe, the shard rests ``block_duration`` at most)."""
        self.idle = count > 0
        if self.idle and self._probing:
            self._rest_until = trio.current_time() + self._block
        self._pool.release(count)


def tag_entries(start: Start, tag: str) -> Start:
    """``start``, marking each entry as read in shard ``tag`` (where it is acked)."""

    def start_in_shard(entry: QueueEntry, consumer: str) -> None:
        # Built field by field: ``attrs.evolve`` (which introspects the class) was
        # some 8 % of a sharded runner's CPU per no-op task. tests/test_shard_fetch.py
        # checks that every field is copied.
        tagged = QueueEntry(
            id=entry.id,
            payload=entry.payload,
            delivery_count=entry.delivery_count,
            queue=entry.queue,
            group=tag,
            inputs=entry.inputs,
        )
        start(tagged, consumer)

    return start_in_shard


def shard_contexts(context: FetcherContext) -> list[FetcherContext]:
    """One fetcher context per shard of ``context``'s group, shard 0 first, then one
    for the group's own stream (where periodic schedules fire,
    :func:`taskrunner._shards.served_groups`), sharing one set of turns at its pool
    (call once per fetcher)."""
    config = context.config
    groups, pool = _shards.served_groups(config.consumer_group, config.shards), context.pool
    turns, block = Turns(len(groups)), config.block_duration
    return [
        attrs.evolve(context, slots=ShardSlots(pool, turns, index, block), group=group)
        for index, group in enumerate(groups)
    ]
