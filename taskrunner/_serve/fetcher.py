"""A fetcher: reserves pool slots, reads that many messages, starts them.

Each fetcher is one consumer of the group (``<group>_<host>_<id>``). Before
each read it reserves free pool slots (how many is :mod:`taskrunner._flow.slots`'s
decision: at most ``batch_size``, and at most its fair share of the pool), so
it never holds a message the pool cannot start at once (back-pressure). Every
``reclaim_interval`` it first claims messages left idle by dead consumers for
longer than ``reclaim_delay``, queue by queue in priority order.

A runner of one queue reads it as it always did (one ``XREADGROUP``). A
runner of several reads them all at once, by the plan of
:mod:`taskrunner._flow.priorities` (strict order, or weighted shares with a round
robin of its own per fetcher), with
:meth:`~taskrunner.backends.MessageQueue.read_many`. Paused queues (as the
gate last read them) are neither read nor reclaimed; with every queue paused
the fetcher gives its slots back and waits for a change. Backend errors are logged and retried with
backoff; they never end the loop. The fetchers run inside the workers nursery
(:func:`taskrunner._serve.worker.run`), whose crew of worker tasks runs the
messages they hand it (:mod:`taskrunner._serve.crew`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs
import trio

from taskrunner._config import TaskRunnerConfig
from taskrunner._execution.backoff import backoff_delay
from taskrunner._flow.priorities import WeightedShares, read_plan
from taskrunner._flow.slots import SlotRequest, slot_request
from taskrunner._serve.crew import Execute
from taskrunner._serve.gate import Gate
from taskrunner._serve.pool import ShardSlotSource, SlotSource, WorkerPool
from taskrunner.backends import Backend, QueueEntry
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

Start = Callable[[QueueEntry, str], None]
"""Starts one message read by consumer ``str`` on a worker (:meth:`Crew.start
<taskrunner._serve.crew.Crew.start>`), whose run frees its pool slot when done."""

BATCH_LINGER = 0.005
"""Longest a fetcher of a busy queue waits for more free slots before reading."""


class FetcherCounters:
    """Counters shared by a runner's fetchers."""

    def __init__(self) -> None:
        self.fetched = 0
        self.reclaimed = 0


@attrs.frozen(kw_only=True)
class FetcherContext:
    """What every fetcher of one ``serve`` shares."""

    config: TaskRunnerConfig
    backend: Backend
    pool: WorkerPool
    """Where slots are reserved before a read."""
    execute: Execute
    """Runs one message read, on a worker of the workers nursery (:mod:`taskrunner._serve.crew`)."""
    counters: FetcherCounters
    gate: Gate
    """What is paused (paused queues are not read)."""
    queues: tuple[str, ...]
    """The queues read, in priority order (heaviest first when weighted)."""
    weights: tuple[int, ...] | None = None
    """Their weights when weighted; ``None``: strict order."""
    group: str | None = None
    """The group read: ``None`` is the runner's; in a sharded group, one shard's tag
    (:mod:`taskrunner._serve.shard_fetch` runs a fetcher per shard)."""
    slots: ShardSlotSource | None = None
    """Where this fetcher reserves: ``None`` is ``pool``; a shard's fetcher takes its
    turn at it (:class:`taskrunner._serve.shard_fetch.ShardSlots`), which also says
    how long each read may block."""


async def run(
    context: FetcherContext,
    start: Start,
    fetcher_id: int,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Fetch messages as consumer ``fetcher_id`` and ``start`` each, until cancelled.

    Calls ``task_status.started()`` before the first read.

    Cancellation: a read cancelled in flight may have delivered messages that
    are never started; they stay pending and are reclaimed after ``reclaim_delay``.
    """
    config, backend = context.config, context.backend
    shard = context.slots
    pool: SlotSource = context.pool if shard is None else shard
    counters = context.counters
    gate, queues = context.gate, context.queues
    shares = WeightedShares(queues, context.weights) if context.weights else None
    consumer = config.consumer_name(fetcher_id)
    group = context.group or config.consumer_group
    # (The run's clock's own method: trio.current_time's two calls fewer, every read.)
    now = trio.lowlevel.current_clock().current_time
    next_claim = now()
    failures = 0
    task_status.started()
    log.debug("fetcher %s started", consumer)
    busy = False
    # The pure rule's answers by (capacity, busy): asked before every read, and one
    # read per message when messages come one at a time.
    asks: dict[tuple[int, bool], SlotRequest] = {}
    while True:
        capacity = pool.capacity
        ask = asks.get((capacity, busy))
        if ask is None:
            ask = asks[capacity, busy] = slot_request(
                capacity=capacity,
                fetchers=config.num_fetchers,
                batch_size=config.batch_size,
                busy=busy,
            )
        slots = await pool.reserve(ask.most, at_least=ask.at_least, linger=BATCH_LINGER)
        paused = gate.paused.queues
        active = [q for q in queues if q not in paused] if paused else queues
        if not active:
            pool.release(slots)
            with trio.move_on_after(config.block_duration):
                await gate.wait_changed()
            continue
        entries: list[QueueEntry] = []
        try:
            if now() >= next_claim:
                for queue in active:
                    entries += await backend.claim_stale(
                        group, consumer, config.reclaim_delay, slots - len(entries), queue=queue
                    )
                    if len(entries) >= slots:
                        break
                if entries:
                    counters.reclaimed += len(entries)
                    log.info("%s reclaimed %d stale message(s)", consumer, len(entries))
                if len(entries) < slots:
                    next_claim = now() + config.effective_reclaim_interval
            block = config.block_duration if shard is None else shard.read_block
            if not entries and len(queues) == 1:  # as it always was: one XREADGROUP
                entries = await backend.read(group, consumer, slots, block, queue=active[0])
            elif not entries:
                plan = read_plan(queues, slots, paused, shares)
                entries = await backend.read_many(
                    group, consumer, plan.queues, plan.quotas, slots, block
                )
            failures = 0
        except BackendError as exc:
            pool.release(slots)
            failures += 1
            delay = backoff_delay(failures)
            log.warning("%s: read failed (%s); retrying in %.2fs", consumer, exc, delay)
            await trio.sleep(delay)
            continue
        except BaseException:
            pool.release(slots)
            raise
        busy = len(entries) == slots
        if len(entries) < slots:
            pool.release(slots - len(entries))
        counters.fetched += len(entries)
        for entry in entries:
            start(entry, consumer)
