"""Clients for the connection-layer tests, one per transport.

``client`` is parametrized over the transports the Redis backend can run on:
``native`` (:class:`NativeRedisClient` on the real server), ``redis-py``
(:class:`PyRedisClient` over ``redis.Redis`` on the same server) and
``fakeredis`` (:class:`PyRedisClient` over an in-process ``FakeRedis``).
``kind`` tells a test which one it got, for the documented fakeredis
differences.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import fakeredis
import pytest

from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._protocol import RedisClient
from taskrunner.backends.redis._pyredis import PyRedisClient

TRANSPORTS = ["native", "redis-py", "fakeredis"]


@pytest.fixture(params=TRANSPORTS)
def kind(request: pytest.FixtureRequest) -> str:
    """Which transport ``client`` uses."""
    param: str = request.param
    return param


@pytest.fixture
async def client(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[RedisClient]:
    """A client of transport ``kind`` on an empty database."""
    if kind == "fakeredis":
        async with PyRedisClient(
            fakeredis.FakeRedis(server=fakeredis.FakeServer(), protocol=2)
        ) as fake:
            yield fake
        return
    url: str = request.getfixturevalue("redis_url")
    if kind == "native":
        async with NativeRedisClient.from_url(url) as native:
            yield native
    else:
        async with PyRedisClient.from_url(url) as threaded:
            yield threaded
