"""Tasks, and messages as a worker receives them.

:class:`Task` is what an application registers; :class:`Delivery` is one
message as a worker received it. What travels through Redis (the message, the
delayed member) is built and read in :mod:`taskrunner._wire`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from taskrunner import _wire
from taskrunner._codec import ExtraKeys, payload_type_of, result_type_of
from taskrunner._config import is_utf8_text, queue_name_problem
from taskrunner._execution.action import ActionShape, action_shape
from taskrunner._execution.retry import DEFAULT_BACKOFF, Backoff
from taskrunner._flow.limits import RateLimit
from taskrunner._wire import TaskMessage
from taskrunner.errors import InvalidTaskPayload

Action = Callable[..., Any]
"""``async def action(payload[, ctx])`` or a plain ``def`` (run in a thread)."""
UniqueKey = Callable[[Any], "str | None"]
RateLimitKey = Callable[[Any], "str | None"]


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


def _queue(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    problem = None if value is None else queue_name_problem(value)
    if problem is not None:
        raise ValueError(f"Task.{attribute.name} {problem}, got {value!r}")


def _max_concurrency(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"Task.{attribute.name} must be an integer >= 1 or None, got {value!r}")


def _rate_limit(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, RateLimit):
        raise ValueError(
            f"Task.{attribute.name} must be a RateLimit (e.g. RateLimit(10, per=1.0)) or None, "
            f"got {value!r}"
        )


def _extra_keys(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in ("forbid", "ignore"):
        raise ValueError(f"Task.{attribute.name} must be 'forbid' or 'ignore', got {value!r}")


def _retry_policy(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Backoff):
        raise ValueError(f"Task.{attribute.name} must be a Backoff or None, got {value!r}")


def _exception_types(value: object) -> tuple[type[BaseException], ...]:
    # One class is accepted for a tuple of one, as in ``except`` clauses.
    if isinstance(value, type):
        return (value,)
    return tuple(value) if isinstance(value, list | tuple) else value  # type: ignore[return-value]


def _exception_classes(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple) or not all(
        isinstance(t, type) and issubclass(t, BaseException) for t in value
    ):
        raise ValueError(
            f"Task.{attribute.name} must be exception classes (a tuple of them), got {value!r}"
        )


@attrs.frozen(kw_only=True)
class Task:
    """A registered unit of work.

    Raises:
        ValueError: a field is invalid (the message names it), e.g. ``unique=True``
            without ``unique_for > 0``, or an ``action`` that is not callable.
    """

    name: str = attrs.field(validator=_task_name)
    """The name messages refer to; unique within a runner."""

    action: Action
    """``async def action(payload)``, or a plain ``def`` (it runs in a worker
    thread). An attrs class or dataclass annotation on the payload parameter
    makes the payload typed (structured with cattrs). A second parameter (or
    one annotated ``TaskContext``) receives the run's :class:`~taskrunner.TaskContext`."""

    max_retry: int = attrs.field(default=1, validator=_non_negative_int)
    """How many times the task may run in all (first run included); 0 means 1. Every
    attempt counts, retries through the delayed set and deliveries after a crash
    alike, so a run cut off by a crash uses one up too (see "The life of one run"
    in the docs)."""

    reservation_timeout: float | None = attrs.field(default=None, validator=_positive_seconds)
    """While the action runs longer than this, its message is refreshed every
    ``reservation_timeout`` so no other consumer reclaims it. Must be below the
    runner's ``reclaim_delay``; ``None`` (the default) means a third of it."""

    unique: bool = False
    """At most one message of this task (per unique key) queued or running at once."""

    unique_key: UniqueKey | None = None
    """``unique_key(payload) -> str | None`` picks the lock, ``taskrunner:unique:<task>:<key>``;
    ``""`` or ``None`` means the task name as key (as the Go library does). Without
    it, one lock per task name: ``taskrunner:unique:<task>``."""

    unique_for: float = 0.0
    """Lock lifetime in seconds (required > 0 when ``unique``); bounds how long a
    crashed worker can keep a lock."""

    timeout: float | None = attrs.field(default=None, validator=_positive_seconds)
    """Seconds an attempt may run; past it the run is cancelled and the attempt fails
    with :class:`~taskrunner.TaskTimeout`. ``None`` (the default) takes the runner's
    ``default_timeout``, which is off unless set. A plain ``def`` action's thread cannot
    be cancelled: its outcome is discarded when it returns, and its pool slot frees
    only then."""

    retry: Backoff | None = attrs.field(default=DEFAULT_BACKOFF, validator=_retry_policy)
    """How long to wait before the next attempt after a failed one: the next attempt
    goes through the delayed set (the failed entry is acked in the same atomic step).
    ``None`` leaves a failed attempt pending, to run again once reclaimed after
    ``reclaim_delay``. The default is ``Backoff(initial=1.0, factor=2.0,
    maximum=300.0, jitter=0.1)``."""

    permanent: tuple[type[BaseException], ...] = attrs.field(
        default=(), converter=_exception_types, validator=_exception_classes
    )
    """Exception types that make a failed attempt final: the message takes the failure
    path at once, whatever attempts are left (a bad request will not get better)."""

    extra_keys: ExtraKeys = attrs.field(default="forbid", validator=_extra_keys)
    """What keys of a typed payload that its class does not have do, at any depth:
    ``"forbid"`` (the default) refuses the payload, naming them, at dispatch and in
    the worker (the failure path); ``"ignore"`` drops them, e.g. while producers
    that send a new field roll out before the workers that know it."""

    keep_result: float | None = attrs.field(default=None, validator=_positive_seconds)
    """Keep each run's outcome for this many seconds: the return value when it
    succeeds, the error's type and text when it fails for the last time, or that it
    was cancelled. ``TaskHandle.result`` waits for it and ``TaskRunner.get_task``
    reports it until it expires. ``None`` (the default) keeps nothing and costs
    nothing per run."""
    queue: str | None = attrs.field(default=None, validator=_queue)
    """The queue its messages go to (``dispatch(..., queue=)`` overrides it);
    ``None``: the backend's queue (``tasks``)."""

    max_concurrency: int | None = attrs.field(default=None, validator=_max_concurrency)
    """At most this many runs at once across the whole fleet (the consumer group);
    ``None``: no limit. A run that finds every slot taken waits in the delayed
    set, not in a worker, and the wait is not an attempt. A crashed runner's
    slot frees after the task's reservation timeout."""

    rate_limit: RateLimit | None = attrs.field(default=None, validator=_rate_limit)
    """At most ``rate_limit.limit`` starts in any window of ``rate_limit.per``
    seconds across the fleet; a run over the limit waits in the delayed set
    (not an attempt)."""

    rate_limit_key: RateLimitKey | None = None
    """``rate_limit_key(payload) -> str | None``: a limit per key (``""`` or
    ``None``: the task's own limit), e.g. ``lambda p: p["domain"]``."""

    payload_type: type[Any] | None = attrs.field(init=False)
    """The attrs class or dataclass the action's payload is structured into, if any."""

    result_type: type[Any] | None = attrs.field(init=False)
    """The attrs class or dataclass the action's return annotation names, if any: its
    results are unstructured to JSON with cattrs (and can be structured back with
    ``TaskHandle.result(type=...)``)."""

    shape: ActionShape = attrs.field(init=False)
    """How the worker calls the action (read from its signature once, here)."""

    @payload_type.default
    def _payload_type(self) -> type[Any] | None:
        return payload_type_of(self.action)

    @result_type.default
    def _result_type(self) -> type[Any] | None:
        return result_type_of(self.action)

    @shape.default
    def _shape(self) -> ActionShape:
        return action_shape(self.action)

    def __attrs_post_init__(self) -> None:
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
        if self.rate_limit_key is not None and not callable(self.rate_limit_key):
            raise ValueError(
                f"Task.rate_limit_key must be callable or None, got {self.rate_limit_key!r}"
            )
        if self.rate_limit_key is not None and self.rate_limit is None:
            raise ValueError(
                f"Task.rate_limit_key needs a rate_limit, got None for task {self.name!r}"
            )

    @property
    def limited(self) -> bool:
        """Whether a run must be admitted before it starts (a concurrency or rate limit)."""
        return self.max_concurrency is not None or self.rate_limit is not None

    def rate_key_for(self, payload: Any) -> str:
        """What ``rate_limit_key`` returns for ``payload``: ``""`` for ``None``, or
        without a function (the task's own limit).

        Raises:
            InvalidTaskPayload: the function raised, or returned neither a string
                nor ``None``, or a string with no UTF-8 form.
        """
        if self.rate_limit_key is None:
            return ""
        try:
            key = self.rate_limit_key(payload)
        except Exception as exc:
            raise InvalidTaskPayload(
                f"rate_limit_key raised {type(exc).__name__}: {exc}", task_name=self.name
            ) from exc
        if key is not None and not isinstance(key, str):
            raise InvalidTaskPayload(
                f"rate_limit_key must return a str or None, got {key!r}", task_name=self.name
            )
        if key and not is_utf8_text(key):  # it becomes part of the limit's key
            raise InvalidTaskPayload(
                f"rate_limit_key must return valid UTF-8 text, got {key!r}", task_name=self.name
            )
        return key or ""

    def message_unique_key(self, payload: Any) -> str:
        """The message ``unique_key`` of this unique task for ``payload``, as Go writes it.

        ``<task>:<key>`` with ``key`` what the task's key function returns for
        ``payload`` (what ``dispatch`` was given; a Go member's payload structured
        as the action receives it), the task name when it returns ``""`` or
        ``None``; just ``<task>`` when the task has no key function.

        Raises:
            InvalidTaskPayload: the key function raised or returned a non-string.
        """
        key = None if self.unique_key is None else self.lock_key_for(payload)
        return _wire.message_unique_key(self.name, key)

    def catalog_entry(self, stream: str) -> _wire.CatalogTask:
        """This task as the task catalog lists it, served from ``stream``."""
        return _wire.CatalogTask(
            name=self.name,
            stream=stream,
            reservation_timeout=self.reservation,
            unique=self.unique,
            unique_for=self.unique_for if self.unique else 0.0,
            keyed=self.unique and self.unique_key is not None,
            keep_result=self.keep_result,
        )

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
        """What the ``unique_key`` function returns for ``payload``: "" for ``None``,
        or without a function. The message's key is :meth:`message_unique_key`.

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
    """How many times this entry has been delivered, this time included."""
    raw: bytes | None
    """The entry's ``payload`` field as read; ``None`` if the entry had none."""
    message: TaskMessage | None
    """The decoded message, or ``None`` if it could not be, or was not, decoded."""
    queue: str | None = None
    """The queue it was read from."""

    @property
    def task_name(self) -> str | None:
        return self.message.task_name if self.message is not None else None

    @property
    def attempt(self) -> int:
        """The attempt number: attempts used by earlier entries of the task (retries
        re-queued through the delayed set) plus this entry's deliveries."""
        earlier = self.message.attempts if self.message is not None else 0
        return earlier + self.delivery_count
