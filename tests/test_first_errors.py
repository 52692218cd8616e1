"""The errors a new user meets first (issue 10, point 8): each one line that names the
field (or the argument, the path, the group, the file) and the value."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import cattrs
import pytest
import trio
from _fleet import make_runner, serving, wait_until

from taskrunner import (
    InvalidTaskPayload,
    Task,
    TaskMessage,
    TaskRunner,
    TaskRunnerConfig,
    Workflow,
    WrongAsyncLibrary,
)
from taskrunner._wire import encode_message
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.groups import UnknownGroup, require_group

DOCS = Path(__file__).resolve().parent.parent / "docs"

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
    "queues": (
        "critical",
        "queues must be a tuple of queue names (strict priority) or a mapping of queue "
        "names to weights, got 'critical'",
    ),
    "default_timeout": ("30", "default_timeout must be a number of seconds, got '30'"),
    "sync_threads": (2.5, "sync_threads must be an integer, got 2.5"),
    "target_wait": ("5s", "target_wait must be a number of seconds, got '5s'"),
    "max_instances": (3.0, "max_instances must be an integer, got 3.0"),
    "scale_down_hold": (None, "scale_down_hold must be a number of seconds, got None"),
    "min_replicas": (1.5, "min_replicas must be an integer, got 1.5"),
    "key_layout": (3, "key_layout must be 'go', 'cluster' or None, got 3"),
    "shards": ("16", "shards must be an integer, got '16'"),
    "events": ("yes", "events must be True or False, got 'yes'"),
    "events_maxlen": (2.5, "events_maxlen must be an integer, got 2.5"),
    "replica_timeout": ("1", "replica_timeout must be a number of seconds, got '1'"),
}


def test_every_config_field_has_a_wrong_type_case() -> None:
    assert sorted(WRONG_TYPES) == sorted(f.name for f in attrs.fields(TaskRunnerConfig))


@pytest.mark.parametrize(("field", "value", "message"), [(k, *v) for k, v in WRONG_TYPES.items()])
def test_a_wrong_type_names_the_field_and_the_value(field: str, value: Any, message: str) -> None:
    kwargs: dict[str, Any] = {"consumer_group": "g", field: value}
    with pytest.raises((TypeError, ValueError)) as info:
        TaskRunnerConfig(**kwargs)
    assert str(info.value) == message


# TaskRunner(config, backend) ----------------------------------------------------------


def config() -> TaskRunnerConfig:
    return TaskRunnerConfig(consumer_group="g")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (config(), "redis://localhost:6379/0"),
            "TaskRunner's backend must be a Backend, got str 'redis://localhost:6379/0'; pass "
            "RedisBackend.from_url('redis://localhost:6379/0') (from taskrunner.backends.redis)",
        ),
        (
            (config(), None),
            "TaskRunner's backend must be a Backend, got NoneType None; pass "
            "RedisBackend.from_url(url) or MemoryBackend()",
        ),
        (
            ("mail", MemoryBackend()),
            "TaskRunner's config must be a TaskRunnerConfig, got str 'mail'; pass e.g. "
            "TaskRunnerConfig(consumer_group='mail')",
        ),
        (
            ({"consumer_group": "g"}, MemoryBackend()),
            "TaskRunner's config must be a TaskRunnerConfig, got dict {'consumer_group': 'g'}; "
            "pass TaskRunnerConfig(**config)",
        ),
    ],
)
def test_runner_arguments_of_the_wrong_kind_are_refused_at_construction(
    args: tuple[Any, Any], message: str
) -> None:
    with pytest.raises(TypeError) as info:
        TaskRunner(*args)
    assert str(info.value) == message


def test_a_backend_of_ones_own_is_told_what_it_lacks() -> None:
    class HalfBackend(MemoryBackend):
        ack = None  # type: ignore[assignment]
        refresh = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"\(it has no ack, refresh\); pass"):
        TaskRunner(config(), HalfBackend())


# @runner.task ------------------------------------------------------------------------


async def test_task_decorator_without_parentheses_registers_under_the_function_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend())
    ran: list[object] = []

    @runner.task
    async def send_mail(payload: object) -> None:
        ran.append(payload)

    @runner.task()
    async def called(payload: object) -> None:
        ran.append(payload)

    assert runner.task_names == ["send_mail", "called"]
    assert runner.tasks["send_mail"].action is send_mail  # the function itself, returned
    assert runner.tasks["send_mail"].max_retry == 1
    await runner.dispatch("send_mail", 1)
    async with serving(runner):
        await wait_until(lambda: ran == [1])


def test_task_decorator_without_parentheses_takes_a_plain_function_for_a_thread() -> None:
    runner = make_runner(MemoryBackend())

    @runner.task
    def sync(payload: object) -> None: ...

    assert runner.tasks["sync"].shape.sync, "a plain def runs in a worker thread"
    with pytest.raises(ValueError, match=r"^Task\.action must be callable, got 'sync'$"):
        runner.register(Task(name="other", action="sync"))


# Typed payloads ------------------------------------------------------------------------


@attrs.frozen
class Size:
    width: int
    height: int


@attrs.frozen
class Item:
    sku: str
    size: Size


@attrs.frozen
class Resize:
    width: int
    items: list[Item] = attrs.field(factory=list)


@dataclasses.dataclass
class Mail:
    to: str


ITEM = {"sku": "a", "size": {"width": 1, "height": 2}}

REFUSALS: list[tuple[Any, list[str]]] = [
    ({}, ["width: missing required field"]),
    ({"width": "wide"}, ["width: expected int, got 'wide'"]),
    (
        {"width": 1, "items": [ITEM, ITEM, {"sku": "c", "size": {"width": 3}}]},
        ["items[2].size.height: missing required field"],
    ),
    ({"width": 1, "items": 5}, ["items: expected list[Item], got 5"]),
    (
        {"width": 1, "items": [{"sku": "a", "size": "big"}]},
        ["items[0].size: expected Size, got 'big'"],
    ),
    ({"width": 1, "colour": "red"}, ["colour: unknown field"]),
    (
        {"width": 1, "items": [{**ITEM, "size": {"width": 1, "height": 2, "depth": 3}}]},
        ["items[0].size.depth: unknown field"],
    ),
    ("wide", ["expected a JSON object, got 'wide'"]),
    ({"height": 2, "width": "x"}, ["width: expected int, got 'x'", "height: unknown field"]),
]


@pytest.mark.parametrize(("payload", "problems"), REFUSALS)
async def test_dispatch_refuses_a_payload_that_does_not_fit_naming_each_bad_field(
    payload: Any, problems: list[str]
) -> None:
    runner = make_runner(MemoryBackend())

    @runner.task()
    async def resize(payload: Resize) -> None: ...

    with pytest.raises(InvalidTaskPayload) as info:
        await runner.dispatch("resize", payload)
    assert sorted(info.value.problems) == sorted(problems)
    assert str(info.value).startswith("payload for 'resize' does not fit Resize: ")
    assert "\n" not in str(info.value)
    for problem in problems:
        assert problem in str(info.value)
    assert await runner.backend.length(runner.config.consumer_group) == 0


async def test_the_issue_example_and_a_dataclass() -> None:
    runner = make_runner(MemoryBackend())

    @runner.task()
    async def resize(payload: Resize) -> None: ...

    @runner.task()
    async def mail(payload: Mail) -> None: ...

    with pytest.raises(InvalidTaskPayload) as info:
        await runner.dispatch("resize", {})
    assert str(info.value) == (
        "payload for 'resize' does not fit Resize: width: missing required field"
    )
    assert isinstance(info.value.__cause__, cattrs.ClassValidationError)  # for the traceback
    with pytest.raises(InvalidTaskPayload) as info:
        await runner.dispatch_delayed("mail", {"to": "a@example.com", "cc": "b"}, 5)
    assert str(info.value) == (
        "payload for 'mail' does not fit Mail: cc: unknown field "
        "(a task registered with extra_keys='ignore' drops unknown fields)"
    )


async def test_the_worker_sends_a_payload_that_does_not_fit_to_the_failure_path_with_the_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    ran: list[Resize] = []

    @runner.task()
    async def resize(payload: Resize) -> None:
        ran.append(payload)

    # Written by another producer (an older version, or the Go library): not checked.
    await backend.add(
        "g",
        [
            encode_message(TaskMessage(task_name="resize", payload={"width": 1, "colour": "red"})),
            encode_message(TaskMessage(task_name="resize", payload={"items": []})),
            encode_message(TaskMessage(task_name="resize", payload={"width": 2})),
        ],
    )
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 3)
    assert ran == [Resize(width=2)]
    errors = sorted(letter.error for letter in await backend.dead_letters("g"))
    assert errors == [
        "InvalidTaskPayload: payload for 'resize' does not fit Resize: "
        "colour: unknown field (a task registered with extra_keys='ignore' drops unknown fields)",
        "InvalidTaskPayload: payload for 'resize' does not fit Resize: "
        "width: missing required field",
    ]


async def test_a_task_may_let_unknown_keys_be_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    ran: list[object] = []

    @runner.task(extra_keys="ignore")
    async def resize(payload: Resize) -> None:
        ran.append(payload)

    async def mail(payload: Mail) -> None:
        ran.append(payload)

    runner.register(Task(name="mail", action=mail, extra_keys="ignore"))
    await runner.dispatch("resize", {"width": 1, "colour": "red"})
    await backend.add(
        "g", [encode_message(TaskMessage(task_name="mail", payload={"to": "a", "cc": "b"}))]
    )
    async with serving(runner):
        await wait_until(lambda: len(ran) == 2)
    assert sorted(ran, key=repr) == [Mail(to="a"), Resize(width=1)]
    assert await backend.dead_letters("g") == []
    with pytest.raises(InvalidTaskPayload, match="width: missing required field"):
        await runner.dispatch("resize", {"colour": "red"})  # still refused for what is missing


def test_extra_keys_takes_two_values() -> None:
    async def act(payload: Resize) -> None: ...

    with pytest.raises(ValueError, match=r"Task\.extra_keys must be 'forbid' or 'ignore'"):
        Task(name="t", action=act, extra_keys="drop")  # type: ignore[arg-type]
    assert Task(name="t", action=act).extra_keys == "forbid"


# Awaited under asyncio -------------------------------------------------------------------

ASYNC_METHODS: dict[str, tuple[Any, ...]] = {
    "dispatch": ("t", 1),
    "dispatch_many": ("t", [1, 2]),
    "dispatch_delayed": ("t", 1, 5),
    "schedule_for": ("t", 1, datetime(2030, 1, 1, tzinfo=UTC)),
    "serve": (),
    "get_timing_statistics": (),
    "get_number_of_replications": (),
    "wait_leadership_changed": (),
    "get_task": ("0-1",),
    "cancel": ("0-1",),
    "dispatch_workflow": (Workflow("w").step("a", "t"),),
}


def test_every_public_async_method_is_covered() -> None:
    public = {
        name
        for name, fn in inspect.getmembers(TaskRunner, inspect.iscoroutinefunction)
        if not name.startswith("_")
    }
    assert public == set(ASYNC_METHODS)


@pytest.mark.parametrize(("method", "args"), ASYNC_METHODS.items())
def test_a_method_awaited_under_asyncio_says_taskrunner_runs_on_trio(
    method: str, args: tuple[Any, ...]
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task()
    async def t(payload: object) -> None: ...

    with pytest.raises(WrongAsyncLibrary) as info:
        asyncio.run(getattr(runner, method)(*args))
    assert str(info.value) == (
        f"TaskRunner.{method}() was awaited under asyncio, but taskrunner runs on trio: "
        "await it inside trio.run(), or use taskrunner.producer.AsyncProducer from asyncio "
        "code (taskrunner.producer.Producer from sync code); see the docs page "
        "'Dispatching from your application' (docs/dispatching.md)"
    )
    assert (info.value.method, info.value.library) == (f"TaskRunner.{method}", "asyncio")
    assert isinstance(info.value, RuntimeError)
    assert (
        (DOCS / "dispatching.md").read_text().startswith("# Dispatching from your application\n")
    ), "the page the message names exists"
    assert not runner.statistics().serving
    assert trio.run(backend.length, runner.config.consumer_group) == 0  # nothing was queued


def test_a_method_driven_by_no_event_loop_says_so() -> None:
    runner = make_runner(MemoryBackend())
    coro = runner.dispatch("t", 1)
    with pytest.raises(WrongAsyncLibrary, match=r"awaited outside trio, but taskrunner runs"):
        coro.send(None)


# taskrunner stats|top|keys --group typo ------------------------------------------------


async def two_applications(url: str) -> None:
    """``mail`` has served (a consumer group on the stream); ``shop`` only has a delayed
    task waiting (never served); a unique lock whose key ends like a group key."""
    async with RedisBackend.from_url(url) as backend:
        mail = TaskRunner(
            TaskRunnerConfig(consumer_group="mail", block_duration=0.05, shutdown_grace=0),
            backend,
        )
        shop = TaskRunner(TaskRunnerConfig(consumer_group="shop"), backend)

        @mail.task()
        async def send_mail(payload: object) -> None: ...

        @shop.task()
        async def checkout(payload: object) -> None: ...

        async with trio.open_nursery() as nursery:
            await nursery.start(mail.serve)
            with trio.fail_after(10):  # the first read creates the consumer group
                while not (await backend.get_metrics("mail")).groups:  # noqa: ASYNC110 (no event)
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        await shop.dispatch_delayed("checkout", 1, 3600)
        await backend.client.execute("SET", "taskrunner:unique:send_mail:metrics", "token")


async def test_list_groups_sees_served_and_waiting_groups(redis_url: str) -> None:
    await two_applications(redis_url)
    async with RedisBackend.from_url(redis_url) as backend:
        assert await backend.list_groups() == ["mail", "shop"]
        await require_group(backend, "shop")
        with pytest.raises(UnknownGroup) as info:
            await require_group(backend, "typo")
    assert str(info.value) == "no group 'typo' on this server; groups: mail, shop"


async def test_an_empty_server_has_no_groups(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        with pytest.raises(UnknownGroup, match=r"^no group 'g' on this server; groups: none$"):
            await require_group(backend, "g")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskrunner", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", [["stats"], ["stats", "--json"], ["top", "--once"], ["keys"]])
def test_an_operator_command_on_a_misspelt_group_exits_1_listing_the_groups(
    redis_url: str, command: list[str]
) -> None:
    trio.run(two_applications, redis_url)
    result = run_cli(*command, "--url", redis_url, "--group", "typo")
    assert result.returncode == 1, result
    assert result.stderr == (
        f"taskrunner {command[0]}: error: no group 'typo' on this server; groups: mail, shop\n"
    )
    assert result.stdout == ""
    # The groups that are there are shown as before.
    for group in ("mail", "shop"):
        ok = run_cli(*command, "--url", redis_url, "--group", group)
        assert ok.returncode == 0, ok


# taskrunner worker mod:runner, where mod is broken -----------------------------------

BROKEN_MODULES = {
    "pkg/__init__.py": "",
    "pkg/names.py": "import json\n\nx = 1\nrunner = undefined_name\n",
    "pkg/via.py": "from pkg import names\n",
    "syntax.py": "x = 1\ndef f(:\n    pass\n",
    "in_a_library.py": "import json\n\nsettings = json.loads('{')\n",
    "bad_config.py": (
        "from taskrunner import TaskRunnerConfig\n\n\n"
        "config = TaskRunnerConfig(consumer_group='app', num_workers=1.5)\n"
    ),
}


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "pkg.names:runner",
            "importing module 'pkg.names' failed at pkg/names.py, line 4: "
            "NameError: name 'undefined_name' is not defined",
        ),
        (  # raised in a module the target imports: that module's line
            "pkg.via:runner",
            "importing module 'pkg.via' failed at pkg/names.py, line 4: "
            "NameError: name 'undefined_name' is not defined",
        ),
        (
            "syntax:runner",
            "importing module 'syntax' failed at syntax.py, line 2: SyntaxError: invalid syntax",
        ),
        (  # raised inside the standard library: the user's line that called it
            "in_a_library:runner",
            "importing module 'in_a_library' failed at in_a_library.py, line 3: "
            "JSONDecodeError: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)",
        ),
        (  # raised inside taskrunner: the user's line too
            "bad_config:runner",
            "importing module 'bad_config' failed at bad_config.py, line 4: "
            "TypeError: num_workers must be an integer, got 1.5",
        ),
    ],
)
def test_a_broken_import_names_the_file_and_line(tmp_path: Path, target: str, message: str) -> None:
    for name, text in BROKEN_MODULES.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "taskrunner", "worker", target],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result
    assert result.stderr == f"taskrunner worker: error: {message}\n"
