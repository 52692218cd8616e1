"""``RedisBackend``: the Redis Streams queue and the shared state, on one client.

Built synchronously (``RedisBackend.from_url(...)`` at import time, then
``trio.run(runner.serve)``): no connection is opened until the first call
inside trio. ``aclose()`` (or ``async with``) closes the fetchers' dedicated
connections and, when the backend created the client, the client too.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

from taskrunner._keys import KeyLayout
from taskrunner.backends.redis._catalog import RedisCatalog
from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._cluster_client import ClusterRedisClient
from taskrunner.backends.redis._config import ConnectionConfig
from taskrunner.backends.redis._defer import RedisDefer
from taskrunner.backends.redis._detect import DetectingRedisClient
from taskrunner.backends.redis._events import RedisEvents
from taskrunner.backends.redis._flow import RedisFlow
from taskrunner.backends.redis._inspect import RedisInspection
from taskrunner.backends.redis._protocol import RedisClient
from taskrunner.backends.redis._pyredis import PyRedisClient
from taskrunner.backends.redis._queue import RedisQueue
from taskrunner.backends.redis._replicas import RedisReplicas
from taskrunner.backends.redis._schedules import RedisSchedules
from taskrunner.backends.redis._sentinel import SentinelRedisClient
from taskrunner.backends.redis._sentinel_config import SentinelConfig, is_sentinel_url
from taskrunner.backends.redis._state import RedisState
from taskrunner.backends.redis._workflows import RedisWorkflows


class RedisBackend(
    RedisEvents,
    RedisInspection,
    RedisDefer,
    RedisFlow,
    RedisCatalog,
    RedisSchedules,
    RedisWorkflows,
    RedisReplicas,
):
    """Queue, shared state, deferral through the delayed set, flow control, task
    catalog, periodic schedules, task tracking and the event log on Redis (>= 6.2; 7+
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
        cluster: bool | None = None,
        **options: Any,
    ) -> RedisBackend:
        """A backend on the trio-native client.

        Args:
            url: ``redis://[user:password@]host:port/db``, ``rediss://...`` (TLS),
                ``unix:///path?db=N``, or through Sentinel
                ``redis+sentinel://[user:password@]s1:26379,s2:26379/mymaster/0``
                (``rediss+sentinel://`` for TLS to the master; the sentinels' own
                password and TLS are the ``sentinel_*`` query options, see
                ``docs/redis-sentinel.md``). For a cluster, any node (database 0).
            pool_size: Shared (auto-pipelined) connections, per node on a
                cluster; each fetcher also gets a dedicated one for its
                blocking reads.
            cluster: ``None`` (the default) asks the server once, at the first
                call (``INFO cluster``), and uses the cluster client if it is a
                cluster node; ``True`` forces the cluster client, ``False`` the
                standalone one. A Sentinel URL is never a cluster.
            options: Connection options (timeouts, ``ssl_*``), see
                ``docs/redis-connection.md``.

        Raises:
            ValueError: the URL cannot be parsed, or ``cluster=True`` with a
                unix socket.
            ClusterCommandError: ``cluster=True`` and the URL names a database
                other than 0 (with ``cluster=None``, raised by the first call).
        """
        client: RedisClient
        if is_sentinel_url(url):
            if cluster:
                raise ValueError("cluster=True with a Sentinel URL: Sentinel serves no cluster")
            client = SentinelRedisClient.from_url(url, pool_size=pool_size, **options)
            return cls(
                client,
                prefix=prefix,
                queue=queue,
                delete_on_ack=delete_on_ack,
                key_layout=key_layout,
            )
        config = ConnectionConfig.from_url(url, **options)
        if cluster is None:
            client = DetectingRedisClient(config, pool_size=pool_size)
        elif cluster:
            client = ClusterRedisClient(config, pool_size=pool_size)
        else:
            client = NativeRedisClient(config, pool_size=pool_size)
        return cls(
            client,
            prefix=prefix,
            queue=queue,
            delete_on_ack=delete_on_ack,
            key_layout=key_layout,
        )

    @classmethod
    def from_sentinel(
        cls,
        sentinels: Sequence[tuple[str, int]],
        service_name: str,
        *,
        db: int = 0,
        password: str | None = None,
        username: str | None = None,
        sentinel_password: str | None = None,
        sentinel_username: str | None = None,
        prefix: str | None = None,
        queue: str = "tasks",
        delete_on_ack: bool = True,
        pool_size: int = 1,
        key_layout: KeyLayout | None = None,
        **options: Any,
    ) -> RedisBackend:
        """A backend on the master that ``sentinels`` name for ``service_name``.

        The client asks the sentinels where the master is at every connect,
        checks ``ROLE``, follows ``+switch-master`` and holds commands during a
        failover (``docs/redis-sentinel.md``).

        Args:
            sentinels: ``(host, port)`` of the sentinels, asked in order.
            service_name: The master's name in the sentinels' configuration.
            db: Database index on the master.
            password: The master's password (``username`` its ACL user).
            sentinel_password: The sentinels' own password (``sentinel_username``
                their ACL user); ``None``: they need none.
            options: The master's :class:`ConnectionConfig` fields (``ssl_context``,
                timeouts, ``client_name``) and the sentinels' as ``sentinel_ssl_context``,
                ``sentinel_timeout`` (0.5 s per sentinel), ``failover_hold``
                (10 s).

        Raises:
            ValueError: an empty sentinel list or service name, or a bad option.
        """
        sentinel_options = {
            "sentinel_ssl_context": "ssl_context",
            "sentinel_timeout": "timeout",
            "failover_hold": "failover_hold",
        }
        sentinel_fields = {
            field: options.pop(name) for name, field in sentinel_options.items() if name in options
        }
        config = SentinelConfig(
            sentinels=tuple(sentinels),
            service_name=service_name,
            username=sentinel_username,
            password=sentinel_password,
            **sentinel_fields,
        )
        master = ConnectionConfig(db=db, password=password, username=username, **options)
        client = SentinelRedisClient(config, master, pool_size=pool_size)
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

    def _detected_cluster(self) -> bool | None:
        client: object = self.client
        if isinstance(client, DetectingRedisClient):
            if client.chosen is None:
                return None  # not asked yet: see detect_cluster
            client = client.chosen
        return isinstance(client, ClusterRedisClient)

    async def detect_cluster(self) -> bool:
        """Ask the server whether it is a Redis Cluster now (``INFO cluster``), if the
        client (``from_url(cluster=None)``) has not yet; the key layout follows."""
        if isinstance(self.client, DetectingRedisClient):
            await self.client.choose()
        return self.cluster

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
