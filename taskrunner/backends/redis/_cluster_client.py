"""The trio-native Redis Cluster client: a router over the native client per master.

Theory of operation: :class:`ClusterRedisClient` routes; its
:class:`~._cluster_nodes.ClusterNodes` holds one
:class:`~._client.NativeRedisClient` per node (each with its own auto-pipelined
shared connections, so every node keeps the order of what was submitted to it)
and the slot map, kept up to date. A call is decided synchronously first, by
the pure modules: :func:`~._cluster_slots.command_slot` finds the slot
(refusing keys that span slots, before anything is sent), the map gives the
master. Then the I/O: the command is submitted to that master's connection
(directly, on the common path); an error reply that is a redirect
(:func:`~._cluster_topology.parse_redirect`) is followed, each one bounded by
:data:`~._cluster_topology.MAX_REDIRECTS`: ``MOVED`` updates the map for that
slot, schedules a full refresh and resends to the new owner; ``ASK`` sends
``ASKING`` and the command in one write to the target, map unchanged;
``TRYAGAIN``, ``CLUSTERDOWN`` and ``UNBLOCKED`` wait
(:func:`~._cluster_topology.redirect_delay`) and resend, the last two after a
refresh. A redirect means the command did not run, so resending it is safe.

A command is never resent once it may have run: when a connection breaks
after the command was written, the outcome is unknown and the
:class:`~._errors.RedisConnectionError` is raised (a refresh is scheduled, the
node may be gone). Only a failure to connect (nothing was sent) is retried, on
a refreshed map, with backoff.

Walks of the whole key space (``SCAN``) must visit every master:
:meth:`ClusterRedisClient.masters` gives their clients. ``SCRIPT``,
``FLUSHDB``/``FLUSHALL`` and ``FUNCTION`` go to every master. Blocking commands
go through :meth:`ClusterRedisClient.dedicated` (:mod:`._cluster_dedicated`).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import trio

from ._cluster_nodes import ClusterNodes, ClusterStatistics, NotSent
from ._cluster_slots import command_slot
from ._cluster_topology import (
    MAX_REDIRECTS,
    Address,
    Redirect,
    RedirectKind,
    parse_redirect,
    redirect_delay,
)
from ._config import ConnectionConfig
from ._connection import CommandArg, Opener, Reply, open_connection, pack_command
from ._errors import (
    ClusterCommandError,
    RedisConnectionError,
    ResponseError,
    error_from_reply,
)
from ._multiplexed import wait_for

if TYPE_CHECKING:
    from ._cluster_dedicated import ClusterDedicatedConnection
    from ._protocol import RedisClient


ASKING = pack_command(("ASKING",))
BROADCAST = frozenset({b"SCRIPT", b"FLUSHDB", b"FLUSHALL", b"FUNCTION"})
"""Key-less commands that must reach every master (scripts are cached per node)."""


def _name(args: Sequence[CommandArg]) -> bytes:
    head = args[0] if args else b""
    return (head if isinstance(head, bytes) else str(head).encode()).upper()


def _unserved(slot: int) -> ResponseError:
    return error_from_reply(f"CLUSTERDOWN slot {slot} is served by no master the client knows")


class ClusterRedisClient:
    """A :class:`~._protocol.RedisClient` for a Redis or Valkey Cluster (module docstring).

    Use it as ``async with ClusterRedisClient(config) as client`` or, like the
    native client, without ``async with`` inside ``trio.run``.

    Args:
        config: How to connect; ``host``/``port`` is the first node to ask.
        seeds: More nodes to ask for the topology if that one does not answer.
        pool_size: Shared connections per node.
        refresh_interval: Seconds between background topology refreshes.
        opener: How connections are opened (tests pass in-memory fakes).

    Raises:
        ClusterCommandError: ``config`` selects a database other than 0.
        ValueError: ``config`` is a unix socket (a cluster is reached over TCP).
    """

    def __init__(
        self,
        config: ConnectionConfig,
        *,
        seeds: Sequence[Address] = (),
        pool_size: int = 1,
        refresh_interval: float = 30.0,
        opener: Opener = open_connection,
    ) -> None:
        if config.db:
            raise ClusterCommandError(
                "SELECT", f"a cluster has only database 0, the URL names database {config.db}"
            )
        if config.path is not None:
            raise ValueError(f"a cluster is reached over TCP, not the unix socket {config.path}")
        self.config = config
        self.nodes = ClusterNodes(
            config,
            seeds=seeds,
            pool_size=pool_size,
            refresh_interval=refresh_interval,
            opener=opener,
        )
        self._dedicated: set[ClusterDedicatedConnection] = set()
        self._nursery_manager: Any = None

    # -- life ------------------------------------------------------------------

    async def __aenter__(self) -> ClusterRedisClient:
        if self._nursery_manager is not None:
            raise RuntimeError("this client was already entered")
        manager = trio.open_nursery()
        self.nodes.nursery = await manager.__aenter__()
        self._nursery_manager = manager
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            with trio.CancelScope(shield=True):
                await self.aclose()
        finally:
            self.nodes.nursery = None
            try:
                result: bool | None = await self._nursery_manager.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group:
                if exc is not None and group.exceptions == (exc,):
                    return False  # only the strict nursery's wrapping (see NativeRedisClient)
                raise
        return result

    async def aclose(self) -> None:
        """Close every node's connections; later calls raise ``trio.ClosedResourceError``."""
        self.nodes.closed = True
        dedicated, self._dedicated = self._dedicated, set()
        for connection in list(dedicated):
            await connection.aclose()
        await self.nodes.aclose()
        await trio.lowlevel.checkpoint()

    def statistics(self) -> ClusterStatistics:
        """Counts of masters, node clients, refreshes and redirects followed."""
        return self.nodes.statistics()

    # -- the protocol ----------------------------------------------------------

    def dedicated(self) -> ClusterDedicatedConnection:
        """A new single-user connection for blocking commands, routed per call."""
        from ._cluster_dedicated import ClusterDedicatedConnection

        self.nodes.check_open()
        connection = ClusterDedicatedConnection(self.nodes, on_close=self._dedicated.discard)
        self._dedicated.add(connection)
        return connection

    async def masters(self) -> list[RedisClient]:
        """A client per master, for walks of the whole key space (``SCAN``).

        Raises:
            RedisConnectionError: No node answered for the topology.
        """
        cluster_map = await self.nodes.current_map()
        return [self.nodes.node(address) for address in cluster_map.masters]

    async def execute(self, *args: CommandArg) -> Reply:
        """Run one command on the master serving its keys (same contract as the
        native client's ``execute``).

        Raises:
            CrossSlotError: Its keys span slots; nothing was sent.
            ClusterCommandError: It cannot run on a cluster (``SELECT``, a bare
                ``SCAN``, ``MULTI``...); nothing was sent.
            ResponseError: The command's own error reply, or the last redirect
                when more than :data:`MAX_REDIRECTS` were followed.
            RedisConnectionError: The connection broke after the command was
                sent (it is not resent: it may have run), or no node could be
                reached.

        Cancellation: as the native client's; in the middle of a redirect the
        command either was not resent yet or is pending on its new node.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        slot = command_slot(args)
        data = pack_command(args)
        if slot is None and _name(args) in BROADCAST:
            masters = (await self.nodes.current_map()).masters
            replies = [await self.nodes.node(address).execute(*args) for address in masters]
            return replies[0]
        # The common case, with no layer of the general path: a map, a live
        # connection to the slot's master, a reply that is not a redirect.
        nodes = self.nodes
        cluster_map, node = nodes.map, None
        if cluster_map is not None and not nodes.closed:
            owner = nodes.owner_in(cluster_map, slot)
            node = nodes.clients.get(owner) if owner is not None else None
        if node is not None and nodes.is_fresh():
            try:
                waiter = (await node.shared()).submit(data, 1)
            except RedisConnectionError:
                pass  # nothing was sent: the general path retries on a fresh map
            else:
                reply = await wait_for(waiter)  # a broken connection raises: never resent
                if not isinstance(reply, ResponseError):
                    return reply
                assert owner is not None
                redirect = parse_redirect(reply, owner)
                if redirect is None:
                    raise reply
                (reply,) = await self._run([(slot, data)], first=redirect)
                if isinstance(reply, ResponseError):
                    raise reply
                return reply
        (reply,) = await self._run([(slot, data)])
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def pipeline(
        self, commands: Sequence[Sequence[CommandArg]], *, raise_on_error: bool = True
    ) -> list[Reply]:
        """Run commands on their masters, one write per node, replies in order.

        Each node receives its commands in the order given; commands of
        different nodes run concurrently. A redirected command is resent
        after the others of its node (it had not run). A key-less command
        goes with the command before it (``XADD`` then ``WAIT``: one node, one
        connection) and is resent with it. Same errors as
        :meth:`execute`; with ``raise_on_error`` false, error replies are
        returned in place (a redirect only once it is past its bound).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if not commands:
            return []
        calls = [(command_slot(command), pack_command(tuple(command))) for command in commands]
        if any(
            slot is None and _name(c) in BROADCAST
            for (slot, _), c in zip(calls, commands, strict=True)
        ):
            raise ClusterCommandError("SCRIPT", "send SCRIPT/FLUSH commands alone, not pipelined")
        # A key-less command (``WAIT`` after ``XADD``) goes with the command before
        # it, to the same node's connection, and is resent with it.
        leaders: dict[int, int] = {}
        keyed: int | None = None
        for index, (slot, _) in enumerate(calls):
            if slot is not None:
                keyed = index
            elif keyed is not None:
                leaders[index] = keyed
        replies = await self._run(calls, leaders=leaders)
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, ResponseError):
                    raise reply
        return replies

    # -- routing ---------------------------------------------------------------

    async def _run(
        self,
        calls: list[tuple[int | None, bytes]],
        *,
        first: Redirect | None = None,
        leaders: dict[int, int] | None = None,
    ) -> list[Reply]:
        """Send ``calls`` (slot, packed command) to their nodes, following redirects.

        ``first``: the redirect :meth:`execute`'s direct path met for its one
        call (it counts as the first of the bound). ``leaders``: the index of
        the command each key-less one follows.
        """
        leaders = leaders or {}
        nodes = self.nodes
        cluster_map = await nodes.current_map()
        replies: list[Reply] = [None] * len(calls)
        asking: dict[int, Address] = {}
        todo = list(range(len(calls)))
        last_error: BaseException | None = None
        start = 1
        if first is not None:
            start = 2
            nodes.count_redirect()
            if first.kind is RedirectKind.MOVED:
                assert first.slot is not None
                assert first.address is not None
                nodes.adopt_moved(first.slot, first.address)
            elif first.kind is RedirectKind.ASK:
                assert first.address is not None
                asking[0] = first.address
            else:
                await trio.sleep(redirect_delay(first.kind, 1))
                if first.kind is not RedirectKind.TRYAGAIN:
                    await nodes.refresh_quietly()
            cluster_map = nodes.map or cluster_map
        for attempt in range(start, MAX_REDIRECTS + 2):
            nodes.check_open()  # closed while we waited to resend
            nodes.maybe_refresh()
            by_node: dict[Address, list[int]] = {}
            targets: dict[int, Address | None] = {}
            for index in todo:
                slot = calls[index][0]
                if index in leaders:  # WAIT after XADD: on the same connection
                    target = targets.get(leaders[index])
                else:
                    target = asking.get(index) or nodes.owner_in(cluster_map, slot)
                targets[index] = target
                if target is None:
                    replies[index] = _unserved(slot or 0)
                    continue
                by_node.setdefault(target, []).append(index)
            results = await self._send_all(by_node, calls, asking)
            todo, wait, refresh = [], 0.0, False
            asking = {}
            for address, (sent, outcome) in results.items():
                if isinstance(outcome, BaseException):
                    if sent:
                        nodes.refresh_soon()
                        raise outcome
                    todo += by_node[address]  # could not connect: nothing was sent
                    refresh = True
                    wait = max(wait, redirect_delay(RedirectKind.CLUSTERDOWN, attempt))
                    last_error = outcome
                    continue
                for index, reply in zip(by_node[address], outcome, strict=True):
                    replies[index] = reply
                    redirect = (
                        parse_redirect(reply, address) if isinstance(reply, ResponseError) else None
                    )
                    if redirect is None or attempt > MAX_REDIRECTS:
                        continue
                    nodes.count_redirect()
                    todo.append(index)
                    if redirect.kind is RedirectKind.MOVED:
                        assert redirect.slot is not None
                        assert redirect.address is not None
                        nodes.adopt_moved(redirect.slot, redirect.address)
                    elif redirect.kind is RedirectKind.ASK:
                        assert redirect.address is not None
                        asking[index] = redirect.address
                    else:
                        refresh = refresh or redirect.kind is not RedirectKind.TRYAGAIN
                        wait = max(wait, redirect_delay(redirect.kind, attempt))
            if not todo:
                return replies
            redone = set(todo)
            todo += [i for i, lead in leaders.items() if lead in redone and i not in redone]
            todo.sort()  # keep each node's order on the resend, too
            if wait:
                await trio.sleep(wait)
            if refresh:
                await nodes.refresh_quietly()
            cluster_map = nodes.map or cluster_map
        # Past the bound only nodes that could not be reached are left to do.
        raise RedisConnectionError(f"could not reach the cluster: {last_error}") from last_error

    async def _send_all(
        self,
        by_node: dict[Address, list[int]],
        calls: list[tuple[int | None, bytes]],
        asking: dict[int, Address],
    ) -> dict[Address, tuple[bool, Any]]:
        """Each node's commands in one write; per node ``(sent, replies or error)``."""
        results: dict[Address, tuple[bool, Any]] = {}

        async def send(address: Address, indexes: list[int]) -> None:
            parts: list[bytes] = []
            for index in indexes:
                if index in asking:
                    parts.append(ASKING)
                parts.append(calls[index][1])
            try:
                got = await self.nodes.send(address, b"".join(parts), len(parts))
            except NotSent as exc:
                results[address] = (False, exc.error)
                return
            except RedisConnectionError as exc:
                results[address] = (True, exc)
                return
            if len(parts) == 1:
                got = [got]
            replies = []
            at = 0
            for index in indexes:
                at += index in asking  # the ASKING reply is +OK
                replies.append(got[at])
                at += 1
            results[address] = (True, replies)

        if len(by_node) == 1:  # one node (one hash tag): no nursery on the common path
            ((address, indexes),) = by_node.items()
            await send(address, indexes)
        else:
            async with trio.open_nursery() as nursery:
                for address, indexes in by_node.items():
                    nursery.start_soon(send, address, indexes)
        return results

    def owner_of(self, slot: int | None) -> Address | None:
        """The master serving ``slot`` in the current map (any master for ``None``)."""
        return self.nodes.owner_of(slot)

    async def refresh(self) -> None:
        """Read the slot map again now (see :meth:`ClusterNodes.refresh`)."""
        await self.nodes.refresh()


if TYPE_CHECKING:  # mypy checks that the protocol is implemented

    def _is_client(client: ClusterRedisClient) -> RedisClient:
        return client
