"""Configuration and task validation: bad values name the field and the value."""

from __future__ import annotations

import re
from typing import Any

import pytest
from _fleet import make_runner

from taskrunner import Task, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend


async def noop(payload: object) -> None:
    pass


def test_defaults_match_the_behaviour_spec() -> None:
    cfg = TaskRunnerConfig(consumer_group="emails")
    assert cfg.reclaim_delay == 300.0
    assert cfg.delayed_poll_interval == 5.0
    assert cfg.metrics_reset_interval == 86400.0
    assert cfg.tuning_cooldown == 10.0
    assert cfg.effective_reclaim_interval == 150.0
    assert re.fullmatch(r".+-\d+", cfg.host), cfg.host  # hostname-pid
    assert cfg.consumer_name(1) == f"emails_{cfg.host}_1"


def test_seconds_accept_ints_and_are_stored_as_floats() -> None:
    cfg = TaskRunnerConfig(consumer_group="g", reclaim_delay=10, shutdown_grace=0)
    assert cfg.reclaim_delay == 10.0
    assert isinstance(cfg.reclaim_delay, float)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("consumer_group", ""),
        ("consumer_group", "has space"),
        ("host", ""),
        ("batch_size", 0),
        ("num_fetchers", -1),
        ("num_workers", 0),
        ("min_workers", -2),
        ("desired_wait_time", -0.5),
        ("block_duration", 0),
        ("reclaim_delay", 0.0),
        ("delayed_poll_interval", -1),
        ("shutdown_grace", -1),
        ("metrics_reset_interval", -3600),
        ("reclaim_interval", 0),
        ("reclaim_delay", float("inf")),
        ("leader_lease_ttl", float("inf")),
        ("shutdown_grace", float("nan")),
        ("long_queue_hook", "not callable"),
        ("failed_task_handler", 42),
        ("on_error", 1.5),
        ("min_replicas", -1),
        ("replica_timeout", 0),
    ],
)
def test_bad_config_value_names_field_and_value(field: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"consumer_group": "g", field: value}
    with pytest.raises(ValueError, match=re.escape(field)) as info:
        TaskRunnerConfig(**kwargs)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize(("field", "value"), [("batch_size", "10"), ("reclaim_delay", True)])
def test_wrong_types_are_refused(field: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"consumer_group": "g", field: value}
    with pytest.raises(TypeError, match=re.escape(repr(value))):
        TaskRunnerConfig(**kwargs)


def test_max_workers_below_min_workers_is_refused() -> None:
    with pytest.raises(ValueError, match=r"max_workers must be >= min_workers \(4\), got 2"):
        TaskRunnerConfig(consumer_group="g", min_workers=4, max_workers=2)


def test_min_replicas_needs_a_backend_with_replicas() -> None:
    assert TaskRunnerConfig(consumer_group="g").min_replicas == 0  # off by default
    with pytest.raises(ValueError, match=r"min_replicas=1 needs a backend with replicas"):
        make_runner(MemoryBackend(), min_replicas=1)


def test_config_is_frozen_and_keyword_only() -> None:
    cfg = TaskRunnerConfig(consumer_group="g")
    with pytest.raises(AttributeError):
        cfg.num_workers = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        TaskRunnerConfig("g")  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": ""}, "Task.name"),
        ({"name": "a b"}, "Task.name"),
        ({"max_retry": -1}, "Task.max_retry must be an integer >= 0, got -1"),
        ({"reservation_timeout": 0}, "Task.reservation_timeout must be a number of seconds > 0"),
        (
            {"unique": True},
            "Task.unique_for must be a finite number of seconds > 0 when unique=True, got 0.0",
        ),
        ({"unique": True, "unique_for": -5}, "got -5"),
        ({"unique": True, "unique_for": float("inf")}, "got inf"),
        ({"reservation_timeout": float("inf")}, "Task.reservation_timeout must be a number"),
        ({"action": 42}, "Task.action must be callable, got 42"),
        ({"unique_key": "user"}, "Task.unique_key must be callable"),
        ({"action": "not a function"}, "Task.action"),
        ({"timeout": 0}, "Task.timeout must be a number of seconds > 0, got 0"),
        ({"timeout": "30"}, "Task.timeout must be a number of seconds > 0, got '30'"),
        ({"retry": 3}, "Task.retry must be a Backoff or None, got 3"),
        ({"permanent": "ValueError"}, "Task.permanent must be exception classes"),
        ({"permanent": (ValueError, int)}, "Task.permanent must be exception classes"),
    ],
)
def test_bad_task_fields_are_named(kwargs: dict[str, Any], message: str) -> None:
    kwargs = {"name": "t", "action": noop, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        Task(**kwargs)


def test_max_retry_zero_means_one_attempt() -> None:
    assert Task(name="t", action=noop, max_retry=0).attempts == 1
    assert Task(name="t", action=noop, max_retry=4).attempts == 4


async def test_register_refuses_duplicates_reserved_names_and_long_reservations() -> None:
    runner = make_runner(MemoryBackend(), reclaim_delay=30)
    runner.register(Task(name="t", action=noop, reservation_timeout=10))
    with pytest.raises(ValueError, match="'t' is already registered"):
        runner.register(Task(name="t", action=noop, reservation_timeout=10))
    with pytest.raises(ValueError, match="reserved"):
        runner.register(Task(name="delayed_tasks_schedule", action=noop, reservation_timeout=1))
    with pytest.raises(
        ValueError, match=r"reservation_timeout \(30s\) must be below reclaim_delay"
    ):
        runner.register(Task(name="u", action=noop, reservation_timeout=30))
    assert list(runner.tasks) == ["t"]
