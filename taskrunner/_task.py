"""Tasks, and messages as a worker receives them.

:class:`Task` is what an application registers; :class:`Delivery` is one
message as a worker received it. What travels through Redis (the message, the
delayed member) is built and read in :mod:`taskrunner._wire`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from taskrunner import _wire
from taskrunner._codec import encode_payload, payload_type_of, result_type_of
from taskrunner._config import is_utf8_text
from taskrunner._dispatch.routing import key_text
from taskrunner._execution.action import ActionShape, action_shape
from taskrunner._options import RateLimitKey as RateLimitKey
from taskrunner._options import ShardKey as ShardKey
from taskrunner._options import TaskOptions, option_values
from taskrunner._options import UniqueKey as UniqueKey
from taskrunner._wire import TaskMessage
from taskrunner.errors import InvalidTaskPayload

Action = Callable[..., Any]
"""``async def action(payload[, ctx])`` or a plain ``def`` (run in a thread)."""


def _task_name(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError(
            f"Task.{attribute.name} must be a non-empty string without spaces, got {value!r}"
        )
    if not is_utf8_text(value):  # it names metrics fields and lock keys
        raise ValueError(f"Task.{attribute.name} must be valid UTF-8 text, got {value!r}")


def _name_and_action_first(
    cls: type, fields: list[attrs.Attribute[Any]]
) -> list[attrs.Attribute[Any]]:
    # A Task's repr (and its fields) begin with what names it, then its options.
    first = [f for f in fields if f.name in ("name", "action")]
    return first + [f for f in fields if f.name not in ("name", "action")]


@attrs.frozen(kw_only=True, field_transformer=_name_and_action_first)
class Task(TaskOptions):
    """A registered unit of work: a name, an action, and the options of
    :class:`TaskOptions <taskrunner._options.TaskOptions>` (its other fields).

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

    @classmethod
    def with_options(cls, name: str, action: Action, options: TaskOptions) -> Task:
        """The task ``name`` that runs ``action`` with ``options``.

        Raises:
            ValueError: ``name`` or ``action`` is invalid.
        """
        return cls(name=name, action=action, **option_values(options))

    @property
    def options(self) -> TaskOptions:
        """Its options, without its name and action."""
        return TaskOptions(**option_values(self))

    def _of(self) -> str:
        return f" for task {self.name!r}"

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

    def dispatch_form(self, payload: Any) -> tuple[Any, str | None]:
        """What a dispatch of ``payload`` sends, before it is encoded: its wire form
        and, for a unique task with a key function, the lock key (``None``
        otherwise; see :meth:`~taskrunner._dispatch.enqueue.Planner.entry`).

        The key functions run first, on the payload as given; then a typed
        payload is checked and unstructured. So a payload is refused before
        anything is queued, whichever of them refuses it.

        Raises:
            InvalidTaskPayload: a key function raised or returned a non-string, or
                the payload does not fit the task's payload type.
        """
        if self.rate_limit_key is not None:
            self.rate_key_for(payload)  # refuse a payload whose limit's key cannot be computed
        key = self.lock_key_for(payload) if self.unique and self.unique_key is not None else None
        if self.payload_type is None:
            return payload, key
        return encode_payload(payload, self.payload_type, self.name, self.extra_keys), key

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
        """This task as the task catalog lists it, served from ``stream``.

        Raises:
            RuntimeError: the task was not registered and has no explicit timeout.
        """
        self.reservation  # noqa: B018 - a task's entry carries its resolved timeout
        return self.catalog_task(self.name, stream)

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

    def shard_key_for(self, payload: Any) -> str | None:
        """The text ``payload``'s shard is the hash of
        (:func:`taskrunner._dispatch.routing.key_text` of what ``shard_key`` returns),
        or ``None`` without a key (no function, or it returned ``None`` or ``""``).

        Raises:
            InvalidTaskPayload: ``shard_key`` raised, or returned no JSON value.
        """
        if self.shard_key is None:
            return None
        try:
            key = self.shard_key(payload)
        except Exception as exc:
            raise InvalidTaskPayload(
                f"shard_key raised {type(exc).__name__}: {exc}", task_name=self.name
            ) from exc
        try:
            return key_text(key)
        except TypeError as exc:
            raise InvalidTaskPayload(str(exc), task_name=self.name) from None


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
    group: str | None = None
    """In a sharded group, the tag of the shard it was read in (its keys' group,
    docs/sharding.md); ``None``: the runner's group."""

    @property
    def task_name(self) -> str | None:
        return self.message.task_name if self.message is not None else None

    @property
    def attempt(self) -> int:
        """The attempt number: attempts used by earlier entries of the task (retries
        re-queued through the delayed set) plus this entry's deliveries."""
        earlier = self.message.attempts if self.message is not None else 0
        return earlier + self.delivery_count
