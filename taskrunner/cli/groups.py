"""Which consumer groups a Redis server holds: the ``--group`` check of ``stats``, ``top``
and ``keys``.

Theory of operation: those commands read a group's keys by name, so a misspelt
``--group`` reads nothing and shows an empty, healthy-looking fleet. Before reading,
they call :func:`require_group`, which is quiet when the group is on the server and
otherwise fails with the one line ``no group 'typo' on this server; groups: mail,
shop``. :func:`find_groups` decides what "on the server" means, in one place:

- a consumer group of that name on any stream (``SCAN ... TYPE stream``, then
  ``XINFO GROUPS`` of each): every group that ever served;
- a key named after the group (:data:`GROUP_KEYS`: the default stream
  ``taskrunner:<group>:tasks``, ``taskrunner:<group>:metrics``,
  ``:delayed_tasks``, ``:worker_tuning_capacity``): a group that has delayed tasks
  waiting but never served, or whose stream was flushed but not its metrics.

The leader lease is named by a hash of the group, so it cannot name one. Every
listing is ``SCAN``, never ``KEYS``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from taskrunner import _keys
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._errors import ResponseError
from taskrunner.errors import TaskRunnerError


def _default_stream(group: str) -> str:
    return f"{_keys.PREFIX}:{group}:tasks"  # as _keys.stream_keys(None, group, "tasks")


GROUP_KEYS: tuple[Callable[[str], str], ...] = (
    _default_stream,
    _keys.metrics,
    _keys.delayed_tasks,
    _keys.worker_tuning_capacity,
)
"""Key names built from a group name alone (see :mod:`taskrunner._keys`)."""

NOT_GROUPS = ("unique:", "replication:", "leader:")
"""Heads of the names under ``taskrunner:`` that belong to no group (a unique lock's
key may well end in ``:metrics``)."""

MAX_LISTED = 20
"""Most group names one error lists."""


class UnknownGroup(TaskRunnerError):
    """``--group`` names no group on the server (the message lists those that are)."""


async def require_group(backend: RedisBackend, group: str) -> None:
    """Return when ``group`` is on ``backend``'s server.

    Raises:
        UnknownGroup: it is not; the message lists the groups that are.
        BackendError: the server could not be read.
    """
    groups = await find_groups(backend)
    if group in groups:
        return
    listed = ", ".join(groups[:MAX_LISTED]) or "none"
    if len(groups) > MAX_LISTED:
        listed += f" and {len(groups) - MAX_LISTED} more"
    raise UnknownGroup(f"no group {group!r} on this server; groups: {listed}")


async def find_groups(backend: RedisBackend) -> list[str]:
    """Every group name on the server (see the module docstring), sorted."""
    found: set[str] = set()
    for stream in await _scan(backend, "*", kind="stream"):
        try:
            reply = await backend.client.execute("XINFO", "GROUPS", stream)
        except ResponseError:
            continue  # deleted since the scan
        for row in reply:
            fields = dict(zip(row[::2], row[1::2], strict=True))
            found.add(_text(fields[b"name"]))
    for key_of in GROUP_KEYS:
        head, _, tail = key_of("\0").partition("\0")
        for name in await _scan(backend, f"{_glob_escape(head)}*{_glob_escape(tail)}"):
            group = name[len(head) : len(name) - len(tail)]
            if group and not group.startswith(NOT_GROUPS):
                found.add(group)
    return sorted(found)


async def _scan(backend: RedisBackend, pattern: str, *, kind: str | None = None) -> list[str]:
    cursor: Any = b"0"
    names: set[str] = set()
    extra = ("TYPE", kind) if kind else ()
    while True:
        cursor, batch = await backend.client.execute(
            "SCAN", cursor, "MATCH", pattern, "COUNT", 1000, *extra
        )
        names.update(_text(k) for k in batch)
        if int(cursor) == 0:
            return sorted(names)


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)
