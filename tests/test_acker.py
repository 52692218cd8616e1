"""The acker: an ack refused for good drops only the message refused, and a transient
failure is retried as it was (MemoryBackend, MockClock)."""

from __future__ import annotations

from collections.abc import Sequence

import trio
import trio.testing
from _fleet import wait_until

from taskrunner import TaskRunnerConfig
from taskrunner._config import ConfigHolder
from taskrunner._serve.acker import AT_ONCE_RUNNING, Acker
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis._errors import RedisConnectionError, error_from_reply


class RefusingBackend(MemoryBackend):
    """Refuses, for good, every ack of a batch holding a refused id (as Redis refuses a
    whole command); fails ``transient`` acks in a row first, as a lost connection would."""

    def __init__(self, refused: set[str], transient: int = 0) -> None:
        super().__init__()
        self.refused = refused
        self.transient = transient
        self.calls: list[list[str]] = []

    async def ack(self, group: str, ids: Sequence[str], *, queue: str | None = None) -> int:
        self.calls.append(list(ids))
        if self.transient:
            self.transient -= 1
            raise RedisConnectionError("connection lost")
        if self.refused & set(ids):
            raise error_from_reply("WRONGTYPE Operation against a key holding the wrong kind")
        return await super().ack(group, ids, queue=queue)


async def test_an_ack_refused_for_good_drops_only_the_refused_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = RefusingBackend(set(), transient=2)
    ids = await backend.add("g", [b"a", b"b", b"c"])
    assert len(await backend.read("g", "c1", 3, 0)) == 3
    backend.refused = {ids[1]}
    for i in range(3):
        assert await backend.acquire_lock(f"lock{i}", "t", 60)
    acker = Acker(backend, ConfigHolder(TaskRunnerConfig(consumer_group="g")))
    for i, entry_id in enumerate(ids):
        acker.ack(entry_id, (f"lock{i}", "t"))

    async with trio.open_nursery() as nursery:
        await nursery.start(acker.run)
        await wait_until(lambda: acker.backlog == 0, limit=60)
        await trio.sleep(30)  # and it does not spin on the refused one
        nursery.cancel_scope.cancel()

    # two transient failures retried as they were, then the refusal split into single acks
    assert backend.calls == [ids, ids, ids, [ids[0]], [ids[1]], [ids[2]]]
    assert (acker.acked, acker.dropped) == (2, 1)
    info = await backend.group_info("g")
    assert info.pending == 1  # the refused one is delivered again after reclaim_delay
    # locks of acked messages are released; the refused one's is left to expire
    assert [await backend.acquire_lock(f"lock{i}", "u", 60) for i in range(3)] == [
        True,
        False,
        True,
    ]


