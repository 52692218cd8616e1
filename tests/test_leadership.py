"""The lease keeper (``_serve.leadership.run``) under MockClock."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from taskrunner._serve import leadership
from taskrunner.backends.memory import MemoryBackend


class _SlowAcquire(MemoryBackend):
    """A store whose first lease acquire answers only after the whole ttl has passed."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self._delay = delay

    async def acquire_lease(self, group: str, owner: str, ttl: float) -> bool:
        acquired = await super().acquire_lease(group, owner, ttl)
        if self._delay:
            await trio.sleep(self._delay)
            self._delay = 0.0
        return acquired


async def test_a_term_that_lapses_before_it_is_used_is_logged(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    ttl = 5.0
    backend = _SlowAcquire(delay=ttl)
    held = leadership.Leadership()
    caplog.set_level(logging.WARNING, logger=leadership.__name__)
    async with trio.open_nursery() as nursery:
        await nursery.start(leadership.run, backend, "g", "me", held)
        await trio.sleep(ttl + 0.1)  # promoted with a validity already past, then again
        assert held.is_leader
        nursery.cancel_scope.cancel()
    lapsed = [r.getMessage() for r in caplog.records if "lapsed" in r.getMessage()]
    assert lapsed == ["leadership of group g lapsed: no renew answered before the term's end"]


async def test_a_healthy_term_logs_no_lapse(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    held = leadership.Leadership()
    caplog.set_level(logging.WARNING, logger=leadership.__name__)
    async with trio.open_nursery() as nursery:
        await nursery.start(leadership.run, MemoryBackend(), "g", "me", held)
        await trio.sleep(30)
        assert held.is_leader
        nursery.cancel_scope.cancel()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
