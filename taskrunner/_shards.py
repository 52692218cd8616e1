"""Sharded groups (issue 27): where each shard's keys live, and how a task id names its shard.

Pure functions, no I/O, in the keys' layer (every backend names a shard's keys by them).

Theory of operation. A group of ``shards > 1`` spreads every queue over ``shards`` streams,
each under a hash tag of its own (:func:`shard_tag`), so that a Redis Cluster puts the
shards on different masters and moving one between masters is plain
``redis-cli --cluster reshard``. The keys one message's scripts touch (its stream, the
delayed set, the indexes, results, unique locks, cancel marks) are under its shard's tag
(:func:`shard_root`); what the whole group shares (the leader lease of periodic
schedules, the tuner, metrics, flow-control limits, pauses, the catalog,
``desired_instances`` and the recorded shard count, :func:`shard_count_key`) stays under
the group's own tag ``{<group>}``. ``shards=1`` is the layout of before, byte for byte:
no shard tag, no prefix on task ids.

Shard ``i`` of ``N`` has the tag ``<group>:<i>:<salt>`` with the smallest ``salt``
(0, 1, 2, ...) whose CRC16 slot lies in the middle quarter of its band
``[i*16384//N, (i+1)*16384//N)`` (:func:`target_slots`): one shard per ``16384/N``
band, so any even, contiguous split of the slots among a cluster's masters (what
``redis-cli --cluster create`` makes) gives each master its share of the shards. Only a
shard whose middle quarter a master's edge crosses can go either way, so a master is
less than two shards off its share, and with 16 shards on 3 masters the split is
6, 5, 5 (a slot anywhere in its band could make it 6, 4, 6). The salt is searched for,
not stored: the tag is a function of the group, ``i`` and ``N`` alone, so every
producer and worker finds the same keys. The search costs about ``4N`` CRC16s per
shard (the window holds a quarter of a band, ``1/4N`` of the slots), cached.

A sharded task id is ``<shard>.<id>``: the shard's number, a dot, and the id the shard
gave it (a stream id ``<ms>-<seq>`` or a delayed member's uuid4, neither of which holds
a dot), so ``get_task``, ``cancel`` and ``result()`` go straight to one shard, and ids
no longer repeat across shards (two shards' streams may hand out the same stream id).
"""

from __future__ import annotations

import binascii
import functools
from collections.abc import Iterable, Mapping

from taskrunner import _keys

HASH_SLOTS = 16384
"""The hash slots of a Redis Cluster."""
MAX_SHARDS = 256
"""The most shards a group may have: far more than a cluster has masters (every shard
costs each fetcher one blocking read), and few enough that every tag is found in a
fraction of a second (about ``4N`` CRC16s per shard)."""
SHARD_COUNT_NAME = "shards"


class ShardCountError(ValueError):
    """A runner's ``shards`` differs from the count a live (not empty) group is laid out
    in (:func:`shard_change_problem` says why); docs/sharding.md says how to migrate."""


"""The tail of the group key recording its shard count: ``<root>:shards``."""


def slot(key: str) -> int:
    """The hash slot of ``key``: CRC16 (XMODEM) of its hash tag, modulo 16384."""
    return binascii.crc_hqx(_keys.hash_tag(key).encode(), 0) % HASH_SLOTS


def slot_band(index: int, count: int) -> range:
    """The slots shard ``index`` of ``count`` must hash into: ``[i*16384//N, (i+1)*16384//N)``.

    Raises:
        ValueError: ``count`` is not in ``1..MAX_SHARDS`` or ``index`` not in ``0..count-1``.
    """
    check_shard(index, count)
    return range(index * HASH_SLOTS // count, (index + 1) * HASH_SLOTS // count)


def check_shards(count: object, *, field: str = "shards") -> None:
    """Refuse a shard count that is not an integer in ``1..MAX_SHARDS``.

    Raises:
        TypeError: ``count`` is not an integer (``bool`` is not one).
        ValueError: it is below 1 or above :data:`MAX_SHARDS`.
    """
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"{field} must be an integer, got {count!r}")
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"{field} must be an integer from 1 to {MAX_SHARDS}, got {count!r}")


