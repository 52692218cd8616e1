"""Result waiters on a real server: a finish pushes a task's notice only while someone
waits for it, and no waiter misses a result whenever the finish comes.

The waiter's steps are ``lua/wait.lua`` (read the result, else register, in one
step) and then ``BLMOVE`` of the notice; each test puts the finish at one place
among them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from taskrunner import _keys
from taskrunner.backends import Outcome
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._tracking import WAIT

GROUP = "g"
DOCUMENT = b'{"state":"succeeded","task":"t","value":1,"attempts":1,"finished_at":1.0}'


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url) as b:
        yield b


async def _finish_one(backend: RedisBackend, *task_ids: str) -> list[str]:
    """Add one entry per task, read them, and finish them all with kept results."""
    ids = await backend.add(GROUP, [b'{"task_name":"t"}'] * len(task_ids))
    entries = await backend.read(GROUP, "c", len(ids), 0)
    assert [e.id for e in entries] == ids
    outcomes = [
        Outcome(entry_id=e, task_id=t, document=DOCUMENT + t.encode(), keep=60.0, notify=60.0)
        for e, t in zip(ids, task_ids, strict=True)
    ]
    assert await backend.finish(GROUP, ids, outcomes) == len(ids)
    return ids


async def _exists(backend: RedisBackend, key: str) -> bool:
    return bool(await backend.client.execute("EXISTS", key))


WAITERS = _keys.result_waiters(GROUP)


async def test_a_result_nobody_waits_for_is_one_key(backend: RedisBackend) -> None:
    await _finish_one(backend, "a")
    assert await backend.client.execute("GET", _keys.result(GROUP, "a")) == DOCUMENT + b"a"
    assert not await _exists(backend, _keys.notify(GROUP, "a"))
    assert not await _exists(backend, WAITERS)
    # A waiter that comes after the finish reads the result, and registers nothing.
    assert await backend.wait_result(GROUP, "a", 5.0) == DOCUMENT + b"a"
    assert not await _exists(backend, WAITERS)


async def test_a_blocked_waiter_is_woken_by_the_finish(backend: RedisBackend) -> None:
    got: list[bytes | None] = []
    async with trio.open_nursery() as nursery:

        async def wait() -> None:
            got.append(await backend.wait_result(GROUP, "a", 10.0))

        nursery.start_soon(wait)
        with trio.fail_after(5):
            while await backend.client.execute("ZSCORE", WAITERS, "a") is None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        await trio.sleep(0.1)  # blocked in BLMOVE by now
        started = trio.current_time()
        await _finish_one(backend, "a")
    assert got == [DOCUMENT + b"a"]
    assert trio.current_time() - started < 2, "woken by the notice, not at the slice's end"
    assert await _exists(backend, _keys.notify(GROUP, "a"))
    assert not await _exists(backend, WAITERS), "its member ends with the finish"


async def test_a_finish_between_registering_and_blocking_is_not_missed(
    backend: RedisBackend,
) -> None:
    key, notice = _keys.result(GROUP, "a"), _keys.notify(GROUP, "a")
    assert await WAIT(backend.client, [key, WAITERS], ["a", 10_000]) is None  # registered
    await _finish_one(backend, "a", "b")  # before the waiter blocks; "b" has no waiter
    connection = backend.client.dedicated()
    try:
        reply = await connection.execute(
            "BLMOVE", notice, notice, "RIGHT", "LEFT", "0.5", reply_timeout=5
        )
    finally:
        await connection.aclose()
    assert reply == DOCUMENT + b"a"
    assert not await _exists(backend, _keys.notify(GROUP, "b"))


async def test_a_registration_that_ran_out_pushes_no_notice(backend: RedisBackend) -> None:
    key = _keys.result(GROUP, "a")
    assert await WAIT(backend.client, [key, WAITERS], ["a", 1]) is None  # 1 ms
    await trio.sleep(0.05)
    await _finish_one(backend, "a")
    assert not await _exists(backend, _keys.notify(GROUP, "a"))
    assert not await _exists(backend, WAITERS), "dropped by the finish that found it over"


async def test_two_waiters_keep_the_later_end(backend: RedisBackend) -> None:
    key = _keys.result(GROUP, "a")
    assert await WAIT(backend.client, [key, WAITERS], ["a", 60_000]) is None
    assert await WAIT(backend.client, [key, WAITERS], ["a", 1]) is None  # a shorter one
    await trio.sleep(0.05)
    await _finish_one(backend, "a")
    assert await _exists(backend, _keys.notify(GROUP, "a")), "the first still waits"


async def test_a_wait_that_times_out_returns_none_and_its_registration_ends(
    backend: RedisBackend,
) -> None:
    assert await backend.wait_result(GROUP, "a", 0.2) is None
    left = await backend.client.execute("ZSCORE", WAITERS, "a")
    assert left is not None  # until the slice's end and the margin, then dropped
    assert await backend.wait_result(GROUP, "a", 0) is None  # no wait: no registration
