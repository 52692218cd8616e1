"""The errors a new user meets first (issue 10, point 8): each one line that names the
field (or the argument, the path, the group, the file) and the value."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from taskrunner import TaskRunnerConfig

# Configuration ------------------------------------------------------------------------

WRONG_TYPES: dict[str, tuple[Any, str]] = {
    "consumer_group": (5, "consumer_group must be a string, got 5"),
    "host": (b"box", "host must be a string, got b'box'"),
    "batch_size": ("10", "batch_size must be an integer, got '10'"),
    "num_fetchers": (2.0, "num_fetchers must be an integer, got 2.0"),
    "num_workers": (1.5, "num_workers must be an integer, got 1.5"),
    "min_workers": (True, "min_workers must be an integer, got True"),
    "max_workers": (None, "max_workers must be an integer, got None"),
    "desired_wait_time": ("1s", "desired_wait_time must be a number of seconds, got '1s'"),
    "desired_wait_time_tolerance": (
        [1],
        "desired_wait_time_tolerance must be a number of seconds, got [1]",
    ),
    "tuning_cooldown": (None, "tuning_cooldown must be a number of seconds, got None"),
    "block_duration": (True, "block_duration must be a number of seconds, got True"),
    "long_queue_threshold": ("0", "long_queue_threshold must be a number of seconds, got '0'"),
    "long_queue_hook": ("hook", "long_queue_hook must be callable or None, got 'hook'"),
    "failed_task_handler": (42, "failed_task_handler must be callable or None, got 42"),
    "on_error": (1.5, "on_error must be callable or None, got 1.5"),
    "metrics_reset_interval": (
        "24h",
        "metrics_reset_interval must be a number of seconds, got '24h'",
    ),
    "reclaim_delay": ("300", "reclaim_delay must be a number of seconds, got '300'"),
    "reclaim_interval": ("5", "reclaim_interval must be a number of seconds, got '5'"),
    "delayed_poll_interval": (
        False,
        "delayed_poll_interval must be a number of seconds, got False",
    ),
    "leader_lease_ttl": (b"5", "leader_lease_ttl must be a number of seconds, got b'5'"),
    "shutdown_grace": ({}, "shutdown_grace must be a number of seconds, got {}"),
}


def test_every_config_field_has_a_wrong_type_case() -> None:
    assert sorted(WRONG_TYPES) == sorted(f.name for f in attrs.fields(TaskRunnerConfig))


@pytest.mark.parametrize(("field", "value", "message"), [(k, *v) for k, v in WRONG_TYPES.items()])
def test_a_wrong_type_names_the_field_and_the_value(field: str, value: Any, message: str) -> None:
    kwargs: dict[str, Any] = {"consumer_group": "g", field: value}
    with pytest.raises((TypeError, ValueError)) as info:
        TaskRunnerConfig(**kwargs)
    assert str(info.value) == message
