"""What a group keeps in Redis, listed and flushed with ``taskrunner.admin``.

Runs on fakeredis (``fakeredis[lua]``), so no server is needed:
``python examples/inspect_keys.py``.
"""

import fakeredis
import trio

from taskrunner import TaskRunner, TaskRunnerConfig, admin
from taskrunner.backends.redis import RedisBackend


async def main() -> None:
    # --8<-- [start:fakeredis]
    client = fakeredis.FakeRedis(protocol=2)  # in process; RESP2 is required
    backend = RedisBackend.from_client(client, prefix="shop", queue="orders")
    runner = TaskRunner(TaskRunnerConfig(consumer_group="billing"), backend)
    # --8<-- [end:fakeredis]

    @runner.task(name="invoice", unique=True, unique_key=lambda p: p["order"], unique_for=60)
    async def invoice(payload: dict[str, str]) -> None: ...

    @runner.task(name="remind")
    async def remind(payload: dict[str, str]) -> None: ...

    await runner.dispatch("invoice", {"order": "A-17"})
    await runner.dispatch_delayed("remind", {"order": "A-17"}, delay=3600)

    # --8<-- [start:list]
    for key in await admin.list_keys(backend, "billing"):
        ttl = f"{key.ttl:.0f} s" if key.ttl is not None else "-"
        print(f"{key.name:34} {key.type:6} size {key.size:<3} ttl {ttl:6} {key.purpose}")
    # --8<-- [end:list]

    # --8<-- [start:flush]
    deleted = await admin.flush(backend, "billing", confirm=True)  # dev and staging only
    print(f"flushed {len(deleted)} key(s); left: {await admin.list_keys(backend, 'billing')}")
    # --8<-- [end:flush]
    await backend.aclose()


if __name__ == "__main__":
    trio.run(main)
