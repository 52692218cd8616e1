"""The worker tuner's decisions: when tuning is on, and what capacity to pick.

Theory of operation: on each aggregator tick the leader computes the
predicted wait (see :mod:`taskrunner._stats`) and asks
:func:`compute_tuned_workers` for a new pool capacity. The rule keeps the
predicted wait inside a band around ``desired_wait_time``: inside the band
nothing changes; outside it, the capacity is scaled in proportion to how far
the prediction is from a target, then clamped to ``[min_workers,
max_workers]``. With nothing queued the pool sheds 10% per decision. The
runner rate-limits changes with :func:`cooldown_elapsed`, applies the new
capacity locally and publishes it with a TTL of :func:`tuning_ttl`;
followers read it back on each tick of :func:`aggregator_interval`.

Everything here is synchronous and pure: the caller passes the current state
and the clock reading and performs whatever I/O the answer calls for.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = [
    "TuningDecision",
    "aggregator_interval",
    "compute_tuned_workers",
    "cooldown_elapsed",
    "round_half_away_from_zero",
    "tuning_enabled",
    "tuning_ttl",
]

_MIN_TUNING_TTL_S = 20.0
_DEFAULT_AGGREGATOR_INTERVAL_S = 60.0


class TuningDecision(NamedTuple):
    """What :func:`compute_tuned_workers` chose, and why (for the log line)."""

    capacity: int
    """The pool capacity to use from now on (may equal the current one)."""

    reason: str
    """A human-readable explanation, e.g. for ``log.info("tuner: %s", reason)``."""


def tuning_enabled(
    *, min_workers: int, max_workers: int, desired_wait_time: float, tolerance: float
) -> bool:
    """Whether the configuration turns the worker tuner on.

    On when ``min_workers > 0``, ``max_workers >= min_workers``,
    ``desired_wait_time > 0`` and ``tolerance >= 0`` (NaN fails every test).
    Units of ``desired_wait_time`` and ``tolerance`` do not matter here as
    long as they are the same.
    """
    return (
        min_workers > 0 and max_workers >= min_workers and desired_wait_time > 0 and tolerance >= 0
    )


def round_half_away_from_zero(value: float) -> int:
    """Round to the nearest integer, halves away from zero, as Go's ``math.Round``.

    Python's :func:`round` rounds halves to even (``round(4.5) == 4``), which
    would make the tuner disagree with the Go library on exact halves.

    Raises:
        OverflowError: ``value`` is infinite.
        ValueError: ``value`` is NaN.
    """
    magnitude = abs(value)
    whole = math.floor(magnitude)
    # magnitude - whole is exact for doubles, unlike floor(magnitude + 0.5),
    # which turns 0.49999999999999994 into 1.
    if magnitude - whole >= 0.5:
        whole += 1
    return whole if value >= 0 else -whole


def compute_tuned_workers(
    *,
    cur: int,
    rf: int,
    min_workers: int,
    max_workers: int,
    pwt: float,
    desired: float,
    tolerance: float,
) -> TuningDecision:
    """The leader's tuning rule: the pool capacity that brings ``pwt`` back to the band.

    The function is unit-agnostic: ``pwt``, ``desired`` and ``tolerance``
    only need to share a unit. (The runner passes the predicted wait in ms
    and converts ``desired_wait_time`` and its tolerance from seconds.)

    The rule, with ``d = desired`` and ``t = tolerance``:

    * ``pwt <= 0`` (nothing queued): shrink by 10%, ``max(min, int(cur * 0.9))``.
    * ``max(0, d - t) <= pwt <= d + t``: keep ``cur``.
    * above the band: target ``d`` when ``pwt > 1.5 d``, else ``d + t``.
    * below the band: target ``d`` when ``pwt < 0.5 d``, else ``d - t``.
    * new capacity ``round(round(cur * rf * pwt / target) / rf)``, rounding
      halves away from zero as Go does.

    Every valid decision is clamped to ``[min_workers, max_workers]``, the
    shrink and keep cases included; for a ``cur`` already in that range this
    is exactly the rule above, and a ``cur`` left outside it (say, the limits
    changed) is brought back. An infinite ``pwt`` asks for ``max_workers``.

    A zero target cannot happen: below the band means ``pwt < max(0, d - t)``,
    and with ``d <= t`` that would need ``pwt < 0``, which the first case has
    already taken; when the target is ``d - t`` we have ``d - t > pwt > 0``.
    So with ``t >= d`` the band reaches down to 0 and any positive ``pwt``
    under ``d + t`` keeps ``cur``. The code still guards the division.

    Args:
        cur: Current pool capacity (per instance).
        rf: Replication count, the number of live instances.
        min_workers: Lower bound for the capacity.
        max_workers: Upper bound for the capacity.
        pwt: Predicted wait time.
        desired: Desired wait time, same unit as ``pwt``.
        tolerance: Half-width of the band around ``desired``, same unit.

    Returns:
        The capacity to use and why. Invalid input (tuning disabled, ``cur``
        not positive, ``rf < 1``, NaN ``pwt``) returns ``cur`` unchanged with
        the reason, rather than raising: a bad reading must not take down the
        aggregator tick.
    """
    if not tuning_enabled(
        min_workers=min_workers,
        max_workers=max_workers,
        desired_wait_time=desired,
        tolerance=tolerance,
    ):
        return TuningDecision(cur, f"tuning disabled by configuration; keeping {cur}")
    if cur <= 0:
        return TuningDecision(cur, f"current capacity {cur} is not positive; keeping it")
    if rf < 1:
        return TuningDecision(cur, f"replication count {rf} is below 1; keeping {cur}")
    if math.isnan(pwt):
        return TuningDecision(cur, f"predicted wait is NaN; keeping {cur}")

    def clamp(capacity: int) -> int:
        return min(max_workers, max(min_workers, capacity))

    if pwt <= 0:
        new = clamp(int(cur * 0.9))
        return TuningDecision(new, f"nothing waiting (predicted wait {pwt:g}): {cur} -> {new}")

    low = max(0.0, desired - tolerance)
    high = desired + tolerance
    if low <= pwt <= high:
        new = clamp(cur)
        return TuningDecision(
            new, f"predicted wait {pwt:g} within [{low:g}, {high:g}]: {cur} -> {new}"
        )

    if pwt > high:
        where = "above"
        target = desired if pwt > 1.5 * desired else high
    else:
        where = "below"
        target = desired if pwt < 0.5 * desired else low
    if not target > 0:  # unreachable, see the docstring; never divide by it
        return TuningDecision(cur, f"tuning target {target:g} is not positive; keeping {cur}")

    scaled = cur * rf * pwt / target
    if math.isinf(scaled):
        new = max_workers
    else:
        new = clamp(round_half_away_from_zero(round_half_away_from_zero(scaled) / rf))
    return TuningDecision(
        new,
        f"predicted wait {pwt:g} {where} [{low:g}, {high:g}], target {target:g},"
        f" replication {rf}: {cur} -> {new}",
    )


def tuning_ttl(long_queue_threshold_s: float) -> float:
    """TTL in seconds of the published capacity.

    ``max(20, long_queue_threshold)`` as in the original, and at least two
    aggregator ticks: with the threshold at 0 the tick is 60 s, and a 20 s value
    would expire before most followers' next tick, so they would never follow.
    """
    return max(
        _MIN_TUNING_TTL_S, long_queue_threshold_s, 2 * aggregator_interval(long_queue_threshold_s)
    )


def aggregator_interval(long_queue_threshold_s: float) -> float:
    """Seconds between aggregator ticks: half the long-queue threshold.

    60 s when the threshold is 0 (a negative or NaN threshold is treated the
    same, so a bad setting can never turn the aggregator into a busy loop).
    """
    if not long_queue_threshold_s > 0:
        return _DEFAULT_AGGREGATOR_INTERVAL_S
    return long_queue_threshold_s / 2


def cooldown_elapsed(*, now: float, last_change: float | None, cooldown: float) -> bool:
    """Whether the tuner may change the capacity again.

    Args:
        now: The current time, same clock as ``last_change`` (seconds).
        last_change: When the capacity last changed, or None if it never did.
        cooldown: ``tuning_cooldown`` in seconds; 0 never holds a change back.

    Returns:
        True when at least ``cooldown`` seconds have passed since the last
        change (a change exactly ``cooldown`` later is allowed).
    """
    if last_change is None:
        return True
    return now - last_change >= cooldown
