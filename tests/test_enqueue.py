"""What a dispatch sends, decided before anything is sent (taskrunner._dispatch.enqueue, pure): the
rules the runner's dispatch and the producers share, held by tables."""

from __future__ import annotations

import enum
import json
import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from taskrunner import InvalidTaskPayload, Task
from taskrunner._dispatch.enqueue import (
    LockRequest,
    delay_seconds,
    delayed_member,
    enqueue,
    give_back_lock,
    unix_seconds,
)
from taskrunner._wire import CatalogTask, decode_delayed, decode_message


async def _noop(payload: object) -> None:
    pass


PLAIN = Task(name="resize", action=_noop, reservation_timeout=30.0)
UNIQUE = Task(
    name="sync_account",
    action=_noop,
    reservation_timeout=30.0,
    unique=True,
    unique_key=lambda p: str(p["id"]),
    unique_for=59.5,
)


@pytest.mark.parametrize(("maybe_applied", "released"), [(False, True), (True, False)])
def test_a_lock_is_given_back_only_when_the_add_certainly_did_not_happen(
    maybe_applied: bool, released: bool
) -> None:
    assert give_back_lock(maybe_applied) is released


def test_a_plain_entry_takes_no_lock() -> None:
    entry = enqueue(PLAIN, {"w": 100})
    assert entry.lock is None
    message = decode_message(entry.data)
    assert (message.task_name, message.payload, message.unique) == ("resize", {"w": 100}, False)
    assert message.reservation_timeout == 30_000_000_000


def test_a_unique_entry_names_its_lock_and_carries_the_token() -> None:
    entry = enqueue(UNIQUE, {"id": 1}, unique_key="sync_account:1", token="t" * 32)
    assert entry.lock == LockRequest(
        key="taskrunner:unique:sync_account:1", token="t" * 32, ttl=59.5
    )
    message = decode_message(entry.data)
    assert (message.unique, message.unique_for, message.unique_key) == (True, 60, "sync_account:1")
    assert message.unique_lock_value == "t" * 32


def test_a_task_known_by_name_writes_gos_zero_values() -> None:
    """What a producer that is not strict sends: the worker runs the task with its own
    reservation timeout (Go's does too), so 0 is what the scheduler writes for a task
    it does not know either."""
    entry = enqueue(CatalogTask(name="resize", stream="s"), [1, 2])
    assert json.loads(entry.data) == {
        "task_name": "resize",
        "payload": [1, 2],
        "unique": False,
        "unique_for": 0,
        "unique_key": "",
        "unique_lock_value": "",
        "reservation_timeout": 0,
    }


def test_the_plain_encoder_refuses_a_string_with_no_utf8_form() -> None:
    from taskrunner._wire import plain_encoder

    with pytest.raises(InvalidTaskPayload, match=r"not JSON-serialisable: .*surrogates"):
        plain_encoder(PLAIN)("\ud800")  # a lone surrogate


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({"x": object()}, "not JSON-serialisable"),
        (math.nan, "not JSON"),
        ("x" * 9_000_000, "over"),
    ],
)
def test_what_cannot_be_sent_is_refused(payload: object, match: str) -> None:
    with pytest.raises(InvalidTaskPayload, match=match):
        enqueue(PLAIN, payload)
    with pytest.raises(InvalidTaskPayload, match=match):
        delayed_member(PLAIN, payload, 10.0, id="i")


def test_a_delayed_member_is_gos_with_our_unique_key() -> None:
    member = decode_delayed(
        delayed_member(UNIQUE, {"id": 7}, 100.75, id="abc", unique_key="sync_account:7")
    )
    assert (member.id, member.task, member.time, member.payload) == (
        "abc",
        "sync_account",
        100,
        {"id": 7},
    )
    assert member.unique_key == "sync_account:7"


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [(0, 0.0), (2.5, 2.5), (timedelta(minutes=1), 60.0), (timedelta(0), 0.0)],
)
def test_delays(delay: float | timedelta, seconds: float) -> None:
    assert delay_seconds(delay) == seconds


@pytest.mark.parametrize(
    ("delay", "match"),
    [
        (-1, "finite number of seconds >= 0"),
        (timedelta(seconds=-1), ">= 0"),
        (math.inf, "finite"),
        (math.nan, "finite"),
        (True, "seconds or a timedelta"),
        ("5", "seconds or a timedelta"),
    ],
)
def test_bad_delays_are_refused(delay: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        delay_seconds(delay)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("when", "unix"),
    [
        (datetime(2030, 1, 1, tzinfo=UTC), 1893456000.0),
        (datetime(2030, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))), 1893456000.0),
        (1893456000, 1893456000.0),
        (12.5, 12.5),
    ],
)
def test_times(when: datetime | float, unix: float) -> None:
    assert unix_seconds(when) == unix


