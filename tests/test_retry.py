"""Retry policies and the step after a failed attempt (pure, no I/O): tables."""

from __future__ import annotations

import math
import random

import pytest

from taskrunner import Backoff, Retry, TaskTimeout
from taskrunner._execution.retry import DEFAULT_BACKOFF, Defer, GiveUp, LeavePending, next_step


class Edge(random.Random):
    """Jitter that always draws one end of its range."""

    def __init__(self, top: bool) -> None:
        super().__init__(0)
        self.top = top

    def uniform(self, a: float, b: float) -> float:
        return b if self.top else a


@pytest.mark.parametrize(
    ("policy", "attempt", "delay"),
    [
        (Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0), 1, 1.0),
        (Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0), 2, 2.0),
        (Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0), 5, 16.0),
        (Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0), 9, 256.0),
        (Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0), 10, 300.0),  # 512, capped
        (Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0), 5000, 300.0),  # no overflow
        (Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0), 0, 1.0),  # below 1: as 1
        (Backoff(initial=0.5, factor=3.0, maximum=10.0, jitter=0), 3, 4.5),
        (Backoff(initial=5.0, factor=1.0, maximum=10.0, jitter=0), 7, 5.0),  # constant
        (Backoff(initial=0.0, factor=2.0, maximum=10.0, jitter=0.5), 3, 0.0),  # no jitter on 0
    ],
)
def test_backoff_delay_without_jitter(policy: Backoff, attempt: int, delay: float) -> None:
    assert policy.delay(attempt, Edge(top=True)) == delay


@pytest.mark.parametrize(
    ("attempt", "low", "high"),
    [(1, 0.9, 1.1), (3, 3.6, 4.4), (12, 270.0, 330.0)],  # the cap before the jitter
)
def test_backoff_jitter_spreads_by_the_fraction(attempt: int, low: float, high: float) -> None:
    assert DEFAULT_BACKOFF.delay(attempt, Edge(top=False)) == pytest.approx(low)
    assert DEFAULT_BACKOFF.delay(attempt, Edge(top=True)) == pytest.approx(high)
    seeded = [DEFAULT_BACKOFF.delay(attempt, random.Random(7)) for _ in range(2)]
    assert seeded[0] == seeded[1], "a seeded generator gives the same jitter"
    assert low <= seeded[0] <= high


def test_the_default_policy_is_the_issues() -> None:
    assert (
        Backoff() == DEFAULT_BACKOFF == Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0.1)
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("initial", -1.0, "Backoff.initial must be a finite number >= 0, got -1.0"),
        ("initial", math.inf, "Backoff.initial must be a finite number >= 0, got inf"),
        ("factor", 0.5, "Backoff.factor must be a finite number >= 1, got 0.5"),
        ("maximum", "10", "Backoff.maximum must be a finite number >= 0, got '10'"),
        ("jitter", 1.5, "Backoff.jitter must be between 0 and 1, got 1.5"),
        ("jitter", True, "Backoff.jitter must be between 0 and 1, got True"),
    ],
)
def test_backoff_refuses_bad_fields(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(") + "$"):
        Backoff(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("delay", [-1.0, math.nan, math.inf, "5", True])
def test_retry_refuses_bad_delays(delay: object) -> None:
    with pytest.raises(ValueError, match=r"^Retry\.delay must be a finite number of seconds >= 0"):
        Retry(delay=delay)  # type: ignore[arg-type]


FLAT = Backoff(initial=2.0, factor=1.0, maximum=2.0, jitter=0)


@pytest.mark.parametrize(
    ("attempt", "attempts", "error", "policy", "permanent", "step"),
    [
        (1, 3, RuntimeError(), FLAT, (), Defer(2.0)),
        (2, 3, RuntimeError(), FLAT, (), Defer(2.0)),
        (3, 3, RuntimeError(), FLAT, (), GiveUp(permanent=False)),  # the last attempt
        (4, 3, RuntimeError(), FLAT, (), GiveUp(permanent=False)),
        (1, 1, RuntimeError(), FLAT, (), GiveUp(permanent=False)),  # max_retry=1: no retry
        (1, 3, RuntimeError(), None, (), LeavePending()),  # retry=None: reclaim
        (3, 3, RuntimeError(), None, (), GiveUp(permanent=False)),
        (1, 3, ValueError(), FLAT, (ValueError,), GiveUp(permanent=True)),
        (1, 3, KeyError(), FLAT, (LookupError,), GiveUp(permanent=True)),  # subclasses too
        (1, 3, RuntimeError(), FLAT, (ValueError,), Defer(2.0)),
        (1, 3, Retry(delay=30.0), FLAT, (), Defer(30.0)),
        (1, 3, Retry(delay=0.0), None, (), Defer(0.0)),  # a requested retry needs no policy
        (1, 3, Retry(), FLAT, (), Defer(2.0)),  # no delay: the policy's
        (2, 3, Retry(), None, (), Defer(DEFAULT_BACKOFF.delay(2, Edge(top=True)))),  # default
        (3, 3, Retry(delay=1.0), FLAT, (), GiveUp(permanent=False)),  # it counts as an attempt
        (1, 3, Retry(delay=1.0), FLAT, (Exception,), Defer(1.0)),  # never "permanent"
        (1, 3, TaskTimeout("t", "1-1", 5.0), FLAT, (), Defer(2.0)),  # a timeout is a failure
        (1, 3, TaskTimeout("t", "1-1", 5.0), FLAT, (TaskTimeout,), GiveUp(permanent=True)),
    ],
)
def test_next_step(
    attempt: int,
    attempts: int,
    error: BaseException,
    policy: Backoff | None,
    permanent: tuple[type[BaseException], ...],
    step: object,
) -> None:
    got = next_step(
        attempt=attempt,
        attempts=attempts,
        error=error,
        policy=policy,
        permanent=permanent,
        rng=Edge(top=True),
    )
    assert got == step
