"""Sharded groups' layout (taskrunner._shards): the shards' tags spread over the slots, their
keys' roots, task ids naming a shard, and when a group's shard count may change; as tables."""

from __future__ import annotations

import collections
import re

import pytest

from taskrunner import _keys, _shards
from taskrunner._shards import (
    HASH_SLOTS,
    MAX_SHARDS,
    parse_task_id,
    shard_change_problem,
    shard_count_key,
    shard_root,
    shard_tag,
    shard_task_id,
    slot,
    slot_band,
)
from taskrunner.backends.redis._cluster_slots import key_slot
from taskrunner.testing._cluster import slot_ranges

# Slots and bands ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("123456789", 12739),  # Redis's own example
        ("taskrunner:{shop}:tasks", key_slot("shop")),
        ("{user1000}.following", key_slot("user1000")),
        ("foo{}{bar}", key_slot("foo{}{bar}")),
    ],
)
def test_slot_is_the_cluster_clients_slot(key: str, expected: int) -> None:
    assert slot(key) == expected == key_slot(key)


@pytest.mark.parametrize(
    ("index", "count", "band"),
    [
        (0, 1, range(0, 16384)),
        (0, 2, range(0, 8192)),
        (1, 2, range(8192, 16384)),
        (0, 3, range(0, 5461)),
        (1, 3, range(5461, 10922)),
        (2, 3, range(10922, 16384)),
        (15, 16, range(15360, 16384)),
    ],
)
def test_the_band_of_a_shard(index: int, count: int, band: range) -> None:
    assert slot_band(index, count) == band


def test_the_bands_cover_every_slot_once() -> None:
    for count in (1, 2, 3, 7, 16, 64, MAX_SHARDS):
        covered = [s for i in range(count) for s in slot_band(i, count)]
        assert covered == list(range(HASH_SLOTS))


@pytest.mark.parametrize("count", range(1, 65))
def test_every_shards_tag_hashes_into_its_own_band(count: int) -> None:
    slots = [slot(shard_tag("shop", i, count)) for i in range(count)]
    assert all(s in slot_band(i, count) for i, s in enumerate(slots))
    assert all(s in _shards.target_slots(i, count) for i, s in enumerate(slots))
    assert len(set(slots)) == count
    # Spread: whatever even, contiguous split of the slots a cluster makes among its
    # masters, each gets less than two shards more or fewer than its share (only the two
    # bands at the edges of its slots can go either way).
    for masters in (1, 2, 3, 5):
        if masters > count:
            continue
        per_master = collections.Counter(s * masters // HASH_SLOTS for s in slots)
        share = count / masters
        assert all(abs(n - share) < 2 for n in per_master.values()), per_master
        assert len(per_master) == masters


@pytest.mark.parametrize("group", ["shop", "billing", "a", "x" * 40])
def test_sixteen_shards_over_three_masters_are_six_five_five(group: str) -> None:
    slots = [slot(shard_tag(group, i, 16)) for i in range(16)]
    served = [sum(lo <= s <= hi for s in slots) for lo, hi in slot_ranges(3)]
    assert served == [5, 6, 5]  # 31 %, 38 %, 31 %: each within 33 % +- 8 %


@pytest.mark.parametrize(
    ("index", "count", "target"),
    [
        (0, 1, range(6144, 10241)),
        (0, 16, range(384, 641)),
        (5, 16, range(5504, 5761)),
        (255, 256, range(16344, 16361)),
    ],
)
def test_a_tag_aims_at_the_middle_quarter_of_its_band(
    index: int, count: int, target: range
) -> None:
    assert _shards.target_slots(index, count) == target


def test_a_tag_is_a_function_of_the_group_the_shard_and_the_count() -> None:
    shard_tag.cache_clear()
    first = [shard_tag("shop", i, 16) for i in range(16)]
    shard_tag.cache_clear()
    assert [shard_tag("shop", i, 16) for i in range(16)] == first
    assert first[7].startswith("shop:7:")
    assert shard_tag("shop", 7, 16) != shard_tag("shop", 7, 32)
    assert shard_tag("billing", 7, 16).startswith("billing:7:")


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("shop", 0, 0), ValueError, "shards must be an integer from 1 to 256, got 0"),
        (("shop", 0, 257), ValueError, "shards must be an integer from 1 to 256, got 257"),
        (("shop", 0, True), TypeError, "shards must be an integer, got True"),
        (("shop", 16, 16), ValueError, "shard must be from 0 to 15, got 16"),
        (("shop", -1, 16), ValueError, "shard must be from 0 to 15, got -1"),
        (("shop", "1", 16), TypeError, "shard must be an integer, got '1'"),
        (("sh{op}", 0, 2), ValueError, "consumer_group must not contain '{' or '}'"),
    ],
)
def test_a_tag_of_no_shard_is_refused(
    args: tuple[str, object, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match="^" + re.escape(message)):
        shard_tag(*args)  # type: ignore[arg-type]


# Roots and the group's keys ----------------------------------------------------------


def test_one_shard_is_the_groups_own_root() -> None:
    assert shard_root("shop", 0, 1) == _keys.group_root("shop", "cluster") == "taskrunner:{shop}"
    assert _shards.shard_roots("shop", 1) == ("taskrunner:{shop}",)


def test_a_shards_root_is_under_its_tag_and_no_two_share_a_slot() -> None:
    roots = _shards.shard_roots("shop", 16)
    assert roots[7] == f"taskrunner:{{{shard_tag('shop', 7, 16)}}}"
    stream = _keys.stream(roots[7], "tasks")
    assert key_slot(stream) == slot(shard_tag("shop", 7, 16))
    assert len({key_slot(f"{root}:tasks") for root in roots}) == 16
    # ... and none is in the group's own slot by accident of naming: the group's keys
    # hash by "shop", the shard's by "shop:7:<salt>".
    assert _keys.hash_tag(stream) != "shop"


def test_the_shard_count_is_a_key_of_the_group_in_its_slot() -> None:
    assert shard_count_key("shop") == "taskrunner:{shop}:shards"
    assert key_slot(shard_count_key("shop")) == key_slot(_keys.leader("shop", "cluster"))


def test_no_queue_of_the_cluster_layout_may_be_named_shards() -> None:
    with pytest.raises(
        ValueError, match=re.escape("would collide with the key taskrunner:{shop}:shards")
    ):
        _keys.stream_keys(None, "shop", "shards", "cluster")
    # The go layout has no such key: its names are unchanged.
    assert _keys.stream_keys(None, "shop", "shards", "go").stream == "taskrunner:shop:shards"


# Task ids ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "inner", "count", "task_id"),
    [
        (0, "1700000000000-0", 1, "1700000000000-0"),  # shards=1: today's ids, byte for byte
        (0, "1700000000000-0", 16, "0.1700000000000-0"),
        (15, "1700000000000-3", 16, "15.1700000000000-3"),
        (7, "0b5e3c1e-8a63-4b55-9d8e-6a3e5c4f3a21", 16, "7.0b5e3c1e-8a63-4b55-9d8e-6a3e5c4f3a21"),
    ],
)
def test_a_task_id_names_its_shard_and_parses_back(
    index: int, inner: str, count: int, task_id: str
) -> None:
    assert shard_task_id(index, inner, count) == task_id
    assert parse_task_id(task_id, count) == (index, inner)