@pytest.mark.parametrize(
    ("when", "match"),
    [
        (datetime(2030, 1, 1), "timezone-aware"),  # naive: refused
        (math.nan, "aware datetime or unix seconds"),
        (math.inf, "aware datetime or unix seconds"),
        (False, "aware datetime or unix seconds"),
        ("2030-01-01", "aware datetime or unix seconds"),
    ],
)
def test_bad_times_are_refused(when: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        unix_seconds(when)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "payload",
    [
        None,
        0,
        -1.5,
        "é",
        "\x00taskrunner:payload\x00",
        {"a": [1, {"b": None}]},
        [True, False],
        # The payloads written without the encoder: each as the encoder writes it.
        True,
        False,
        10**40,
        'a "quoted"\\ line\n\x1f \u2028 ünï',
        "",
        enum.IntEnum("Level", "LOW").LOW,
        enum.StrEnum("Colour", "RED").RED,
    ],
)
@pytest.mark.parametrize(
    "task",
    [PLAIN, CatalogTask(name="resize", stream="s"), CatalogTask(name="r", stream="s", unique=True)],
)
def test_the_plain_encoder_writes_encode_messages_bytes(task: object, payload: object) -> None:
    from taskrunner._wire import encode_message, new_message, plain_encoder

    assert plain_encoder(task)(payload) == encode_message(new_message(task, payload))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({"x": object()}, "not JSON-serialisable"),
        (math.nan, "not JSON"),
        ("x" * 9_000_000, "over"),
    ],
)
def test_the_plain_encoder_refuses_the_same(payload: object, match: str) -> None:
    from taskrunner._wire import encode_message, new_message, plain_encoder

    with pytest.raises(InvalidTaskPayload, match=match) as ours:
        plain_encoder(PLAIN)(payload)
    with pytest.raises(InvalidTaskPayload) as theirs:
        encode_message(new_message(PLAIN, payload))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize(
    "payload",
    [
        None,
        0,
        -1.5,
        "é",
        "\x00taskrunner:payload\x00",
        {"a": [1, {"b": None}]},
        [True, False],
        # The payloads written without the encoder: each as the encoder writes it.
        True,
        False,
        10**40,
        'a "quoted"\\ line\n\x1f \u2028 ünï',
        "",
        enum.IntEnum("Level", "LOW").LOW,
        enum.StrEnum("Colour", "RED").RED,
    ],
)
@pytest.mark.parametrize(
    ("task", "unique_key"), [(PLAIN, None), (UNIQUE, "sync_account:1"), (UNIQUE, None)]
)
@pytest.mark.parametrize(
    "trace", [None, {"traceparent": "00-1"}, {"x": "\x00taskrunner:payload\x00"}]
)
def test_a_planned_member_is_encode_delayeds_bytes(
    task: Task, unique_key: str | None, trace: dict[str, str] | None, payload: object
) -> None:
    """The payload is encoded once and spliced in; the bytes are those of encoding the
    member whole (a trace holding the splice's mark takes that way)."""
    from taskrunner._dispatch.enqueue import Planner
    from taskrunner._wire import encode_delayed, message_unique_key, new_delayed

    planned = Planner().member(
        task, payload, 100.5, id="m", unique_key=unique_key, queue="q", trace=trace
    )
    expected = unique_key
    if task.unique and unique_key is None:
        expected = message_unique_key(task.name, None)
    whole = encode_delayed(
        new_delayed(task.name, payload, 100.5, id="m", unique_key=expected, queue="q", trace=trace)
    )
    assert planned == whole


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({"x": object()}, "not JSON-serialisable"),
        (math.nan, "not JSON"),
        ("x" * 9_000_000, "over"),
    ],
)
@pytest.mark.parametrize("task", [PLAIN, UNIQUE])
def test_a_planned_member_is_refused_in_encode_messages_words(
    task: Task, payload: object, match: str
) -> None:
    from taskrunner._dispatch.enqueue import Planner
    from taskrunner._wire import encode_message, new_message

    with pytest.raises(InvalidTaskPayload, match=match) as ours:
        Planner().member(task, payload, 10.0, id="i")
    with pytest.raises(InvalidTaskPayload) as theirs:
        encode_message(new_message(task, payload))
    assert str(ours.value) == str(theirs.value)


def test_a_planned_unique_entry_takes_the_key_functions_key() -> None:
    from taskrunner._dispatch.enqueue import Planner

    entry = Planner().entry(UNIQUE, {"id": 1}, key="1", token="t" * 32)
    assert entry == enqueue(UNIQUE, {"id": 1}, unique_key="sync_account:1", token="t" * 32)
    by_name = Planner().entry(UNIQUE, {"id": 1}, key=None, token="t")
    assert by_name.lock is not None
    assert by_name.lock.key == "taskrunner:unique:sync_account"
