"""Operator views of a sharded group on a real 3-master Redis Cluster (issue 27): the
group is listed once with its 16 shards (``admin.list_groups``, though the shards' keys
are on every master), and ``taskrunner keys`` lists every shard's keys, naming each
key's shard (tests/test_shard_admin.py does the same on one server)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from test_shard_admin import check_keys_listing, fill

from taskrunner import _shards, admin
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import ClusterProcess, running_cluster

SHARDS = 16


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterProcess]:
    with running_cluster(os.environ.get("TASKRUNNER_TEST_SERVER", "auto")) as running:
        yield running


async def test_a_sharded_group_is_listed_once_and_its_keys_per_shard(
    cluster: ClusterProcess,
) -> None:
    group = f"shop-{uuid.uuid4().hex[:6]}"
    async with RedisBackend.from_url(cluster.url) as backend:
        await fill(backend, group, SHARDS)
        masters = {
            cluster.master_of_slot(_shards.slot(_shards.shard_tag(group, i, SHARDS))).port
            for i in range(SHARDS)
        }
        assert len(masters) == 3, "the shards are on every master"
        listed = {g.name: g.shards for g in await admin.list_groups(backend)}
        assert listed[group] == SHARDS
        assert not [name for name in listed if name.startswith(f"{group}:")], listed
        await check_keys_listing(backend, group, SHARDS)