async def test_a_batch_without_locks_is_retried_and_split_the_same_way(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The plain batch (one queue, no lock, nothing recorded beside it) takes a path of
    its own: it fails, is retried and is split exactly as the general one."""
    backend = RefusingBackend(set(), transient=2)
    ids = await backend.add("g", [b"a", b"b", b"c"])
    assert len(await backend.read("g", "c1", 3, 0)) == 3
    backend.refused = {ids[1]}
    acker = Acker(backend, ConfigHolder(TaskRunnerConfig(consumer_group="g")))
    for entry_id in ids:
        acker.ack(entry_id)

    async with trio.open_nursery() as nursery:
        await nursery.start(acker.run)
        await wait_until(lambda: acker.backlog == 0, limit=60)
        await trio.sleep(30)
        nursery.cancel_scope.cancel()

    assert backend.calls == [ids, ids, ids, [ids[0]], [ids[1]], [ids[2]]]
    assert (acker.acked, acker.dropped) == (2, 1)
    assert (await backend.group_info("g")).pending == 1


async def test_acks_queued_during_a_flush_go_together_in_the_next_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = RefusingBackend(set())
    ids = await backend.add("g", [b"a", b"b", b"c", b"d"])
    assert len(await backend.read("g", "c1", 4, 0)) == 4
    acker = Acker(backend, ConfigHolder(TaskRunnerConfig(consumer_group="g")))
    async with trio.open_nursery() as nursery:
        await nursery.start(acker.run)
        acker.ack(ids[0])
        await wait_until(lambda: len(backend.calls) == 1)  # in flight, or done
        for entry_id in ids[1:]:
            acker.ack(entry_id)
        await wait_until(lambda: acker.acked == 4)
        nursery.cancel_scope.cancel()
    assert backend.calls == [[ids[0]], ids[1:]]
    assert (await backend.group_info("g")).pending == 0


async def test_an_idle_ackers_ack_lands_in_the_callers_step_in_memory(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """On a MemoryBackend, an ack handed to an idle acker with nothing else to send
    lands at once, in the caller's step (no pass of the acker's loop); one with a lock
    to release after it still waits for the loop's flush."""
    backend = MemoryBackend()
    ids = await backend.add("g", [b"a", b"b"])
    assert len(await backend.read("g", "c1", 2, 0)) == 2
    assert await backend.acquire_lock("lock", "t", 60)
    acker = Acker(backend, ConfigHolder(TaskRunnerConfig(consumer_group="g")))
    async with trio.open_nursery() as nursery:
        await nursery.start(acker.run)
        await trio.testing.wait_all_tasks_blocked()
        acker.ack(ids[0])
        assert (acker.acked, acker.backlog) == (1, 0)
        assert backend.is_pending("g", ids[0]) is False
        acker.ack(ids[1], ("lock", "t"))
        assert (acker.acked, acker.backlog) == (1, 1)
        await wait_until(lambda: acker.acked == 2)
        nursery.cancel_scope.cancel()
    assert (await backend.group_info("g")).pending == 0
    assert await backend.acquire_lock("lock", "u", 60)  # released after its ack


async def test_an_ack_replaced_on_the_backend_is_awaited_as_it_is(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An ``ack`` replaced on the instance (as the contract suite's broken backends do)
    or overridden in a subclass is the one called: nothing acks around it."""
    backend = MemoryBackend()
    ids = await backend.add("g", [b"a"])
    assert len(await backend.read("g", "c1", 1, 0)) == 1
    calls: list[list[str]] = []
    original = backend.ack

    async def ack(group: str, ids: Sequence[str], **options: object) -> int:
        calls.append(list(ids))
        return await original(group, ids)

    backend.ack = ack  # type: ignore[method-assign]
    acker = Acker(backend, ConfigHolder(TaskRunnerConfig(consumer_group="g")))
    async with trio.open_nursery() as nursery:
        await nursery.start(acker.run)
        await trio.testing.wait_all_tasks_blocked()
        acker.ack(ids[0])
        assert acker.backlog == 1  # queued for the loop, which awaits the replaced ack
        await wait_until(lambda: acker.acked == 1)
        nursery.cancel_scope.cancel()
    assert calls == [ids]
    assert backend.ack_at_once("g", ids) is None
    assert RefusingBackend(set()).ack_at_once("g", ids) is None


async def test_an_ack_that_other_runs_acks_would_join_waits_for_the_flush(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While more runs are running than ``AT_ONCE_RUNNING`` (the crew's count), an ack
    queues for the loop's flush, which their acks join; at that count or fewer, it
    lands at once."""
    backend = MemoryBackend()
    ids = await backend.add("g", [b"a", b"b"])
    assert len(await backend.read("g", "c1", 2, 0)) == 2
    acker = Acker(backend, ConfigHolder(TaskRunnerConfig(consumer_group="g")))
    running = AT_ONCE_RUNNING + 1
    acker.running = lambda: running
    async with trio.open_nursery() as nursery:
        await nursery.start(acker.run)
        await trio.testing.wait_all_tasks_blocked()
        acker.ack(ids[0])
        assert (acker.acked, acker.backlog) == (0, 1)
        await wait_until(lambda: acker.acked == 1)
        await trio.testing.wait_all_tasks_blocked()
        running = AT_ONCE_RUNNING
        acker.ack(ids[1])
        assert (acker.acked, acker.backlog) == (2, 0)
        nursery.cancel_scope.cancel()
    assert (await backend.group_info("g")).pending == 0
