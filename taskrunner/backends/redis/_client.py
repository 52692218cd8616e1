"""The trio-native client: a small pool of shared, auto-pipelined connections.

:class:`NativeRedisClient` keeps ``pool_size`` slots, each holding at most one
:class:`~._multiplexed.SharedConnection`. A call picks a slot (an idle live
connection first, then an unopened slot, then the least busy live one),
opening the connection on demand under the slot's lock; callers queued behind
a failed attempt fail with that attempt's error rather than each trying again,
and the next attempt waits out the slot's backoff delay. The connections'
reader/writer tasks run in a nursery the client opens in ``__aenter__``; a
client used without ``async with`` runs them as trio system tasks instead
(then :meth:`NativeRedisClient.aclose` ends them, or the end of ``trio.run``).

Blocking commands go through :meth:`NativeRedisClient.dedicated`, which hands
out a :class:`~._connection.DedicatedConnection` of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._config import ConnectionConfig
from ._connection import (
    CommandArg,
    DedicatedConnection,
    Opener,
    Reconnector,
    Reply,
    open_connection,
    pack_command,
    pack_commands,
)
from ._errors import RedisConnectionError, ResponseError
from ._multiplexed import SharedConnection, wait_for

if TYPE_CHECKING:
    from ._protocol import DedicatedRedisConnection, RedisClient


@attrs.frozen(kw_only=True)
class ClientStatistics:
    """A snapshot of a :class:`NativeRedisClient`'s connections."""

    shared_connections: int
    """Shared connections currently open (at most ``pool_size``)."""
    pending_requests: int
    """Requests sent or queued on shared connections whose replies have not all arrived
    (a pipeline counts once)."""
    dedicated_connections: int
    """Dedicated connections handed out and not closed (open or waiting to reopen)."""
    connect_failures: int
    """Consecutive failed connect attempts of the shared slots (0 when all is well)."""


class _Slot:
    __slots__ = ("connection", "lock", "reconnector")

    def __init__(self, config: ConnectionConfig, opener: Opener) -> None:
        self.connection: SharedConnection | None = None
        self.lock = trio.Lock()
        self.reconnector = Reconnector(config, opener)


