"""Golden tests of the wire (taskrunner._wire): literal bytes, in both directions.

The documents marked "Go" are what soroosh-tanzadeh/taskrunner v0.4.1 writes,
as seen in Redis when it shared a server with this project (issue 11): its
field order, its meaning of ``unique_key``, its integer ``time``. Each is read
here into what we expect, and what we write is compared with literal bytes,
given a fixed uuid, token and time.
"""

from __future__ import annotations

import enum
import json
import re
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import InvalidTaskPayload, InvalidTaskResult, Task, TaskMessage, _wire
from taskrunner._fleet.stats import compute_stats
from taskrunner._fleet.timings import TimingRecorder
from taskrunner._schedules.delayed import build_move
from taskrunner._serve import bulk_writer
from taskrunner._wire import (
    MAX_MESSAGE_BYTES,
    DelayedTask,
    MessageExtras,
    TimingFields,
    decode_delayed,
    decode_message,
    encode_delayed,
    encode_message,
    new_delayed,
    new_message,
    unique_lock,
)
from taskrunner._wire.encoding import json_object
from taskrunner._wire.message import extras_of
from taskrunner.backends import DelayedMove
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend

TOKEN = "0123456789abcdef0123456789abcdef"
"""A lock token as ours look (uuid4 hex); Go's are base64, like ``GO_TOKEN``."""
GO_TOKEN = "q83vEjRWeJA="
DELAYED_ID = "5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11"


async def _noop(payload: Any) -> None:
    pass


def echo(**options: Any) -> Task:
    """The task ``echo`` as registered (reservation 30 s)."""
    return Task(name="echo", action=_noop, reservation_timeout=30.0, **options)


UNIQUE_ECHO = echo(unique=True, unique_for=60, unique_key=lambda p: p["key"])


# The stream message ------------------------------------------------------------------

GO_UNIQUE_MESSAGE = (
    b'{"unique":true,"unique_for":60,"unique_key":"echo:A-17",'
    b'"unique_lock_value":"q83vEjRWeJA=","reservation_timeout":30000000000,'
    b'"task_name":"echo","payload":{"key":"A-17"}}'
)
GO_PLAIN_MESSAGE = (
    b'{"unique":false,"unique_for":60,"unique_key":"","unique_lock_value":"",'
    b'"reservation_timeout":30000000000,"task_name":"echo","payload":{"n":2}}'
)
"""Go writes the task's ``unique_for`` even when it is not unique."""

OUR_UNIQUE_MESSAGE = (
    b'{"task_name":"echo","payload":{"key":"A-17"},"unique":true,"unique_for":60,'
    b'"unique_key":"echo:A-17","unique_lock_value":"0123456789abcdef0123456789abcdef",'
    b'"reservation_timeout":30000000000}'
)
OUR_PLAIN_MESSAGE = (
    b'{"task_name":"echo","payload":{"n":2},"unique":false,"unique_for":0,'
    b'"unique_key":"","unique_lock_value":"","reservation_timeout":30000000000}'
)


def test_go_messages_decode() -> None:
    assert decode_message(GO_UNIQUE_MESSAGE) == TaskMessage(
        task_name="echo",
        payload={"key": "A-17"},
        unique=True,
        unique_for=60,
        unique_key="echo:A-17",
        unique_lock_value=GO_TOKEN,
        reservation_timeout=30_000_000_000,
    )
    plain = decode_message(GO_PLAIN_MESSAGE)
    assert plain == TaskMessage(
        task_name="echo", payload={"n": 2}, unique_for=60, reservation_timeout=30_000_000_000
    )
    assert plain.reservation_timeout_seconds == 30.0


def test_we_write_the_literal_bytes() -> None:
    payload = {"key": "A-17"}
    unique = new_message(
        UNIQUE_ECHO, payload, unique_key=UNIQUE_ECHO.message_unique_key(payload), token=TOKEN
    )
    assert encode_message(unique) == OUR_UNIQUE_MESSAGE
    assert encode_message(new_message(echo(), {"n": 2})) == OUR_PLAIN_MESSAGE


