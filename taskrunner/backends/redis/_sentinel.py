"""The Sentinel client: the native client, following the master through failovers.

Theory of operation. :class:`SentinelRedisClient` is a
:class:`~._client.NativeRedisClient` whose every connection (shared or
dedicated) is opened by :meth:`~._sentinel_locate.MasterLocator.open_master`:
ask the sentinels in order, each within ``SentinelConfig.timeout``, ``SENTINEL
get-master-addr-by-name``; connect; check that ``ROLE`` says ``master``, else
ask again. So every reconnect resolves the master afresh.

Two things say the master moved, and both drop every connection (requests
pending on them fail with :class:`~._errors.RedisConnectionError`; the next
call resolves again):

* a ``READONLY`` reply: the server we talk to is a replica now (``FAILOVER``
  and Sentinel's reconfiguration disconnect only blocked clients, so a client
  that ignored it would go on writing to a replica);
* ``+switch-master`` on any sentinel: the watcher (one task per sentinel,
  subscribed to the channels of :mod:`._failover`) moves at once to the
  address the event names.

Between a failover's first event (``+try-failover``...) and ``+switch-master``
commands are held (see :mod:`._failover` for why that, and only that, loses
nothing), at most ``failover_hold`` seconds.

What is resent: a command answered ``READONLY`` (a replica refuses a write
before running it, and a script's first write fails the script, so nothing
ran), a pipeline with a ``READONLY`` reply whose every reply is an error (none
of it ran), and held commands (never sent). Nothing else: a command whose
connection broke after it was written may have run on the old master, so it
fails with ``RedisConnectionError`` (``maybe_applied``), as on any connection,
and its caller handles it as it handles any lost connection; a dispatch raises
to its caller, so an acknowledged dispatch was acknowledged by the master that
stays.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import hiredis
import trio

from . import _failover
from ._client import NativeRedisClient
from ._config import ConnectionConfig
from ._connection import (
    CommandArg,
    DedicatedConnection,
    Reply,
    open_connection,
    pack_command,
    read_replies,
    translate_errors,
)
from ._errors import ReadOnlyError, RedisConnectionError, ResponseError
from ._sentinel_config import SentinelConfig
from ._sentinel_locate import MasterLocator

log = logging.getLogger(__name__)

MOVE_RETRIES = 3
"""Times one command answered ``READONLY`` is resent to a freshly resolved master."""
WATCH_RETRY_DELAY = 1.0
"""Seconds before the watcher reconnects to a sentinel it lost."""


class _FollowingConnection:
    """A dedicated connection that waits out holds and is replaced when the master moves."""

    def __init__(self, client: SentinelRedisClient) -> None:
        self._client = client
        self._inner = client._new_dedicated()
        self._generation = client._generation
        self._scope: trio.CancelScope | None = None
        self._closed = False

    @property
    def is_connected(self) -> bool:
        return self._inner.is_connected

    def interrupt(self) -> None:
        """End a call in progress (the master moved): it raises ``RedisConnectionError``."""
        if self._scope is not None:
            self._scope.cancel()

    async def execute(self, *args: CommandArg, reply_timeout: float | None = None) -> Reply:
        """As :meth:`DedicatedConnection.execute`; a call cut off by a move of the
        master raises :class:`RedisConnectionError` (it may have run, as any
        command whose connection broke)."""
        if self._closed:
            raise trio.ClosedResourceError("this dedicated connection was closed")
        if self._scope is not None:
            raise trio.BusyResourceError("another task is using this dedicated connection")
        client = self._client
        for attempt in range(MOVE_RETRIES + 1):
            await client._wait_writable()
            if self._generation != client._generation:  # opened on the old master
                self._generation = client._generation
                await self._inner.aclose()
                self._inner = client._new_dedicated()
            with trio.CancelScope() as scope:
                self._scope = scope
                try:
                    return await self._inner.execute(*args, reply_timeout=reply_timeout)
                except ReadOnlyError:
                    self._scope = None  # the move must not cut this call's retry
                    if attempt == MOVE_RETRIES:
                        raise
                    client._master_moved("a READONLY reply")
                finally:
                    self._scope = None
            if scope.cancelled_caught:
                raise RedisConnectionError("the master moved while the command was in flight")
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        self._closed = True
        self._client._following.discard(self)
        await self._inner.aclose()

    async def __aenter__(self) -> _FollowingConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class SentinelRedisClient(NativeRedisClient):
    """The native client on whichever server the sentinels name master (module docstring).

    Args:
        sentinel: The sentinels, the master's name, their credentials and TLS.
        master: How to talk to the master (credentials, TLS, db, timeouts);
            ``host``/``port`` are ignored.
        pool_size: Shared connections.
    """

    def __init__(
        self, sentinel: SentinelConfig, master: ConnectionConfig, *, pool_size: int = 1
    ) -> None:
        self.sentinel = sentinel
        self.locator = MasterLocator(sentinel)
        super().__init__(master, pool_size=pool_size, opener=self._open)
        self._gate = _failover.OPEN
        self._released = trio.Event()
        self._generation = 0
        self._following: set[_FollowingConnection] = set()
        self._watch_scope: trio.CancelScope | None = None
        self.moves = 0
        """How many times the client dropped its connections because the master moved."""

    @classmethod
    def from_url(cls, url: str, *, pool_size: int = 1, **options: Any) -> SentinelRedisClient:
        """A client from a ``redis+sentinel://`` URL (see :mod:`._sentinel_config`)."""
        from ._sentinel_config import parse_sentinel_url

        sentinel, master = parse_sentinel_url(url, **options)
        return cls(sentinel, master, pool_size=pool_size)

    # Connecting -------------------------------------------------------------
    async def _open(self, config: ConnectionConfig) -> tuple[trio.abc.Stream, hiredis.Reader]:
        if self._watch_scope is None and not self._closed:
            self._start_watch()
        return await self.locator.open_master(config)

    def _start_watch(self) -> None:
        self._watch_scope = trio.CancelScope()
        if self._nursery is not None:
            self._nursery.start_soon(self._watch_all)
        else:  # used without ``async with``: as the shared connections, a system task
            trio.lowlevel.spawn_system_task(self._watch_all)

    def _new_dedicated(self) -> DedicatedConnection:
        return DedicatedConnection(self.config, opener=self._opener)

    def dedicated(self) -> _FollowingConnection:  # type: ignore[override]  # same protocol
        """A single-user connection for blocking commands, following the master."""
        if self._closed:
            raise trio.ClosedResourceError("the client was closed")
        connection = _FollowingConnection(self)
        self._following.add(connection)
        return connection

    async def aclose(self) -> None:
        self._closed = True  # before anything is awaited: held callers stop waiting
        if self._watch_scope is not None:
            self._watch_scope.cancel()
        else:
            self._watch_scope = trio.CancelScope()  # never start it now
            self._watch_scope.cancel()
        self._released.set()
        following, self._following = self._following, set()
        for connection in list(following):
            await connection.aclose()
        await super().aclose()

    async def __aenter__(self) -> SentinelRedisClient:
        await super().__aenter__()
        return self

    # The master moved -------------------------------------------------------
    def _master_moved(self, why: str) -> None:
        """Drop every connection; the next call resolves the master again."""
        self.moves += 1
        self._generation += 1
        log.warning("Sentinel master %s moved (%s): reconnecting", self.sentinel.service_name, why)
        # The shared slots are the parent's: closing one fails its pending
        # requests and lets the next call reopen it through ``_open``.
        for slot in self._slots:
            if slot.connection is not None:
                slot.connection.close()
                slot.connection = None
        for connection in self._following:
            connection.interrupt()

    def _apply(self, decision: _failover.Decision) -> None:
        was_holding = bool(self._gate.holders)
        self._gate = decision.gate
        if decision.move_to is not None:
            # Every sentinel announces the same switch: move once, or the later
            # announcements would cut requests already running on the new master.
            if decision.move_to != self.locator.switched_to:
                self.locator.switched_to = decision.move_to
                host, port = decision.move_to
                self._master_moved(f"+switch-master to {host}:{port}")
        elif decision.expired:
            self.locator.switched_to = None
            self._master_moved(f"no +switch-master within {self.sentinel.failover_hold:g} s")
        if self._gate.holders and not was_holding:
            self._released = trio.Event()
            log.warning(
                "Sentinel: failover of %s started; holding commands", self.sentinel.service_name
            )
        elif was_holding and not self._gate.holders:
            self._released.set()

    async def _wait_writable(self) -> None:
        """Wait while a failover is under way (bounded by ``failover_hold``)."""
        while self._gate.holders and not self._closed:
            with trio.move_on_at(self._gate.deadline):
                await self._released.wait()
            self._apply(_failover.on_deadline(self._gate, trio.current_time()))

    # Commands ---------------------------------------------------------------
    async def execute(self, *args: CommandArg) -> Reply:
        """As :meth:`NativeRedisClient.execute`, on the current master; a ``READONLY``
        reply (the server became a replica) is resent to the master resolved afresh."""
        for attempt in range(MOVE_RETRIES + 1):
            if self._gate.holders:
                await self._wait_writable()
            try:
                return await super().execute(*args)
            except ReadOnlyError:
                if attempt == MOVE_RETRIES:
                    raise
                self._master_moved("a READONLY reply")
        raise AssertionError("unreachable")  # pragma: no cover

    async def pipeline(
        self, commands: Sequence[Sequence[CommandArg]], *, raise_on_error: bool = True
    ) -> list[Reply]:
        """As :meth:`NativeRedisClient.pipeline`; resent when a reply was ``READONLY``
        and every reply was an error (then none of its commands ran)."""
        if not commands:
            return await super().pipeline(commands, raise_on_error=raise_on_error)
        for attempt in range(MOVE_RETRIES + 1):
            if self._gate.holders:
                await self._wait_writable()
            replies = await super().pipeline(commands, raise_on_error=False)
            if not any(isinstance(reply, ReadOnlyError) for reply in replies):
                break
            self._master_moved("a READONLY reply")
            # Resent only if no command succeeded: an error reply did not apply (a
            # replica also refuses ``WAIT`` with ``ERR``, so ``XADD``+``WAIT`` qualifies).
            if attempt == MOVE_RETRIES or not all(
                isinstance(reply, ResponseError) for reply in replies
            ):
                break
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, ResponseError):
                    raise reply
        return replies

    # Watching the sentinels -------------------------------------------------
    async def _watch_all(self) -> None:
        scope = self._watch_scope
        assert scope is not None
        with scope:
            async with trio.open_nursery() as nursery:
                for index, (host, port) in enumerate(self.sentinel.sentinels):
                    nursery.start_soon(self._watch_one, index, host, port)

    async def _watch_one(self, index: int, host: str, port: int) -> None:
        """Follow one sentinel's failover events until the client closes (never raises)."""
        config = self.sentinel.connection_to(host, port)
        while True:
            try:
                await self._listen(index, config)
            except (RedisConnectionError, ResponseError) as exc:
                log.info("Sentinel %s:%s: watch lost (%s); retrying", host, port, exc)
            except Exception:  # a bug: log it, keep watching (a system task must not raise)
                log.exception("Sentinel %s:%s: unexpected error in the watcher", host, port)
            await trio.sleep(WATCH_RETRY_DELAY)

    async def _listen(self, index: int, config: ConnectionConfig) -> None:
        stream, reader = await open_connection(config)
        service = self.sentinel.service_name
        try:
            with translate_errors(f"watching sentinel {config.host}:{config.port}"):
                await stream.send_all(pack_command(("SUBSCRIBE", *_failover.CHANNELS)))
                while True:
                    # No read timeout: a quiet sentinel is the normal case. A dead
                    # one is noticed by TCP, and the others are watched too.
                    (message,) = await read_replies(stream, reader, 1)
                    if isinstance(message, ResponseError):
                        raise message
                    if not isinstance(message, list) or len(message) != 3:
                        continue
                    if message[0] != b"message":
                        continue
                    event = _failover.event_of(message[1], message[2], service)
                    if event is None:
                        continue
                    log.info("Sentinel %s:%s: %s", config.host, config.port, event.channel)
                    now = trio.current_time()
                    hold = self.sentinel.failover_hold
                    self._apply(_failover.on_event(self._gate, index, event, now, hold))
        finally:
            await trio.aclose_forcefully(stream)