class NativeRedisClient:
    """A Redis client running natively on trio (see the module docstring).

    Use it as ``async with NativeRedisClient.from_url(url) as client: ...``,
    or without ``async with`` anywhere inside ``trio.run`` (connections then
    run as trio system tasks; call :meth:`aclose` when done).
    Concurrent :meth:`execute`/:meth:`pipeline` calls share ``pool_size``
    connections and are pipelined automatically. Replies are never decoded.

    Args:
        config: Where and how to connect.
        pool_size: Number of shared connections (at least 1).
        opener: Opens each connection (default :func:`~._connection.open_connection`
            on ``config``; the Sentinel client's finds the master first; tests
            pass in-memory fakes).
    """

    def __init__(
        self, config: ConnectionConfig, *, pool_size: int = 1, opener: Opener = open_connection
    ) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self.config = config
        self._opener = opener
        self._slots = [_Slot(config, opener) for _ in range(pool_size)]
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: Any = None
        self._dedicated: set[DedicatedConnection] = set()
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, pool_size: int = 1, **options: Any) -> NativeRedisClient:
        """Build a client from a URL; ``options`` are :class:`ConnectionConfig` fields
        or ``ssl_*`` TLS options (see :meth:`ConnectionConfig.from_url`)."""
        return cls(ConnectionConfig.from_url(url, **options), pool_size=pool_size)

    async def __aenter__(self) -> NativeRedisClient:
        if self._nursery_manager is not None:
            raise RuntimeError("this client was already entered")
        manager = trio.open_nursery()
        self._nursery = await manager.__aenter__()
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
            self._nursery = None
            try:
                result: bool | None = await self._nursery_manager.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group:
                # The connection tasks never raise, so a group holding just the
                # block's own exception is only the strict nursery's wrapping:
                # let ``async with`` re-raise that exception as it was raised,
                # so callers can ``except WrongTypeError`` around the block.
                if exc is not None and group.exceptions == (exc,):
                    return False
                raise
        return result

    async def aclose(self) -> None:
        """Close every connection; pending calls fail with :class:`RedisConnectionError`.

        Later calls raise ``trio.ClosedResourceError``. Idempotent.
        """
        self._closed = True
        for slot in self._slots:
            if slot.connection is not None:
                slot.connection.close()
                slot.connection = None
        dedicated, self._dedicated = self._dedicated, set()
        for connection in list(dedicated):
            await connection.aclose()
        await trio.lowlevel.checkpoint()

    def statistics(self) -> ClientStatistics:
        """Counts of open connections and pending requests, for metrics and debugging."""
        live = [
            s.connection for s in self._slots if s.connection is not None and s.connection.is_usable
        ]
        return ClientStatistics(
            shared_connections=len(live),
            pending_requests=sum(connection.pending for connection in live),
            dedicated_connections=len(self._dedicated),
            connect_failures=sum(slot.reconnector.failures for slot in self._slots),
        )

    def dedicated(self) -> DedicatedConnection:
        """A new single-user connection for blocking commands (opened on first use).

        The caller owns it and should ``aclose()`` it (or use ``async with``);
        closing the client closes it too.
        """
        if self._closed:
            raise trio.ClosedResourceError("the client was closed")
        connection = DedicatedConnection(
            self.config, on_close=self._dedicated.discard, opener=self._opener
        )
        self._dedicated.add(connection)
        return connection

    async def masters(self) -> list[NativeRedisClient]:
        """``[self]``: one server holds the whole key space."""
        await trio.lowlevel.checkpoint()
        return [self]

    async def execute(self, *args: CommandArg) -> Reply:
        """Run one command on a shared connection and return its reply.

        Returns:
            The reply (see :data:`~._connection.Reply`): never decoded.

        Raises:
            ResponseError: The server answered with an error reply; the
                subclass is chosen by the reply's first word.
            InvalidCommandArgument: A ``str`` argument has no UTF-8 form (a
                lone surrogate); nothing was sent.
            RedisConnectionError: Connecting failed, or the connection broke
                or timed out before the reply arrived.
            trio.ClosedResourceError: The client was closed.

        Cancellation: the command may still be sent and run on the server; its
        reply is discarded. Use idempotent commands, or make the effect
        harmless, where a cancelled call must not leave a trace.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        data = pack_command(args)
        connection = self._pick()
        if isinstance(connection, _Slot):
            connection = await self._connect(connection)
        reply = await wait_for(connection.submit(data, 1))
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def pipeline(
        self, commands: Sequence[Sequence[CommandArg]], *, raise_on_error: bool = True
    ) -> list[Reply]:
        """Send several commands in one write and return their replies in order.

        This is not a transaction: other callers' commands may run between
        them (wrap them in ``MULTI``/``EXEC`` yourself for atomicity, or use a
        Lua script). Every command is executed even when an earlier one fails.

        Args:
            commands: Commands, each a sequence of arguments.
            raise_on_error: If true, raise the first error reply after all
                replies have arrived; if false, return error replies in place
                as :class:`ResponseError` instances.

        Raises:
            ResponseError: With ``raise_on_error``, the first error reply.
            InvalidCommandArgument: An argument of any command cannot be
                encoded; none of them was sent.
            RedisConnectionError: As for :meth:`execute`.

        Cancellation: as for :meth:`execute`, for every command.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if not commands:
            return []
        data = pack_commands(commands)
        connection = self._pick()
        if isinstance(connection, _Slot):
            connection = await self._connect(connection)
        replies: list[Reply] = await wait_for(connection.submit(data, len(commands)))
        if len(commands) == 1:
            replies = [replies]
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, ResponseError):
                    raise reply
        return replies

    async def shared(self) -> SharedConnection:
        """A live shared connection to :meth:`~._multiplexed.SharedConnection.submit` to.

        For the cluster client, which must know whether a command was sent: a
        failure here means nothing was.

        Raises:
            RedisConnectionError: Connecting failed (nothing was sent).
            trio.ClosedResourceError: The client was closed.
        """
        connection = self._pick()
        if isinstance(connection, _Slot):
            connection = await self._connect(connection)
        return connection

    def _pick(self) -> SharedConnection | _Slot:
        """A usable connection to queue on now, or the slot whose connection to open first.

        Prefers an idle live connection, then a slot nobody is opening (and
        whose last attempt did not fail, or failed longer ago than its backoff
        delay), then the least busy live connection, then a slot being opened
        by another caller.

        A failed slot becomes openable again once its backoff has passed, so a
        pool that shrank to one connection during an outage grows back to
        ``pool_size`` (and ``connect_failures`` back to 0) as load returns;
        the backoff still spaces out attempts while the server stays down.
        """
        if self._closed:
            raise trio.ClosedResourceError("the client was closed")
        slots = self._slots
        if len(slots) == 1:
            connection = slots[0].connection
            return connection if connection is not None and connection.is_usable else slots[0]
        best: SharedConnection | None = None
        best_pending = math.inf
        unopened: _Slot | None = None
        now = trio.current_time()
        for slot in slots:
            connection = slot.connection
            if connection is not None and connection.is_usable:
                if connection.pending < best_pending:
                    best, best_pending = connection, connection.pending
            elif (
                unopened is None
                and not slot.lock.locked()
                and (not slot.reconnector.failures or slot.reconnector.not_before <= now)
            ):
                unopened = slot
        if best is not None and (best_pending == 0 or unopened is None):
            return best
        if unopened is not None:
            return unopened
        return next((slot for slot in slots if slot.lock.locked()), slots[0])

    async def _connect(self, slot: _Slot) -> SharedConnection:
        attempts_seen = slot.reconnector.attempts
        async with slot.lock:
            if self._closed:
                raise trio.ClosedResourceError("the client was closed")
            if slot.connection is not None and slot.connection.is_usable:
                return slot.connection
            error = slot.reconnector.last_error
            if slot.reconnector.attempts != attempts_seen and error is not None:
                # An attempt made while we queued failed: share its outcome.
                raise RedisConnectionError(f"could not connect: {error}") from error
            stream, reader = await slot.reconnector.connect()
            if self._closed:  # closed while we connected: the nursery may be exiting
                await trio.aclose_forcefully(stream)
                raise trio.ClosedResourceError("the client was closed")
            connection = SharedConnection(stream, reader, self.config.command_timeout)
            if self._nursery is not None:
                await self._nursery.start(connection.serve)
            else:
                # Not entered with ``async with``: the client still works lazily
                # (a backend built synchronously before ``trio.run``); the
                # connection's reader runs as a system task, which ``serve``
                # never lets raise, and ends when the client is closed or the
                # run finishes.
                trio.lowlevel.spawn_system_task(connection.serve)
            slot.connection = connection
            return connection


if TYPE_CHECKING:  # mypy checks that the protocols are implemented

    def _is_client(client: NativeRedisClient) -> RedisClient:
        return client

    def _is_dedicated(connection: DedicatedConnection) -> DedicatedRedisConnection:
        return connection
