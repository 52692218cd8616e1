"""The in-flight table of a sharded group (issue 27): two shards can hand out the same
stream id, so each shard's runs are in a table of their own (``InFlight.of``); the
refresher refreshes a shard's runs in that shard and the canceller reads a shard's
stop requests there (MemoryBackend, MockClock)."""

from __future__ import annotations

from collections.abc import Sequence

import trio
import trio.testing
from _fleet import make_runner

from taskrunner._execution.inflight import InFlight
from taskrunner._serve import canceller, refresher
from taskrunner.backends.memory import MemoryBackend


class _Slot:
    def __init__(self) -> None:
        self.stopped = 0

    def stop(self) -> None:
        self.stopped += 1


def test_the_same_stream_id_in_two_shards_is_two_runs() -> None:
    table = InFlight()
    table.add("1-1", "c1", 10, 0, queue="tasks")
    table.of("shop:0:2").add("1-1", "c1", 10, 0, queue="tasks")
    table.of("shop:1:2").add("1-1", "c1", 10, 0, queue="tasks")
    assert len(table) == 3
    assert [group for group, _ in table.tables()] == [None, "shop:0:2", "shop:1:2"]
    assert table.of("shop:0:2").remove("1-1", queue="tasks") is False
    assert len(table) == 2
    assert table.of("shop:1:2").due(now=10, slack=0) == {("c1", "tasks"): ["1-1"]}
    assert table.due(now=10, slack=0) == {("c1", "tasks"): ["1-1"]}
    assert table.of(None) is table


def test_a_stop_of_one_shards_run_leaves_the_same_id_of_another_running() -> None:
    table = InFlight()
    one, other = _Slot(), _Slot()
    table.of("shop:0:2").add("1-1", "c1", 10, 0, slot=one)
    table.of("shop:1:2").add("1-1", "c1", 10, 0, slot=other)
    assert table.of("shop:0:2").stop("1-1")
    assert (one.stopped, other.stopped) == (1, 0)
    assert table.of("shop:1:2").running() == ["1-1"]


async def test_the_refresher_refreshes_a_shards_runs_in_that_shard(
    autojump_clock: trio.testing.MockClock,
) -> None:
    refreshed: list[tuple[str, list[str]]] = []

    class Recording(MemoryBackend):
        async def refresh(
            self, group: str, consumer: str, ids: Sequence[str], *, queue: str | None = None
        ) -> list[str]:
            refreshed.append((group, list(ids)))
            return await super().refresh(group, consumer, ids, queue=queue)

    backend = Recording()
    table = InFlight()
    now = trio.current_time()
    table.add("1-1", "c1", 10, now)
    table.of("shop:1:2").add("1-1", "c1", 10, now)
    async with trio.open_nursery() as nursery:
        await nursery.start(refresher.run, backend, "shop", table, lambda: 1.0)
        await trio.sleep(10.5)
        nursery.cancel_scope.cancel()
    assert sorted(refreshed) == [("shop", ["1-1"]), ("shop:1:2", ["1-1"])]


async def test_the_canceller_reads_a_shards_stop_requests_in_that_shard(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    tag = "shop:1:2"
    (entry_id,) = await backend.add(tag, [b"{}"])
    assert (await backend.read(tag, "c1", 10, 0.0))[0].id == entry_id
    await backend.cancel(tag, entry_id)
    table = InFlight()
    own, sharded = _Slot(), _Slot()
    table.add(entry_id, "c1", 10, trio.current_time(), slot=own)  # same id, own group
    table.of(tag).add(entry_id, "c1", 10, trio.current_time(), slot=sharded)
    async with trio.open_nursery() as nursery:
        await nursery.start(canceller.run, backend, "shop", table)
        await trio.sleep(canceller.POLL_INTERVAL * 2)
        nursery.cancel_scope.cancel()
    assert (own.stopped, sharded.stopped) == (0, 1)


async def test_an_ack_in_a_shard_ends_that_shards_run_only() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, consumer_group="shop", shards=2)
    tag = "shop:1:2"
    (entry_id,) = await backend.add(tag, [b"{}"])
    await backend.read(tag, "c1", 10, 0.0)
    table = runner._parts.inflight
    table.add(entry_id, "c1", 10, trio.current_time())
    table.of(tag).add(entry_id, "c1", 10, trio.current_time())
    table.of(tag).end(entry_id)  # its attempt is over: only its ack keeps it
    async with trio.open_nursery() as nursery:
        await nursery.start(runner._parts.acker.run)
        runner._parts.acker.ack(entry_id, group=tag)
        nursery.cancel_scope.cancel()
    assert table.of(tag).due(now=1e9, slack=0) == {}
    assert entry_id not in table.of(tag)
    assert entry_id in table
    assert table.due(now=1e9, slack=0) == {("c1", None): [entry_id]}, "the own group's run"
    assert (await backend.group_info(tag)).pending == 0
