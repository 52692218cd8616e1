"""Typed payloads: an action's annotation, and the payload in and out of its JSON form.

One private cattrs converter does every typed (de)serialisation. The wire
documents that carry payloads (the stream message, the delayed member) are in
:mod:`taskrunner._wire`.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

import attrs
import cattrs

from taskrunner.errors import InvalidTaskPayload

converter = cattrs.Converter()


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
