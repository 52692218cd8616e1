"""Opening connections, and the single-user :class:`DedicatedConnection`.

A connection is a trio stream (TCP, unix socket, or TLS over TCP) plus a
``hiredis.Reader`` that turns received bytes into replies. Commands are encoded
with ``hiredis.pack_command``. :func:`open_connection` does the set-up
(connect, TLS handshake, ``AUTH``/``SELECT``/``CLIENT SETNAME`` sent in one
write) under ``connect_timeout``. :class:`Reconnector` spaces out connect
attempts after failures with :func:`~._config.reconnect_delay`.

:class:`DedicatedConnection` serves one caller at a time with a plain
write-then-read, which is what blocking commands (``XREADGROUP ... BLOCK``)
need: they must never sit on a connection shared with other callers. Any
failure or cancellation mid-command closes it (its reply stream can no longer
be trusted); the next call reopens it.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeAlias, cast

import attrs
import hiredis
import trio

from taskrunner.errors import InvalidCommandArgument

from ._config import ConnectionConfig, reconnect_delay
from ._errors import RedisConnectionError, RedisTimeoutError, ResponseError, error_from_reply

CommandArg: TypeAlias = bytes | str | int | float
"""One argument of a command; ``str`` is sent as UTF-8, numbers as their decimal text."""

Reply: TypeAlias = Any
"""A decoded reply: ``bytes`` (bulk and status replies), ``int``, ``None`` (nil),
``list`` of replies, or a :class:`ResponseError` instance for an error nested in
an array (or returned in place by a pipeline with ``raise_on_error=False``)."""

NOT_ENOUGH_DATA: Any = object()
"""Sentinel returned by :meth:`hiredis.Reader.gets` when no complete reply is buffered."""

RECEIVE_SIZE = 65536

_pack_command = cast(Callable[[tuple[CommandArg, ...]], bytes], hiredis.pack_command)


def unencodable_argument(
    commands: Sequence[Sequence[CommandArg]], error: UnicodeEncodeError
) -> InvalidCommandArgument:
    """The refusal for the argument of ``commands`` that ``error`` failed to encode.

    Called once encoding failed, so the search costs nothing on the way that
    works. The argument is the ``str`` that ``error`` was encoding, else the
    first one with no UTF-8 form.
    """

    def name_of(command: Sequence[CommandArg]) -> str:
        name = command[0] if command else "?"
        return (name.decode(errors="replace") if isinstance(name, bytes) else str(name)).upper()

    fallback: InvalidCommandArgument | None = None
    for command in commands:
        for position, arg in enumerate(command):
            if not isinstance(arg, str):
                continue
            if arg == error.object:
                return InvalidCommandArgument(name_of(command), position, arg, error.reason)
            if fallback is None and not arg.isascii():
                try:
                    arg.encode()
                except UnicodeEncodeError as exc:
                    fallback = InvalidCommandArgument(name_of(command), position, arg, exc.reason)
    if fallback is not None:
        return fallback
    shown = error.object if isinstance(error.object, str) else repr(error.object)
    return InvalidCommandArgument(name_of(commands[0]), "an argument", shown, error.reason)


def pack_command(args: tuple[CommandArg, ...]) -> bytes:
    """Encode one command (``hiredis.pack_command``; its stub's argument type is too narrow).

    Raises:
        InvalidCommandArgument: a ``str`` argument has no UTF-8 form (a lone
            surrogate); nothing can be sent.
    """
    try:
        return _pack_command(args)
    except UnicodeEncodeError as exc:
        raise unencodable_argument([args], exc) from None


def make_reader() -> hiredis.Reader:
    """A RESP parser that yields bytes and builds our error classes for error replies."""
    return hiredis.Reader(replyError=error_from_reply, notEnoughData=NOT_ENOUGH_DATA)


def pack_commands(commands: Sequence[Sequence[CommandArg]]) -> bytes:
    """Encode several commands into one buffer, to be written at once.

    Raises:
        InvalidCommandArgument: as :func:`pack_command`, for any of them.
    """
    try:
        return b"".join([_pack_command(tuple(command)) for command in commands])
    except UnicodeEncodeError as exc:
        raise unencodable_argument(commands, exc) from None


@contextlib.contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Turn transport errors into :class:`RedisConnectionError` (``what`` names the step)."""
    try:
        yield
    except trio.TooSlowError as exc:
        raise RedisTimeoutError(f"{what}: timed out") from exc
    except (OSError, trio.BrokenResourceError, hiredis.ProtocolError) as exc:
        raise RedisConnectionError(f"{what}: {type(exc).__name__}: {exc}") from exc


async def read_replies(stream: trio.abc.Stream, reader: hiredis.Reader, count: int) -> list[Reply]:
    """Receive until ``count`` complete replies are parsed (error replies returned in place).

    Raises:
        RedisConnectionError: The server closed the connection first.
    """
    replies: list[Reply] = []
    while True:
        while len(replies) < count:
            reply = reader.gets()
            if reply is NOT_ENOUGH_DATA:
                break
            replies.append(reply)
        if len(replies) == count:
            return replies
        data = await stream.receive_some(RECEIVE_SIZE)
        if not data:
            raise RedisConnectionError("the server closed the connection")
        reader.feed(data)  # type: ignore[arg-type]  # bytearray works


def _handshake_commands(config: ConnectionConfig) -> list[tuple[CommandArg, ...]]:
    commands: list[tuple[CommandArg, ...]] = []
    if config.password is not None:
        if config.username is not None:
            commands.append(("AUTH", config.username, config.password))
        else:
            commands.append(("AUTH", config.password))
    if config.db:
        commands.append(("SELECT", config.db))
    if config.client_name:
        commands.append(("CLIENT", "SETNAME", config.client_name))
    return commands


async def _open_stream(config: ConnectionConfig) -> trio.abc.Stream:
    if config.path is not None:
        return await trio.open_unix_socket(config.path)
    stream: trio.abc.Stream = await trio.open_tcp_stream(config.host, config.port)
    if config.ssl_context is not None:
        tls = trio.SSLStream(stream, config.ssl_context, server_hostname=config.host)
        try:
            await tls.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        stream = tls
    return stream


async def open_connection(config: ConnectionConfig) -> tuple[trio.abc.Stream, hiredis.Reader]:
    """Connect, authenticate and select the database, within ``config.connect_timeout``.

    Returns:
        The open stream and its reply parser (which may already hold data).

    Raises:
        RedisConnectionError: The server is unreachable, the TLS handshake
            failed, or the set-up timed out (:class:`RedisTimeoutError`).
        ResponseError: The server refused a set-up command (e.g.
            :class:`~._errors.AuthenticationError` for a wrong password).

    Cancellation: nothing is left open.
    """
    where = config.path or f"{config.host}:{config.port}"
    with translate_errors(f"connecting to {where}"), trio.fail_after(config.connect_timeout):
        stream = await _open_stream(config)
        try:
            reader = make_reader()
            commands = _handshake_commands(config)
            if commands:
                await stream.send_all(pack_commands(commands))
                for reply in await read_replies(stream, reader, len(commands)):
                    if isinstance(reply, ResponseError):
                        raise reply
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
    return stream, reader


Opener: TypeAlias = Callable[[ConnectionConfig], Awaitable[tuple[trio.abc.Stream, hiredis.Reader]]]
"""How a connection is opened: :func:`open_connection`, or one that first finds the
server (the Sentinel client asks the sentinels where the master is), or an
in-memory fake in tests; same errors."""


@attrs.define
class Reconnector:
    """Spaces out connect attempts: no delay after a success, growing delays after failures.

    ``attempts`` counts finished attempts so that callers queued behind a
    failing attempt can fail with its error instead of each trying again.
    ``opener`` opens each connection (default :func:`open_connection`).
    """

    config: ConnectionConfig
    opener: Opener = open_connection
    failures: int = 0
    attempts: int = 0
    not_before: float = 0.0
    last_error: BaseException | None = None

    async def connect(self) -> tuple[trio.abc.Stream, hiredis.Reader]:
        """Wait out the backoff delay, then open (:func:`open_connection`'s errors)."""
        await trio.sleep_until(self.not_before)
        try:
            opened = await self.opener(self.config)
        except (RedisConnectionError, ResponseError) as exc:
            self.failures += 1
            self.attempts += 1
            self.last_error = exc
            delay = reconnect_delay(
                self.failures,
                base=self.config.backoff_base,
                cap=self.config.backoff_cap,
                jitter=random.random(),
            )
            self.not_before = trio.current_time() + delay
            raise
        self.failures = 0
        self.attempts += 1
        self.last_error = None
        return opened


class DedicatedConnection:
    """A connection for one user at a time, opened lazily and reopened after failures.

    Made by :meth:`NativeRedisClient.dedicated`. Meant for blocking commands
    (``XREADGROUP ... BLOCK``, ``BLPOP``...), owned by one task for its lifetime.
    """

    def __init__(
        self,
        config: ConnectionConfig,
        *,
        on_close: Callable[[DedicatedConnection], object] | None = None,
        opener: Opener = open_connection,
    ) -> None:
        self._on_close = on_close
        self._reconnector = Reconnector(config, opener)
        self._config = config
        self._stream: trio.abc.Stream | None = None
        self._reader: hiredis.Reader | None = None
        self._closed = False
        self._busy = False

    @property
    def is_connected(self) -> bool:
        """Whether a connection is currently open (it is opened on demand)."""
        return self._stream is not None

    async def execute(self, *args: CommandArg, reply_timeout: float | None = None) -> Reply:
        """Send one command and wait for its reply.

        Args:
            *args: The command and its arguments.
            reply_timeout: Seconds to wait for the reply before the connection
                is declared dead, default ``command_timeout``. A blocking
                command must pass more than its ``BLOCK`` time.

        Returns:
            The reply (see :data:`Reply`).

        Raises:
            ResponseError: The server answered with an error reply (a subclass
                chosen by its first word); the connection stays open.
            InvalidCommandArgument: An argument cannot be encoded; nothing was sent.
            RedisConnectionError: Connecting failed, the connection broke, or
                the reply did not come within ``reply_timeout``
                (:class:`RedisTimeoutError`); the connection is closed and the
                next call reopens it.
            trio.BusyResourceError: Another task is using this connection.
            trio.ClosedResourceError: :meth:`aclose` was called.

        Cancellation: the connection is closed (a late reply must not be read
        as the next command's). The command may already have run on the
        server: a cancelled ``XREADGROUP`` may have delivered entries to this
        consumer, which then sit in its pending list until claimed or acked.
        """
        if self._closed:
            raise trio.ClosedResourceError("this dedicated connection was closed")
        if self._busy:
            raise trio.BusyResourceError("another task is using this dedicated connection")
        data = pack_command(args)  # refused before anything is sent or opened
        self._busy = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            if self._stream is None:
                self._stream, self._reader = await self._reconnector.connect()
            stream, reader = self._stream, self._reader
            assert reader is not None
            limit = self._config.command_timeout if reply_timeout is None else reply_timeout
            try:
                with translate_errors("dedicated connection"), trio.fail_after(limit):
                    await stream.send_all(data)
                    (reply,) = await read_replies(stream, reader, 1)
            except BaseException:
                await self._drop()
                raise
        finally:
            self._busy = False
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def _drop(self) -> None:
        stream, self._stream, self._reader = self._stream, None, None
        if stream is not None:
            await trio.aclose_forcefully(stream)

    async def aclose(self) -> None:
        """Close the connection for good; later calls raise ``trio.ClosedResourceError``."""
        self._closed = True
        if self._on_close is not None:
            self._on_close(self)
        await self._drop()

    async def __aenter__(self) -> DedicatedConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
