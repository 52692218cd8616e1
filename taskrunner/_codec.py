"""Typed payloads: an action's annotation, and the payload in and out of its JSON form.

One private cattrs converter does every typed (de)serialisation; a copy of it
that refuses unknown keys serves the tasks that forbid them (the default, see
``Task.extra_keys``). When a payload does not fit, cattrs' structured errors
(exception groups whose members carry notes naming the attribute or index) are
flattened into ``path: reason`` lines such as ``items[2].size: missing required
field``, so the refusal names the bad field without a traceback. The wire
documents that carry payloads (the stream message, the delayed member) are in
:mod:`taskrunner._wire`.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)

from taskrunner.errors import InvalidTaskPayload

ExtraKeys = Literal["forbid", "ignore"]
"""What a typed payload's unknown keys do: refuse the payload, or be dropped."""

converter = cattrs.Converter()
_forbidding = converter.copy(forbid_extra_keys=True)

MAX_PROBLEMS = 5
"""Most ``path: reason`` lines one refusal lists."""
_MAX_VALUE_REPR = 60


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


def result_type_of(action: Callable[..., Any]) -> type[Any] | None:
    """The attrs class or dataclass annotating ``action``'s return value, if any.

    Raises:
        ValueError: the annotations cannot be resolved.
    """
    try:
        inspect.signature(action)
    except (TypeError, ValueError):
        return None  # not a function: Task refuses it, naming the field
    try:
        hints = typing.get_type_hints(action)
    except Exception as exc:
        raise ValueError(
            f"cannot resolve the type annotations of action {action!r}: {exc}"
        ) from exc
    hint = hints.get("return")
    if isinstance(hint, type) and (attrs.has(hint) or dataclasses.is_dataclass(hint)):
        return hint
    return None


def unstructure_result(value: Any) -> Any:
    """The JSON-ready form of an action's return value: attrs classes, dataclasses
    (and containers of them) become dicts and lists, through the one converter.

    Raises:
        Exception: whatever cattrs raises for a value it cannot unstructure.
    """
    if value is None or type(value) in (str, int, float, bool):  # the usual, at no cost
        return value
    return converter.unstructure(value)


def structure_result(value: Any, result_type: type[Any]) -> Any:
    """A kept result's JSON form structured back into ``result_type``.

    Raises:
        InvalidTaskPayload: it does not fit (its ``problems`` name each bad field).
    """
    try:
        return converter.structure(value, result_type)
    except Exception as exc:
        shown = "; ".join(payload_problems(exc, value)[:MAX_PROBLEMS])
        raise InvalidTaskPayload(
            f"result does not fit {result_type.__qualname__}: {shown}"
        ) from exc


def encode_payload(
    payload: Any, payload_type: type[Any] | None, task_name: str, extra_keys: ExtraKeys = "forbid"
) -> Any:
    """The JSON-ready form of ``payload`` for a task whose payload type is ``payload_type``.

    Raises:
        InvalidTaskPayload: ``payload`` does not fit ``payload_type`` (its
            ``problems`` name each bad field).
    """
    if payload_type is None:
        return payload
    if isinstance(payload, payload_type):
        return converter.unstructure(payload)
    # A plain mapping is fine as long as it would structure on the worker.
    _structure(payload, payload_type, task_name, extra_keys)
    return payload


def decode_payload(
    payload: Any, payload_type: type[Any] | None, task_name: str, extra_keys: ExtraKeys = "forbid"
) -> Any:
    """The payload as the action receives it.

    Raises:
        InvalidTaskPayload: the payload does not structure into ``payload_type``
            (its ``problems`` name each bad field).
    """
    if payload_type is None:
        return payload
    return _structure(payload, payload_type, task_name, extra_keys)


def _structure(payload: Any, payload_type: type[Any], task_name: str, extra_keys: ExtraKeys) -> Any:
    if type(payload) is not dict and not isinstance(payload, Mapping):  # (dict: the fast test)
        problems = [f"expected a JSON object, got {_short_repr(payload)}"]
        raise _does_not_fit(payload_type, task_name, problems)
    try:
        return (_forbidding if extra_keys == "forbid" else converter).structure(
            payload, payload_type
        )
    except Exception as exc:
        problems = payload_problems(exc, payload)
        raise _does_not_fit(payload_type, task_name, problems) from exc