def check_shard(index: object, count: object) -> None:
    """Refuse a shard number that is not one of ``count``'s.

    Raises:
        TypeError: ``index`` or ``count`` is not an integer.
        ValueError: ``count`` is out of range, or ``index`` not in ``0..count-1``.
    """
    check_shards(count)
    assert isinstance(count, int)  # checked just above
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"shard must be an integer, got {index!r}")
    if not 0 <= index < count:
        raise ValueError(f"shard must be from 0 to {count - 1}, got {index!r}")


def target_slots(index: int, count: int) -> range:
    """The slots shard ``index`` of ``count``'s tag is searched for: the middle quarter
    of its :func:`slot_band` (its centre give or take an eighth of the band).

    Raises:
        ValueError: as :func:`slot_band`.
    """
    band = slot_band(index, count)
    centre, spread = (band.start + band.stop) // 2, len(band) // 8
    return range(centre - spread, centre + spread + 1)


@functools.lru_cache(maxsize=4096)
def shard_tag(group: str, index: int, count: int) -> str:
    """The hash tag of shard ``index`` of ``count`` of ``group``: ``<group>:<index>:<salt>``,
    the smallest salt putting it in :func:`target_slots` (see the module's docstring).

    Raises:
        ValueError: a group the keys cannot carry, or a shard out of range.
    """
    _keys.check_group(group)
    target = target_slots(index, count)
    salt = 0
    while True:  # ends: CRC16 of the growing decimal salt reaches every slot
        tag = f"{group}:{index}:{salt}"
        if slot(tag) in target:
            _TAG_INDEX[tag] = index
            return tag
        salt += 1


_TAG_INDEX: dict[str, int] = {}
"""The shard number of every tag :func:`shard_tag` found in this process (a cache of
that pure function's inverse: a tag is found before anything is read in its shard)."""


def run_task_id(shard: str | None, inner: str) -> str:
    """The task id a run read in ``shard`` (an entry's ``group``: ``None`` for an
    unsharded group's, else a shard's tag or the group itself) is known by:
    ``<shard>.<inner>`` in a shard, else ``inner`` as it is (an unsharded group's run,
    or a sharded group's run of its own stream, where periodic schedules fire).
    """
    if shard is None:
        return inner
    index = _TAG_INDEX.get(shard)
    return inner if index is None else f"{index}.{inner}"


def shard_root(group: str, index: int, count: int) -> str:
    """The head of shard ``index``'s keys: ``taskrunner:{<shard tag>}``, or the group's
    own root (cluster layout) when ``count`` is 1.

    Raises:
        ValueError: as :func:`shard_tag`.
    """
    if count == 1:
        check_shard(index, count)
        return _keys.group_root(group, "cluster")
    return f"{_keys.PREFIX}:{{{shard_tag(group, index, count)}}}"


def shard_roots(group: str, count: int) -> tuple[str, ...]:
    """Every shard's root, shard 0 first (:func:`shard_root`)."""
    return tuple(shard_root(group, i, count) for i in range(count))


def served_groups(group: str, count: int) -> tuple[str, ...]:
    """What a runner of ``group`` with ``count`` shards reads and keeps, each named as
    the backend's ``group`` argument: every shard's tag, shard 0 first, then the group
    itself (periodic schedules fire into its own stream, and their retries wait in its
    own delayed set); just ``(group,)`` when ``count`` is 1.

    Raises:
        ValueError: as :func:`shard_tag`.
    """
    if count == 1:
        return (group,)
    return (*(shard_tag(group, i, count) for i in range(count)), group)


def shard_count_key(group: str) -> str:
    """The group key recording how many shards the group's keys are laid out in:
    ``taskrunner:{<group>}:shards`` (under the group's own tag; absent means 1). Only
    the cluster layout has it: a sharded group is always laid out so, and a go-layout
    group is never sharded."""
    return f"{_keys.group_root(group, 'cluster')}:{SHARD_COUNT_NAME}"


