"""A fetcher's slot reservation (pure, no I/O)."""

from __future__ import annotations

import pytest

from taskrunner._flow.slots import SlotRequest, slot_request


@pytest.mark.parametrize(
    ("capacity", "fetchers", "batch_size", "busy", "expected"),
    [
        (32, 1, 32, False, SlotRequest(most=32, at_least=1)),  # the defaults
        (32, 1, 32, True, SlotRequest(most=32, at_least=8)),  # busy: wait for a quarter
        (100, 1, 32, False, SlotRequest(most=32, at_least=1)),  # never above batch_size
        (10, 3, 32, False, SlotRequest(most=4, at_least=1)),  # a fair share, rounded up
        (10, 3, 32, True, SlotRequest(most=4, at_least=1)),
        (1, 4, 32, False, SlotRequest(most=1, at_least=1)),  # at least one slot each
        (3, 1, 32, True, SlotRequest(most=3, at_least=1)),  # a quarter of 3 is still 1
        (64, 2, 16, True, SlotRequest(most=16, at_least=4)),
    ],
)
def test_slot_request(
    capacity: int, fetchers: int, batch_size: int, busy: bool, expected: SlotRequest
) -> None:
    request = slot_request(capacity=capacity, fetchers=fetchers, batch_size=batch_size, busy=busy)
    assert request == expected
