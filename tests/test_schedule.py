"""The delayed-task scheduler's sleep between passes (pure, no I/O).

What a member becomes (``build_move``) is pinned byte for byte with the wire's
documents, in tests/test_wire.py.
"""

from __future__ import annotations

import pytest

from taskrunner._schedules.delayed import sleep_time


@pytest.mark.parametrize(
    ("now", "next_at", "held", "expected"),
    [
        (0, None, False, 5),
        (0, 0.2, False, 0.2),
        (10, 9, False, 0),  # due and not held: new since the pass, go again
        (10, 9, True, 1.0),  # due but its lock is held: look again later, no spinning
        (10, 10.5, True, 0.5),
        (0, 30, False, 5),
    ],
)
def test_scheduler_sleep_time(
    now: float, next_at: float | None, held: bool, expected: float
) -> None:
    assert sleep_time(now, next_at, 5, held=held) == expected
