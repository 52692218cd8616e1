"""The cluster key layout: every key of a group under the hash tag ``{<group>}``.

Runs on fakeredis (``fakeredis[lua]``), a standalone server: the cluster layout
works there too, so a team can move to it before it shards. On a Redis Cluster
it is the default. ``python examples/cluster_layout.py``.
"""

import binascii

import fakeredis
import trio

from taskrunner import TaskRunner, TaskRunnerConfig, admin
from taskrunner.backends.redis import RedisBackend


def slot(key: str) -> int:
    """The Redis Cluster slot of ``key`` (CRC16 of its hash tag)."""
    tag = key[key.index("{") + 1 : key.index("}")] if "{" in key else key
    return binascii.crc_hqx(tag.encode(), 0) % 16384


async def main() -> None:
    backend = RedisBackend.from_client(fakeredis.FakeRedis(protocol=2))
    # --8<-- [start:config]
    config = TaskRunnerConfig(consumer_group="shop", key_layout="cluster")
    runner = TaskRunner(config, backend)
    # --8<-- [end:config]

    @runner.task(name="invoice", unique=True, unique_key=lambda p: p["order"], unique_for=60)
    async def invoice(payload: dict[str, str]) -> None: ...

    await runner.dispatch("invoice", {"order": "A-17"})
    await runner.dispatch_delayed("invoice", {"order": "B-2"}, delay=3600)

    names = [key.name for key in await admin.list_keys(backend, "shop")]
    for name in names:
        print(f"{name:40} slot {slot(name)}")
    print(f"{len(names)} keys, {len({slot(n) for n in names})} slot")

    try:
        TaskRunnerConfig(consumer_group="shop{eu}")
    except ValueError as exc:
        print(f"refused: {exc}")
    await backend.aclose()


if __name__ == "__main__":
    trio.run(main)