def test_what_we_write_reads_back_as_go_wrote_it() -> None:
    ours = decode_message(OUR_UNIQUE_MESSAGE)
    go = decode_message(GO_UNIQUE_MESSAGE)
    assert (ours.task_name, ours.payload, ours.unique, ours.unique_for, ours.unique_key) == (
        go.task_name,
        go.payload,
        go.unique,
        go.unique_for,
        go.unique_key,
    )
    assert ours.reservation_timeout == go.reservation_timeout


@pytest.mark.parametrize(("seconds", "whole"), [(60, 60), (59.2, 60), (0.001, 1)])
def test_unique_for_is_whole_seconds_rounded_up(seconds: float, whole: int) -> None:
    task = echo(unique=True, unique_for=seconds)
    assert new_message(task, None, unique_key="echo", token=TOKEN).unique_for == whole


def test_nulls_missing_fields_and_extra_fields_are_tolerated() -> None:
    message = decode_message(b'{"task_name":"t","unique_key":null,"attempt":3,"dispatched_at":1.5}')
    assert message == TaskMessage(task_name="t", extras=MessageExtras(dispatched_at=1.5))
    assert message.attempts == 0, "attempt (singular) is not ours"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "no 'payload' field"),
        (b"", "not valid JSON"),
        (b"{nope", "not valid JSON"),
        (b"[1,2]", "expected a JSON object, got list"),
        (b'"text"', "expected a JSON object, got str"),
        (b'{"payload":1}', "'task_name' should be a non-empty string, got None"),
        (b'{"task_name":7}', "'task_name' should be a non-empty string, got 7"),
        (b'{"task_name":"t","unique":"yes"}', "'unique' should be bool, got 'yes'"),
        (b'{"task_name":"t","reservation_timeout":"1s"}', "'reservation_timeout' should be int"),
        (b'{"task_name":"t","unique_for":true}', "'unique_for' should be int, got True"),
        (b" " * (MAX_MESSAGE_BYTES + 1), "byte limit"),
    ],
)
def test_malformed_entries_raise_invalid_payload_naming_the_problem(
    raw: bytes | None, reason: str
) -> None:
    with pytest.raises(InvalidTaskPayload, match=reason.replace("(", r"\(").replace("[", r"\[")):
        decode_message(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"task_name":"t","payload":[1,{"a":null}]}',
        b' {"task_name":"t"}',  # whitespace around the document
        b'{"task_name":"t"}\n\t ',
        b'\xef\xbb\xbf{"task_name":"t"}',  # a UTF-8 byte order mark
        '{"task_name":"t"}'.encode("utf-16-le"),
        '{"task_name":"t","payload":"\ud800"}'.encode(errors="surrogatepass"),
        b'{"task_name":"t"}{"task_name":"u"}',  # two documents
        b'{"task_name":"t"} x',
        b'{"task_name":"t"',
        b'[{"task_name":"t"}]',
        b"\xff",
        b"",
    ],
)
def test_messages_parse_as_json_loads_parses_them(raw: bytes) -> None:
    # The short way through strict UTF-8 must decide every input as json.loads does.
    try:
        expected: Any = json.loads(raw)
    except ValueError:
        expected = "refused"
    if not isinstance(expected, dict):
        expected = "refused"
    try:
        got: Any = json_object(raw)
    except InvalidTaskPayload:
        got = "refused"
    assert got == expected


def test_a_field_of_another_type_than_its_own_is_still_refused_or_read() -> None:
    message = decode_message(
        b'{"task_name":"t","unique":null,"unique_for":2.0,"unique_key":null,'
        b'"unique_lock_value":null,"reservation_timeout":5.0}'
    )
    assert (message.unique, message.unique_for, message.unique_key) == (False, 2, "")
    assert (message.unique_lock_value, message.reservation_timeout) == ("", 5)
    with pytest.raises(InvalidTaskPayload, match="'unique' should be bool, got 1"):
        decode_message(b'{"task_name":"t","unique":1}')
    with pytest.raises(InvalidTaskPayload, match="'unique_for' should be int, got False"):
        decode_message(b'{"task_name":"t","unique_for":false}')


