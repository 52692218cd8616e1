"""The task catalog: what each serving runner serves, for producers that send tasks by name
(see the package docstring for its bytes)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from taskrunner._wire.encoding import dumps, field, json_object
from taskrunner.errors import InvalidTaskPayload


@attrs.frozen(kw_only=True)
class CatalogTask:
    """One task a runner serves, as a producer needs to know it. Times in seconds."""

    name: str
    stream: str
    """The stream the runner reads it from (``<prefix>:<queue>``)."""
    reservation_timeout: float = 0.0
    """What the runner's own ``dispatch`` writes into the message (0 when unknown)."""
    unique: bool = False
    unique_for: float = 0.0
    """The unique lock's lifetime (0 when not unique)."""
    keyed: bool = False
    """The lock key comes from the task's ``unique_key`` function of the payload, which a
    producer cannot run: it must be given the key."""
    keep_result: float | None = None
    """How long the task keeps its results, ``None`` when it does not."""

    @property
    def reservation(self) -> float:
        """The reservation timeout a message of this task carries (see ``TaskSettings``)."""
        return self.reservation_timeout


@attrs.frozen(kw_only=True)
class CatalogDocument:
    """What one serving instance publishes under its host in the group's catalog."""

    host: str
    instance: str
    """The instance id (``TaskRunner.instance_id``)."""
    expires: float
    """When the document stops counting unless republished, in the backend's clock
    (unix seconds on Redis)."""
    tasks: tuple[CatalogTask, ...] = ()


def encode_catalog(document: CatalogDocument) -> bytes:
    """The document's JSON: ``keep_result`` only for tasks that keep results."""
    entries = []
    for task in document.tasks:
        entry: dict[str, Any] = {
            "name": task.name,
            "stream": task.stream,
            "reservation_timeout": task.reservation_timeout,
            "unique": task.unique,
            "unique_for": task.unique_for,
            "keyed": task.keyed,
        }
        if task.keep_result is not None:
            entry["keep_result"] = task.keep_result
        entries.append(entry)
    doc = {
        "host": document.host,
        "instance": document.instance,
        "expires": document.expires,
        "tasks": entries,
    }
    return dumps(doc).encode()


def _seconds(doc: Mapping[str, Any], name: str, default: float | None) -> Any:
    value = doc.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidTaskPayload(f"field {name!r} should be seconds, got {value!r}")
    return float(value)


def decode_catalog(raw: bytes) -> CatalogDocument:
    """Parse one instance's document.

    Raises:
        InvalidTaskPayload: invalid JSON, not a document of this shape, or a field
            of the wrong type (the message names it).
    """
    doc = json_object(raw)
    entries = doc.get("tasks")
    if not isinstance(entries, list):
        raise InvalidTaskPayload(f"field 'tasks' should be a list, got {entries!r}")
    tasks = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise InvalidTaskPayload(f"a catalog task should be an object, got {entry!r}")
        name = field(entry, "name", str, "")
        if not name:
            raise InvalidTaskPayload(f"field 'name' should be a non-empty string, got {name!r}")
        tasks.append(
            CatalogTask(
                name=name,
                stream=field(entry, "stream", str, ""),
                reservation_timeout=_seconds(entry, "reservation_timeout", 0.0),
                unique=field(entry, "unique", bool, False),
                unique_for=_seconds(entry, "unique_for", 0.0),
                keyed=field(entry, "keyed", bool, False),
                keep_result=_seconds(entry, "keep_result", None),
            )
        )
    return CatalogDocument(
        host=field(doc, "host", str, ""),
        instance=field(doc, "instance", str, ""),
        expires=_seconds(doc, "expires", 0.0),
        tasks=tuple(tasks),
    )


def served_keep_result(documents: Iterable[CatalogDocument], name: str, now: float) -> float | None:
    """How long the fleet keeps the results of task ``name`` (pure): the largest
    ``keep_result`` of its live entries, ``None`` when none keeps them. What a cancel
    records a removed task for when its message does not say (a producer that is not
    strict does not know); ``lua/track.lua`` applies the same rule."""
    keeps = [t.keep_result for t in served(documents, name, now) if t.keep_result is not None]
    return max(keeps) if keeps else None


def served(documents: Iterable[CatalogDocument], name: str, now: float) -> list[CatalogTask]:
    """Every live entry for task ``name`` (pure): one per instance serving it, by host.

    A document counts until its ``expires``, compared with ``now`` in the same clock.
    """
    found: list[CatalogTask] = []
    for document in sorted(documents, key=lambda d: d.host):
        if document.expires <= now:
            continue
        found.extend(task for task in document.tasks if task.name == name)
    return found
