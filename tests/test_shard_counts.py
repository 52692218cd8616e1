"""What a sharded group's operator views count (issue 27): each shard's queued, delayed
and dead messages (``Inspection.count_messages``, on the in-memory backend and a real
server), each queue's size summed over the shards in ``taskrunner stats``, ``top`` and
the dashboard, and a per-shard table in each; an unsharded group shows none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from taskrunner import TaskRunner, TaskRunnerConfig, _shards
from taskrunner._fleet.shard_counts import queue_sizes, read_shard_counts, totals
from taskrunner._serve.catalog import catalog_document
from taskrunner.backends import Backend, MessageCounts
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.stats import collect, render
from taskrunner.cli.top import read_snapshot
from taskrunner.cli.views import History, render_text, top_view
from taskrunner.dashboard import create_app

SHARDS = 4


@pytest.fixture(params=["memory", "server"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryBackend()
        return
    url = request.getfixturevalue("redis_url")
    async with RedisBackend.from_url(url, key_layout="cluster") as made:
        yield made


def make_runner(backend: Any, shards: int = SHARDS) -> TaskRunner:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="shop", shards=shards), backend)

    @runner.task(name="charge", shard_key=lambda p: p["customer"])
    async def charge(payload: Any) -> None:
        raise AssertionError("not served here")

    @runner.task(name="low", queue="low")
    async def low(payload: Any) -> None:
        raise AssertionError("not served here")

    return runner


async def fill(backend: Any) -> dict[int, MessageCounts]:
    """Messages in known shards, and the catalog a serving runner would publish (its
    queues, for the views refreshed every few seconds)."""
    runner = make_runner(backend)
    stream = backend.stream_keys("shop").stream
    streams = {"low": backend.stream_keys("shop", "low").stream}
    doc = catalog_document("h1", "i1", runner._registry.tasks, stream, backend.now(), streams)
    await backend.publish_catalog("shop", doc, 600.0)
    expected: dict[int, MessageCounts] = {}

    def add(shard: int, **counts: int) -> None:
        expected[shard] = expected.get(shard, MessageCounts()) + MessageCounts(**counts)

    for customer in range(10):
        handle = await runner.dispatch("charge", {"customer": customer})
        add(shard_of(handle.id), queued=1)
    for customer in range(3):
        handle = await runner.dispatch_delayed("charge", {"customer": customer}, 600.0)
        add(shard_of(handle.id), delayed=1)
    handle = await runner.dispatch("low", 1)
    add(shard_of(handle.id), queued=1)
    tag = _shards.shard_tag("shop", 2, SHARDS)
    await backend.dead_letter(tag, "1-0", b"{}", "failed", queue="low")
    add(2, dead=1)
    return expected


def shard_of(task_id: str) -> int:
    found = _shards.parse_task_id(task_id, SHARDS)
    assert found is not None
    return found[0]


async def test_each_shards_messages_are_counted_where_they_wait(backend: Any) -> None:
    expected = await fill(backend)
    rows = await read_shard_counts(backend, "shop", SHARDS, ["tasks", "low"])
    assert [r.shard for r in rows] == list(range(SHARDS))
    assert [r.tag for r in rows] == [_shards.shard_tag("shop", i, SHARDS) for i in range(SHARDS)]
    for row in rows:
        want = expected.get(row.shard, MessageCounts())
        assert (row.queued, row.delayed, row.dead) == (want.queued, want.delayed, want.dead)
    assert totals(rows) == MessageCounts(queued=11, delayed=3, dead=1)
    # Per queue, over the shards, with the group's own stream's count given.
    assert await queue_sizes(backend, "shop", SHARDS, {"tasks": 2, "low": 0}) == {
        "tasks": 12,
        "low": 1,
    }
    assert await read_shard_counts(backend, "shop", 1, ["tasks"]) == ()


async def test_count_messages_of_an_unsharded_group(backend: Backend) -> None:
    runner = make_runner(backend, shards=1)
    await runner.dispatch("charge", {"customer": 1})
    await runner.dispatch("low", 1)
    await runner.dispatch_delayed("charge", {"customer": 1}, 600.0)
    counts = await backend.count_messages("shop", [None, "low", "low"])  # type: ignore[attr-defined]
    assert counts == MessageCounts(queued=2, delayed=1, dead=0)


# The views ---------------------------------------------------------------------------


@pytest.fixture
async def redis_backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url, key_layout="cluster") as made:
        yield made


async def test_stats_sums_the_shards_and_lists_them(redis_backend: RedisBackend) -> None:
    await fill(redis_backend)
    await redis_backend.remove_catalog("shop", "h1")  # "low" is in the shards' keys alone
    doc = await collect(redis_backend, "shop", None)
    assert doc["shard_count"] == SHARDS
    assert [row["shard"] for row in doc["shards"]] == list(range(SHARDS))
    assert sum(row["queued"] for row in doc["shards"]) == 11
    assert sum(row["delayed"] for row in doc["shards"]) == 3
    assert sum(row["dead"] for row in doc["shards"]) == 1
    assert doc["queue"]["size"] == doc["queues"]["tasks"]["size"] == 10
    assert doc["queues"]["low"]["size"] == 1
    assert set(doc["shards"][0]) == {"shard", "tag", "queued", "delayed", "dead"}
    text = render(doc)
    assert "shards:    4 (queued, delayed and dead messages of each)" in text
    assert f"  {_shards.shard_tag('shop', 3, SHARDS)}" in text


async def test_stats_of_an_unsharded_group_has_no_shards(redis_backend: RedisBackend) -> None:
    await make_runner(redis_backend, shards=1).dispatch("charge", {"customer": 1})
    doc = await collect(redis_backend, "shop", None)
    assert (doc["shard_count"], doc["shards"], doc["queue"]["size"]) == (1, [], 1)
    assert "shards:" not in render(doc)


async def test_top_shows_the_summed_queue_and_a_shard_table(redis_backend: RedisBackend) -> None:
    await fill(redis_backend)
    snapshot = await read_snapshot(redis_backend, "shop")
    assert snapshot.queue.queue_size == 10  # the backend's own queue, every shard's entries
    assert [row.queued for row in snapshot.shards] == [
        row.queued
        for row in await read_shard_counts(redis_backend, "shop", SHARDS, ["tasks", "low"])
    ]
    frame = render_text(top_view(snapshot, History()), width=120)
    assert "shards (4)" in frame
    assert "delayed" in frame
    total = next(
        line for line in frame.splitlines() if line.strip().startswith("total") and "11" in line
    )
    assert total.split()[1:] == ["11", "3", "1"]


async def test_the_dashboard_shows_the_shards(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    await fill(backend)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(backend)), base_url="http://dash"
    ) as http:
        doc = (await http.get("/api/groups/shop")).json()
        page = (await http.get("/groups/shop")).text
    assert [row["shard"] for row in doc["shards"]] == list(range(SHARDS))
    assert sum(row["queued"] for row in doc["shards"]) == 11
    assert {q["name"]: q["length"] for q in doc["queues"]} == {"tasks": 10, "low": 1}
    assert doc["queue"]["length"] == 11
    assert '<table id="shards">' in page
    assert _shards.shard_tag("shop", 1, SHARDS) in page