def test_ids_no_longer_repeat_across_shards() -> None:
    same_stream_id = "1700000000000-0"  # two shards' streams can hand out the same id
    ids = {shard_task_id(i, same_stream_id, 16) for i in range(16)}
    assert len(ids) == 16


@pytest.mark.parametrize(
    ("task_id", "count"),
    [
        ("1700000000000-0", 16),  # an unsharded id names no shard of a sharded group
        ("16.1700000000000-0", 16),  # no shard 16
        ("07.1700000000000-0", 16),  # one spelling per shard
        ("-1.1700000000000-0", 16),
        ("x.1700000000000-0", 16),
        ("٣.1700000000000-0", 16),  # a decimal digit, but not an ASCII one
        ("3.", 16),
        ("3.a.b", 16),
        ("", 16),
        ("3.1700000000000-0", 1),  # a sharded id names nothing of an unsharded group
        ("", 1),
    ],
)
def test_an_id_of_no_shard_parses_to_none(task_id: str, count: int) -> None:
    assert parse_task_id(task_id, count) is None


@pytest.mark.parametrize("inner", ["", "3.4"])
def test_a_shards_id_with_a_dot_or_empty_is_refused(inner: str) -> None:
    with pytest.raises(
        ValueError, match=re.escape("a shard's task id must be non-empty without '.'")
    ):
        shard_task_id(0, inner, 16)


# Changing a live group's shard count ----------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "wanted", "pending", "allowed"),
    [
        (None, 1, 5, True),  # a group of before, served as before
        (None, 16, 0, True),  # an empty group of before may become sharded
        (None, 16, 5, False),  # ... a busy one may not: its messages would go unread
        (16, 16, 5, True),
        (16, 8, 0, True),  # empty: any change
        (16, 8, 1, False),
        (16, 1, 3, False),
        (1, 16, 3, False),
    ],
)
def test_a_live_groups_shard_count_changes_only_when_it_is_empty(
    recorded: int | None, wanted: int, pending: int, allowed: bool
) -> None:
    problem = shard_change_problem("shop", recorded, wanted, pending=pending)
    assert (problem is None) is allowed
    if problem is not None:
        assert "\n" not in problem
        assert f"shards={wanted}" in problem
        assert f"the {recorded or 1} shard(s)" in problem
        assert f"{pending} message(s)" in problem
        assert "taskrunner:{shop}:shards" in problem
