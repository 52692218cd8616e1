"""JSON in and out: the wire format and typed payloads.

One private cattrs converter does every typed (de)serialisation. The wire
message is decoded by hand rather than through cattrs: it runs once per task
on the hot path, must accept the original library's documents (``null`` for
empty strings, extra fields), and must turn every malformed input into an
:class:`InvalidTaskPayload` naming what is wrong.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import cattrs

from taskrunner.errors import InvalidTaskPayload

if TYPE_CHECKING:
    from taskrunner._task import TaskMessage

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""Largest encoded message accepted at dispatch or decoded by a worker."""

converter = cattrs.Converter()

_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode


def payload_type_of(action: Callable[..., Any]) -> type[Any] | None:
    """The attrs class or dataclass annotating ``action``'s payload parameter, if any.

    Raises:
        ValueError: the annotations cannot be resolved (e.g. a name that is not
            importable where the action is defined).
    """
    try:
        params = list(inspect.signature(action).parameters.values())
    except (TypeError, ValueError):
        return None
    if not params:
        return None
    try:
        hints = typing.get_type_hints(action)
    except Exception as exc:
        raise ValueError(
            f"cannot resolve the type annotations of action {action!r}: {exc}"
        ) from exc
    hint = hints.get(params[0].name)
    if isinstance(hint, type) and (attrs.has(hint) or dataclasses.is_dataclass(hint)):
        return hint
    return None


def encode_payload(payload: Any, payload_type: type[Any] | None, task_name: str) -> Any:
    """The JSON-ready form of ``payload`` for a task whose payload type is ``payload_type``.

    Raises:
        InvalidTaskPayload: ``payload`` does not fit ``payload_type``.
    """
    if payload_type is None:
        return payload
    if isinstance(payload, payload_type):
        return converter.unstructure(payload)
    try:  # a plain dict is fine as long as it would structure on the worker
        converter.structure(payload, payload_type)
    except Exception as exc:
        raise InvalidTaskPayload(
            f"payload {payload!r} does not fit {payload_type.__qualname__}: {exc}",
            task_name=task_name,
        ) from exc
    return payload


def decode_payload(payload: Any, payload_type: type[Any] | None, task_name: str) -> Any:
    """The payload as the action receives it.

    Raises:
        InvalidTaskPayload: the payload does not structure into ``payload_type``.
    """
    if payload_type is None:
        return payload
    try:
        return converter.structure(payload, payload_type)
    except Exception as exc:
        raise InvalidTaskPayload(
            f"payload does not structure into {payload_type.__qualname__}: {exc}",
            task_name=task_name,
        ) from exc


def encode_message(message: TaskMessage) -> bytes:
    """The wire JSON of ``message``.

    Raises:
        InvalidTaskPayload: the payload is not JSON-serialisable, or too large.
    """
    doc = {
        "task_name": message.task_name,
        "payload": message.payload,
        "unique": message.unique,
        "unique_for": message.unique_for,
        "unique_key": message.unique_key,
        "unique_lock_value": message.unique_lock_value,
        "reservation_timeout": message.reservation_timeout,
    }
    try:
        data = _dumps(doc).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidTaskPayload(
            f"not JSON-serialisable: {exc}", task_name=message.task_name
        ) from exc
    if len(data) > MAX_MESSAGE_BYTES:
        raise InvalidTaskPayload(
            f"encoded message is {len(data)} bytes, over the {MAX_MESSAGE_BYTES}-byte limit",
            task_name=message.task_name,
        )
    return data


def _field(doc: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    value = doc.get(name)
    if value is None:
        return default
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidTaskPayload(f"field {name!r} should be {kind.__name__}, got {value!r}")
    return value


def decode_message(raw: bytes | None) -> TaskMessage:
    """Parse a stream entry's ``payload`` field.

    Raises:
        InvalidTaskPayload: no field, over :data:`MAX_MESSAGE_BYTES`, invalid JSON,
            or a document that is not a task message.
    """
    from taskrunner._task import TaskMessage

    if raw is None:
        raise InvalidTaskPayload("stream entry has no 'payload' field")
    if len(raw) > MAX_MESSAGE_BYTES:
        raise InvalidTaskPayload(
            f"entry is {len(raw)} bytes, over the {MAX_MESSAGE_BYTES}-byte limit"
        )
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidTaskPayload(f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise InvalidTaskPayload(f"expected a JSON object, got {type(doc).__name__}")
    task_name = doc.get("task_name")
    if not isinstance(task_name, str) or not task_name:
        raise InvalidTaskPayload(
            f"field 'task_name' should be a non-empty string, got {task_name!r}"
        )
    return TaskMessage(
        task_name=task_name,
        payload=doc.get("payload"),
        unique=_field(doc, "unique", bool, False),
        unique_for=_field(doc, "unique_for", int, 0),
        unique_key=_field(doc, "unique_key", str, ""),
        unique_lock_value=_field(doc, "unique_lock_value", str, ""),
        reservation_timeout=_field(doc, "reservation_timeout", int, 0),
    )


def dumps(value: Any) -> bytes:
    """Compact JSON bytes (no NaN), for documents other than the task message."""
    return _dumps(value).encode()
