"""A producer's view of a sharded group (issue 27): the shard count, and each shard's keys.

Theory of operation. A producer of a group laid out in ``shards > 1`` shards must write
where a runner of that group writes: the same shard for the same key, under that
shard's hash tag. It does not decide anything itself: the shard of a dispatch is the
runner's own :class:`~taskrunner._dispatch.routing.ShardRouter` decision (the stable
hash of the ``shard_key`` value the caller gives, else of the unique key, else the
round-robin), and a task id is ``<shard>.<id>`` as the runner's. What is the producer's
own is how it learns the count: from the group's record ``taskrunner:{<group>}:shards``,
read once at its first call (a runner records it at its first dispatch); a ``shards=``
given to the producer is checked against the record, never written. The record exists
in the cluster key layout only, so a producer of the go layout is unsharded without
asking. Pure: the shell (``Producer``, ``AsyncProducer``) does the one ``GET``.
"""

from __future__ import annotations

import logging

import attrs

from taskrunner import _keys, _shards
from taskrunner._dispatch.routing import ShardRouter, key_text
from taskrunner._keys import KeyLayout
from taskrunner.producer._plan import Destination

log = logging.getLogger("taskrunner.producer")


def check_wanted(shards: int | None, key_layout: KeyLayout | None, prefix: str | None) -> None:
    """Refuse a ``shards=`` a producer cannot work with (``None``: follow the record).

    Raises:
        TypeError: ``shards`` is not an integer.
        ValueError: out of ``1..256``; above 1 with ``key_layout="go"`` (a sharded
            group is always in the cluster layout) or with a ``prefix`` (a shard's
            stream is under the shard's own tag, as the runner names it).
    """
    if shards is None:
        return
    _shards.check_shards(shards)
    if shards > 1 and key_layout == "go":
        raise ValueError(
            f"shards={shards} needs key_layout='cluster' or None, got 'go': a sharded "
            "group is laid out in the cluster layout (docs/sharding.md)"
        )
    if shards > 1 and prefix is not None:
        raise ValueError(
            f"prefix must be None for a sharded group (shards={shards}), got {prefix!r}: "
            "each shard's stream is under its own hash tag"
        )


def wanted_layout(shards: int | None, key_layout: KeyLayout | None) -> KeyLayout | None:
    """The key layout to resolve: ``"cluster"`` for ``shards > 1`` (on any server, as
    ``TaskRunnerConfig.requested_layout``), else ``key_layout``."""
    return "cluster" if shards is not None and shards > 1 else key_layout


def producer_layout(
    key_layout: KeyLayout | None, shards: int | None, prefix: str | None, *, cluster: bool
) -> KeyLayout:
    """The key layout a producer names keys in (:func:`taskrunner._keys.resolve_layout`
    of :func:`wanted_layout`), once ``shards`` is checked (:func:`check_wanted`).

    Raises:
        KeyLayoutError, ValueError, TypeError: as those two.
    """
    check_wanted(shards, key_layout, prefix)
    return _keys.resolve_layout(wanted_layout(shards, key_layout), cluster=cluster)


def recorded_count(reply: object) -> int | None:
    """The shard count a ``GET`` of the record gave (``None``: no record, or a value
    that is not a shard count, which the runner's backend ignores too)."""
    if reply is None:
        return None
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
    try:
        count = int(text)
    except ValueError:
        log.warning("ignoring a non-integer shard count %r", reply)
        return None
    return count if 1 <= count <= _shards.MAX_SHARDS else None


def shard_count(group: str, wanted: int | None, recorded: int | None, prefix: str | None) -> int:
    """The count a producer writes in: the recorded one (1 without a record), which a
    ``wanted`` count must equal.

    Raises:
        ShardCountError: ``wanted`` differs from the recorded count (both named).
        ValueError: the group is sharded and the producer has a ``prefix``.
    """
    have = 1 if recorded is None else recorded
    key = _shards.shard_count_key(group)
    if wanted is not None and wanted != have:
        where = f"recorded in {key}" if recorded is not None else f"no {key} record"
        raise _shards.ShardCountError(
            f"shards={wanted} differs from the {have} shard(s) group {group!r} is laid out "
            f"in ({where}); a runner records its count at its first dispatch "
            "(docs/sharding.md)"
        )
    if have > 1 and prefix is not None:
        raise ValueError(
            f"prefix must be None for group {group!r}, sharded in {have} ({key}), "
            f"got {prefix!r}: each shard's stream is under its own hash tag"
        )
    return have


def shard_key_text(value: object) -> str | None:
    """The text a dispatch's ``shard_key=`` routes by (what the task's ``shard_key``
    function would return for the payload), ``None`` for no key.

    Raises:
        TypeError: ``value`` is not a JSON value.
    """
    try:
        return key_text(value)
    except TypeError:
        raise TypeError(f"shard_key must be a JSON value or None, got {value!r}") from None


class ProducerShards:
    """The shards of a producer's group, once their count is known.

    Args:
        group: The consumer group.
        count: Its shard count (:func:`shard_count`).
    """

    def __init__(self, group: str, count: int) -> None:
        self.router = ShardRouter(group, count)
        self.count = count
        """The shard count (an attribute: read on every dispatch)."""
        self._at: dict[tuple[Destination, int], Destination] = {}

    def pick(self, shard_key: object, unique_key: str | None) -> int:
        """The shard of one dispatch, as the runner's :meth:`ShardRouter.pick` decides.

        Raises:
            TypeError: ``shard_key`` is not a JSON value.
        """
        if self.router.count == 1:
            return 0
        return self.router.pick(shard_key_text(shard_key), unique_key)

    def at(self, destination: Destination, index: int) -> Destination:
        """The keys of ``destination``'s queue in shard ``index``: the destination of
        the group named by the shard's tag (``destination`` itself when unsharded)."""
        if self.router.count == 1:
            return destination
        found = self._at.get((destination, index))
        if found is None:
            group = self.router.group_of(index)
            found = attrs.evolve(destination, consumer_group=group, prefix=None)
            self._at[destination, index] = found
        return found

    def task_id(self, index: int, inner: str) -> str:
        """The id a caller is given (``<shard>.<id>``; ``inner`` when unsharded)."""
        return inner if self.count == 1 else self.router.task_id(index, inner)

    def locate(self, task_id: str) -> tuple[int, str] | None:
        """``(shard, the id in it)`` of ``task_id``, or ``None`` when it names no shard."""
        if self.router.count == 1:
            return 0, task_id
        return _shards.parse_task_id(task_id, self.router.count)

    def group_of(self, index: int) -> str:
        """The group name shard ``index``'s keys are named by."""
        return self.router.group_of(index)
