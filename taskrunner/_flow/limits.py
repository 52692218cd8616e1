"""Flow control's values and decisions: rate limits, pauses, and how long a run waits.

Theory of operation (the gate that acts on them is
:mod:`taskrunner._serve.gate`). A task may carry a fleet-wide concurrency
limit and a rate limit; before its action starts, the gate asks the backend
to admit the run (:meth:`~taskrunner.backends.FlowControl.admit`, one
script). A run that is not admitted is not failed and not counted as an
attempt: its message goes back through the delayed set (acked and re-added
in one step, :meth:`~taskrunner.backends.Deferral.defer`) to come back when a
start may be allowed. How long that is:

- refused by the rate limit: the backend says (the pace of the limit: runs
  refused one after another are told to come back one interval apart, so a
  backlog flows at the allowed rate instead of stampeding each time a start
  frees up), and :func:`rate_wait` adds a millisecond so it is never early;
- refused for want of a concurrency slot: nobody knows when one frees, so
  :func:`slot_wait`, about half a second, jittered so that waiting runs do
  not all come back at once.

A paused task's runs are parked instead: added to the delayed set far in the
future (:data:`PARK_HORIZON`) and indexed, so a resume brings them all back at
once. Pure: no I/O, table-tested in ``tests/test_limits.py``.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

__all__ = [
    "PARK_HORIZON",
    "RATE_MARGIN",
    "SLOT_WAIT",
    "Paused",
    "RateLimit",
    "holder_id",
    "rate_wait",
    "slot_wait",
]

SLOT_WAIT = 0.5
"""Seconds a run refused a concurrency slot waits before it is tried again (on
average; see :func:`slot_wait`)."""

RATE_MARGIN = 0.001
"""Seconds a run refused by a rate limit comes back after its turn: a run that came
back a hair early (float rounding, a coarser clock) would find the window still
full and lose its place in the pace."""

PARK_HORIZON = 365 * 86400.0
"""How far in the future a paused task's run is parked in the delayed set: it is
brought back by the resume, not by time (the horizon only bounds a member whose
resume was lost, e.g. its index deleted by hand)."""


def _positive_int(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"RateLimit.{attribute.name} must be an integer >= 1, got {value!r}")


def _positive_seconds(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(
            f"RateLimit.{attribute.name} must be a finite number of seconds > 0, got {value!r}"
        )


@attrs.frozen
class RateLimit:
    """At most ``limit`` starts in any window of ``per`` seconds, across the fleet.

    ``RateLimit(100, per=1.0)``: a hundred starts a second. The window slides:
    whatever ``per``-second stretch of time you look at, it holds at most
    ``limit`` starts of the task (of one key, with ``rate_limit_key``), so a
    burst at the end of one second and another at the start of the next
    cannot add up to twice the limit.

    Raises:
        ValueError: ``limit`` is not an integer >= 1, or ``per`` not a finite
            number of seconds > 0.
    """

    limit: int = attrs.field(validator=_positive_int)
    """Starts allowed per window."""
    per: float = attrs.field(default=1.0, kw_only=True, validator=_positive_seconds)
    """The window's length in seconds."""

    @property
    def interval(self) -> float:
        """Seconds between two starts at the allowed rate (``per / limit``)."""
        return self.per / self.limit


@attrs.frozen(kw_only=True)
class Paused:
    """What is paused in a group: queues not read, tasks whose runs are parked."""

    queues: frozenset[str] = frozenset()
    tasks: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.queues or self.tasks)


def slot_wait(jitter: float) -> float:
    """How long a run refused a concurrency slot waits: :data:`SLOT_WAIT` scaled by
    ``0.5 + jitter`` (``jitter`` uniform in [0, 1): between half and one and a
    half times it), so runs that were refused together come back spread out."""
    return SLOT_WAIT * (0.5 + min(max(jitter, 0.0), 1.0))


def rate_wait(retry_after: float) -> float:
    """How long a run refused by a rate limit waits: its turn in the limit's pace
    (``retry_after``, from the backend), plus :data:`RATE_MARGIN`."""
    return max(0.0, retry_after) + RATE_MARGIN


def holder_id(
    instance_id: str,
    queue: str | None,
    entry_id: str,
    delivery_count: int,
    shard: str | None = None,
) -> str:
    """The name a run holds a concurrency slot under, and logs its start by in a
    rate limit: unique per delivery, fleet-wide (an entry id is only unique
    within its stream, and a redelivery is another start). A run read in a shard
    (``shard``: its tag) names it too, since two shards can hand out one stream id;
    an unsharded group's names are what they always were."""
    if shard is not None:
        return f"{instance_id}/{shard}/{queue or ''}/{entry_id}/{delivery_count}"
    return f"{instance_id}/{queue or ''}/{entry_id}/{delivery_count}"
