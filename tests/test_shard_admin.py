"""Operator views of a sharded group (issue 27): ``admin.list_groups`` and the dashboard's
front page fold each shard's tag, which the backend's own listing names as a group,
into the group, with its shard count (on the in-memory backend and a real server), and
``taskrunner keys`` lists every shard's keys, each naming its shard (a real server; a
cluster in tests/redis/test_cluster_shard_admin.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from taskrunner import TaskRunner, TaskRunnerConfig, _keys, _shards, admin
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli import keys
from taskrunner.dashboard import create_app

SHARDS = 4


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("shop:3:12", ("shop", 3)),
        ("a:b:0:7", ("a:b", 0)),
        ("shop", None),
        ("shop:3", None),
        (":3:1", None),
        ("shop:x:1", None),
        ("shop:3:y", None),
        ("shop:٣:1", None),  # a decimal digit, not an ASCII one
    ],
)
def test_split_tag(name: str, split: tuple[str, int] | None) -> None:
    assert _shards.split_tag(name) == split


def test_fold_shard_tags() -> None:
    tags = [_shards.shard_tag("shop", i, SHARDS) for i in range(SHARDS)]
    index, salt = tags[3].rsplit(":", 1)
    lookalike = f"{index}:{int(salt) + 1}"  # spelled as a tag, but not shard 3's
    names = ["mail", *tags, lookalike, "solo:0:0"]
    assert _shards.fold_shard_tags(names, {"shop": SHARDS, "solo": 1}) == {
        "mail": 1,
        "shop": SHARDS,
        lookalike: 1,
        "solo:0:0": 1,
    }
    # Without the count, the tags are groups of their own (what the listing names).
    assert _shards.fold_shard_tags(tags, {}) == dict.fromkeys(tags, 1)
    # A shard number beyond the count is no shard of it.
    assert _shards.fold_shard_tags([tags[3]], {"shop": 2}) == {tags[3]: 1}


@pytest.fixture(params=["memory", "server"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryBackend()
        return
    url = request.getfixturevalue("redis_url")
    async with RedisBackend.from_url(url, key_layout="cluster") as made:
        yield made


async def fill(backend: Any, group: str = "shop", shards: int = SHARDS) -> int:
    """A sharded group with a message in every shard, and an unsharded group (``mail``)
    with one; returns the sharded group's messages."""
    shop = TaskRunner(TaskRunnerConfig(consumer_group=group, shards=shards), backend)
    mail = TaskRunner(TaskRunnerConfig(consumer_group="mail", key_layout="cluster"), backend)

    @shop.task(name="charge", shard_key=lambda p: p["customer"])
    async def charge(payload: Any) -> None:
        raise AssertionError("not served here")

    @mail.task(name="send")
    async def send(payload: Any) -> None:
        raise AssertionError("not served here")

    seen = set()
    customer = 0
    while len(seen) < shards:
        handle = await shop.dispatch("charge", {"customer": customer})
        seen.add(handle.id.partition(".")[0])
        customer += 1
    await mail.dispatch("send", {"to": "a"})
    for name in (group, "mail"):  # consumer groups, as serving runners create
        await backend.read(name, "c", 1, 0)
    for i in range(shards):
        await backend.read(_shards.shard_tag(group, i, shards), "c", 1, 0)
    return customer


async def test_list_groups_names_a_sharded_group_once(backend: Any) -> None:
    await fill(backend)
    tags = {_shards.shard_tag("shop", i, SHARDS) for i in range(SHARDS)}
    assert tags <= set(await backend.list_groups()), "the backend's listing names the shards"
    assert await admin.list_groups(backend) == [
        admin.GroupListing(name="mail", shards=1),
        admin.GroupListing(name="shop", shards=SHARDS),
    ]


async def test_list_groups_keeps_a_group_named_like_a_shard(backend: Any) -> None:
    await fill(backend)
    index, salt = _shards.shard_tag("shop", 1, SHARDS).rsplit(":", 1)
    lookalike = f"{index}:{int(salt) + 1}"
    await backend.read(lookalike, "c", 1, 0)
    names = [g.name for g in await admin.list_groups(backend)]
    assert names == sorted(["mail", "shop", lookalike])


async def test_the_dashboard_front_page_shows_a_sharded_group_once(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    dispatched = await fill(backend)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(backend)), base_url="http://dash"
    ) as http:
        doc = (await http.get("/api/")).json()
        page = (await http.get("/")).text
    rows = {row["name"]: row for row in doc["groups"]}
    assert set(rows) == {"mail", "shop"}
    assert (rows["shop"]["shards"], rows["mail"]["shards"]) == (SHARDS, 1)
    # Every shard's entry counts, as on the group's page.
    assert rows["shop"]["queue_length"] == dispatched
    assert rows["mail"]["queue_length"] == 1
    assert rows["shop"]["pending"] == SHARDS  # one read per shard (the group's own is empty)
    assert "<th>Shards</th>" in page
    assert _shards.shard_tag("shop", 0, SHARDS) not in page


async def check_keys_listing(backend: RedisBackend, group: str, shards: int) -> None:
    """``taskrunner keys`` of a group :func:`fill` made (``group`` as ``shop``): every
    shard's stream, each key naming its shard, and a row per shard."""
    doc = await keys.collect(backend, group)
    tags = [_shards.shard_tag(group, i, shards) for i in range(shards)]
    assert doc["shard_count"] == shards
    assert [row["shard"] for row in doc["shards"]] == list(range(shards))
    assert [row["tag"] for row in doc["shards"]] == tags
    streams = {k["name"]: k["shard"] for k in doc["keys"] if k["category"] == "streams"}
    assert streams == {
        **{f"taskrunner:{{{tag}}}:tasks": i for i, tag in enumerate(tags)},
        f"taskrunner:{{{group}}}:tasks": None,
    }
    for key in doc["keys"]:
        tag = _keys.hash_tag(key["name"])
        assert key["shard"] == (tags.index(tag) if tag in tags else None), key
    assert all(row["counts"]["streams"] == 1 for row in doc["shards"])
    assert sum(row["total"] for row in doc["shards"]) == len(
        [k for k in doc["keys"] if k["shard"] is not None]
    )
    assert doc["total"] == len(doc["keys"])
    own = {c["category"]: c["found"] for c in doc["counts"]}
    assert (own["streams"], own["shard counts"]) == (1, 1)  # the group's own only
    text = keys.render(doc)
    assert f"Keys in each of the {shards} shards" in text
    for i, tag in enumerate(tags):
        assert f"  {i:>5}  {tag}" in text
        assert f"{i:>5}  taskrunner:{{{tag}}}:tasks" in text


async def test_keys_lists_every_shards_keys(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url, key_layout="cluster") as backend:
        await fill(backend)
        await check_keys_listing(backend, "shop", SHARDS)
        doc = await keys.collect(backend, "mail")
        assert (doc["shard_count"], doc["shards"]) == (1, [])
        assert {k["shard"] for k in doc["keys"]} == {None}
        assert "SHARD" not in keys.render(doc)
