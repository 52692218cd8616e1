"""Producers on a ``redis+sentinel://`` URL: redis-py's ``Sentinel`` underneath.

``Sentinel(...).master_for(service)`` gives a client whose connection pool asks
the sentinels for the master at each new connection, and drops a connection
that answers ``READONLY`` (the master moved). The client it returns is a
subclass here only so that closing it closes the sentinels' connections too.
redis-py does not hold writes during a failover, as the workers' native client
does (``docs/redis-sentinel.md``).
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from taskrunner.backends.redis._sentinel_config import redis_py_sentinel_options


class SentinelMaster(redis.Redis):
    """``redis.Redis`` on the master; :meth:`close` closes the sentinels' clients too."""

    finder: redis.sentinel.Sentinel | None = None

    def close(self) -> None:
        super().close()
        if self.finder is not None:
            for client in self.finder.sentinels:
                client.close()


class AsyncSentinelMaster(redis.asyncio.Redis):
    """``redis.asyncio.Redis`` on the master; :meth:`aclose` closes the sentinels' too."""

    finder: redis.asyncio.sentinel.Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.finder is not None:
            for client in self.finder.sentinels:
                await client.aclose()


def _arguments(url: str, defaults: dict[str, Any], given: dict[str, Any]) -> tuple[Any, ...]:
    sentinels, service, sentinel_kwargs, master_kwargs = redis_py_sentinel_options(url)
    # Keywords win over the URL, the URL over the producer's default timeouts.
    return sentinels, service, sentinel_kwargs, defaults | master_kwargs | given


def sync_master(url: str, defaults: dict[str, Any], given: dict[str, Any]) -> redis.Redis:
    """A sync client on the master the URL's sentinels name."""
    sentinels, service, sentinel_kwargs, options = _arguments(url, defaults, given)
    finder = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        sentinels, sentinel_kwargs=sentinel_kwargs, **options
    )
    master: SentinelMaster = finder.master_for(  # type: ignore[no-untyped-call]
        service, redis_class=SentinelMaster
    )
    master.finder = finder
    return master


def async_master(url: str, defaults: dict[str, Any], given: dict[str, Any]) -> redis.asyncio.Redis:
    """A redis.asyncio client on the master the URL's sentinels name."""
    sentinels, service, sentinel_kwargs, options = _arguments(url, defaults, given)
    finder = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        sentinels, sentinel_kwargs=sentinel_kwargs, **options
    )
    master: AsyncSentinelMaster = finder.master_for(service, redis_class=AsyncSentinelMaster)
    master.finder = finder
    return master
