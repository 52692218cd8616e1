"""The trio-native Redis client under RedisBackend, used directly (docs/redis-connection.md).

``python examples/redis_connection.py``; it connects to ``$REDIS_URL``
(default ``redis://127.0.0.1:6379/0``) and leaves no keys behind. These are
private modules: the backend's building blocks, not a public API.
"""

import os

import trio

# --8<-- [start:usage]
from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._errors import BusyGroupError
from taskrunner.backends.redis._scripts import Script

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


async def main() -> None:
    async with NativeRedisClient.from_url(REDIS_URL, pool_size=1) as client:
        print(await client.execute("SET", "k", "v", "NX", "PX", 30_000))  # b'OK' or None
        print(await client.pipeline([("INCR", "n"), ("GET", "n")]))  # [1, b'1']
        try:
            await client.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        except BusyGroupError:
            pass  # the group exists already
        await client.execute("XADD", "s", "*", "payload", "hello")
        async with client.dedicated() as fetcher:  # one per blocking reader
            entries = await fetcher.execute(
                "XREADGROUP", "GROUP", "g", "c1", "COUNT", 10, "BLOCK", 5000, "STREAMS", "s", ">",
                reply_timeout=5 + 10,  # must exceed BLOCK
            )  # fmt: skip
        print(entries[0][1][0][1])  # [b'payload', b'hello']
        get = Script("return redis.call('GET', KEYS[1])")
        print(await get(client, keys=["k"], args=[]))  # b'v'
        # --8<-- [end:usage]
        await client.execute("DEL", "k", "n", "s")


if __name__ == "__main__":
    trio.run(main)
