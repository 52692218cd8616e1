"""One TaskOptions (taskrunner._options): its validation as one-line errors naming the field
and the value, shared by Task, ``task()``, ``periodic()`` and the catalog."""

from __future__ import annotations

import inspect
import math
import re
from typing import Any

import attrs
import pytest

from taskrunner import Backoff, RateLimit, Task, TaskRunner
from taskrunner._options import DEFAULT_OPTIONS, OPTION_NAMES, TaskOptions, option_values
from taskrunner._wire import CatalogTask


async def noop(payload: object) -> None:
    pass


BAD = [
    ({"max_retry": -1}, "Task.max_retry must be an integer >= 0, got -1"),
    ({"max_retry": True}, "Task.max_retry must be an integer >= 0, got True"),
    ({"max_retry": 1.5}, "Task.max_retry must be an integer >= 0, got 1.5"),
    ({"reservation_timeout": 0}, "Task.reservation_timeout must be a number of seconds > 0, got 0"),
    (
        {"reservation_timeout": math.inf},
        "Task.reservation_timeout must be a number of seconds > 0, got inf",
    ),
    ({"timeout": "30"}, "Task.timeout must be a number of seconds > 0, got '30'"),
    ({"keep_result": -1.0}, "Task.keep_result must be a number of seconds > 0, got -1.0"),
    (
        {"unique": True},
        "Task.unique_for must be a finite number of seconds > 0 when unique=True, got 0.0",
    ),
    (
        {"unique": True, "unique_for": math.nan},
        "Task.unique_for must be a finite number of seconds > 0 when unique=True, got nan",
    ),
    ({"unique_key": "user"}, "Task.unique_key must be callable or None, got 'user'"),
    ({"extra_keys": "drop"}, "Task.extra_keys must be 'forbid' or 'ignore', got 'drop'"),
    ({"retry": 3}, "Task.retry must be a Backoff or None, got 3"),
    (
        {"permanent": "ValueError"},
        "Task.permanent must be exception classes (a tuple of them), got 'ValueError'",
    ),
    ({"queue": "a b"}, "Task.queue "),
    ({"max_concurrency": 0}, "Task.max_concurrency must be an integer >= 1 or None, got 0"),
    ({"rate_limit": 10}, "Task.rate_limit must be a RateLimit (e.g. RateLimit(10, per=1.0))"),
    ({"rate_limit_key": "domain"}, "Task.rate_limit_key must be callable or None, got 'domain'"),
    ({"rate_limit_key": lambda p: "k"}, "Task.rate_limit_key needs a rate_limit, got None"),
    ({"shard_key": "customer_id"}, "Task.shard_key must be callable or None, got 'customer_id'"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_a_bad_option_is_one_line_naming_the_field_and_the_value(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)) as caught:
        TaskOptions(**kwargs)
    text = str(caught.value)
    assert "\n" not in text
    field = next(iter(kwargs)) if "unique" not in kwargs else "unique_for"
    assert f"Task.{field}" in text


@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_a_task_refuses_the_same_options_in_the_same_words(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as options:
        TaskOptions(**kwargs)
    with pytest.raises(ValueError, match=re.escape(message)) as task:
        Task(name="t", action=noop, **kwargs)
    # A task names itself where the options alone cannot say whose they are.
    assert str(task.value) in (str(options.value), f"{options.value} for task 't'")


@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_the_task_decorator_refuses_a_bad_option_when_it_is_called(
    kwargs: dict[str, Any], message: str
) -> None:
    runner = TaskRunner.__new__(TaskRunner)  # no backend needed: nothing gets registered
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        runner.task("t", **kwargs)


def test_the_task_decorators_keywords_are_the_options_with_their_defaults() -> None:
    """``task()`` spells every option out (for the reader and the type checker); this
    keeps the spelling and the one TaskOptions the same, names and defaults."""
    params = inspect.signature(TaskRunner.task).parameters
    keywords = {n: p.default for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    defaults = {f.name: f.default for f in attrs.fields(TaskOptions)}
    assert keywords == defaults
    periodic = inspect.signature(TaskRunner.periodic).parameters
    task_keywords = {n: p.default for n, p in periodic.items() if n in defaults}
    assert task_keywords == {n: defaults[n] for n in task_keywords}
    assert set(task_keywords) == {
        "max_retry",
        "reservation_timeout",
        "extra_keys",
        "timeout",
        "retry",
        "permanent",
        "queue",
        "max_concurrency",
        "rate_limit",
    }


def test_a_task_is_its_options_with_a_name_and_an_action() -> None:
    options = TaskOptions(
        max_retry=3, retry=Backoff(initial=2.0), permanent=KeyError, rate_limit=RateLimit(5)
    )
    task = Task.with_options("t", noop, options)
    assert (task.name, task.action) == ("t", noop)
    assert task.options == options
    assert option_values(task) == option_values(options)
    assert task.permanent == (KeyError,)
    assert tuple(f.name for f in attrs.fields(Task))[:2] == ("name", "action")
    assert set(OPTION_NAMES) < {f.name for f in attrs.fields(Task)}


@pytest.mark.parametrize(
    ("options", "entry"),
    [
        (DEFAULT_OPTIONS, CatalogTask(name="t", stream="s")),
        (
            TaskOptions(reservation_timeout=10.0, unique=True, unique_for=30.0, keep_result=60.0),
            CatalogTask(
                name="t",
                stream="s",
                reservation_timeout=10.0,
                unique=True,
                unique_for=30.0,
                keep_result=60.0,
            ),
        ),
        (
            TaskOptions(unique=True, unique_for=5.0, unique_key=lambda p: "k"),
            CatalogTask(name="t", stream="s", unique=True, unique_for=5.0, keyed=True),
        ),
        (TaskOptions(unique=False, unique_for=5.0), CatalogTask(name="t", stream="s")),
    ],
)
def test_the_catalog_entry_is_a_function_of_the_options(
    options: TaskOptions, entry: CatalogTask
) -> None:
    """The default options give Go's zero values: what a producer that knows a task by
    name only writes."""
    assert options.catalog_task("t", "s") == entry


def test_a_registered_tasks_entry_is_its_options_entry() -> None:
    task = Task(name="t", action=noop, reservation_timeout=10.0, unique=True, unique_for=3.0)
    assert task.catalog_entry("s") == task.options.catalog_task("t", "s")
    with pytest.raises(RuntimeError, match="no reservation timeout until registered"):
        Task(name="t", action=noop).catalog_entry("s")
