"""Tasks and the messages that carry them.

:class:`Task` is what an application registers; :class:`TaskMessage` is what
travels through the queue (its JSON is the original library's wire format, so
a Go fleet and a Python fleet can share a stream); :class:`DelayedTask` is a
member of the delayed set; :class:`Delivery` is one message as a worker
received it.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from taskrunner._codec import payload_type_of
from taskrunner._config import is_utf8_text
from taskrunner.errors import InvalidTaskPayload

Action = Callable[[Any], Awaitable[Any]]
UniqueKey = Callable[[Any], "str | None"]


def _task_name(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError(
            f"Task.{attribute.name} must be a non-empty string without spaces, got {value!r}"
        )
    if not is_utf8_text(value):  # it names metrics fields and lock keys
        raise ValueError(f"Task.{attribute.name} must be valid UTF-8 text, got {value!r}")


def _non_negative_int(instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Task.{attribute.name} must be an integer >= 0, got {value!r}")


def _positive_seconds(instance: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"Task.{attribute.name} must be a number of seconds > 0, got {value!r}")


def _is_async_callable(fn: object) -> bool:
    """An ``async def`` function, method or callable object, possibly wrapped in
    ``functools.partial``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - the method, not callability
    )


@attrs.frozen(kw_only=True)
class Task:
    """A registered unit of work.

    Raises:
        ValueError: a field is invalid (the message names it), e.g. ``unique=True``
            without ``unique_for > 0``, or an ``action`` that is not an async function.
    """

    name: str = attrs.field(validator=_task_name)
    """The name messages refer to; unique within a runner."""

    action: Action
    """``async def action(payload)``. An attrs class or dataclass annotation on the
    payload parameter makes the payload typed (structured with cattrs)."""

    max_retry: int = attrs.field(default=1, validator=_non_negative_int)
    """How many times the task may run in all (first run included); 0 means 1."""

    reservation_timeout: float | None = attrs.field(default=None, validator=_positive_seconds)
    """While the action runs longer than this, its message is refreshed every
    ``reservation_timeout`` so no other consumer reclaims it. Must be below the
    runner's ``reclaim_delay``; ``None`` (the default) means a third of it."""

    unique: bool = False
    """At most one message of this task (per unique key) queued or running at once."""

    unique_key: UniqueKey | None = None
    """``unique_key(payload) -> str | None`` picks the lock key; without it, one
    lock per task name."""

    unique_for: float = 0.0
    """Lock lifetime in seconds (required > 0 when ``unique``); bounds how long a
    crashed worker can keep a lock."""

    payload_type: type[Any] | None = attrs.field(init=False)
    """The attrs class or dataclass the action's payload is structured into, if any."""

    @payload_type.default
    def _payload_type(self) -> type[Any] | None:
        return payload_type_of(self.action)

    def __attrs_post_init__(self) -> None:
        if not _is_async_callable(self.action):
            raise ValueError(f"Task.action must be an async function, got {self.action!r}")
        if self.unique and not (
            isinstance(self.unique_for, int | float)
            and not isinstance(self.unique_for, bool)
            and 0 < self.unique_for < math.inf
        ):
            raise ValueError(
                f"Task.unique_for must be a finite number of seconds > 0 when unique=True, "
                f"got {self.unique_for!r}"
            )
        if self.unique_key is not None and not callable(self.unique_key):
            raise ValueError(f"Task.unique_key must be callable or None, got {self.unique_key!r}")

    @property
    def reservation(self) -> float:
        """The reservation timeout in seconds, as resolved by ``TaskRunner.register``.

        Raises:
            RuntimeError: the task was not registered and has no explicit timeout.
        """
        if self.reservation_timeout is None:
            raise RuntimeError(f"task {self.name!r} has no reservation timeout until registered")
        return self.reservation_timeout

    def lock_key_for(self, payload: Any) -> str:
        """The ``unique_key`` of ``payload`` ("" without a ``unique_key`` function).

        Raises:
            InvalidTaskPayload: ``unique_key`` raised, or returned neither a
                string nor ``None``, or a string with no UTF-8 form.
        """
        if self.unique_key is None:
            return ""
        try:
            key = self.unique_key(payload)
        except Exception as exc:
            raise InvalidTaskPayload(
                f"unique_key raised {type(exc).__name__}: {exc}", task_name=self.name
            ) from exc
        if key is not None and not isinstance(key, str):
            raise InvalidTaskPayload(
                f"unique_key must return a str or None, got {key!r}", task_name=self.name
            )
        if key and not is_utf8_text(key):  # it becomes part of the lock's key
            raise InvalidTaskPayload(
                f"unique_key must return valid UTF-8 text, got {key!r}", task_name=self.name
            )
        return key or ""

    @property
    def attempts(self) -> int:
        """Total runs allowed: ``max_retry``, with 0 meaning 1."""
        return max(1, self.max_retry)


@attrs.frozen(kw_only=True)
class TaskMessage:
    """The JSON document in a stream entry's ``payload`` field.

    Field names and units are the original library's wire format:
    ``reservation_timeout`` in nanoseconds, ``unique_for`` in seconds. The
    message id is the stream id and is not serialised.
    """

    task_name: str
    payload: Any = None
    unique: bool = False
    unique_for: int = 0
    unique_key: str = ""
    unique_lock_value: str = ""
    reservation_timeout: int = 0

    @property
    def reservation_timeout_seconds(self) -> float:
        return self.reservation_timeout / 1e9


def unique_for_wire(seconds: float) -> int:
    """Seconds as the wire's whole seconds, rounded up so a lock never lives shorter."""
    return math.ceil(seconds)


@attrs.frozen(kw_only=True)
class DelayedTask:
    """A member of the delayed set: run ``task`` with ``payload`` at ``time``.

    ``time`` is the run-at time in the backend's clock: unix seconds on Redis
    (the wire format), trio's clock on the in-memory backend.
    """

    id: str
    task: str
    time: float
    payload: Any = None


@attrs.frozen(kw_only=True)
class Delivery:
    """One message as a worker received it.

    Handed to ``failed_task_handler`` and ``on_error``. ``message`` is ``None``
    when the entry could not be decoded, or was not (a redelivery past its
    limit, which may be what killed its workers); ``raw`` is then what was read.
    """

    id: str
    """The stream id."""
    consumer: str
    """The consumer (fetcher) that holds it."""
    delivery_count: int
    """How many times it has been delivered, this time included (the attempt number)."""
    raw: bytes | None
    """The entry's ``payload`` field as read; ``None`` if the entry had none."""
    message: TaskMessage | None
    """The decoded message, or ``None`` if it could not be, or was not, decoded."""

    @property
    def task_name(self) -> str | None:
        return self.message.task_name if self.message is not None else None