def test_whole_number_floats_are_read_as_ints() -> None:
    assert decode_message(b'{"task_name":"t","unique_for":60.0}').unique_for == 60


def test_encoding_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(InvalidTaskPayload, match="not JSON-serialisable"):
        encode_message(TaskMessage(task_name="t", payload={1, 2}))
    with pytest.raises(InvalidTaskPayload, match="not JSON-serialisable"):
        encode_message(TaskMessage(task_name="t", payload=float("inf")))


async def test_dispatch_writes_the_literal_bytes(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, reclaim_delay=90)  # reservation: a third, 30 s
    runner.register(
        Task(name="echo", action=_noop, unique=True, unique_for=60, unique_key=lambda p: p["key"])
    )
    await runner.dispatch("echo", {"key": "A-17"})
    (entry,) = await backend.read("g", "c", 10, 0)
    assert entry.payload is not None
    token = decode_message(entry.payload).unique_lock_value
    assert re.fullmatch("[0-9a-f]{32}", token), token
    assert entry.payload == OUR_UNIQUE_MESSAGE.replace(TOKEN.encode(), token.encode())
    assert backend.keys() == ["taskrunner:unique:echo:A-17"]


# The unique lock ---------------------------------------------------------------------

KEYS = [
    pytest.param(lambda p: "A-17", "echo:A-17", "taskrunner:unique:echo:A-17", id="key"),
    pytest.param(lambda p: "", "echo:echo", "taskrunner:unique:echo:echo", id="empty key"),
    pytest.param(lambda p: None, "echo:echo", "taskrunner:unique:echo:echo", id="None key"),
    pytest.param(None, "echo", "taskrunner:unique:echo", id="no key function"),
]


@pytest.mark.parametrize(("key_function", "unique_key", "lock"), KEYS)
def test_unique_key_and_lock_as_go_builds_them(
    key_function: Any, unique_key: str, lock: str
) -> None:
    task = echo(unique=True, unique_for=60, unique_key=key_function)
    assert task.message_unique_key({}) == unique_key
    assert unique_lock("echo", unique_key) == lock


def test_a_go_message_without_a_key_function_releases_the_lock_go_took() -> None:
    # Go writes "" for a task with no key function but locks taskrunner:unique:echo.
    assert unique_lock("echo", "") == "taskrunner:unique:echo"


async def test_a_go_message_releases_its_lock(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    ran: list[Any] = []

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: p["key"])
    async def echo(payload: dict[str, str]) -> None:
        ran.append(payload)

    assert await backend.acquire_lock("taskrunner:unique:echo:A-17", GO_TOKEN, 60)  # as Go does
    await backend.add("g", [GO_UNIQUE_MESSAGE])
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 1)
    assert ran == [{"key": "A-17"}]
    assert backend.keys() == [], "the worker must release taskrunner:unique:echo:A-17"


async def test_a_key_function_returning_empty_locks_as_go_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: "")
    async def echo(payload: None) -> None:
        pass

    await runner.dispatch("echo")
    assert backend.keys() == ["taskrunner:unique:echo:echo"]


# The delayed member ------------------------------------------------------------------

GO_MEMBER = (
    b'{"id":"5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11","task":"echo","time":1796108032,'
    b'"payload":{"key":"A-17"}}'
)
"""A member as Go writes it, with the score 1796108032."""
OUR_MEMBER = (
    b'{"id":"5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11","task":"echo","time":1796108038,'
    b'"payload":{"n":3}}'
)
OUR_UNIQUE_MEMBER = (
    b'{"id":"5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11","task":"echo","time":1796108038,'
    b'"payload":{"key":"A-17"},"unique_key":"echo:A-17"}'
)


def test_a_go_member_decodes() -> None:
    assert decode_delayed(GO_MEMBER) == DelayedTask(
        id=DELAYED_ID, task="echo", time=1796108032, payload={"key": "A-17"}
    )


def test_we_write_an_integer_time() -> None:
    member = new_delayed("echo", {"n": 3}, 1796108038.335579, id=DELAYED_ID)
    assert encode_delayed(member) == OUR_MEMBER
    unique = new_delayed(
        "echo", {"key": "A-17"}, 1796108038.9, id=DELAYED_ID, unique_key="echo:A-17"
    )
    assert encode_delayed(unique) == OUR_UNIQUE_MEMBER


