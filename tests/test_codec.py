"""The wire format: what the original library writes, we read, and back."""

from __future__ import annotations

import json

import pytest

from taskrunner import InvalidTaskPayload, TaskMessage
from taskrunner._codec import MAX_MESSAGE_BYTES, decode_message, encode_message

# A message as the original library writes it (behaviour.md's field list):
# reservation_timeout in nanoseconds, unique_for in seconds.
GO_MESSAGE = (
    b'{"task_name":"send_email","payload":{"to":"a@example.com"},"unique":true,'
    b'"unique_for":60,"unique_key":"a@example.com",'
    b'"unique_lock_value":"c2a1f0","reservation_timeout":30000000000}'
)


def test_reads_a_message_written_by_the_original_library() -> None:
    message = decode_message(GO_MESSAGE)
    assert message == TaskMessage(
        task_name="send_email",
        payload={"to": "a@example.com"},
        unique=True,
        unique_for=60,
        unique_key="a@example.com",
        unique_lock_value="c2a1f0",
        reservation_timeout=30_000_000_000,
    )
    assert message.reservation_timeout_seconds == 30.0


def test_writes_exactly_the_original_field_set() -> None:
    message = decode_message(GO_MESSAGE)
    assert json.loads(encode_message(message)) == json.loads(GO_MESSAGE)


def test_nulls_missing_fields_and_extra_fields_are_tolerated() -> None:
    message = decode_message(b'{"task_name":"t","unique_key":null,"attempt":3,"dispatched_at":1.5}')
    assert message == TaskMessage(task_name="t")


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


def test_whole_number_floats_are_read_as_ints() -> None:
    assert decode_message(b'{"task_name":"t","unique_for":60.0}').unique_for == 60


def test_encoding_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(InvalidTaskPayload, match="not JSON-serialisable"):
        encode_message(TaskMessage(task_name="t", payload={1, 2}))
    with pytest.raises(InvalidTaskPayload, match="not JSON-serialisable"):
        encode_message(TaskMessage(task_name="t", payload=float("inf")))
