"""``RedisBackend``: the Redis Streams queue and the shared state, on one client.

Built synchronously (``RedisBackend.from_url(...)`` at import time, then
``trio.run(runner.serve)``): no connection is opened until the first call
inside trio. ``aclose()`` (or ``async with``) closes the fetchers' dedicated
connections and, when the backend created the client, the client too.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from taskrunner._keys import KeyLayout
from taskrunner.backends.redis._catalog import RedisCatalog
from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._defer import RedisDefer
from taskrunner.backends.redis._flow import RedisFlow
from taskrunner.backends.redis._inspect import RedisInspection
from taskrunner.backends.redis._protocol import RedisClient
from taskrunner.backends.redis._pyredis import PyRedisClient
from taskrunner.backends.redis._queue import RedisQueue
from taskrunner.backends.redis._schedules import RedisSchedules
from taskrunner.backends.redis._state import RedisState
from taskrunner.backends.redis._tracking import RedisTracking


class RedisBackend(
    RedisInspection, RedisDefer, RedisFlow, RedisCatalog, RedisSchedules, RedisTracking
):
    """Queue, shared state, deferral through the delayed set, flow control, task
    catalog, periodic schedules and task tracking on Redis (>= 6.2; 7+
    recommended), and their
    :class:`~taskrunner.backends.Inspection`.

    Args:
        client: Any :class:`RedisClient` (native or redis-py transport).
        prefix: Stream namespace: the stream is ``<prefix>:<queue>``. ``None``
            (the default) means ``taskrunner:<group>``, one stream per consumer
            group; pass ``"taskrunner"`` to share ``taskrunner:<queue>`` with
            a Go fleet, or one prefix to have several groups read one stream.
        queue: Stream name.
        delete_on_ack: ``XDEL`` entries when they are acked (keeps the stream short).
        key_layout: How keys are named (see docs/redis-key-layout.md): ``"go"``, the
            Go library's layout, or ``"cluster"``, every key of a group under the
            hash tag ``{<group>}``. ``None`` (the default) is the backend's choice,
            ``"cluster"`` on a Redis Cluster and ``"go"`` elsewhere, unless a
            runner's ``TaskRunnerConfig.key_layout`` asks for one first.
        owns_client: Close ``client`` in :meth:`aclose` (true for the clients
            :meth:`from_url` and :meth:`from_client` wrap; the latter never
            closes the redis-py client you passed).

    Prefer :meth:`from_url` or :meth:`from_client`.
    """

    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str | None = None,
        queue: str = "tasks",
        delete_on_ack: bool = True,
        owns_client: bool = True,
        key_layout: KeyLayout | None = None,
    ) -> None:
        RedisQueue.__init__(
            self,
            client,
            prefix=prefix,
            queue=queue,
            delete_on_ack=delete_on_ack,
            key_layout=key_layout,
        )
        RedisState.__init__(self, client, stream_of=self._stream)
        self._init_tracking()
        self.client = client
        self._owns_client = owns_client

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str | None = None,
        queue: str = "tasks",
        delete_on_ack: bool = True,
        pool_size: int = 1,
        key_layout: KeyLayout | None = None,
        **options: Any,
    ) -> RedisBackend:
        """A backend on the trio-native client.

        Args:
            url: ``redis://[user:password@]host:port/db``, ``rediss://...`` (TLS),
                or ``unix:///path?db=N``.
            pool_size: Shared (auto-pipelined) connections; each fetcher also
                gets a dedicated one for its blocking reads.
            options: Connection options (timeouts, ``ssl_*``), see
                ``docs/redis-connection.md``.

        Raises:
            ValueError: the URL cannot be parsed.
        """
        client = NativeRedisClient.from_url(url, pool_size=pool_size, **options)
        return cls(
            client,
            prefix=prefix,
            queue=queue,
            delete_on_ack=delete_on_ack,
            key_layout=key_layout,
        )

    @classmethod
    def from_client(
        cls,
        client: Any,
        *,
        prefix: str | None = None,
        queue: str = "tasks",
        delete_on_ack: bool = True,
        key_layout: KeyLayout | None = None,
    ) -> RedisBackend:
        """A backend on any redis-py sync client (``redis.Redis``,
        ``redis.RedisCluster``, ``fakeredis.FakeRedis``...), called in worker
        threads. The client stays yours: :meth:`aclose` does not close it.
        """
        return cls(
            PyRedisClient(client, close_client=False),
            prefix=prefix,
            queue=queue,
            delete_on_ack=delete_on_ack,
            key_layout=key_layout,
        )

    def __repr__(self) -> str:
        return f"RedisBackend(prefix={self.prefix!r}, queue={self.queue!r})"

    async def aclose(self) -> None:
        """Close the dedicated connections, and the client if this backend made it."""
        await self._close_readers()
        await self._close_waiters()
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> RedisBackend:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