def test_a_fractional_time_left_by_0_1_0_is_read() -> None:
    old = b'{"id":"x","task":"echo","time":1796108038.335579,"payload":null}'
    assert decode_delayed(old).time == 1796108038


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[]", "expected a JSON object"),
        (b'{"id":"x"}', "'task' should be a non-empty string, got None"),
        (b'{"task":"echo","time":"soon"}', "'time' should be unix seconds, got 'soon'"),
        (b'{"task":"echo","unique_key":5}', "'unique_key' should be str, got 5"),
    ],
)
def test_malformed_members_are_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidTaskPayload, match=reason):
        decode_delayed(raw)


MOVED_ID = b',"id":"5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11"}'
"""What a moved member's message ends with: the member's id, the task's id (ours; Go
ignores it), after Go's fields."""
OUR_MOVED_UNIQUE_MESSAGE = OUR_UNIQUE_MESSAGE[:-1] + MOVED_ID


def test_a_go_member_moves_to_the_message_go_would_dispatch() -> None:
    move = build_move(GO_MEMBER, {"echo": UNIQUE_ECHO}, token=TOKEN)
    assert move == DelayedMove(
        member=GO_MEMBER,
        message=OUR_MOVED_UNIQUE_MESSAGE,
        lock_key="taskrunner:unique:echo:A-17",
        lock_token=TOKEN,
        lock_ttl=60,
        task_id=DELAYED_ID,
    )
    # Go's own fields are what Go would dispatch: a Go worker reads the same message.
    moved = decode_message(move.message)
    assert attrs.evolve(moved, extras=None) == decode_message(OUR_UNIQUE_MESSAGE)


def test_our_member_moves_with_its_precomputed_key() -> None:
    # The key function is not called again: the member carries the message's key.
    task = echo(unique=True, unique_for=60, unique_key=lambda p: pytest.fail("called"))
    move = build_move(OUR_UNIQUE_MEMBER, {"echo": task}, token=TOKEN)
    assert move.message == OUR_MOVED_UNIQUE_MESSAGE
    assert move.lock_key == "taskrunner:unique:echo:A-17"
    plain = build_move(OUR_MEMBER, {"echo": echo()})
    assert plain == DelayedMove(
        member=OUR_MEMBER,
        message=(
            b'{"task_name":"echo","payload":{"n":3},"unique":false,"unique_for":0,'
            b'"unique_key":"","unique_lock_value":"","reservation_timeout":30000000000'
        )
        + MOVED_ID,
        task_id=DELAYED_ID,
    )


def test_a_member_of_a_task_not_registered_here_moves_with_go_zero_values() -> None:
    move = build_move(GO_MEMBER, {})
    assert (
        move.message
        == (
            b'{"task_name":"echo","payload":{"key":"A-17"},"unique":false,"unique_for":0,'
            b'"unique_key":"","unique_lock_value":"","reservation_timeout":0'
        )
        + MOVED_ID
    )
    assert move.lock_key is None


def test_a_member_that_keeps_results_moves_with_its_keep_result() -> None:
    member = OUR_MEMBER[:-1] + b',"keep_result":60.0}'
    assert decode_delayed(member).keep_result == 60.0
    move = build_move(member, {"echo": echo()})
    assert move.message.endswith(MOVED_ID[:-1] + b',"keep_result":60.0}')
    assert decode_message(move.message).keep_result == 60.0


