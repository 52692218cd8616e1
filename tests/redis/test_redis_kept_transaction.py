"""A finish of kept results written as one MULTI/EXEC block, with no script, on a real
server: what it writes, when the script still runs, and that waiters are still woken.

See ``taskrunner/backends/redis/_kept_results.py`` for the ordering that keeps the
waiters safe.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis
import trio

from taskrunner import _keys
from taskrunner.backends import Outcome
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._errors import ResponseError
from taskrunner.backends.redis._tracking import WAIT

GROUP = "g"
DOCUMENT = b'{"state":"succeeded","task":"t","value":1,"attempts":1,"finished_at":1.0}'
WAITERS = _keys.result_waiters(GROUP)


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url) as b:
        yield b


async def _delivered(backend: RedisBackend, n: int) -> list[str]:
    ids = await backend.add(GROUP, [b'{"task_name":"t"}'] * n)
    entries = await backend.read(GROUP, "c", n, 0)
    assert [e.id for e in entries] == ids
    return ids


async def _calls(backend: RedisBackend) -> dict[str, int]:
    """Each command's calls so far that did not fail (``INFO commandstats``; a
    ``NOSCRIPT`` reply counts as a failed call), and ``scripts``: the scripts run."""
    text = await backend.client.execute("INFO", "commandstats")
    calls = {}
    for line in bytes(text).decode().splitlines():
        if line.startswith("cmdstat_"):
            name, _, fields = line.removeprefix("cmdstat_").partition(":")
            stats = dict(item.split("=") for item in fields.split(","))
            calls[name] = int(stats["calls"]) - int(stats.get("failed_calls", 0))
    calls["scripts"] = calls.get("evalsha", 0) + calls.get("eval", 0)
    return calls


def _kept(ids: list[str], keep: float = 60.0) -> list[Outcome]:
    return [
        Outcome(entry_id=e, task_id=e, document=DOCUMENT + e.encode(), keep=keep, notify=60.0)
        for e in ids
    ]


async def test_kept_results_nobody_waits_for_are_written_without_a_script(
    backend: RedisBackend,
) -> None:
    ids = await _delivered(backend, 3)
    before = await _calls(backend)
    assert await backend.finish(GROUP, ids, _kept(ids, keep=30.0)) == 3
    after = await _calls(backend)
    ran = {name: after[name] - before.get(name, 0) for name in after}
    assert ran["scripts"] == 0
    assert (ran["multi"], ran["exec"], ran["set"]) == (1, 1, 3)
    client = backend.client
    for entry_id in ids:
        key = _keys.result(GROUP, entry_id)
        assert await client.execute("GET", key) == DOCUMENT + entry_id.encode()
        assert 29_000 < await client.execute("PTTL", key) <= 30_000
        assert not await client.execute("EXISTS", _keys.notify(GROUP, entry_id))
    stream = backend.stream_keys(GROUP, None).stream
    pending = await client.execute("XPENDING", stream, GROUP)
    assert pending[0] == 0, "acknowledged"
    assert await client.execute("XLEN", stream) == 0, "deleted on ack"


async def test_a_cancelled_run_ends_its_stop_request_in_the_transaction(
    backend: RedisBackend,
) -> None:
    (entry_id,) = await _delivered(backend, 1)
    stops = _keys.cancelled(GROUP)
    await backend.client.execute("ZADD", stops, 1, entry_id)
    before = await _calls(backend)
    outcome = Outcome(entry_id=entry_id, task_id=entry_id, cancelled=True)
    assert await backend.finish(GROUP, [entry_id], [outcome]) == 1
    assert (await _calls(backend))["scripts"] == before["scripts"]
    assert await backend.client.execute("ZSCORE", stops, entry_id) is None


async def test_a_waiter_registered_before_the_transaction_is_woken(
    backend: RedisBackend,
) -> None:
    (entry_id,) = await _delivered(backend, 1)
    key = _keys.result(GROUP, entry_id)
    got: list[bytes | None] = []
    async with trio.open_nursery() as nursery:

        async def wait() -> None:
            got.append(await backend.wait_result(GROUP, entry_id, 10.0))

        nursery.start_soon(wait)
        with trio.fail_after(5):
            while await backend.client.execute("ZSCORE", WAITERS, entry_id) is None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        await trio.sleep(0.1)  # blocked by now
        started = trio.current_time()
        before = await _calls(backend)
        assert await backend.finish(GROUP, [entry_id], _kept([entry_id])) == 1
        after = await _calls(backend)
    assert got == [DOCUMENT + entry_id.encode()]
    assert trio.current_time() - started < 2, "woken by the notice, not at the slice's end"
    assert after["scripts"] - before["scripts"] == 1, "the notices' script"
    assert await backend.client.execute("GET", key) == DOCUMENT + entry_id.encode()
    assert not await backend.client.execute("EXISTS", WAITERS), "its member ends"


async def test_a_waiter_after_the_transaction_reads_the_document_and_registers_nothing(
    backend: RedisBackend,
) -> None:
    (entry_id,) = await _delivered(backend, 1)
    await backend.finish(GROUP, [entry_id], _kept([entry_id]))
    key = _keys.result(GROUP, entry_id)
    assert await WAIT(backend.client, [key, WAITERS], [entry_id, 10_000]) == (
        DOCUMENT + entry_id.encode()
    )
    assert not await backend.client.execute("EXISTS", WAITERS)


async def test_an_indexed_outcome_goes_by_the_script(backend: RedisBackend) -> None:
    """The entry index's mapping ends only if it still names this entry: a check the
    transaction cannot make, so the whole batch goes by lua/finish.lua."""
    ids = await _delivered(backend, 2)
    index = _keys.entry_index(GROUP)
    await backend.client.execute("HSET", index, "mine", ids[0], "moved", "9-9")
    outcomes = [
        Outcome(entry_id=ids[0], task_id="mine", document=DOCUMENT, keep=60.0, notify=60.0,
                indexed=True),
        Outcome(entry_id=ids[1], task_id="moved", document=DOCUMENT, keep=60.0, notify=60.0,
                indexed=True),
    ]  # fmt: skip
    before = await _calls(backend)
    assert await backend.finish(GROUP, ids, outcomes) == 2
    after = await _calls(backend)
    assert after["scripts"] - before["scripts"] == 1
    assert after.get("exec", 0) == before.get("exec", 0)
    assert await backend.client.execute("HGET", index, "mine") is None
    assert await backend.client.execute("HGET", index, "moved") == b"9-9", "retried elsewhere"


async def test_a_refused_transaction_raises_the_command_s_error(backend: RedisBackend) -> None:
    (entry_id,) = await _delivered(backend, 1)
    # The waiters' key holding a string: the ZMSCORE inside EXEC fails there (an error
    # in EXEC's reply, not in the pipeline's), and the finish must say so.
    await backend.client.execute("SET", WAITERS, "not a sorted set")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await backend.finish(GROUP, [entry_id], _kept([entry_id]))


async def test_a_redis_py_client_finishes_by_the_script(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url, protocol=2)
    try:
        async with RedisBackend.from_client(sync) as backend:
            ids = await _delivered(backend, 2)
            before = await _calls(backend)
            assert await backend.finish(GROUP, ids, _kept(ids)) == 2
            after = await _calls(backend)
            assert after["scripts"] - before["scripts"] == 1
            assert after.get("multi", 0) == before.get("multi", 0)
            for entry_id in ids:
                key = _keys.result(GROUP, entry_id)
                assert await backend.client.execute("GET", key) == DOCUMENT + entry_id.encode()
    finally:
        sync.close()
