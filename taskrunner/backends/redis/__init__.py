"""Redis Streams backend, and the trio-native Redis connection layer under it.

The public name is :class:`RedisBackend` (``RedisBackend.from_url(url)`` or
``RedisBackend.from_client(redis_py_client)``).

Connection layer (private modules; the backend imports from them directly):

- :mod:`._protocol`: :class:`RedisClient` and :class:`DedicatedRedisConnection`,
  the interface the backend programs against.
- :mod:`._client`: :class:`NativeRedisClient`, trio sockets + ``hiredis``,
  automatic pipelining of concurrent calls over a small pool of shared
  connections, ``dedicated()`` connections for blocking commands.
- :mod:`._pyredis`: :class:`PyRedisClient`, the same interface over any
  redis-py sync client (``redis.Redis``, ``redis.RedisCluster``,
  ``fakeredis.FakeRedis``) in worker threads.
- :mod:`._inspect`: :class:`RedisInspection`, the operator reads (``SCAN``, pipelined).
- :mod:`._catalog`: :class:`RedisCatalog`, the task catalog (one hash per group).
- :mod:`._scripts`: :class:`Script`, Lua by ``EVALSHA`` with reload on ``NOSCRIPT``.
- :mod:`._errors`: :class:`RedisConnectionError` and the :class:`ResponseError`
  family (``NoGroupError``, ``BusyGroupError``, ``NoScriptError``...).
- :mod:`._config`: :class:`ConnectionConfig` and URL parsing.

See ``docs/redis-connection.md`` for the design notes.
"""

from taskrunner.backends.redis._backend import RedisBackend as RedisBackend
