"""A message's frame: its bytes around the payload, so a payload is encoded once.

Theory of operation. Every message of a task that is not unique is the same
bytes but for its payload: :func:`plain_encoder` encodes that frame once per
task (with :data:`PAYLOAD_MARK` as the payload) and splices each payload's
JSON in. A delayed member is planned the same way
(``taskrunner._dispatch.enqueue.Planner.member``): the payload's JSON is
encoded once (:func:`payload_bytes`), the size of the message it will become
is checked from it (:func:`frame_size`, :func:`check_size`), and it is spliced
into the member (``encode_delayed_around``). The bytes and the refusals are
those of :func:`~taskrunner._wire.message.encode_message` (tests/test_enqueue.py
holds them equal).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from taskrunner._wire.encoding import dumps, dumps_value
from taskrunner._wire.message import (
    MAX_MESSAGE_BYTES,
    TaskSettings,
    encode_message,
    new_message,
)
from taskrunner.errors import InvalidTaskPayload

PAYLOAD_MARK = "\x00taskrunner:payload\x00"
"""A payload no task name can hold (names have no control characters in practice; if one
does, :func:`plain_encoder` falls back to :func:`encode_message`)."""


def payload_bytes(task_name: str, payload: Any) -> bytes:
    """``payload``'s JSON, encoded once: what a message (or a delayed member) splices in.

    Raises:
        InvalidTaskPayload: the payload is not JSON-serialisable (the words of
            :func:`encode_message`).
    """
    try:
        return dumps(payload).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidTaskPayload(f"not JSON-serialisable: {exc}", task_name=task_name) from exc


def frame_size(task: TaskSettings) -> int | None:
    """The bytes of ``encode_message(new_message(task, payload))`` around the payload's
    JSON, so the message's size is known from the payload's bytes alone; ``None``
    when the frame cannot be told apart (then encode the message to know)."""
    mark = dumps(PAYLOAD_MARK).encode()
    sample = encode_message(new_message(task, PAYLOAD_MARK))
    if sample.count(mark) != 1:
        return None
    return len(sample) - len(mark)


def check_size(task_name: str, frame: int, body: bytes) -> None:
    """Refuse a message of ``frame`` bytes around a payload of ``body`` bytes that is
    over the limit, in the words of :func:`encode_message`.

    Raises:
        InvalidTaskPayload: over :data:`MAX_MESSAGE_BYTES`.
    """
    if frame + len(body) > MAX_MESSAGE_BYTES:
        raise InvalidTaskPayload(
            f"encoded message is {frame + len(body)} bytes, over the "
            f"{MAX_MESSAGE_BYTES}-byte limit",
            task_name=task_name,
        )


def plain_encoder(task: TaskSettings) -> Callable[[Any], bytes]:
    """``encode_message(new_message(task, payload))`` as a function of ``payload``, for a
    task that is not unique, made once per task: the message's bytes around the payload
    are encoded here, once, so each call encodes only the payload. The same bytes and
    the same refusals as :func:`encode_message` (tests/test_wire.py holds them equal).

    Raises (from the function it returns):
        InvalidTaskPayload: the payload is not JSON-serialisable, or the message too large.
    """
    name = task.name
    mark = dumps(PAYLOAD_MARK).encode()
    sample = encode_message(new_message(task, PAYLOAD_MARK))
    if task.unique or sample.count(mark) != 1:
        return lambda payload: encode_message(new_message(task, payload))
    head, _, tail = sample.partition(mark)
    frame = len(head) + len(tail)

    def encode(payload: Any) -> bytes:
        try:
            body = dumps_value(payload).encode()
        except (TypeError, ValueError) as exc:
            raise InvalidTaskPayload(f"not JSON-serialisable: {exc}", task_name=name) from exc
        if frame + len(body) > MAX_MESSAGE_BYTES:
            raise InvalidTaskPayload(
                f"encoded message is {frame + len(body)} bytes, over the "
                f"{MAX_MESSAGE_BYTES}-byte limit",
                task_name=name,
            )
        return head + body + tail

    return encode
