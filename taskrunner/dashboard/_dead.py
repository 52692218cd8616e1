"""The dead-letter page's data: the oldest dead letters of every queue of a group, each
as the page shows it (its payload as JSON text, cut past a size).
"""

from __future__ import annotations

import json

import attrs

from taskrunner.admin import DeadLetterInfo
from taskrunner.backends import Backend
from taskrunner.dashboard import _features

DEAD_SHOWN = 100
"""Dead letters one page lists."""
PAYLOAD_SHOWN = 65536
"""Characters of one payload a page shows (the rest is cut, and says so)."""


@attrs.frozen(kw_only=True)
class DeadRow:
    id: str
    queue: str | None
    """The queue whose dead letter it is."""
    ref: str
    """What the page's replay and purge forms send for it: ``<queue>:<id>``."""
    task_id: str
    """The task's id (its page is ``/groups/{group}/tasks/{task_id}``)."""
    message_id: str
    task_name: str | None
    """From the message, when it is one."""
    error: str
    dead_at: float
    payload: str
    """The task's payload as JSON text when the message decodes, else the raw entry
    (undecodable bytes replaced); cut at :data:`PAYLOAD_SHOWN` characters."""
    cut: bool


@attrs.frozen(kw_only=True)
class DeadPage:
    group: str
    letters: tuple[DeadRow, ...]
    shown: int
    """At most :data:`DEAD_SHOWN`: the oldest ones."""


def dead_row(dead: DeadLetterInfo) -> DeadRow:
    """What a page shows of one dead letter (pure; never raises on a bad payload)."""
    if dead.task_name is None:  # not a message: the entry as it was
        text = "" if dead.raw is None else dead.raw.decode("utf-8", "replace")
    else:
        text = json.dumps(dead.payload, ensure_ascii=False, indent=2)
    cut = len(text) > PAYLOAD_SHOWN
    return DeadRow(
        id=dead.id,
        queue=dead.queue,
        ref=dead.id if dead.queue is None else f"{dead.queue}:{dead.id}",
        task_id=dead.task_id,
        message_id=dead.message_id,
        task_name=dead.task_name,
        error=dead.reason,
        dead_at=dead.dead_at,
        payload=text[:PAYLOAD_SHOWN],
        cut=cut,
    )


async def read_dead(backend: Backend, group: str) -> DeadPage:
    """The oldest :data:`DEAD_SHOWN` dead letters of every queue of ``group``.

    Raises:
        BackendError: the store could not be read.
    """
    letters = await _features.dead_letters(backend, group, DEAD_SHOWN)
    return DeadPage(group=group, letters=tuple(dead_row(d) for d in letters), shown=len(letters))
