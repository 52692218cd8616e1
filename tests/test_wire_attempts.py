"""Golden tests of the wire fields issue 13 adds: ``attempts``, ``id``, ``dispatched_at``
and ``trace`` in a message, and a retry's member (with its lock token).

Each is absent from a plain message, whose bytes do not change; a Go worker
ignores them (they are unknown JSON fields to it)."""

from __future__ import annotations

from typing import Any

import pytest

from taskrunner import InvalidTaskPayload, Task, TaskMessage
from taskrunner._schedules.delayed import build_move
from taskrunner._wire import (
    decode_delayed,
    decode_message,
    encode_delayed,
    encode_message,
    new_delayed,
    new_message,
    retry_delayed,
)
from taskrunner.backends import DelayedMove

TOKEN = "0123456789abcdef0123456789abcdef"
TASK_ID = "5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11"
TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


async def _noop(payload: Any) -> None:
    pass


ECHO = Task(name="echo", action=_noop, reservation_timeout=30.0)
UNIQUE = Task(
    name="echo",
    action=_noop,
    reservation_timeout=30.0,
    unique=True,
    unique_for=60,
    unique_key=lambda p: p["key"],
)

PLAIN = (
    b'{"task_name":"echo","payload":{"n":2},"unique":false,"unique_for":0,'
    b'"unique_key":"","unique_lock_value":"","reservation_timeout":30000000000}'
)
RETRIED = (
    b'{"task_name":"echo","payload":{"n":2},"unique":false,"unique_for":0,'
    b'"unique_key":"","unique_lock_value":"","reservation_timeout":30000000000,'
    b'"attempts":2,"id":"5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11","dispatched_at":1796108030.25,'
    b'"trace":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}'
)
RETRY_MEMBER = (
    b'{"id":"5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11","task":"echo","time":1796108038,'
    b'"payload":{"key":"A-17"},"unique_key":"echo:A-17",'
    b'"unique_lock_value":"0123456789abcdef0123456789abcdef","attempts":1,'
    b'"dispatched_at":1796108030.25}'
)


def test_a_plain_message_is_unchanged() -> None:
    assert encode_message(new_message(ECHO, {"n": 2})) == PLAIN
    assert decode_message(PLAIN) == TaskMessage(
        task_name="echo", payload={"n": 2}, reservation_timeout=30_000_000_000
    )


def test_the_optional_fields_are_written_only_when_set_and_read_back() -> None:
    message = new_message(
        ECHO, {"n": 2}, attempts=2, id=TASK_ID, dispatched_at=1796108030.25, trace=TRACE
    )
    assert encode_message(message) == RETRIED
    assert decode_message(RETRIED) == message
    assert (message.attempts, message.id, message.dispatched_at, message.trace) == (
        2,
        TASK_ID,
        1796108030.25,
        TRACE,
    )


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (b'"attempts":-1', "'attempts' should be >= 0, got -1"),
        (b'"attempts":"2"', "'attempts' should be int, got '2'"),
        (b'"id":7', "'id' should be str, got 7"),
        (b'"dispatched_at":"now"', "'dispatched_at' should be seconds, got 'now'"),
        (b'"trace":{"traceparent":1}', "'trace' should be an object of strings"),
        (b'"trace":[]', "'trace' should be an object of strings, got \\[\\]"),
    ],
)
def test_bad_optional_fields_are_refused_naming_them(extra: bytes, reason: str) -> None:
    with pytest.raises(InvalidTaskPayload, match=reason):
        decode_message(PLAIN[:-1] + b"," + extra + b"}")


def test_a_retry_member_keeps_the_task_id_the_lock_and_the_dispatch_time() -> None:
    payload = {"key": "A-17"}
    message = new_message(UNIQUE, payload, unique_key="echo:A-17", token=TOKEN)
    member = retry_delayed(
        message, 1796108038.9, id=TASK_ID, attempts=1, dispatched_at=1796108030.25
    )
    assert encode_delayed(member) == RETRY_MEMBER
    assert decode_delayed(RETRY_MEMBER) == member


def test_a_retry_member_moves_as_a_message_that_keeps_its_lock_token() -> None:
    move = build_move(RETRY_MEMBER, {"echo": UNIQUE}, token="not-this-one")
    assert move == DelayedMove(
        member=RETRY_MEMBER,
        message=(
            b'{"task_name":"echo","payload":{"key":"A-17"},"unique":true,"unique_for":60,'
            b'"unique_key":"echo:A-17","unique_lock_value":"0123456789abcdef0123456789abcdef",'
            b'"reservation_timeout":30000000000,"attempts":1,'
            b'"id":"5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11","dispatched_at":1796108030.25}'
        ),
        lock_key="taskrunner:unique:echo:A-17",
        lock_token=TOKEN,
        lock_ttl=60,
        task_id="5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11",
    )


def test_a_delayed_dispatch_carries_its_id_and_dispatch_time_into_the_message() -> None:
    member = encode_delayed(
        new_delayed("echo", {"n": 2}, 1796108038.5, id=TASK_ID, dispatched_at=1796108030.25)
    )
    assert member == (
        b'{"id":"5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11","task":"echo","time":1796108038,'
        b'"payload":{"n":2},"dispatched_at":1796108030.25}'
    )
    moved = decode_message(build_move(member, {"echo": ECHO}).message)
    assert (moved.attempts, moved.id, moved.dispatched_at) == (0, TASK_ID, 1796108030.25)
