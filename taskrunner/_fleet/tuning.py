"""The worker tuner's decisions: when tuning is on, and what capacity to pick.

Theory of operation: on each aggregator tick the leader computes the
predicted wait (see :mod:`taskrunner._fleet.stats`) and asks
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
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from taskrunner._config import TaskRunnerConfig

__all__ = [
    "TuningDecision",
    "aggregator_interval",
    "compute_tuned_workers",
    "cooldown_elapsed",
    "follow_capacity",
    "round_half_away_from_zero",
    "tune",
    "tuning_enabled",
    "tuning_on",
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
    capacity: int,
    replicas: int,
    min_workers: int,
    max_workers: int,
    predicted_wait: float,
    desired: float,
    tolerance: float,
) -> TuningDecision:
    """The leader's tuning rule: the pool capacity that brings the predicted wait back
    to the band.

    The function is unit-agnostic: ``predicted_wait``, ``desired`` and
    ``tolerance`` only need to share a unit. (The runner passes the predicted
    wait in ms and converts ``desired_wait_time`` and its tolerance from
    seconds.)

    The rule, with ``c = capacity``, ``r = replicas``, ``w = predicted_wait``,
    ``d = desired`` and ``t = tolerance``:

    * ``w <= 0`` (nothing queued): shrink by 10%, ``max(min, int(c * 0.9))``.
    * ``max(0, d - t) <= w <= d + t``: keep ``c``.
    * above the band: target ``d`` when ``w > 1.5 d``, else ``d + t``.
    * below the band: target ``d`` when ``w < 0.5 d``, else ``d - t``.
    * new capacity ``round(round(c * r * w / target) / r)``, rounding halves
      away from zero as Go does.

    Every valid decision is clamped to ``[min_workers, max_workers]``, the
    shrink and keep cases included; for a ``c`` already in that range this is
    exactly the rule above, and a ``c`` left outside it (say, the limits
    changed) is brought back. An infinite ``w`` asks for ``max_workers``.

    A zero target cannot happen: below the band means ``w < max(0, d - t)``,
    and with ``d <= t`` that would need ``w < 0``, which the first case has
    already taken; when the target is ``d - t`` we have ``d - t > w > 0``. So
    with ``t >= d`` the band reaches down to 0 and any positive ``w`` under
    ``d + t`` keeps ``c``. The code still guards the division.

    Args:
        capacity: Current pool capacity (per instance).
        replicas: Replication count, the number of live instances.
        min_workers: Lower bound for the capacity.
        max_workers: Upper bound for the capacity.
        predicted_wait: Predicted wait time.
        desired: Desired wait time, same unit as ``predicted_wait``.
        tolerance: Half-width of the band around ``desired``, same unit.

    Returns:
        The capacity to use and why. Invalid input (tuning disabled,
        ``capacity`` not positive, ``replicas < 1``, NaN ``predicted_wait``)
        returns ``capacity`` unchanged with the reason, rather than raising: a
        bad reading must not take down the aggregator tick.
    """
    if not tuning_enabled(
        min_workers=min_workers,
        max_workers=max_workers,
        desired_wait_time=desired,
        tolerance=tolerance,
    ):
        return TuningDecision(capacity, f"tuning disabled by configuration; keeping {capacity}")
    if capacity <= 0:
        return TuningDecision(capacity, f"current capacity {capacity} is not positive; keeping it")
    if replicas < 1:
        return TuningDecision(
            capacity, f"replication count {replicas} is below 1; keeping {capacity}"
        )
    if math.isnan(predicted_wait):
        return TuningDecision(capacity, f"predicted wait is NaN; keeping {capacity}")

    def clamp(value: int) -> int:
        return min(max_workers, max(min_workers, value))

    if predicted_wait <= 0:
        new = clamp(int(capacity * 0.9))
        return TuningDecision(
            new, f"nothing waiting (predicted wait {predicted_wait:g}): {capacity} -> {new}"
        )

    low = max(0.0, desired - tolerance)
    high = desired + tolerance
    if low <= predicted_wait <= high:
        new = clamp(capacity)
        return TuningDecision(
            new,
            f"predicted wait {predicted_wait:g} within [{low:g}, {high:g}]: {capacity} -> {new}",
        )

    if predicted_wait > high:
        where = "above"
        target = desired if predicted_wait > 1.5 * desired else high
    else:
        where = "below"
        target = desired if predicted_wait < 0.5 * desired else low
    if not target > 0:  # unreachable, see the docstring; never divide by it
        return TuningDecision(
            capacity, f"tuning target {target:g} is not positive; keeping {capacity}"
        )

    scaled = capacity * replicas * predicted_wait / target
    if math.isinf(scaled):
        new = max_workers
    else:
        new = clamp(round_half_away_from_zero(round_half_away_from_zero(scaled) / replicas))
    return TuningDecision(
        new,
        f"predicted wait {predicted_wait:g} {where} [{low:g}, {high:g}], target {target:g},"
        f" replication {replicas}: {capacity} -> {new}",
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


def tuning_on(config: TaskRunnerConfig) -> bool:
    """Whether ``config`` turns the worker tuner on."""
    return tuning_enabled(
        min_workers=config.min_workers,
        max_workers=config.max_workers,
        desired_wait_time=config.desired_wait_time,
        tolerance=config.desired_wait_time_tolerance,
    )


def follow_capacity(published: int | None, *, current: int, config: TaskRunnerConfig) -> int | None:
    """The capacity a published tuning value asks this instance to take, if any.

    Args:
        published: The live published capacity, or None when there is none.
        current: This instance's pool capacity.
        config: This instance's configuration (its own limits apply).

    Returns:
        The new capacity, clamped to this instance's ``[min_workers,
        max_workers]``; None when there is nothing to do (no value, tuning
        off here, or the clamped value is the current one).
    """
    if published is None or not tuning_on(config):
        return None
    target = min(config.max_workers, max(config.min_workers, published))
    return None if target == current else target


def tune(
    *,
    now: float,
    last_change: float | None,
    config: TaskRunnerConfig,
    capacity: int,
    replicas: int,
    predicted_wait: float,
) -> TuningDecision | None:
    """The leader's tuning decision for this tick, or None when it may not decide.

    Args:
        now: The current time (same clock as ``last_change``).
        last_change: When the pool capacity last changed (for the cooldown),
            None if it never did.
        config: The instance's configuration.
        capacity: Current pool capacity.
        replicas: Replication count.
        predicted_wait: Predicted wait time in ms (:attr:`Stats.predicted_wait_time
            <taskrunner.Stats.predicted_wait_time>`).

    Returns:
        None when tuning is off or ``tuning_cooldown`` has not passed since
        the last change; otherwise the decision (whose capacity may equal
        ``capacity``). ``desired_wait_time`` and its tolerance are converted
        from seconds to the ms of ``predicted_wait``.
    """
    if not tuning_on(config):
        return None
    if not cooldown_elapsed(now=now, last_change=last_change, cooldown=config.tuning_cooldown):
        return None
    return compute_tuned_workers(
        capacity=capacity,
        replicas=replicas,
        min_workers=config.min_workers,
        max_workers=config.max_workers,
        predicted_wait=predicted_wait,
        desired=config.desired_wait_time * 1000.0,
        tolerance=config.desired_wait_time_tolerance * 1000.0,
    )