def _does_not_fit(
    payload_type: type[Any], task_name: str, problems: list[str]
) -> InvalidTaskPayload:
    shown = "; ".join(problems[:MAX_PROBLEMS])
    if len(problems) > MAX_PROBLEMS:
        shown += f"; and {len(problems) - MAX_PROBLEMS} more"
    if any(p.endswith(": unknown field") for p in problems):
        shown += " (a task registered with extra_keys='ignore' drops unknown fields)"
    return InvalidTaskPayload(
        f"does not fit {payload_type.__qualname__}: {shown}", task_name=task_name, problems=problems
    )


def payload_problems(exc: BaseException, payload: Any) -> list[str]:
    """``path: reason`` for each problem cattrs found structuring ``payload``.

    Paths are Python-like (``items[2].size``, ``tags['a']``); a problem with the
    payload as a whole has no path. Never raises: a failure to read ``exc``
    gives its type and message as the one problem.
    """
    try:
        return _problems(exc, (), payload)
    except Exception:
        return [f"{type(exc).__name__}: {exc}"]


_Step = tuple[Literal["attr", "index"], Any]


def _problems(exc: BaseException, path: tuple[_Step, ...], payload: Any) -> list[str]:
    if isinstance(exc, ClassValidationError | IterableValidationError):
        out = []
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            if isinstance(note, AttributeValidationNote):
                step: _Step = ("attr", note.name)
            elif isinstance(note, IterableValidationNote):
                step = ("index", note.index)
            else:  # pragma: no cover - cattrs only attaches these two
                out.extend(_problems(sub, path, payload))
                continue
            if isinstance(sub, ClassValidationError | IterableValidationError):
                out.extend(_problems(sub, (*path, step), payload))
            else:
                out.append(_leaf((*path, step), sub, note.type, payload))
        for sub in without:
            out.extend(_problems(sub, path, payload))
        return out
    if isinstance(exc, ForbiddenExtraKeysError):
        return [f"{_path((*path, ('attr', k)))}: unknown field" for k in sorted(exc.extra_fields)]
    return [_located(path, _message(exc))]


def _leaf(path: tuple[_Step, ...], exc: BaseException, kind: Any, payload: Any) -> str:
    """The problem of one field (or item) whose expected type is ``kind``."""
    if isinstance(exc, KeyError):
        return _located(path, "missing required field")
    found, value = _value_at(payload, path)
    if found:
        return _located(path, f"expected {_type_name(kind)}, got {_short_repr(value)}")
    return _located(path, f"expected {_type_name(kind)}: {_message(exc)}")


def _located(path: tuple[_Step, ...], reason: str) -> str:
    where = _path(path)
    return f"{where}: {reason}" if where else reason


def _path(path: tuple[_Step, ...]) -> str:
    out = ""
    for kind, key in path:
        if kind == "attr":
            out += f".{key}" if out else str(key)
        else:
            out += f"[{key!r}]"
    return out


def _value_at(payload: Any, path: tuple[_Step, ...]) -> tuple[bool, Any]:
    value = payload
    for _, key in path:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, value


def _message(exc: BaseException) -> str:
    # A ValueError or TypeError speaks for itself (an attrs validator, a bad tuple);
    # anything else is named, since its message alone may not say what went wrong.
    if type(exc) in (ValueError, TypeError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _type_name(kind: Any) -> str:
    """``list[Item]``, ``int | None``, ``one of 'a', 'b'``: as the payload's author wrote it."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is type(None):
        return "None"
    if origin is None:
        return kind.__qualname__ if isinstance(kind, type) else repr(kind).replace("typing.", "")
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_type_name(a) for a in args)
    return f"{_type_name(origin)}[{', '.join(_type_name(a) for a in args)}]"


def _short_repr(value: Any) -> str:
    text = repr(value)
    if len(text) > _MAX_VALUE_REPR:
        text = text[: _MAX_VALUE_REPR - 3] + "..."
    return text