# Task ids ------------------------------------------------------------------------------


def shard_task_id(index: int, inner: str, count: int) -> str:
    """The task id of ``inner`` (the id shard ``index`` gave it) in a group of ``count``
    shards: ``<index>.<inner>``, or ``inner`` itself when ``count`` is 1.

    Raises:
        ValueError: a shard out of range, or ``inner`` empty or holding a dot.
    """
    check_shard(index, count)
    if not inner or "." in inner:
        raise ValueError(f"a shard's task id must be non-empty without '.', got {inner!r}")
    return inner if count == 1 else f"{index}.{inner}"


def parse_task_id(task_id: str, count: int) -> tuple[int, str] | None:
    """``(shard, inner id)`` of ``task_id`` in a group of ``count`` shards, or ``None``
    when it names no shard of it (so a lookup answers "not found" rather than asking
    the wrong shard). With ``count`` 1 every non-empty id without a dot is shard 0's.
    """
    if count == 1:
        return (0, task_id) if task_id and "." not in task_id else None
    head, dot, inner = task_id.partition(".")
    if not dot or not inner or "." in inner or not head.isdecimal() or not head.isascii():
        return None
    if len(head) > 1 and head.startswith("0"):  # one spelling per shard
        return None
    index = int(head)
    return (index, inner) if index < count else None


# A live group's shard count --------------------------------------------------------------


def shard_change_problem(
    group: str, recorded: int | None, wanted: int, *, pending: int
) -> str | None:
    """Why a runner of ``wanted`` shards must not serve or dispatch to ``group``, or
    ``None`` when it may (and then records ``wanted``).

    Args:
        group: The consumer group.
        recorded: The shard count recorded in :func:`shard_count_key`; ``None`` when
            none is (a group that never ran sharded: 1).
        wanted: ``TaskRunnerConfig.shards``.
        pending: Messages the group holds in the layout of ``recorded`` (queued,
            delayed, pending, dead): a change is allowed only when it is 0, since the
            old layout's keys would no longer be read.
    """
    have = 1 if recorded is None else recorded
    if have == wanted or pending == 0:
        return None
    return (
        f"shards={wanted} differs from the {have} shard(s) group {group!r} is laid out in "
        f"({shard_count_key(group)}), and it still holds {pending} message(s); "
        "drain it (or move its messages) before changing shards (docs/sharding.md)"
    )


# The groups a listing of the store names -------------------------------------------------


def split_tag(name: str) -> tuple[str, int] | None:
    """``(group, shard)`` of a name spelled as a shard's tag, ``<group>:<i>:<salt>``, or
    ``None``. Only the spelling is checked: whether ``name`` is a shard of that group
    is for :func:`fold_shard_tags`, which knows the group's shard count."""
    group, _, rest = name.rpartition(":")
    group, _, index = group.rpartition(":")
    if not group or not (index.isdecimal() and index.isascii()):
        return None
    if not (rest.isdecimal() and rest.isascii()):
        return None
    return group, int(index)


def fold_shard_tags(names: Iterable[str], counts: Mapping[str, int]) -> dict[str, int]:
    """The groups ``names`` (a listing of the store's groups) stand for, each with its
    shard count: a name that is the tag of a shard of a group of ``counts`` (its
    recorded count, above 1) folds into that group, listed once, even when the group's
    own keys are not listed; every other name is a group of 1 shard.
    """
    found: dict[str, int] = {}
    for name in names:
        split = split_tag(name)
        count = counts.get(split[0], 1) if split is not None else 1
        if split is not None and count > 1 and _is_tag(name, *split, count):
            found[split[0]] = count
        else:
            found.setdefault(name, counts.get(name, 1))
    return found


def _is_tag(name: str, group: str, index: int, count: int) -> bool:
    try:
        return index < count and shard_tag(group, index, count) == name
    except ValueError:  # a group name the keys cannot carry
        return False
