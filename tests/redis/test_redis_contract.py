"""The backend contract suite on RedisBackend: native client on a real server,
redis-py client on the same server, and fakeredis in process."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import fakeredis
import pytest

from taskrunner._keys import KeyLayout
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import contract_parametrize


@pytest.fixture(params=["native", "redis-py", "fakeredis"])
async def make_backend(request: pytest.FixtureRequest) -> AsyncIterator[object]:
    opened: list[RedisBackend] = []

    def make(
        delete_on_ack: bool = True, prefix: str | None = None, key_layout: KeyLayout = "go"
    ) -> RedisBackend:
        queue = f"contract-{uuid.uuid4().hex[:8]}"
        options = {
            "prefix": prefix,
            "queue": queue,
            "delete_on_ack": delete_on_ack,
            "key_layout": key_layout,
        }
        if request.param == "fakeredis":
            server = fakeredis.FakeServer()
            backend = RedisBackend.from_client(
                fakeredis.FakeRedis(server=server, protocol=2), **options
            )
        elif request.param == "redis-py":
            import redis

            url = request.getfixturevalue("redis_url")
            backend = RedisBackend.from_client(redis.Redis.from_url(url, protocol=2), **options)
        else:
            url = request.getfixturevalue("redis_url")
            backend = RedisBackend.from_url(url, **options)
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        await backend.aclose()


@contract_parametrize()
@pytest.mark.parametrize("delete_on_ack", [True, False], ids=["delete", "keep"])
@pytest.mark.parametrize(
    ("key_layout", "prefix"),
    [("go", None), ("go", "taskrunner"), ("cluster", None)],
    ids=["per_group", "shared", "cluster"],
)
async def test_redis_contract(check, make_backend, delete_on_ack: bool, key_layout, prefix) -> None:  # type: ignore[no-untyped-def]
    """Both key layouts: the go layout with a stream per group and with one shared
    stream, and the cluster layout (every key of a group under ``{<group>}``; a shared
    stream cannot be, its groups' keys would be in different slots)."""
    await check(make_backend(delete_on_ack, prefix, key_layout))
