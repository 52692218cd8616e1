"""Standalone server or cluster? Asked once, at the first call (``cluster=None``).

Theory of operation: :class:`DetectingRedisClient` is what
``RedisBackend.from_url(url)`` builds when the caller did not say: it is made
synchronously (no I/O before ``trio.run``), and its first call opens one
throwaway connection (to database 0, since a cluster refuses ``SELECT``), reads
``INFO cluster`` (:func:`is_cluster_info`, pure) and builds the real client,
a :class:`~._cluster_client.ClusterRedisClient` or a
:class:`~._client.NativeRedisClient`. From then on the chosen client's bound
methods replace this object's own (instance attributes shadow the class's), so
the hot path pays nothing for the choice. Dedicated connections handed out
before the choice wait for it on their first call.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._client import NativeRedisClient
from ._cluster_client import ClusterRedisClient
from ._config import ConnectionConfig
from ._connection import CommandArg, Reply
from ._errors import NoPermissionError

if TYPE_CHECKING:
    from ._protocol import DedicatedRedisConnection, RedisClient


def is_cluster_info(reply: bytes | str) -> bool:
    """Whether an ``INFO cluster`` reply says ``cluster_enabled:1``."""
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else reply
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "cluster_enabled":
            return value.strip() == "1"
    return False


async def ask_is_cluster(config: ConnectionConfig) -> bool:
    """Ask the server at ``config`` (on database 0) whether it is a cluster node.

    An ACL user may not run ``INFO``: that server is taken as standalone (a
    cluster's user passes ``cluster=True``).

    Raises:
        RedisConnectionError: It cannot be reached.
        ResponseError: It refused ``AUTH``.
    """
    probe = NativeRedisClient(attrs.evolve(config, db=0))
    try:
        return is_cluster_info(await probe.execute("INFO", "cluster"))
    except NoPermissionError:
        return False
    finally:
        await probe.aclose()


class DetectingRedisClient:
    """A :class:`~._protocol.RedisClient` that becomes the right one at its first call.

    Args:
        config: Where and how to connect.
        pool_size: Shared connections (per node on a cluster).
    """

    def __init__(self, config: ConnectionConfig, *, pool_size: int = 1) -> None:
        self.config = config
        self._pool_size = pool_size
        self._lock = trio.Lock()
        self.chosen: NativeRedisClient | ClusterRedisClient | None = None
        self._closed = False

    async def choose(self) -> NativeRedisClient | ClusterRedisClient:
        """The client for the server, asking it on the first call.

        Raises:
            RedisConnectionError: The server cannot be reached (asked again next time).
            ClusterCommandError: It is a cluster and the URL names a database other than 0.
        """
        async with self._lock:
            if self._closed:
                raise trio.ClosedResourceError("the client was closed")
            if self.chosen is None:
                chosen: NativeRedisClient | ClusterRedisClient
                if await ask_is_cluster(self.config):
                    chosen = ClusterRedisClient(self.config, pool_size=self._pool_size)
                else:
                    chosen = NativeRedisClient(self.config, pool_size=self._pool_size)
                self.chosen = chosen
                # From now on calls go straight to the chosen client's methods.
                self.execute = chosen.execute  # type: ignore[method-assign]
                self.pipeline = chosen.pipeline  # type: ignore[method-assign]
                self.masters = chosen.masters  # type: ignore[method-assign]
            return self.chosen

    async def execute(self, *args: CommandArg) -> Reply:
        return await (await self.choose()).execute(*args)

    async def pipeline(
        self, commands: Sequence[Sequence[CommandArg]], *, raise_on_error: bool = True
    ) -> list[Reply]:
        return await (await self.choose()).pipeline(commands, raise_on_error=raise_on_error)

    async def masters(self) -> Sequence[RedisClient]:
        return await (await self.choose()).masters()

    def dedicated(self) -> DedicatedRedisConnection:
        if self._closed:
            raise trio.ClosedResourceError("the client was closed")
        if self.chosen is not None:
            return self.chosen.dedicated()
        return _LateDedicated(self)

    async def aclose(self) -> None:
        self._closed = True
        if self.chosen is not None:
            await self.chosen.aclose()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> DetectingRedisClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        with trio.CancelScope(shield=True):
            await self.aclose()
        return None


class _LateDedicated:
    """A dedicated connection asked for before the choice: made at its first call."""

    def __init__(self, owner: DetectingRedisClient) -> None:
        self._owner = owner
        self._inner: Any = None
        self._closed = False

    async def execute(self, *args: CommandArg, reply_timeout: float | None = None) -> Reply:
        if self._closed:
            raise trio.ClosedResourceError("this dedicated connection was closed")
        if self._inner is None:
            self._inner = (await self._owner.choose()).dedicated()
        return await self._inner.execute(*args, reply_timeout=reply_timeout)

    async def aclose(self) -> None:
        self._closed = True
        if self._inner is not None:
            await self._inner.aclose()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> _LateDedicated:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


if TYPE_CHECKING:  # mypy checks that the protocols are implemented

    def _is_client(client: DetectingRedisClient) -> RedisClient:
        return client

    def _is_dedicated(connection: _LateDedicated) -> DedicatedRedisConnection:
        return connection
