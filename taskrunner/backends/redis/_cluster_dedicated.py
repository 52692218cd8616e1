"""A dedicated connection on a cluster: one native dedicated connection per node.

Theory of operation: a blocking read (``XREADGROUP ... BLOCK``) must have a
connection of its own, on the master serving its keys. A
:class:`ClusterDedicatedConnection` keeps one
:class:`~._connection.DedicatedConnection` per node it was sent to, picks the
node per call from the client's map, and follows redirects as the shared path
does (bounded; ``ASKING`` then the command on the same connection for ``ASK``;
a read that Redis ends with ``UNBLOCKED`` because its master became a replica
is sent again to the new master).
A node's connection is opened with a ``PING`` first, so that a failure to
connect (nothing of the caller's was sent) can be retried on a refreshed map;
once the command was written, a broken connection is raised, never resent
(a read may have moved entries to the consumer's pending list).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ._cluster_slots import command_slot
from ._cluster_topology import MAX_REDIRECTS, Address, RedirectKind, parse_redirect, redirect_delay
from ._connection import CommandArg, DedicatedConnection, Reply, pack_command
from ._errors import RedisConnectionError, ResponseError, error_from_reply

if TYPE_CHECKING:
    from ._cluster_nodes import ClusterNodes
    from ._protocol import DedicatedRedisConnection


class ClusterDedicatedConnection:
    """A connection for one task's blocking commands on a cluster (module docstring).

    Made by :meth:`ClusterRedisClient.dedicated`; same contract as
    :class:`~._protocol.DedicatedRedisConnection`.
    """

    def __init__(
        self,
        nodes: ClusterNodes,
        *,
        on_close: Callable[[ClusterDedicatedConnection], object] | None = None,
    ) -> None:
        self._nodes = nodes
        self._on_close = on_close
        self._connections: dict[Address, DedicatedConnection] = {}
        self._closed = False
        self._busy = False

    async def execute(self, *args: CommandArg, reply_timeout: float | None = None) -> Reply:
        """Run one command on the master serving its keys.

        Raises:
            CrossSlotError: Its keys span slots; nothing was sent.
            ResponseError: Its own error reply, or the last redirect past the bound.
            RedisConnectionError: The connection broke after sending (not
                resent), or no node could be reached.
            trio.BusyResourceError: Another task is using this connection.
            trio.ClosedResourceError: It was closed.

        Cancellation: as the native dedicated connection's (the node's
        connection is closed; the command may have run).
        """
        if self._closed:
            raise trio.ClosedResourceError("this dedicated connection was closed")
        if self._busy:
            raise trio.BusyResourceError("another task is using this dedicated connection")
        slot = command_slot(args)
        pack_command(args)  # refuse an unencodable argument before anything is sent
        self._busy = True
        try:
            return await self._run(slot, args, reply_timeout)
        finally:
            self._busy = False

    async def _run(
        self, slot: int | None, args: tuple[CommandArg, ...], reply_timeout: float | None
    ) -> Reply:
        nodes = self._nodes
        await nodes.current_map()
        asking: Address | None = None
        last: BaseException | None = None
        for attempt in range(1, MAX_REDIRECTS + 2):
            target = asking or nodes.owner_of(slot)
            if target is None:
                raise error_from_reply(f"CLUSTERDOWN slot {slot} is served by no known master")
            connection = self._connection(target)
            if not connection.is_connected:
                try:
                    await connection.execute("PING")
                except RedisConnectionError as exc:  # nothing of ours was sent
                    last = exc
                    await trio.sleep(redirect_delay(RedirectKind.CLUSTERDOWN, attempt))
                    await nodes.refresh_quietly()
                    asking = None
                    continue
            try:
                if asking is not None:
                    await connection.execute("ASKING")
                return await connection.execute(*args, reply_timeout=reply_timeout)
            except ResponseError as error:
                redirect = parse_redirect(error, target)
                if redirect is None or attempt > MAX_REDIRECTS:
                    raise
                nodes.count_redirect()
                asking = None
                if redirect.kind is RedirectKind.MOVED:
                    assert redirect.slot is not None
                    assert redirect.address is not None
                    nodes.adopt_moved(redirect.slot, redirect.address)
                elif redirect.kind is RedirectKind.ASK:
                    asking = redirect.address
                else:
                    await trio.sleep(redirect_delay(redirect.kind, attempt))
                    if redirect.kind is not RedirectKind.TRYAGAIN:
                        await nodes.refresh_quietly()
            except RedisConnectionError:
                nodes.refresh_soon()  # the node may be gone; the command may have run
                raise
        raise RedisConnectionError(f"could not reach the cluster: {last}") from last

    def _connection(self, address: Address) -> DedicatedConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = self._nodes.node(address).dedicated()
        return connection

    async def aclose(self) -> None:
        """Close it (every node's connection); later calls raise ``trio.ClosedResourceError``."""
        self._closed = True
        if self._on_close is not None:
            self._on_close(self)
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.aclose()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> ClusterDedicatedConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


if TYPE_CHECKING:  # mypy checks that the protocol is implemented

    def _is_dedicated(connection: ClusterDedicatedConnection) -> DedicatedRedisConnection:
        return connection
