"""A task's retry policy, and what a failed attempt leads to.

Theory of operation. When an attempt fails, the worker asks :func:`next_step`
what happens to the message, given the attempt number (1-based, counted
across re-queues: the message's ``attempts`` plus its delivery count), the
task's attempts in all, the exception and the task's policy:

- the exception is one of the task's ``permanent`` types, or this was the
  last attempt: the failure path (:class:`GiveUp`);
- the action raised :class:`~taskrunner.errors.Retry`: another attempt after
  the delay it asked for, or the policy's (:class:`Defer`);
- the task has a :class:`Backoff`: another attempt after its delay
  (:class:`Defer`), through the delayed set;
- the task has ``retry=None``: the message stays pending and comes back
  after ``reclaim_delay`` (:class:`LeavePending`), as before retry policies.

:meth:`Backoff.delay` is ``min(maximum, initial * factor ** (attempt - 1))``
spread by ``± jitter`` (a fraction of it), drawn from the random generator
passed in, so a test can seed it.

Pure: no I/O, table-tested in ``tests/test_retry.py``.
"""

from __future__ import annotations

import math
import random
from typing import Any

import attrs

from taskrunner.errors import Retry

__all__ = ["DEFAULT_BACKOFF", "Backoff", "Defer", "GiveUp", "LeavePending", "Step", "next_step"]


def _finite_at_least(low: float) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (low <= value < math.inf)
        ):
            raise ValueError(
                f"Backoff.{attribute.name} must be a finite number >= {low:g}, got {value!r}"
            )

    return check


def _fraction(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"Backoff.{attribute.name} must be between 0 and 1, got {value!r}")


@attrs.frozen(kw_only=True)
class Backoff:
    """Exponential backoff between attempts: the delay before attempt ``n + 1``
    is ``min(maximum, initial * factor ** (n - 1))``, spread by ``± jitter``.

    Raises:
        ValueError: a field is out of range (the message names it).
    """

    initial: float = attrs.field(default=1.0, validator=_finite_at_least(0.0))
    """Seconds before the second attempt (after the first failed)."""
    factor: float = attrs.field(default=2.0, validator=_finite_at_least(1.0))
    """How much longer each further delay is."""
    maximum: float = attrs.field(default=300.0, validator=_finite_at_least(0.0))
    """The longest delay, before jitter."""
    jitter: float = attrs.field(default=0.1, validator=_fraction)
    """A fraction: the delay is spread uniformly over ``delay * (1 ± jitter)``, so
    messages that failed together do not all come back together."""

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based; below 1 counts as 1).

        Args:
            attempt: The attempt that failed.
            rng: Where the jitter is drawn from (the ``random`` module's by default).
        """
        exponent = max(0, attempt - 1)
        try:
            raw = self.initial * self.factor**exponent
        except OverflowError:  # a float power past 1.8e308
            raw = math.inf
        base = min(self.maximum, raw)
        if not self.jitter or not base:
            return base
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return max(0.0, base * (1.0 + spread))


DEFAULT_BACKOFF = Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0.1)
"""The policy of a task registered without ``retry``."""


@attrs.frozen
class GiveUp:
    """The failure path: no attempt is left, or the error is permanent."""

    permanent: bool
    """The error is one of the task's ``permanent`` types (attempts were left)."""


@attrs.frozen
class Defer:
    """Another attempt, ``delay`` seconds from now, through the delayed set."""

    delay: float


@attrs.frozen
class LeavePending:
    """No retry policy: the message stays pending until reclaimed."""


Step = GiveUp | Defer | LeavePending
"""What a failed attempt leads to."""


def next_step(
    *,
    attempt: int,
    attempts: int,
    error: BaseException,
    policy: Backoff | None,
    permanent: tuple[type[BaseException], ...] = (),
    rng: random.Random | None = None,
) -> Step:
    """What happens after attempt ``attempt`` of ``attempts`` failed with ``error`` (pure
    but for the jitter drawn from ``rng``).

    Args:
        attempt: The attempt that failed (1-based, across re-queues).
        attempts: The task's attempts in all (``max(1, max_retry)``).
        error: What the attempt raised (a :class:`~taskrunner.errors.TaskTimeout`
            for a run past its timeout, a :class:`~taskrunner.errors.Retry` for a
            requested retry).
        policy: The task's retry policy; ``None`` leaves the message to reclaim.
        permanent: Exception types after which no attempt is made.
        rng: Where jitter is drawn from.
    """
    if permanent and isinstance(error, permanent) and not isinstance(error, Retry):
        return GiveUp(permanent=True)
    if attempt >= attempts:
        return GiveUp(permanent=False)
    if isinstance(error, Retry):
        if error.delay is not None:
            return Defer(error.delay)
        return Defer((policy or DEFAULT_BACKOFF).delay(attempt, rng))
    if policy is None:
        return LeavePending()
    return Defer(policy.delay(attempt, rng))
