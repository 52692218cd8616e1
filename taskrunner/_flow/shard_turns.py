"""Which shard of a sharded group reserves pool slots next, and how many it asks for.

Theory of operation (the shell that acts on it is :mod:`taskrunner._serve.shard_fetch`).
A fetcher of a sharded group (``TaskRunnerConfig.shards > 1``) runs one read loop per
shard, since a blocking read never spans slots (each shard's keys are under a hash tag
of their own). Every loop reserves pool slots before it reads, as an unsharded fetcher
does, so the loops compete for one pool. Left to the pool, whichever loop the scheduler
wakes first would take the freed slots, and a shard could wait behind the others for
as long as they have work. So the loops take turns: one at a time reserves, and when
it is done the turn passes to the next waiting shard after it in cyclic order
(:func:`next_turn`), so every shard with work gets its share of the capacity, in turn.

A shard whose last read came back empty asks for one slot only
(:func:`shard_slots`): its next read is a blocking read that may wait
``block_duration`` for nothing, and holding a whole batch of slots meanwhile would
starve the shards that have work. One slot is enough to learn that work arrived; the
read after that asks for a full batch again.

A read blocks only when it holds nothing another shard could use (:func:`read_block`):
one slot, no shard with known work waits for its turn, and a slot is still free (so
blocking reads never hold the last one).
Otherwise it is a *probe* (``block`` 0): a shard with work gets its entries, an idle
one learns it is idle at the cost of one round trip. A blocking read that held the
pool's last slot (``num_workers=1``), or a batch of slots (a shard whose last batch
emptied it exactly), kept the shards with work waiting up to ``block_duration`` for
it: the tail of a drain stalled for one to three ``block_duration`` s, and a
single-slot pool served 16 shards at one read per ``block_duration``. A probe that
finds nothing while the pool is contended (:func:`contended`) sends its shard to rest
without a slot until ``block_duration`` has passed or the pool has a spare slot, so an
idle shard still costs one read per ``block_duration``, and never a busy loop.

Pure: no I/O, table-tested in ``tests/test_shard_fetch.py``.
"""

from __future__ import annotations

from collections.abc import Collection

from taskrunner._flow.slots import SlotRequest

__all__ = ["contended", "next_turn", "read_block", "shard_slots"]


def next_turn(waiting: Collection[int], last: int, count: int) -> int | None:
    """The waiting shard that reserves next: the first after ``last`` in cyclic order.

    Args:
        waiting: The shards waiting for their turn (each in ``0..count-1``).
        last: The shard that reserved last (``count - 1`` before anyone has, so shard
            0 goes first).
        count: The group's shard count.

    Returns:
        The shard whose turn it is, or ``None`` when none waits.
    """
    if not waiting:
        return None
    return min(waiting, key=lambda shard: (shard - last - 1) % count)


def shard_slots(ask: SlotRequest, *, idle: bool) -> SlotRequest:
    """What a shard's loop reserves: ``ask`` (the unsharded fetcher's request), or one
    slot when its last read found nothing (``idle``)."""
    return SlotRequest(most=1, at_least=1) if idle else ask


def contended(*, free: int, wanting: bool) -> bool:
    """Whether a slot held is one another shard could use: a shard with known work
    (its last read used every slot it had) is ``wanting`` its turn, or none is
    ``free`` after the reservation (another shard may come for it while the read
    waits: a fetcher's shards start one after another, and work arrives anytime)."""
    return wanting or free < 1  # (below 0 after the pool shrank)


def read_block(*, held: int, free: int, wanting: bool, block: float) -> float:
    """How long a shard's read may block: ``block`` when it holds one slot (``held``)
    that no other shard could use (not :func:`contended`), else 0 (a probe, which
    returns at once whether or not it found entries)."""
    if held == 1 and not contended(free=free, wanting=wanting):
        return block
    return 0.0
