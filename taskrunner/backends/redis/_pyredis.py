"""The same client interface over any redis-py sync client, called in worker threads.

:class:`PyRedisClient` wraps ``redis.Redis``, ``fakeredis.FakeRedis`` or
``redis.RedisCluster`` and runs each call with
``trio.to_thread.run_sync(..., abandon_on_cancel=True)``. Replies must have the
raw RESP2 shape the native client returns, so redis-py's response callbacks
(which turn ``HGETALL`` into dicts, ``SET`` into booleans, ``XREADGROUP`` into
dicts...) are bypassed: for ``redis.Redis``/``FakeRedis`` we call through a
second ``redis.Redis`` that shares the caller's connection pool and has no
callbacks; for a cluster, whose routing we cannot bypass, the callbacks of
the cluster object and of its node clients are emptied (the wrapped cluster
client is taken over). Every call passes ``NEVER_DECODE``, so
``decode_responses=True`` clients still give bytes.

The wrapped client must speak RESP2 (``protocol=2``; redis-py 8 defaults to
RESP3, whose maps, doubles and sets have other shapes): the constructor checks.
With ``protocol=2`` fakeredis, too, builds RESP2-shaped replies.

Errors are translated at this boundary: redis-py's ``ResponseError`` family to
ours by the error code (redis-py strips known codes into ``status_code``; we put
them back), its ``ConnectionError``/``TimeoutError`` (and ``OSError``) to
:class:`RedisConnectionError`/:class:`RedisTimeoutError`, and the
``UnicodeEncodeError`` of an argument with no UTF-8 form to
:class:`~taskrunner.errors.InvalidCommandArgument`, as the native client
raises it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import redis.exceptions
import trio
from redis.client import NEVER_DECODE

from ._connection import CommandArg, Reply, unencodable_argument
from ._errors import (
    _BY_CODE,
    AuthenticationError,
    RedisConnectionError,
    RedisTimeoutError,
    ResponseError,
    error_from_reply,
)

if TYPE_CHECKING:
    from ._protocol import DedicatedRedisConnection, RedisClient

_T = TypeVar("_T")
_RAW = {NEVER_DECODE: True}

log = logging.getLogger(__name__)


def to_resp2(reply: Any) -> Reply:
    """Translate redis-py exceptions found in a reply (pipeline results, ``EXEC``
    arrays) into ours; every other value is already in RESP2 shape."""
    if isinstance(reply, list):
        if any(isinstance(item, list | redis.exceptions.RedisError) for item in reply):
            return [to_resp2(item) for item in reply]
        return reply
    if isinstance(reply, redis.exceptions.RedisError):
        return translate_error(reply)
    return reply


def _protocol_of(client: Any) -> Any:
    if isinstance(client, redis.RedisCluster):
        return client.nodes_manager.connection_kwargs.get("protocol")
    return client.connection_pool.get_protocol()


def translate_error(exc: BaseException) -> Exception:
    """Our exception for a redis-py one (connection errors included)."""
    if isinstance(exc, redis.exceptions.AuthenticationError):
        return AuthenticationError(f"WRONGPASS {exc}")
    if isinstance(exc, redis.exceptions.TimeoutError):
        return RedisTimeoutError(f"redis-py: {exc}")
    if isinstance(exc, redis.exceptions.ConnectionError | OSError):
        return RedisConnectionError(f"redis-py: {type(exc).__name__}: {exc}")
    if isinstance(exc, redis.exceptions.ResponseError):
        message = str(exc)
        code = getattr(exc, "status_code", None)
        if code and message.split(" ", 1)[0] not in _BY_CODE:
            message = f"{code} {message}"
        return error_from_reply(message)
    if isinstance(exc, redis.exceptions.RedisError):
        return RedisConnectionError(f"redis-py: {type(exc).__name__}: {exc}")
    raise TypeError(f"not a redis-py error: {exc!r}")


async def _in_thread(func: Callable[[], _T], commands: Sequence[Sequence[CommandArg]]) -> _T:
    try:
        return await trio.to_thread.run_sync(func, abandon_on_cancel=True)
    except (redis.exceptions.RedisError, OSError) as exc:
        raise translate_error(exc) from exc
    except UnicodeEncodeError as exc:
        # redis-py encodes every argument before it writes anything, so
        # nothing was sent: refuse it as the native client does.
        raise unencodable_argument(commands, exc) from None


def _raw_view(client: Any) -> Any:
    """A callback-free client that sends its commands the way ``client`` would."""
    if isinstance(client, redis.RedisCluster):
        client.cluster_response_callbacks.clear()
        nodes = client.nodes_manager
        original = nodes.create_redis_node

        @functools.wraps(original)
        def create_redis_node(*args: Any, **kwargs: Any) -> Any:
            node = original(*args, **kwargs)  # type: ignore[no-untyped-call]
            node.response_callbacks.clear()
            return node

        nodes.create_redis_node = create_redis_node  # type: ignore[method-assign]
        for node in client.get_nodes():  # type: ignore[no-untyped-call]
            if node.redis_connection is not None:
                node.redis_connection.response_callbacks.clear()
        return client
    view = redis.Redis(connection_pool=client.connection_pool)
    view.response_callbacks.clear()
    return view


class PyRedisDedicatedConnection:
    """A dedicated connection over redis-py (see :class:`DedicatedRedisConnection`).

    For ``redis.Redis``/``FakeRedis`` it owns one redis-py connection made
    from the client's pool settings (never handed back to the pool); a
    cancelled or timed-out call disconnects it from the trio side, which also
    ends the worker thread's blocking read, and the next call uses a fresh
    one. For a cluster each call goes through the cluster client (so a
    cancelled blocking call only abandons its thread, which finishes by
    itself when the ``BLOCK`` time ends).

    Its connection has no redis-py ``socket_timeout``: ``reply_timeout`` bounds
    each call instead (for a cluster, redis-py's ``socket_timeout`` applies and
    must exceed any ``BLOCK`` time used).
    """

    def __init__(
        self,
        client: Any,
        default_timeout: float,
        on_close: Callable[[PyRedisDedicatedConnection], object] | None = None,
    ) -> None:
        self._on_close = on_close
        self._client = client
        self._default_timeout = default_timeout
        self._pool = None if isinstance(client, redis.RedisCluster) else client.connection_pool
        self._connection: Any = None
        self._closed = False
        self._busy = False

    async def execute(self, *args: CommandArg, reply_timeout: float | None = None) -> Reply:
        """Run one command (same contract as the native dedicated connection)."""
        if self._closed:
            raise trio.ClosedResourceError("this dedicated connection was closed")
        if self._busy:
            raise trio.BusyResourceError("another task is using this dedicated connection")
        self._busy = True
        try:
            if self._pool is None:
                call = functools.partial(self._client.execute_command, *args, **_RAW)
            else:
                if self._connection is None:
                    pool = self._pool
                    # no redis-py read timeout: ``reply_timeout`` bounds the wait instead,
                    # so a long BLOCK is not cut short by the pool's socket_timeout
                    options = {**pool.connection_kwargs, "socket_timeout": None}
                    self._connection = pool.connection_class(**options)
                call = functools.partial(_send_and_read, self._connection, args)
            limit = self._default_timeout if reply_timeout is None else reply_timeout
            try:
                with trio.fail_after(limit):
                    reply = await _in_thread(call, [args])
            except trio.TooSlowError as exc:
                self._drop()
                raise RedisTimeoutError(f"no reply within {limit:.3g} s") from exc
            except BaseException:
                self._drop()
                raise
        finally:
            self._busy = False
        return to_resp2(reply)

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            connection.disconnect()
        except Exception as exc:
            # The abandoned thread may still be inside this connection (fakeredis
            # then raises "generator already executing"); it finishes by itself
            # when its BLOCK time ends, and the connection is never used again.
            log.debug("disconnecting an abandoned dedicated connection failed: %r", exc)

    async def aclose(self) -> None:
        """Close it; later calls raise ``trio.ClosedResourceError``."""
        self._closed = True
        if self._on_close is not None:
            self._on_close(self)
        self._drop()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> PyRedisDedicatedConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _send_and_read(connection: Any, args: tuple[CommandArg, ...]) -> Any:
    connection.send_command(*args)
    reply = connection.read_response(disable_decoding=True)
    if isinstance(reply, redis.exceptions.ResponseError):
        raise reply
    return reply


class PyRedisClient:
    """:class:`RedisClient` over a redis-py sync client (module docstring has the details).

    Args:
        client: ``redis.Redis``, ``fakeredis.FakeRedis`` or ``redis.RedisCluster``.
            A cluster client is taken over (its response callbacks are emptied).
        dedicated_timeout: Default reply timeout of :meth:`dedicated` connections.
        close_client: Whether :meth:`aclose` also closes ``client``.
    """

    def __init__(
        self, client: Any, *, dedicated_timeout: float = 30.0, close_client: bool = True
    ) -> None:
        if str(_protocol_of(client)) != "2":
            raise ValueError(
                "PyRedisClient needs a redis-py client speaking RESP2: create it with "
                "protocol=2 (redis-py 8 defaults to RESP3, whose replies have other shapes)"
            )
        self._client = client
        self._raw = _raw_view(client)
        self._dedicated_timeout = dedicated_timeout
        self._close_client = close_client
        self._dedicated: set[PyRedisDedicatedConnection] = set()
        self._closed = False

    @classmethod
    def from_url(cls, url: str, **redis_options: Any) -> PyRedisClient:
        """A client over ``redis.Redis.from_url(url, protocol=2, **redis_options)``.

        Unless given, ``socket_connect_timeout=5`` and ``socket_timeout=30`` are
        set (the native client's defaults), so that no call waits forever.
        """
        redis_options.setdefault("socket_connect_timeout", 5.0)
        redis_options.setdefault("socket_timeout", 30.0)
        return cls(redis.Redis.from_url(url, protocol=2, **redis_options))

    async def execute(self, *args: CommandArg) -> Reply:
        """Run one command in a worker thread (contract: :class:`RedisClient`).

        Timeouts are the wrapped client's (``socket_timeout``,
        ``socket_connect_timeout``): set them, or a dead server hangs the call.

        Cancellation: the thread is abandoned and finishes the command by
        itself; the reply is dropped.
        """
        if self._closed:
            raise trio.ClosedResourceError("the client was closed")
        call = functools.partial(self._raw.execute_command, *args, **_RAW)
        reply = await _in_thread(call, [args])
        return to_resp2(reply)

    async def pipeline(
        self, commands: Sequence[Sequence[CommandArg]], *, raise_on_error: bool = True
    ) -> list[Reply]:
        """One redis-py non-transactional pipeline (contract: :class:`RedisClient`)."""
        if self._closed:
            raise trio.ClosedResourceError("the client was closed")
        if not commands:
            await trio.lowlevel.checkpoint()
            return []
        replies = await _in_thread(functools.partial(self._run_pipeline, commands), commands)
        results = [to_resp2(reply) for reply in replies]
        if raise_on_error:
            for result in results:
                if isinstance(result, ResponseError):
                    raise result
        return results

    def _run_pipeline(self, commands: Sequence[Sequence[CommandArg]]) -> list[Any]:
        pipe = self._raw.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command, **_RAW)
        result: list[Any] = pipe.execute(raise_on_error=False)
        return result

    async def masters(self) -> list[PyRedisClient]:
        """``[self]``, or for a ``redis.RedisCluster`` a client per primary (for ``SCAN``)."""
        if self._closed:
            raise trio.ClosedResourceError("the client was closed")
        await trio.lowlevel.checkpoint()
        if not isinstance(self._client, redis.RedisCluster):
            return [self]
        primaries = self._client.get_primaries()  # type: ignore[no-untyped-call]
        return [
            PyRedisClient(node.redis_connection, close_client=False)
            for node in primaries
            if node.redis_connection is not None
        ]

    def dedicated(self) -> PyRedisDedicatedConnection:
        """A connection of its own for blocking commands (see the class)."""
        if self._closed:
            raise trio.ClosedResourceError("the client was closed")
        connection = PyRedisDedicatedConnection(
            self._client, self._dedicated_timeout, self._dedicated.discard
        )
        self._dedicated.add(connection)
        return connection

    async def aclose(self) -> None:
        """Close dedicated connections and (with ``close_client``) the wrapped client."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        dedicated, self._dedicated = self._dedicated, set()
        for connection in list(dedicated):
            await connection.aclose()
        if self._close_client:
            await trio.to_thread.run_sync(self._client.close)

    async def __aenter__(self) -> PyRedisClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


if TYPE_CHECKING:  # mypy checks that the protocols are implemented

    def _is_client(client: PyRedisClient) -> RedisClient:
        return client

    def _is_dedicated(connection: PyRedisDedicatedConnection) -> DedicatedRedisConnection:
        return connection
