"""The backend contract suite on a real Redis Cluster (3 masters + 3 replicas), in the
cluster key layout the backend chooses there: a multi-key command or script whose keys
span slots would be refused (by the client before sending, or by the server with
``CROSSSLOT``), so every check passing is the layout's proof on a cluster."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import ClusterProcess, ContractCheck, contract_parametrize, running_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterProcess]:
    with running_cluster(os.environ.get("TASKRUNNER_TEST_SERVER", "auto")) as running:
        yield running


@contract_parametrize()
@pytest.mark.parametrize("delete_on_ack", [True, False], ids=["delete", "keep"])
async def test_contract_on_a_cluster(
    check: ContractCheck, cluster: ClusterProcess, delete_on_ack: bool
) -> None:
    queue = f"contract-{uuid.uuid4().hex[:8]}"
    async with RedisBackend.from_url(cluster.url, queue=queue, delete_on_ack=delete_on_ack) as b:
        assert await b.detect_cluster()
        assert b.key_layout == "cluster"
        await check(b)


async def test_the_go_layout_is_refused_on_a_cluster(cluster: ClusterProcess) -> None:
    from taskrunner import TaskRunner, TaskRunnerConfig
    from taskrunner._keys import KeyLayoutError

    async with RedisBackend.from_url(cluster.url, key_layout="go") as backend:
        runner = TaskRunner(TaskRunnerConfig(consumer_group="shop"), backend)
        with pytest.raises(KeyLayoutError, match="cannot run on a Redis Cluster"):
            await runner.serve()


async def test_min_replicas_dispatches_on_a_cluster(cluster: ClusterProcess) -> None:
    """The replicated adds (``XADD`` or the delayed script, then ``WAIT``) name the
    cluster layout's keys: a go-layout key beside a cluster one would be refused as
    ``CROSSSLOT`` before anything is sent."""
    from taskrunner import TaskRunner, TaskRunnerConfig, _keys

    async with RedisBackend.from_url(cluster.url, queue="replicated") as backend:
        runner = TaskRunner(TaskRunnerConfig(consumer_group="shop", min_replicas=1), backend)

        @runner.task(name="t")
        async def t(payload: object) -> None:
            raise AssertionError("not served")

        await runner.dispatch("t", {"n": 1})
        await runner.dispatch_delayed("t", {"n": 2}, 30.0)
        delayed = _keys.delayed_tasks("shop", "cluster")
        assert await backend.client.execute("ZCARD", delayed) == 1


async def test_desired_instances_live_under_the_group_tag(cluster: ClusterProcess) -> None:
    from taskrunner import _keys

    async with RedisBackend.from_url(cluster.url) as backend:
        assert await backend.detect_cluster()
        await backend.publish_desired_instances("shop", 3, 30.0)
        key = _keys.desired_instances("shop", "cluster")
        assert await backend.client.execute("GET", key) == b"3"
        assert await backend.read_desired_instances("shop") == 3
