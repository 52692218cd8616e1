"""What a producer sends, decided before any I/O: the part the sync and asyncio producers share.

Theory of operation. A producer knows tasks by name only. Where it sends them
is fixed when it is made (:class:`Destination`: the group's stream and delayed
set, by the same rules as ``RedisBackend``). What a message of task ``name``
carries is a :class:`~taskrunner._wire.CatalogTask`, the settings
:func:`task_settings` chooses:

- without ``strict``, Go's zero values (not unique, reservation timeout 0: the
  worker runs the task with its own settings), made unique by the call's
  ``unique_key`` / ``unique_for``;
- with ``strict``, the entry a live runner published for that name on this
  producer's stream (``taskrunner._serve.catalog``): its unique settings and
  reservation timeout, so the message is the one the runner's own ``dispatch``
  would write; no such entry is :class:`~taskrunner.errors.TaskNotFound`.

From there the rules are the runner's (:mod:`taskrunner._dispatch.enqueue`): encode,
refuse, name the lock. :class:`CatalogView` decides when a strict producer
reads the catalog again. Pure: no I/O; clocks are passed in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import attrs

from taskrunner import _keys, _wire
from taskrunner._codec import converter
from taskrunner._config import _name, is_utf8_text, queue_name_problem
from taskrunner._keys import KeyLayout
from taskrunner._options import DEFAULT_OPTIONS
from taskrunner._wire import CatalogDocument, CatalogTask
from taskrunner.errors import TaskNotFound

CATALOG_CACHE = 5.0
"""Seconds a strict producer uses the catalog it read before reading it again."""
MISS_RECHECK = 1.0
"""A name missing from a catalog read longer ago than this is looked up again (a
runner that just started) before it is refused."""


def _queue(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    _name(instance, attribute, value)


def _layout(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in _keys.KEY_LAYOUTS:
        raise ValueError(f"key_layout must be 'go' or 'cluster', got {value!r}")


def _prefix(instance: Any, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        _name(instance, attribute, value)


DEFAULT_QUEUE = "tasks"
"""The queue of a producer, as of a ``RedisBackend``, unless given."""


@attrs.frozen(kw_only=True)
class Destination:
    """Where a producer's tasks go: the keys ``RedisBackend`` gives the same group,
    prefix and queue.

    Raises:
        ValueError, TypeError: a name is empty, holds spaces, or would collide with
            another key of the layout (see :func:`taskrunner._keys.stream_keys`).
    """

    consumer_group: str = attrs.field(validator=_name)
    prefix: str | None = attrs.field(default=None, validator=_prefix)
    queue: str = attrs.field(default=DEFAULT_QUEUE, validator=_queue)
    key_layout: KeyLayout = attrs.field(default="go", validator=_layout)
    """The key layout the group's runners use (see :mod:`taskrunner._keys`)."""
    stream: str = attrs.field(init=False)
    """``<prefix>:<queue>``, ``taskrunner:<group>:<queue>`` by default."""
    delayed: str = attrs.field(init=False)
    """``taskrunner:<group>:delayed_tasks``."""
    catalog: str = attrs.field(init=False)
    """``taskrunner:<group>:catalog``."""

    lock_prefix: str = attrs.field(init=False)
    """The head of the group's unique lock keys (:func:`taskrunner._keys.unique_prefix`)."""

    @stream.default
    def _stream(self) -> str:
        keys = _keys.stream_keys(self.prefix, self.consumer_group, self.queue, self.key_layout)
        return keys.stream

    @delayed.default
    def _delayed(self) -> str:
        return _keys.delayed_tasks(self.consumer_group, self.key_layout)

    @catalog.default
    def _catalog(self) -> str:
        return _keys.catalog(self.consumer_group, self.key_layout)

    @lock_prefix.default
    def _lock_prefix(self) -> str:
        return _keys.unique_prefix(self.consumer_group, self.key_layout)


def queue_of_stream(destination: Destination, stream: str) -> str | None:
    """The queue of ``destination``'s group and prefix whose stream is ``stream``, or
    ``None`` when no valid queue name maps to it (pure)."""
    head = destination.stream[: len(destination.stream) - len(destination.queue)]
    name = stream[len(head) :]
    if not stream.startswith(head) or queue_name_problem(name) is not None:
        return None
    try:
        same = _keys.stream_keys(
            destination.prefix, destination.consumer_group, name, destination.key_layout
        ).stream
    except ValueError:
        return None
    return name if same == stream else None


def check_task_name(name: object) -> str:
    """``name``, if it can name a task (as ``Task.name``).

    Raises:
        ValueError: not a non-empty string without spaces, or not valid UTF-8 text.
    """
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        raise ValueError(f"task name must be a non-empty string without spaces, got {name!r}")
    if not is_utf8_text(name):
        raise ValueError(f"task name must be valid UTF-8 text, got {name!r}")
    return name


