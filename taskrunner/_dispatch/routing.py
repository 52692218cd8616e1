"""Which shard a dispatch goes to (issue 27): pure decisions, table-tested.

Theory of operation. A group of ``shards > 1`` (``TaskRunnerConfig.shards``) routes each
dispatch to one shard (:mod:`taskrunner._shards` names its keys):

1. a task with a ``shard_key`` function: the stable hash of what it returns for the
   payload, so tasks with one key go to one shard, keep their order of dispatch there
   and meet one another's unique locks;
2. else a unique task: the stable hash of its message's ``unique_key``
   (``<task>`` or ``<task>:<key>``), so one unique key has one lock, in one shard,
   whichever producer dispatches it;
3. else round-robin (:class:`RoundRobin`): spread evenly without reading the payload.
   Round-robin rather than random: a burst of ``N`` dispatches from one producer lands
   once on each of ``N`` shards, where random choice leaves some shards twice as loaded
   as others over short runs. Each producer starts at a random shard, so many
   short-lived producers do not all begin on shard 0.

The stable hash is the first 8 bytes of BLAKE2b of the key's text, modulo the shard
count: the same in every process and every language with BLAKE2b (Python's own
``hash`` of a string is salted per process). A ``shard_key`` returning a string hashes
that string's UTF-8 bytes; any other JSON value (an int, say) hashes its compact JSON
text, so ``7`` and ``"7"`` are different keys, as they are in a JSON payload. ``None``
(or ``""``) means no key: the next rule decides.
"""

from __future__ import annotations

import hashlib
import json
import random

from taskrunner import _shards


def key_text(key: object) -> str | None:
    """The text a ``shard_key`` value hashes by, or ``None`` for no key (``None``, ``""``).

    Raises:
        TypeError: ``key`` is not a JSON value (the message names it).
    """
    if key is None or key == "":
        return None
    if isinstance(key, str):
        return key
    try:
        return json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"shard_key must return a JSON value or None, got {key!r}") from exc


def stable_shard(text: str, count: int) -> int:
    """The shard ``text`` hashes to among ``count``: BLAKE2b-64 of its UTF-8, modulo ``count``.

    Raises:
        ValueError: ``count`` is below 1.
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count!r}")
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def route(count: int, *, shard_key: str | None, unique_key: str | None, turn: int) -> int:
    """The shard of one dispatch among ``count`` (see the module's docstring).

    Args:
        count: The group's shard count.
        shard_key: :func:`key_text` of the task's ``shard_key(payload)``, when it has one.
        unique_key: A unique task's message ``unique_key``; ``None`` for others.
        turn: The round-robin's next shard (:meth:`RoundRobin.take`), used when
            neither key decides.
    """
    if count == 1:
        return 0
    if shard_key is not None:
        return stable_shard(shard_key, count)
    if unique_key is not None:
        return stable_shard(unique_key, count)
    return turn % count


class RoundRobin:
    """The shard after the last one, for dispatches no key routes.

    Args:
        count: The group's shard count.
        start: The first shard; a random one when ``None`` (see the module's docstring).
    """

    def __init__(self, count: int, start: int | None = None) -> None:
        self.count = count
        self._next = random.randrange(count) if start is None else start % count

    def peek(self) -> int:
        """The shard :meth:`take` would give, without moving on."""
        return self._next

    def take(self) -> int:
        """The next shard; moves on to the one after it."""
        turn = self._next
        self._next = (turn + 1) % self.count
        return turn

    def take_many(self, n: int) -> list[int]:
        """The next ``n`` shards, in turn (a ``dispatch_many`` of ``n`` payloads)."""
        return [self.take() for _ in range(n)]


class ShardRouter:
    """Where a group's dispatches go, and where a task id points: the group's shards.

    With ``count`` 1 every answer is the group and the id as they are (the layout of
    before). Otherwise shard ``i`` is addressed as the group named by its hash tag
    (:func:`taskrunner._shards.shard_tag`): every key the backend names for it is under
    that tag, in the shard's own slot.

    Args:
        group: The consumer group.
        count: Its shard count (``TaskRunnerConfig.shards``).
        start: The round-robin's first shard (``None``: a random one).
    """

    def __init__(self, group: str, count: int, start: int | None = None) -> None:
        self.group = group
        self.count = count
        self._spread = RoundRobin(count, start)
        self._groups = [self._group_of(i) for i in range(count)]

    def _group_of(self, index: int) -> str:
        return self.group if self.count == 1 else _shards.shard_tag(self.group, index, self.count)

    def pick(self, shard_key: str | None, unique_key: str | None) -> int:
        """The shard of one dispatch (:func:`route`); the round-robin moves on only
        when it decides."""
        if self.count == 1:
            return 0
        if shard_key is None and unique_key is None:
            return self._spread.take()
        return route(self.count, shard_key=shard_key, unique_key=unique_key, turn=0)

    def group_of(self, index: int) -> str:
        """The group name the backend is given for shard ``index``'s keys."""
        return self._groups[index]

    @property
    def groups(self) -> list[str]:
        """Every shard's group name, shard 0 first."""
        return list(self._groups)

    def task_id(self, index: int, inner: str) -> str:
        """The id a caller is given for ``inner`` of shard ``index``
        (:func:`taskrunner._shards.shard_task_id`)."""
        return inner if self.count == 1 else _shards.shard_task_id(index, inner, self.count)

    def locate(self, task_id: str) -> tuple[str, str] | None:
        """``(shard's group name, the id in it)`` of ``task_id``, or ``None`` when it
        names no shard of the group (an unsharded group takes every id as it is)."""
        if self.count == 1:
            return self.group, task_id
        found = _shards.parse_task_id(task_id, self.count)
        return None if found is None else (self._groups[found[0]], found[1])
