"""The interface the Redis backend programs against, whichever transport is behind it.

Two implementations: :class:`~._client.NativeRedisClient` (trio sockets,
auto-pipelining) and :class:`~._pyredis.PyRedisClient` (any redis-py sync
client in worker threads). Both return replies in raw RESP2 shape, never
decoded: ``bytes`` for bulk and status replies (``b"OK"``), ``int``, ``None``,
nested ``list``; error replies raise :class:`~._errors.ResponseError`
subclasses chosen by the error's first word; a broken connection raises
:class:`~._errors.RedisConnectionError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Protocol, Self

from ._connection import CommandArg, Reply


class DedicatedRedisConnection(Protocol):
    """A connection owned by one task, for blocking commands.

    Opened on first use and reopened on the next call after a failure. Calls
    from two tasks at once raise ``trio.BusyResourceError``.
    """

    async def execute(self, *args: CommandArg, reply_timeout: float | None = None) -> Reply:
        """Run one command; ``reply_timeout`` (seconds) must exceed any ``BLOCK`` time.

        Raises:
            ResponseError: An error reply; the connection stays usable.
            RedisConnectionError: Connecting failed or the connection broke or
                timed out; it is closed and reopened by the next call.

        Cancellation: the connection is closed; the command may have run (a
        cancelled ``XREADGROUP`` may have moved entries to this consumer's
        pending list).
        """
        ...

    async def aclose(self) -> None:
        """Close it; later calls raise ``trio.ClosedResourceError``."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...


class RedisClient(Protocol):
    """What the Redis backend needs from a client (see the module docstring for replies)."""

    async def execute(self, *args: CommandArg) -> Reply:
        """Run one command on a shared connection and return its reply.

        Must not be used for blocking commands (use :meth:`dedicated`).

        Raises:
            ResponseError: An error reply (subclass by first word).
            InvalidCommandArgument: A ``str`` argument has no UTF-8 form (a
                lone surrogate); nothing was sent. Every transport refuses it
                the same way, before sending.
            RedisConnectionError: Connecting failed or the connection broke.
            trio.ClosedResourceError: The client was closed.

        Cancellation: the command may still run on the server; its reply is
        discarded and never given to another caller.
        """
        ...

    async def pipeline(
        self, commands: Sequence[Sequence[CommandArg]], *, raise_on_error: bool = True
    ) -> list[Reply]:
        """Run several commands in one round trip (not atomic); replies in order.

        With ``raise_on_error`` the first error reply is raised after all
        commands ran; otherwise error replies are returned in place as
        :class:`~._errors.ResponseError` instances. An argument that cannot be
        encoded raises :class:`~taskrunner.errors.InvalidCommandArgument`
        before any command is sent.
        """
        ...

    def dedicated(self) -> DedicatedRedisConnection:
        """A new connection for one task's blocking commands, closed with the client."""
        ...

    async def masters(self) -> Sequence[RedisClient]:
        """The clients a walk of the whole key space (``SCAN``) must visit, one per
        master: the client itself on a standalone server, each master's own
        client on a cluster (whose ``execute`` accepts ``SCAN``).

        Raises:
            RedisConnectionError: A cluster's topology could not be read.
        """
        ...

    async def aclose(self) -> None:
        """Close every connection; idempotent."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...