_JSON_TYPES = frozenset({dict, list, str, int, float, bool, type(None)})


def wire_payload(payload: Any) -> Any:
    """``payload`` in its JSON-ready form: an attrs or dataclass instance unstructured
    by cattrs (as a runner does for a typed payload), anything else as it is."""
    kind = type(payload)
    if kind in _JSON_TYPES:  # the common case, decided at once
        return payload
    if attrs.has(kind) or (dataclasses.is_dataclass(payload) and not isinstance(payload, type)):
        return converter.unstructure(payload)
    return payload


def _unique_for(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < math.inf):
        raise ValueError(f"unique_for must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _unique_key(value: object) -> str:
    if not isinstance(value, str) or not is_utf8_text(value):
        raise ValueError(f"unique_key must be a string of valid UTF-8 text, got {value!r}")
    return value


def not_served(name: str, destination: Destination, served: Sequence[CatalogTask]) -> TaskNotFound:
    """The error of a strict producer for a task no live runner serves on its stream."""
    elsewhere = sorted({task.stream for task in served})
    also = f" (served on {', '.join(elsewhere)})" if elsewhere else ""
    return TaskNotFound(
        name,
        f"no live runner of group {destination.consumer_group!r} serves task {name!r} "
        f"on stream {destination.stream!r}{also}",
    )


def served_task(
    name: str, destination: Destination, served: Sequence[CatalogTask] | None
) -> CatalogTask:
    """What the producer knows of task ``name``: Go's zero values without ``strict``
    (``served`` is ``None``), else the first live entry on its stream (by host;
    runners that disagree, during a rolling deploy, are not told apart).

    Raises:
        TaskNotFound: strict, and no live runner serves ``name`` on the producer's stream.
    """
    if served is None:  # known by name only: the default options' entry
        return DEFAULT_OPTIONS.catalog_task(name, destination.stream)
    here = [entry for entry in served if entry.stream == destination.stream]
    if not here:
        raise not_served(name, destination, served)
    return here[0]


@attrs.frozen(kw_only=True)
class Settings:
    """What one dispatch of a task carries."""

    task: CatalogTask
    """The task's settings (for :func:`taskrunner._dispatch.enqueue.enqueue`)."""
    unique_key: str = ""
    """The message's ``unique_key`` when the task is unique ("" otherwise)."""


def task_settings(
    name: str,
    destination: Destination,
    served: Sequence[CatalogTask] | None,
    *,
    unique_key: str | None = None,
    unique_for: float | None = None,
) -> Settings:
    """The settings a dispatch of ``name`` carries (see the module docstring).

    Args:
        name: The task.
        destination: The producer's keys.
        served: For a strict producer, every live catalog entry for ``name``
            (:func:`taskrunner._wire.served`); ``None`` for one that is not strict.
        unique_key: The lock key the task's ``unique_key`` function would give
            (the lock is ``taskrunner:unique:<task>:<key>``).
        unique_for: The lock's lifetime in seconds. Given alone, the task is
            unique per name (``taskrunner:unique:<task>``).

    Raises:
        TaskNotFound: strict, and no live runner serves ``name`` on the producer's stream.
        ValueError: a bad ``unique_key`` or ``unique_for``; a ``unique_key``
            without a lifetime (none given, none in the catalog); or a strict
            producer's task whose key comes from a function of the payload
            (``keyed``) dispatched without ``unique_key``.
    """
    task = served_task(name, destination, served)
    key = None if unique_key is None else _unique_key(unique_key)
    if unique_for is not None:
        task = attrs.evolve(task, unique=True, unique_for=_unique_for(unique_for))
    if not task.unique:
        if key is not None:
            raise ValueError(
                f"unique_for is required with unique_key (the lock's lifetime in seconds) "
                f"for task {name!r}, got None"
            )
        return Settings(task=task)
    if key is None and task.keyed:
        raise ValueError(
            f"task {name!r} takes its unique key from a unique_key function of the payload, "
            "which a producer cannot run: pass unique_key="
        )
    return Settings(task=task, unique_key=_wire.message_unique_key(name, key))


@attrs.define
class CatalogView:
    """A strict producer's copy of the catalog, and when to read it again."""

    documents: tuple[CatalogDocument, ...] = ()
    read_at: float = -math.inf
    """When it was read (a monotonic clock)."""

    def needs_read(self, name: str, now: float, wall: float) -> bool:
        """Whether to read the catalog before dispatching ``name`` (pure).

        Args:
            now: The monotonic clock.
            wall: Unix time, which documents expire by.
        """
        age = now - self.read_at
        if age >= CATALOG_CACHE:
            return True
        return age >= MISS_RECHECK and not _wire.served(self.documents, name, wall)

    def served(self, name: str, wall: float) -> list[CatalogTask]:
        """Every live entry for ``name`` in this copy."""
        return _wire.served(self.documents, name, wall)
