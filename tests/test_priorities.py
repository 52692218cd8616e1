"""Table tests of the read plans of several queues (taskrunner._flow.priorities) and the
waits of flow control (taskrunner._flow.limits)."""

from __future__ import annotations

from collections import Counter

import pytest

from taskrunner import RateLimit
from taskrunner._flow.limits import RATE_MARGIN, SLOT_WAIT, holder_id, rate_wait, slot_wait
from taskrunner._flow.priorities import ReadPlan, WeightedShares, read_plan

QUEUES = ("critical", "default", "low")


@pytest.mark.parametrize(
    ("slots", "paused", "expected"),
    [
        (10, (), ReadPlan(queues=QUEUES, quotas=(0, 0, 0))),
        (1, (), ReadPlan(queues=QUEUES, quotas=(0, 0, 0))),
        (10, ("critical",), ReadPlan(queues=("default", "low"), quotas=(0, 0))),
        (10, ("default",), ReadPlan(queues=("critical", "low"), quotas=(0, 0))),
        (10, QUEUES, ReadPlan(queues=(), quotas=())),
    ],
)
def test_strict_order_reads_in_priority_order_with_no_quotas(
    slots: int, paused: tuple[str, ...], expected: ReadPlan
) -> None:
    assert read_plan(QUEUES, slots, paused, None) == expected


@pytest.mark.parametrize(
    ("weights", "slots", "reads", "expected"),
    [
        # one slot at a time (a full pool): each queue's share is its weight's
        ((6, 3, 1), 1, 10, {"critical": 6, "default": 3, "low": 1}),
        ((6, 3, 1), 1, 1000, {"critical": 600, "default": 300, "low": 100}),
        # ten slots a read: the same shares within every read
        ((6, 3, 1), 10, 1, {"critical": 6, "default": 3, "low": 1}),
        ((6, 3, 1), 3, 10, {"critical": 18, "default": 9, "low": 3}),
        ((1, 1, 1), 1, 3, {"critical": 1, "default": 1, "low": 1}),
        ((100, 1, 1), 1, 102, {"critical": 100, "default": 1, "low": 1}),
    ],
)
def test_weighted_shares_follow_the_weights(
    weights: tuple[int, int, int], slots: int, reads: int, expected: dict[str, int]
) -> None:
    shares = WeightedShares(QUEUES, weights)
    got: Counter[str] = Counter()
    for _ in range(reads):
        plan = read_plan(QUEUES, slots, (), shares)
        assert plan.queues == QUEUES, "the rest is filled heaviest first"
        assert sum(plan.quotas) == slots
        got.update(dict(zip(plan.queues, plan.quotas, strict=True)))
    assert got == expected


def test_no_weighted_queue_starves() -> None:
    """Every queue gets a turn within one round of the weights (their sum)."""
    shares = WeightedShares(QUEUES, (100, 10, 1))
    turns = [next(q for q, n in shares.deal(1, QUEUES).items() if n) for _ in range(111 * 3)]
    for queue in QUEUES:
        positions = [i for i, q in enumerate(turns) if q == queue]
        gaps = [b - a for a, b in zip([-1, *positions], positions, strict=False)]
        assert max(gaps) <= 111, (queue, max(gaps))


def test_a_paused_weighted_queue_gives_its_share_to_the_others() -> None:
    shares = WeightedShares(QUEUES, (6, 3, 1))
    got: Counter[str] = Counter()
    for _ in range(40):
        plan = read_plan(QUEUES, 1, ("critical",), shares)
        assert "critical" not in plan.queues
        got.update(dict(zip(plan.queues, plan.quotas, strict=True)))
    assert got == {"default": 30, "low": 10}


def test_one_weight_per_queue() -> None:
    with pytest.raises(ValueError, match="one weight per queue"):
        WeightedShares(QUEUES, (1, 2))


@pytest.mark.parametrize(
    ("jitter", "expected"),
    [
        (0.0, SLOT_WAIT * 0.5),
        (0.5, SLOT_WAIT),
        (0.999, SLOT_WAIT * 1.499),
        (-1.0, SLOT_WAIT * 0.5),  # clamped
        (7.0, SLOT_WAIT * 1.5),
    ],
)
def test_slot_wait_is_spread_around_half_a_second(jitter: float, expected: float) -> None:
    assert slot_wait(jitter) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [(0.0, RATE_MARGIN), (0.25, 0.25 + RATE_MARGIN), (-0.5, RATE_MARGIN)],
)
def test_rate_wait_is_the_turn_and_never_early(retry_after: float, expected: float) -> None:
    assert rate_wait(retry_after) == pytest.approx(expected)


def test_holder_ids_are_unique_per_delivery_and_queue() -> None:
    ids = {
        holder_id("i", queue, entry, count)
        for queue in (None, "low")
        for entry in ("1-1", "1-2")
        for count in (1, 2)
    }
    assert len(ids) == 8


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0,), {}, "RateLimit.limit must be an integer >= 1, got 0"),
        ((True,), {}, "RateLimit.limit must be an integer >= 1, got True"),
        ((2.5,), {}, "RateLimit.limit must be an integer >= 1, got 2.5"),
        ((1,), {"per": 0}, "RateLimit.per must be a finite number of seconds > 0, got 0"),
        ((1,), {"per": float("inf")}, "RateLimit.per must be a finite number of seconds > 0"),
        ((1,), {"per": "1"}, "RateLimit.per must be a finite number of seconds > 0, got '1'"),
    ],
)
def test_rate_limit_errors_name_the_field_and_the_value(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=r"^RateLimit\.") as error:
        RateLimit(*args, **kwargs)  # type: ignore[arg-type]
    assert str(error.value).startswith(message)


def test_rate_limit_interval() -> None:
    assert RateLimit(100, per=1.0).interval == pytest.approx(0.01)
    assert RateLimit(10, per=60.0).interval == pytest.approx(6.0)
