"""``min_replicas`` on Redis: ``XADD`` then ``WAIT`` in one pipeline, on one connection.

``WAIT n timeout`` blocks the connection until ``n`` replicas acknowledged every
write it sent before, so it must share the ``XADD``'s connection: a pipeline
goes out in one write on one connection (the native client's shared connection,
redis-py's pipeline). Commands of other callers queued behind it on that
connection wait too (a replica round trip, or ``timeout`` when replicas are
missing): the price of the guarantee, paid only when ``min_replicas`` is set.
"""

from __future__ import annotations

from collections.abc import Sequence

from taskrunner import _keys
from taskrunner.errors import NotReplicated

from ._queue import _PAYLOAD, ADD_CHUNK, RedisQueue, _text
from ._state import ADD_DELAYED, _float_arg


def _wait(replicas: int, wait_timeout: float) -> tuple[str, int, int]:
    return ("WAIT", replicas, max(1, round(wait_timeout * 1000)))


def _check(confirmed: int, replicas: int, wait_timeout: float) -> None:
    """Refuse a ``WAIT`` reply (the replicas that confirmed) below ``replicas``."""
    if confirmed < replicas:
        raise NotReplicated(replicas, confirmed, wait_timeout)


class RedisReplicas(RedisQueue):
    """:class:`~taskrunner.backends._protocols.replication.ReplicatedAdd` on the stream."""

    async def add_replicated(
        self,
        group: str,
        payloads: Sequence[bytes],
        *,
        queue: str | None = None,
        replicas: int,
        wait_timeout: float,
    ) -> list[str]:
        stream = self._stream(group, queue)
        wait = _wait(replicas, wait_timeout)
        ids: list[str] = []
        for start in range(0, len(payloads), ADD_CHUNK):
            chunk = payloads[start : start + ADD_CHUNK]
            commands = [("XADD", stream, "*", _PAYLOAD, p) for p in chunk]
            *added, confirmed = await self._client.pipeline([*commands, wait])
            ids.extend(_text(reply) for reply in added)
            _check(confirmed, replicas, wait_timeout)
        return ids

    async def add_delayed_replicated(
        self,
        group: str,
        member: bytes,
        run_at: float,
        *,
        task_id: str,
        replicas: int,
        wait_timeout: float,
    ) -> None:
        # EVAL, not EVALSHA: a NOSCRIPT cannot be retried inside the pipeline.
        layout = self.key_layout
        keys = [_keys.delayed_tasks(group, layout), _keys.delayed_index(group, layout)]
        add = ADD_DELAYED.eval_command(keys, [_float_arg(run_at), member, task_id])
        _added, confirmed = await self._client.pipeline([add, _wait(replicas, wait_timeout)])
        _check(confirmed, replicas, wait_timeout)
