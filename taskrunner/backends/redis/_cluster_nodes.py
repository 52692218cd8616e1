"""The nodes of a cluster and the slot map: who serves what, kept up to date.

Theory of operation: :class:`ClusterNodes` holds one
:class:`~._client.NativeRedisClient` per node the client talks to (made on
first use, closed with the client) and the current
:class:`~._cluster_topology.ClusterMap`. The map is read at the first call,
replaced on ``MOVED`` for one slot (:meth:`ClusterNodes.adopt_moved`), and
refreshed whole from ``CLUSTER SHARDS`` (``CLUSTER SLOTS`` on servers without
it) of the first node that answers: masters and replicas known first, then the
seeds, nodes that failed to connect last (their backoff would hold the refresh
up). One refresh runs at a time; :meth:`ClusterNodes.refresh_soon` starts one
in the background (in the client's nursery, or as a trio system task for a
client used without ``async with``), on ``MOVED``, a lost node, and when the
map is older than ``refresh_interval``. A map that leaves slots unserved keeps
their old owners (:meth:`~._cluster_topology.ClusterMap.over`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import attrs
import trio

from ._client import NativeRedisClient
from ._cluster_topology import Address, ClusterMap, parse_shards, parse_slots
from ._config import ConnectionConfig
from ._connection import Opener, Reply
from ._errors import RedisConnectionError, ResponseError
from ._multiplexed import wait_for

logger = logging.getLogger(__name__)


class NotSent(Exception):
    """Internal: ``error`` happened before the command was written (safe to resend)."""

    def __init__(self, error: RedisConnectionError) -> None:
        super().__init__(str(error))
        self.error = error


@attrs.frozen(kw_only=True)
class ClusterStatistics:
    """A snapshot of a :class:`ClusterRedisClient`."""

    masters: int
    """Masters in the current map."""
    nodes: int
    """Nodes with a client (masters, and nodes asked or redirected to before)."""
    refreshes: int
    """Topology maps adopted so far."""
    redirects: int
    """``MOVED``/``ASK``/``TRYAGAIN``/``CLUSTERDOWN`` replies followed so far."""


class ClusterNodes:
    """A cluster's node clients and slot map (see the module docstring)."""

    def __init__(
        self,
        config: ConnectionConfig,
        *,
        seeds: Sequence[Address],
        pool_size: int,
        refresh_interval: float,
        opener: Opener,
    ) -> None:
        self.config = config
        self._seeds: tuple[Address, ...] = ((config.host, config.port), *seeds)
        self._pool_size = pool_size
        self._opener = opener
        self.refresh_interval = refresh_interval
        self.clients: dict[Address, NativeRedisClient] = {}
        self.map: ClusterMap | None = None
        self._refresh_lock = trio.Lock()
        self.refreshes = 0
        self.refreshed_at = -math.inf
        self._refreshing = False
        self.redirects = 0
        self.nursery: trio.Nursery | None = None
        # Cancelled by aclose: a background refresh ends at once, not the
        # client's whole nursery (the caller's own code may run inside it).
        self._background: trio.CancelScope | None = None
        self.closed = False

    async def aclose(self) -> None:
        """Stop a background refresh and close every node's client."""
        self.closed = True
        if self._background is not None:
            self._background.cancel()
        clients, self.clients = self.clients, {}
        for client in clients.values():
            await client.aclose()

    def statistics(self) -> ClusterStatistics:
        """Counts of masters, node clients, refreshes and redirects followed."""
        return ClusterStatistics(
            masters=len(self.map.masters) if self.map is not None else 0,
            nodes=len(self.clients),
            refreshes=self.refreshes,
            redirects=self.redirects,
        )

    async def send(self, address: Address, data: bytes, count: int) -> Reply:
        """Write ``data`` (``count`` packed commands) to ``address``; its reply or replies.

        Raises:
            NotSent: Connecting failed; nothing was written.
            RedisConnectionError: The connection broke after writing.
        """
        node = self.node(address)
        try:
            connection = await node.shared()
            waiter = connection.submit(data, count)
        except RedisConnectionError as exc:
            raise NotSent(exc) from exc
        return await wait_for(waiter)

    def check_open(self) -> None:
        """Raise ``trio.ClosedResourceError`` once closed."""
        if self.closed:
            raise trio.ClosedResourceError("the client was closed")

    @staticmethod
    def owner_in(cluster_map: ClusterMap, slot: int | None) -> Address | None:
        """The master of ``slot`` in ``cluster_map`` (the first master for ``None``)."""
        if slot is None:
            masters = cluster_map.masters
            return masters[0] if masters else None
        return cluster_map.owners[slot]

    def node(self, address: Address) -> NativeRedisClient:
        """The client of the node at ``address`` (made on first use)."""
        self.check_open()
        node = self.clients.get(address)
        if node is None:
            config = attrs.evolve(self.config, host=address[0], port=address[1])
            node = NativeRedisClient(config, pool_size=self._pool_size, opener=self._opener)
            if self.nursery is not None:
                node._nursery = self.nursery  # its connections live in the client's nursery
            self.clients[address] = node
        return node

    async def current_map(self) -> ClusterMap:
        """The slot map, read from the cluster at the first call.

        Raises:
            RedisConnectionError: No node answered.
        """
        self.check_open()
        if self.map is None:
            await self.refresh()
        assert self.map is not None
        return self.map

    def owner_of(self, slot: int | None) -> Address | None:
        """The master serving ``slot`` in the current map (any master for ``None``)."""
        return None if self.map is None else self.owner_in(self.map, slot)

    def count_redirect(self) -> None:
        """Count one redirect followed (for the client's ``statistics()``)."""
        self.redirects += 1

    def adopt_moved(self, slot: int, address: Address) -> None:
        """What ``MOVED`` says: ``slot`` is served by ``address``; refresh the rest soon."""
        if self.map is not None:
            self.map = self.map.moved(slot, address)
        self.refresh_soon()

    def is_fresh(self) -> bool:
        """Whether the map is younger than ``refresh_interval``."""
        return trio.current_time() - self.refreshed_at <= self.refresh_interval

    def maybe_refresh(self) -> None:
        """Start a background refresh if the map is stale."""
        if trio.current_time() - self.refreshed_at > self.refresh_interval:
            self.refresh_soon()

    def refresh_soon(self) -> None:
        """Refresh the map in the background, unless a refresh is under way."""
        if self._refreshing or self.closed:
            return
        self._refreshing = True
        self.refreshed_at = trio.current_time()  # no second start while this one runs
        if self.nursery is not None:
            self.nursery.start_soon(self._background_refresh)
        else:
            trio.lowlevel.spawn_system_task(self._background_refresh)

    async def _background_refresh(self) -> None:
        try:
            with trio.CancelScope() as self._background:  # one at a time (_refreshing)
                await self.refresh_quietly()
        finally:
            self._refreshing = False
            self._background = None

    async def refresh_quietly(self) -> None:
        """:meth:`refresh`, logging a failure instead of raising it."""
        try:
            await self.refresh()
        except (RedisConnectionError, ResponseError, trio.ClosedResourceError) as exc:
            logger.info("Redis Cluster topology refresh failed: %s", exc)
        except Exception:  # a bug must not crash a (system) task
            logger.exception("Unexpected error refreshing the Redis Cluster topology")

    async def refresh(self) -> None:
        """Read the slot map from the first node that answers; one refresh at a time.

        A map that leaves slots unserved keeps the old owners of those slots
        (a shard whose master failed, before its replica is promoted).

        Raises:
            RedisConnectionError: No known node answered.
        """
        seen = self.refreshes
        async with self._refresh_lock:
            if self.refreshes != seen and self.map is not None:
                return  # refreshed while we waited for the lock
            last: BaseException | None = None
            for address in self._candidates():
                fresh: ClusterMap | None = None
                try:
                    # A hung node must not hold every refresh for a whole
                    # command timeout: the next candidate is asked instead.
                    with trio.move_on_after(self.config.connect_timeout):
                        fresh = await self._ask_topology(address)
                except (RedisConnectionError, ResponseError, ValueError) as exc:
                    last = exc
                    continue
                if fresh is None:
                    last = RedisConnectionError(f"{address[0]}:{address[1]} did not answer")
                    continue
                if not fresh.masters:
                    last = RedisConnectionError(f"{address[0]}:{address[1]} serves no slot")
                    continue
                self._adopt(fresh)
                return
            raise RedisConnectionError(f"no node of the cluster answered: {last}") from last

    def _adopt(self, fresh: ClusterMap) -> None:
        old = self.map
        if old is not None and fresh.missing_slots():
            fresh = fresh.over(old)
        self.map = fresh
        self.refreshes += 1
        self.refreshed_at = trio.current_time()

    def _candidates(self) -> list[Address]:
        found: list[Address] = []
        if self.map is not None:
            for shard in self.map.shards:
                found += [shard.master, *shard.replicas]
        found += [*self._seeds, *self.clients]
        # Nodes that failed to connect last go last: their backoff would hold us up.
        return sorted(dict.fromkeys(found), key=self._connect_failures)

    def _connect_failures(self, address: Address) -> int:
        node = self.clients.get(address)
        return 0 if node is None else node.statistics().connect_failures

    async def _ask_topology(self, address: Address) -> ClusterMap:
        node = self.node(address)
        try:
            reply = await node.execute("CLUSTER", "SHARDS")
        except ResponseError as exc:
            if exc.code != "ERR":  # unknown subcommand on Redis < 7
                raise
            return parse_slots(await node.execute("CLUSTER", "SLOTS"), address)
        return parse_shards(reply, address, tls=self.config.ssl_context is not None)