async def test_in_memory_the_score_not_the_integer_time_schedules(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    ran_at: list[float] = []

    @runner.task()
    async def ping(payload: None) -> None:
        ran_at.append(trio.current_time())

    async with serving(runner):
        await trio.sleep(0.3 - trio.current_time())
        await runner.dispatch_delayed("ping", None, 1.45)  # run at 1.75 on trio's clock
        (member,) = await backend.due_delayed("g", 100, 10)
        assert decode_delayed(member).time == 1, "the member's time is rounded down"
        await wait_until(lambda: len(ran_at) == 1)
    assert 1.75 <= ran_at[0] < 1.8, "scheduled by the score, not by the member's time"


async def test_dispatch_delayed_on_redis_writes_go_s_member(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url, queue="interop") as backend:
        runner = make_runner(backend, consumer_group="interop", reclaim_delay=90)
        runner.register(
            Task(
                name="echo", action=_noop, unique=True, unique_for=60, unique_key=lambda p: p["key"]
            )
        )
        delayed_id = (await runner.schedule_for("echo", {"key": "A-17"}, 1796108038.335579)).id
        raw = await backend.client.execute(
            "ZRANGE", "taskrunner:interop:delayed_tasks", 0, -1, "WITHSCORES"
        )
    member, score = bytes(raw[0]), float(raw[1])
    written = json.loads(member)
    dispatched_at = written.pop("dispatched_at")  # ours: when schedule_for was called
    assert abs(dispatched_at - time.time()) < 60
    assert json.dumps(written, separators=(",", ":")).encode() == OUR_UNIQUE_MEMBER.replace(
        DELAYED_ID.encode(), delayed_id.encode()
    )
    assert score == pytest.approx(1796108038.335579, abs=1e-3), "the score keeps the fraction"


# The metrics fields ------------------------------------------------------------------


def test_field_names() -> None:
    assert _wire.task_fields("echo") == TimingFields("echo_sum", "echo_sum_us", "echo_count")
    assert _wire.schedule_fields("interop") == TimingFields(
        "taskrunner:interop:delayed_tasks_schedule_sum",
        "taskrunner:interop:delayed_tasks_schedule_sum_us",
        "taskrunner:interop:delayed_tasks_schedule_count",
    )


def test_a_reset_zeroes_every_field_it_knows() -> None:
    assert _wire.reset_fields(["echo", "email", "echo"], "interop") == [
        "echo_sum",
        "echo_sum_us",
        "echo_count",
        "email_sum",
        "email_sum_us",
        "email_count",
        "taskrunner:interop:delayed_tasks_schedule_sum",
        "taskrunner:interop:delayed_tasks_schedule_sum_us",
        "taskrunner:interop:delayed_tasks_schedule_count",
        "delayed_tasks_schedule_sum",
        "delayed_tasks_schedule_count",
    ]


FLUSHED = {
    b"echo_sum": b"205",
    b"echo_sum_us": b"205563",
    b"echo_count": b"2",
    b"taskrunner:interop:delayed_tasks_schedule_sum": b"12",
    b"taskrunner:interop:delayed_tasks_schedule_sum_us": b"12500",
    b"taskrunner:interop:delayed_tasks_schedule_count": b"1",
}
"""The metrics hash after one flush of two ``echo`` runs and one scheduler pass."""


async def _flush_echo(backend: RedisBackend) -> None:
    recorder = TimingRecorder()
    recorder.record("echo", 0.205262)
    recorder.record("echo", 0.000301)
    recorder.record_schedule(0.0125)
    assert await bulk_writer.flush(backend, "interop", recorder) == 3


async def _hash(backend: RedisBackend) -> dict[bytes, bytes]:
    flat = await backend.client.execute("HGETALL", "taskrunner:interop:metrics")
    return dict(zip(flat[::2], flat[1::2], strict=True))


async def test_the_metrics_hash_after_a_flush(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        await _flush_echo(backend)
        assert await _hash(backend) == FLUSHED
        stats = compute_stats(
            metrics=await backend.read_metrics("interop"),
            group="interop",
            task_names=["echo"],
            queue_len=0,
            workers=1,
            replication=1,
        )
    assert dict(stats.per_task_timing) == {"echo": pytest.approx(102.7815)}, "_sum_us preferred"
    assert stats.avg_schedule_timing == pytest.approx(12.5)


async def test_go_s_flush_and_reset_on_the_same_hash(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        await _flush_echo(backend)
        # A Go worker's flush, then a Go leader's reset: what the Go library sends.
        await backend.client.pipeline(
            [
                ("HINCRBY", "taskrunner:interop:metrics", "echo_sum", 95),
                ("HINCRBY", "taskrunner:interop:metrics", "echo_count", 1),
            ]
        )
        ms, runs = _wire.task_timing(await backend.read_metrics("interop"), "echo")
        assert (ms, runs) == (300, 3), "Go's milliseconds count; _sum_us is ignored until re-based"
        await backend.client.pipeline(
            [
                ("HSET", "taskrunner:interop:metrics", field, 0)
                for field in ("echo_sum", "echo_count")
            ]
        )
        await _flush_echo(backend)
        got = await _hash(backend)
    assert (got[b"echo_sum"], got[b"echo_sum_us"], got[b"echo_count"]) == (b"205", b"205563", b"2")


async def test_a_float_sum_left_by_0_1_0_is_read(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        await backend.client.execute(
            "HSET",
            "taskrunner:interop:metrics",
            "echo_sum",
            "205.26254101423546999",
            "echo_count",
            "2",
            "delayed_tasks_schedule_sum",
            "10.5",
            "delayed_tasks_schedule_count",
            "1",
        )
        metrics = await backend.read_metrics("interop")
    stats = compute_stats(
        metrics=metrics, group="interop", task_names=["echo"], queue_len=0, workers=1, replication=1
    )
    assert dict(stats.per_task_timing) == {"echo": pytest.approx(102.63127050711773)}
    assert stats.avg_schedule_timing == 10.5, "0.1.0's short scheduler names are read"


# The docs show these bytes ------------------------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize(
    ("page", "documents"),
    [
        ("go-interop.md", [GO_UNIQUE_MESSAGE, OUR_UNIQUE_MESSAGE, GO_MEMBER, OUR_UNIQUE_MEMBER]),
        ("redis-key-layout.md", [OUR_UNIQUE_MEMBER]),
    ],
)
def test_the_docs_show_the_documents(page: str, documents: list[bytes]) -> None:
    text = (DOCS / page).read_text()
    missing = [doc for doc in documents if doc.decode() not in text]
    assert not missing, f"{page} does not show {missing}"


@pytest.mark.parametrize("page", ["go-interop.md", "redis-key-layout.md", "timing-metrics.md"])
def test_the_docs_show_the_metrics_hash_after_a_flush(page: str) -> None:
    block = "\n".join(f"{name.decode():<50}{value.decode()}" for name, value in FLUSHED.items())
    assert block in (DOCS / page).read_text()


# The result document (ours) -----------------------------------------------------------

RESULT_DOCUMENT = (
    b'{"state":"succeeded","task":"resize","value":{"w":100,"h":80},"attempts":1,'
    b'"enqueued_at":1796108038.123,"started_at":1796108038.125,"finished_at":1796108038.331}'
)
"""A kept result, as the key-layout page shows it."""


def test_the_result_document_is_what_the_key_layout_page_shows() -> None:
    doc = _wire.succeeded(
        "resize",
        {"w": 100, "h": 80},
        attempts=1,
        enqueued_at=1796108038.123,
        started_at=1796108038.125,
        finished_at=1796108038.331,
    )
    assert _wire.encode_result(doc) == RESULT_DOCUMENT
    assert _wire.decode_result(RESULT_DOCUMENT) == doc
    assert RESULT_DOCUMENT.decode() in (DOCS / "redis-key-layout.md").read_text()


@pytest.mark.parametrize(
    ("task", "value", "times"),
    [
        ("resize", {"w": 100, "h": 80}, (1796108038.123, 1796108038.125, 1796108038.331)),
        ("resize", None, (None, None, 2.0)),
        ("ünïcode", ["é", 1, 2.5, True, None], (1.0, None, 3.0)),
        ("", 1, (1.0, 2.0, 3.0)),  # no task name: the document leaves it out
        ("t", "x", (1.0, 2.0, 3)),  # an int time
        # The values written without the encoder: each as the encoder writes it.
        ("t", True, (1.0, 2.0, 3.0)),
        ("t", False, (1.0, 2.0, 3.0)),
        ("t", -(10**30), (1.0, 2.0, 3.0)),
        ("t", 'a "quoted"\\ line\n\x01 ünï \u2028', (1.0, 2.0, 3.0)),
        ("t", "", (1.0, 2.0, 3.0)),
        ("t", enum.IntEnum("Level", "LOW")(1), (1.0, 2.0, 3.0)),  # an int of another type
        ("t", enum.StrEnum("Colour", "RED")("red"), (1.0, 2.0, 3.0)),
        ('na"me', None, (1.0, 2.0, 3.0)),  # a task name JSON escapes
        ("t", None, (1e308, 1e308, 3.0)),  # finite times whose sum is not: the general way
    ],
)
def test_the_fast_success_encoder_writes_the_document_bytes(
    task: str, value: Any, times: tuple[Any, Any, Any]
) -> None:
    enqueued, started, finished = times
    kwargs: dict[str, Any] = {
        "attempts": 2,
        "enqueued_at": enqueued,
        "started_at": started,
        "finished_at": finished,
    }
    expected = _wire.encode_result(_wire.succeeded(task, value, **kwargs))
    assert _wire.encode_succeeded(task, value, **kwargs) == expected


@pytest.mark.parametrize("value", [float("nan"), {1j}, object()])
def test_the_fast_success_encoder_refuses_what_cannot_be_kept(value: Any) -> None:
    with pytest.raises(InvalidTaskResult):
        _wire.encode_succeeded(
            "t", value, attempts=1, enqueued_at=1.0, started_at=None, finished_at=2.0
        )


@pytest.mark.parametrize(
    ("field_text", "expected"),
    [
        ("60", 60.0),
        ("0.5", 0.5),
        ("1e3", 1000.0),
        ("null", None),
    ],
)
def test_a_message_that_keeps_results_alone_reads_its_keep_result(
    field_text: str, expected: float | None
) -> None:
    raw = b'{"task_name":"t","payload":null,"keep_result":' + field_text.encode() + b"}"
    message = decode_message(raw)
    assert message.keep_result == expected
    assert type(message.keep_result) is (float if expected is not None else type(None))
    assert message.extras == (
        None if expected is None else _wire.MessageExtras(keep_result=expected)
    )


@pytest.mark.parametrize("field_text", ["0", "-1", "true", '"60"', "1e999", "[60]"])
def test_a_message_with_a_bad_keep_result_alone_is_refused(field_text: str) -> None:
    raw = b'{"task_name":"t","payload":null,"keep_result":' + field_text.encode() + b"}"
    with pytest.raises(InvalidTaskPayload, match="field 'keep_result' should be seconds > 0"):
        decode_message(raw)


_STEP_BASE = {
    "task_name": "t", "payload": None, "unique": False, "unique_for": 0, "unique_key": "",
    "unique_lock_value": "", "reservation_timeout": 0, "workflow": "w1", "step": "s1",
}  # fmt: skip


@pytest.mark.parametrize(
    "more",
    [
        {},
        {"keep_result": 60.0},
        {"keep_result": 60, "step_inputs": True},
        {"step_inputs": False},
        {"keep_result": None, "step": None},  # null step: read by extras_of
        {"keep_result": 0.5, "attempts": 2},  # a retried step: more than a step's fields
        {"workflow": None},
    ],
)
def test_a_steps_extras_are_read_as_extras_of_reads_them(more: dict[str, Any]) -> None:
    """decode_message takes a step's few extras by their exact types (the way every
    step is written); whatever it gets is what extras_of reads from the same document."""
    doc = {**_STEP_BASE, **more}
    message = decode_message(json.dumps(doc).encode())
    expected = extras_of(doc) or None
    assert message.extras == expected


@pytest.mark.parametrize(
    ("more", "error"),
    [
        ({"keep_result": 0}, "keep_result"),
        ({"keep_result": "60"}, "keep_result"),
        ({"step_inputs": "yes"}, "step_inputs"),
        ({"step": 3}, "step"),
        ({"workflow": 3}, "workflow"),
    ],
)
def test_a_steps_extras_of_the_wrong_type_are_refused_by_name(
    more: dict[str, Any], error: str
) -> None:
    with pytest.raises(InvalidTaskPayload, match=f"field '{error}'"):
        decode_message(json.dumps({**_STEP_BASE, **more}).encode())
