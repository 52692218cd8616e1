"""Sharded groups' layout on a real 3-master Redis Cluster (issue 27): the 16 shards of a
group spread 5/6/5 over the masters, each shard's message path (add, read, finish with a
kept result, lookup, delay, move, cancel) runs in its shard's own slot, and the commands
of work spread over every shard land on each master in its share.

These drive the backend as a sharded runner will (a shard addressed as the group named
by its tag, docs/sharding.md), and a sharded runner's fetchers and acker; the runner
itself does not serve ``shards > 1`` yet."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from taskrunner import _keys, _shards
from taskrunner.backends import Outcome
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import ClusterProcess, running_cluster
from taskrunner.testing._cluster import slot_ranges

SHARDS = 16


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterProcess]:
    with running_cluster(os.environ.get("TASKRUNNER_TEST_SERVER", "auto")) as running:
        yield running


def test_sixteen_shards_are_served_five_six_five_by_three_masters(
    cluster: ClusterProcess,
) -> None:
    group = f"shop-{uuid.uuid4().hex[:6]}"
    served: dict[int, int] = {}
    for root in _shards.shard_roots(group, SHARDS):
        stream = _keys.stream(root, "tasks")
        slot = cluster.nodes[0].command("CLUSTER", "KEYSLOT", stream)
        assert slot == _shards.slot(stream)  # the server hashes as we do
        port = cluster.master_of_slot(slot).port
        served[port] = served.get(port, 0) + 1
    assert sorted(served.values()) == [5, 5, 6]
    assert len(slot_ranges(3)) == len(served) == 3


async def test_each_shards_message_path_runs_in_its_own_slot(cluster: ClusterProcess) -> None:
    group = f"shop-{uuid.uuid4().hex[:6]}"
    async with RedisBackend.from_url(cluster.url) as backend:
        assert await backend.detect_cluster()
        for index in range(SHARDS):
            shard = _shards.shard_tag(group, index, SHARDS)
            # Cross-slot keys would be refused by the client before sending (or by the
            # server, CROSSSLOT): each call passing is the shard's one-slot proof.
            (entry,) = await backend.add(shard, [b'{"task_name":"t","payload":"{}"}'])
            (read,) = await backend.read(shard, "c1", 10, 0)
            assert read.id == entry
            done = Outcome(entry_id=entry, task_id=entry, document=b"{}", keep=60, notify=60)
            assert await backend.finish(shard, [entry], [done]) == 1
            found = await backend.lookup(shard, entry)
            assert found is not None
            assert found.result == b"{}"
            await backend.add_delayed(shard, b"member", backend.now() + 3600, task_id="d1")
            cancelled = await backend.cancel(shard, "d1")
            assert cancelled.state is not None
            assert await backend.next_delayed_at(shard) is None
            master = cluster.master_of_slot(_shards.slot(shard))
            assert master.command("EXISTS", _keys.result(shard, entry, "cluster")) == 1


async def test_work_over_every_shard_spreads_over_the_masters(cluster: ClusterProcess) -> None:
    group = f"shop-{uuid.uuid4().hex[:6]}"
    masters = [cluster.master_of_slot(lo) for lo, _ in slot_ranges(3)]
    for master in masters:
        master.command("CONFIG", "RESETSTAT")
    async with RedisBackend.from_url(cluster.url) as backend:
        assert await backend.detect_cluster()
        shards = [_shards.shard_tag(group, i, SHARDS) for i in range(SHARDS)]
        for shard in shards:
            await backend.add(shard, [b"{}"] * 30)
        for shard in shards:
            entries = await backend.read(shard, "c1", 100, 0)
            assert len(entries) == 30
            assert await backend.ack(shard, [e.id for e in entries]) == 30
    calls = [_work_calls(master.info("commandstats")) for master in masters]
    shares = [n / sum(calls) for n in calls]
    assert all(0.25 <= share <= 0.41 for share in shares), shares  # 33 % +- 8 %


def _work_calls(stats: dict[str, str]) -> int:
    """Calls of the queue's work commands in an ``INFO commandstats`` section."""
    total = 0
    for name in ("xadd", "xreadgroup", "xack", "evalsha", "eval"):
        row = stats.get(f"cmdstat_{name}")
        if row:
            total += int(dict(kv.split("=") for kv in row.split(","))["calls"])
    return total


