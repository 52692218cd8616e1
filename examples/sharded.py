"""A sharded group: one queue over 16 hash tags, so a Redis Cluster spreads it over masters.

Runs on fakeredis (``fakeredis[lua]``), a standalone server: all shards on one node, the
same code. Dispatches from a runner and from a producer, lookups and cancels by id, then
the list of groups (the group once, with its shard count); then a runner serves the
group: a task knows its sharded id (``ctx.task_id``), and one
customer's charges run in the order dispatched (docs/sharding.md).
``python examples/sharded.py``.
"""

import binascii

import fakeredis
import trio

from taskrunner import TaskContext, TaskRunner, TaskRunnerConfig, admin
from taskrunner.backends.redis import RedisBackend
from taskrunner.errors import TaskAlreadyDispatched
from taskrunner.producer import Producer


def slot(key: str) -> int:
    """The Redis Cluster slot of ``key`` (CRC16 of its hash tag)."""
    tag = key[key.index("{") + 1 : key.index("}")] if "{" in key else key
    return binascii.crc_hqx(tag.encode(), 0) % 16384


async def main() -> None:
    redis = fakeredis.FakeRedis(protocol=2)
    charged: list[dict[str, object]] = []
    backend = RedisBackend.from_client(redis)
    # --8<-- [start:config]
    runner = TaskRunner(TaskRunnerConfig(consumer_group="shop", shards=16), backend)

    @runner.task(name="charge", shard_key=lambda p: p["customer"], keep_result=60)
    async def charge(payload: dict[str, object], ctx: TaskContext) -> str:
        charged.append(payload)
        return ctx.task_id  # "<shard>.<id>": get_task, cancel and result() find it

    # --8<-- [end:config]

    @runner.task(name="invoice", unique=True, unique_key=lambda p: p["order"], unique_for=60)
    async def invoice(payload: dict[str, str]) -> None: ...

    # One customer's charges go to one shard, in the order dispatched.
    handles = [await runner.dispatch("charge", {"customer": "c-7", "n": n}) for n in range(3)]
    shard = handles[0].id.split(".")[0]
    same = all(h.id.startswith(f"{shard}.") for h in handles)
    print(f"customer c-7: shard {shard} for all 3: {same}")
    # Other customers spread over the shards.
    many = await runner.dispatch_many("charge", [{"customer": f"c-{n}"} for n in range(160)])
    print(f"160 customers over {len({h.id.split('.')[0] for h in many})} shards")

    # A unique key has one lock, in one shard, whichever runner dispatches it.
    await runner.dispatch("invoice", {"order": "A-17"})
    try:
        await runner.dispatch("invoice", {"order": "A-17"})
    except TaskAlreadyDispatched:
        print("invoice A-17 again: refused, its lock is held")

    # A task id names its shard: lookup and cancel ask that shard alone.
    later = await runner.dispatch_delayed("charge", {"customer": "c-9"}, delay=3600)
    info = await runner.get_task(later.id)
    state = info.state.value if info else None
    print(f"delayed charge: {state}; cancel -> {await runner.cancel(later)}")

    # A producer (redis-py, no trio) routes as the runner does: it reads the recorded
    # shard count, and takes the task's shard_key as a value.
    # --8<-- [start:producer]
    producer = Producer(redis, consumer_group="shop", shards=16)
    sent = producer.dispatch("charge", {"customer": "c-7", "n": 3}, shard_key="c-7")
    # --8<-- [end:producer]
    print(f"producer: customer c-7 on shard {sent.id.split('.')[0]} too; cancel -> {sent.cancel()}")

    # Each shard's keys are under its own hash tag: 16 slots, spread over all 16384.
    streams = sorted(k.decode() for k in redis.keys("taskrunner:{shop:*}:tasks"))
    print(f"{len(streams)} streams in {len({slot(s) for s in streams})} slots, e.g. {streams[0]}")

    # The list of groups names the sharded group once, with its shard count.
    # --8<-- [start:groups]
    listed = [f"{g.name} ({g.shards} shards)" for g in await admin.list_groups(backend)]
    print(f"groups: {', '.join(listed)}")  # groups: shop (16 shards)
    # --8<-- [end:groups]

    # Serving: a fetcher per shard; each run knows its sharded id.
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        with trio.fail_after(30):
            ids = [await h.result(timeout=30) for h in handles]
        print(f"c-7's charges ran with their own ids: {ids == [h.id for h in handles]}")
        order = [p["n"] for p in charged if p.get("customer") == "c-7" and "n" in p]
        print(f"in the order dispatched: {order}")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
