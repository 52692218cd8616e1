"""Which shard a dispatch goes to (taskrunner._dispatch.routing), the task's ``shard_key``,
and the ``shards`` setting: tables and one-line errors."""

from __future__ import annotations

import collections
import re
from typing import Any

import pytest

from taskrunner import Task, TaskRunner, TaskRunnerConfig
from taskrunner._dispatch.routing import RoundRobin, key_text, route, stable_shard
from taskrunner._keys import KeyLayoutError
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import InvalidTaskPayload


async def noop(payload: object) -> None:
    pass


# key_text ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (None, None),
        ("", None),
        ("cust-7", "cust-7"),
        (7, "7"),
        (7.5, "7.5"),
        (["a", 1], '["a",1]'),
        ({"b": 1, "a": "é"}, '{"a":"é","b":1}'),  # keys sorted, text kept as it is
        (0, "0"),  # falsy, but a key
        (False, "false"),
    ],
)
def test_the_text_a_key_hashes_by(key: object, text: str | None) -> None:
    assert key_text(key) == text


def test_a_key_that_is_no_json_value_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^shard_key must return a JSON value or None, got \{1\}$"):
        key_text({1})


# stable_shard and route ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "shard"),
    [
        # Pinned: a hash that changed between releases would move keys between shards
        # under a live fleet, breaking order and uniqueness.
        ("cust-7", 16, 11),
        ("cust-8", 16, 7),
        ("charge:order-1", 16, 14),
        ("7", 16, 2),
        ("", 16, 4),
        ("cust-7", 1, 0),
        ("cust-7", 3, 1),
    ],
)
def test_the_stable_hash_is_pinned(text: str, count: int, shard: int) -> None:
    assert stable_shard(text, count) == shard


def test_the_stable_hash_spreads_keys_evenly() -> None:
    counts = collections.Counter(stable_shard(f"cust-{n}", 16) for n in range(16_000))
    assert len(counts) == 16
    assert all(850 <= n <= 1150 for n in counts.values()), counts  # 1000 +- ~4.7 sigma


def test_a_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^count must be >= 1, got 0$"):
        stable_shard("x", 0)


@pytest.mark.parametrize(
    ("count", "shard_key", "unique_key", "turn", "shard"),
    [
        (1, "cust-7", "charge:x", 5, 0),  # one shard: always 0
        (16, "cust-7", None, 3, 11),  # the shard key decides
        (16, "cust-7", "charge:order-1", 3, 11),  # ... before the unique key
        (16, None, "charge:order-1", 3, 14),  # else the unique key
        (16, None, None, 3, 3),  # else the round-robin's turn
        (16, None, None, 19, 3),
    ],
)
def test_route(
    count: int, shard_key: str | None, unique_key: str | None, turn: int, shard: int
) -> None:
    assert route(count, shard_key=shard_key, unique_key=unique_key, turn=turn) == shard


def test_the_round_robin_visits_every_shard_in_turn_from_its_start() -> None:
    spread = RoundRobin(4, start=2)
    assert spread.peek() == 2
    assert [spread.take() for _ in range(6)] == [2, 3, 0, 1, 2, 3]
    assert spread.take_many(3) == [0, 1, 2]
    assert RoundRobin(4, start=9).peek() == 1


def test_round_robins_start_on_random_shards() -> None:
    starts = {RoundRobin(16).peek() for _ in range(200)}
    assert len(starts) > 8
    assert starts <= set(range(16))


# Task.shard_key ------------------------------------------------------------------------


def test_a_tasks_shard_key_is_the_text_of_what_it_returns() -> None:
    task = Task(name="charge", action=noop, shard_key=lambda p: p["customer_id"])
    assert task.shard_key_for({"customer_id": 7}) == "7"
    assert task.shard_key_for({"customer_id": "c7"}) == "c7"
    assert task.shard_key_for({"customer_id": None}) is None
    assert Task(name="plain", action=noop).shard_key_for({"customer_id": 7}) is None


@pytest.mark.parametrize(
    ("shard_key", "message"),
    [
        (lambda p: p["missing"], "shard_key raised KeyError: 'missing'"),
        (lambda p: object, "shard_key must return a JSON value or None, got <class 'object'>"),
    ],
)
def test_a_shard_key_that_fails_refuses_the_payload(shard_key: Any, message: str) -> None:
    task = Task(name="charge", action=noop, shard_key=shard_key)
    with pytest.raises(InvalidTaskPayload, match=re.escape(message)) as info:
        task.shard_key_for({"customer_id": 7})
    assert info.value.task_name == "charge"


def test_the_decorator_takes_a_shard_key() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="shop"), MemoryBackend())

    def customer(p: dict[str, Any]) -> Any:
        return p["customer_id"]

    @runner.task(name="charge", shard_key=customer)
    async def charge(payload: dict[str, Any]) -> None:
        pass

    assert runner.tasks["charge"].shard_key is customer


# TaskRunnerConfig.shards ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("shards", "error", "message"),
    [
        (0, ValueError, "shards must be an integer from 1 to 256, got 0"),
        (257, ValueError, "shards must be an integer from 1 to 256, got 257"),
        ("16", TypeError, "shards must be an integer, got '16'"),
        (True, TypeError, "shards must be an integer, got True"),
        (16.0, TypeError, "shards must be an integer, got 16.0"),
    ],
)
def test_a_bad_shard_count_is_one_line_naming_the_field_and_the_value(
    shards: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        TaskRunnerConfig(consumer_group="shop", shards=shards)  # type: ignore[arg-type]


def test_a_sharded_group_refuses_the_go_layout() -> None:
    with pytest.raises(
        ValueError, match="^" + re.escape("shards=16 needs key_layout='cluster' or None, got 'go'")
    ):
        TaskRunnerConfig(consumer_group="shop", shards=16, key_layout="go")
    assert TaskRunnerConfig(consumer_group="shop", shards=1, key_layout="go").shards == 1


@pytest.mark.parametrize(
    ("shards", "key_layout", "requested"),
    [(1, None, None), (1, "go", "go"), (1, "cluster", "cluster"), (16, None, "cluster")],
)
def test_a_sharded_group_asks_for_the_cluster_layout(
    shards: int, key_layout: Any, requested: str | None
) -> None:
    config = TaskRunnerConfig(consumer_group="shop", shards=shards, key_layout=key_layout)
    assert config.requested_layout == requested


def test_a_sharded_runner_is_made_and_configured_like_any_other() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="shop", shards=16), MemoryBackend())
    assert runner.config.shards == 16
    assert runner.backend.key_layout == "cluster"  # asked for by the sharded group
    runner.configure(shards=4)
    assert runner.config.shards == 4


def test_configuring_shards_moves_the_backend_to_the_cluster_layout() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="shop"), MemoryBackend())
    assert runner.backend.key_layout == "go"
    runner.configure(shards=8)
    assert runner.backend.key_layout == "cluster"
    pinned = TaskRunner(TaskRunnerConfig(consumer_group="shop"), MemoryBackend(key_layout="go"))
    with pytest.raises(KeyLayoutError, match="differs from the backend's key_layout 'go'"):
        pinned.configure(shards=8)
    assert pinned.config.shards == 1