async def dispatch_look_up_and_cancel(url: str, group: str) -> list[str]:
    """A sharded runner's dispatches, lookups and cancels at ``url``: the shards used."""
    from taskrunner import TaskRunner, TaskRunnerConfig, TaskState
    from taskrunner.errors import TaskAlreadyDispatched

    async with RedisBackend.from_url(url) as backend:
        runner = TaskRunner(TaskRunnerConfig(consumer_group=group, shards=SHARDS), backend)

        @runner.task(name="charge", shard_key=lambda p: p["customer"])
        async def charge(payload: object) -> None:
            raise AssertionError("not served")

        @runner.task(name="once", unique=True, unique_key=lambda p: p["order"], unique_for=60.0)
        async def once(payload: object) -> None:
            raise AssertionError("not served")

        handles = await runner.dispatch_many("charge", [{"customer": n} for n in range(64)])
        handles.append(await runner.dispatch("charge", {"customer": 1}))
        delayed = await runner.dispatch_delayed("charge", {"customer": 2}, 3600.0)
        unique = await runner.dispatch("once", {"order": "o-1"})
        with pytest.raises(TaskAlreadyDispatched):
            await runner.dispatch("once", {"order": "o-1"})
        for handle in (handles[0], handles[-1], unique):
            info = await runner.get_task(handle.id)
            assert info is not None
            assert (info.id, info.state) == (handle.id, TaskState.QUEUED)
        info = await runner.get_task(delayed.id)
        assert info is not None
        assert info.state is TaskState.SCHEDULED
        assert await runner.cancel(delayed)
        assert await runner.get_task(delayed.id) is None
        assert await runner.cancel(unique)  # its lock released in its shard
        await runner.dispatch("once", {"order": "o-1"})
        stream = backend.stream_keys(shard_of(handles[-1].id, group)).stream
        assert await backend.client.execute("XLEN", stream) >= 1
        return [shard_of(h.id, group) for h in handles]


async def test_a_sharded_runner_dispatches_looks_up_and_cancels_on_a_cluster(
    cluster: ClusterProcess,
) -> None:
    group = f"shop-{uuid.uuid4().hex[:6]}"
    shards = await dispatch_look_up_and_cancel(cluster.url, group)
    assert len(set(shards)) == SHARDS
    masters = {cluster.master_of_slot(_shards.slot(shard)).port for shard in shards}
    assert len(masters) == 3  # one group's dispatches on every master


async def test_a_sharded_runner_works_on_a_standalone_server(redis_url: str) -> None:
    shards = await dispatch_look_up_and_cancel(redis_url, "shop")
    assert len(set(shards)) == SHARDS


def shard_of(task_id: str, group: str) -> str:
    found = _shards.parse_task_id(task_id, SHARDS)
    assert found is not None
    return _shards.shard_tag(group, found[0], SHARDS)


async def fetch_and_ack_every_shard(url: str, group: str) -> dict[str, int]:
    """Dispatch 64 tasks to a sharded group at ``url``, fetch them with a sharded
    runner's fetchers (one per shard, and the group's own) and ack each in its shard
    through the runner's acker; the entries started, by shard."""
    import trio

    from taskrunner import TaskRunner, TaskRunnerConfig
    from taskrunner._serve import fetcher
    from taskrunner._serve.fetcher import FetcherContext, FetcherCounters
    from taskrunner._serve.pool import WorkerPool
    from taskrunner._serve.shard_fetch import shard_contexts, tag_entries
    from taskrunner.backends import QueueEntry

    async with RedisBackend.from_url(url) as backend:
        config = TaskRunnerConfig(consumer_group=group, shards=SHARDS, block_duration=0.2)
        runner = TaskRunner(config, backend)

        @runner.task(name="plain")
        async def plain(payload: object) -> None:
            raise AssertionError("not run here")

        await runner.dispatch_many("plain", [None] * 64)
        pool = WorkerPool(16)
        acker = runner._parts.acker
        started: dict[str, int] = {}
        all_started = trio.Event()

        def ack(entry: QueueEntry, consumer: str) -> None:
            assert entry.group is not None
            started[entry.group] = started.get(entry.group, 0) + 1
            acker.ack(entry.id, queue=entry.queue, group=entry.group)
            pool.release()
            if sum(started.values()) == 64:
                all_started.set()

        context = FetcherContext(
            config=config,
            backend=backend,
            pool=pool,
            execute=runner._parts.worker.execute,
            counters=FetcherCounters(),
            gate=runner._parts.gate,
            queues=(backend.stream_keys(group).queue,),
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(acker.run)
            for part in shard_contexts(context):
                assert part.group is not None
                await nursery.start(fetcher.run, part, tag_entries(ack, part.group), 1)
            with trio.fail_after(20):
                await all_started.wait()
            nursery.cancel_scope.cancel()  # the acker's final flush sends what is left
        for shard in _shards.served_groups(group, SHARDS):
            assert (await backend.group_info(shard)).pending == 0
        return started


async def test_a_sharded_runners_fetchers_read_and_ack_every_shard_on_a_cluster(
    cluster: ClusterProcess,
) -> None:
    group = f"shop-{uuid.uuid4().hex[:6]}"
    started = await fetch_and_ack_every_shard(cluster.url, group)
    assert started == {_shards.shard_tag(group, i, SHARDS): 4 for i in range(SHARDS)}
