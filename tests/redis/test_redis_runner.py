"""The runner on RedisBackend against a real server, with short real timings."""

from __future__ import annotations

import fnmatch
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import pytest
import trio

from taskrunner import (
    Delivery,
    Task,
    TaskAlreadyDispatched,
    TaskMaxRetryExceeded,
    TaskRunner,
    TaskRunnerConfig,
    admin,
)
from taskrunner.backends.redis import RedisBackend

FAST = {
    "reclaim_delay": 1.0,
    "block_duration": 0.1,
    "leader_lease_ttl": 1.0,
    "delayed_poll_interval": 0.5,
    "shutdown_grace": 5.0,
}


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url, queue=f"q{uuid.uuid4().hex[:8]}") as b:
        yield b


def make(backend: RedisBackend, host: str, **config: Any) -> TaskRunner:
    return TaskRunner(
        TaskRunnerConfig(consumer_group="g", host=host, **{**FAST, **config}), backend
    )


async def wait_until(predicate: Callable[[], bool], limit: float = 30) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_thousand_tasks_three_runners_exactly_once(redis_url: str) -> None:
    queue = f"q{uuid.uuid4().hex[:8]}"
    backends = [RedisBackend.from_url(redis_url, queue=queue) for _ in range(3)]
    runners = [make(b, f"h{i}", num_workers=8, batch_size=8) for i, b in enumerate(backends)]
    seen: Counter[int] = Counter()
    for runner in runners:

        @runner.task(name="work")
        async def work(payload: dict[str, int]) -> None:
            await trio.sleep(0.001)
            seen[payload["i"]] += 1

    await runners[0].dispatch_many("work", [{"i": i} for i in range(1000)])
    async with trio.open_nursery() as nursery:
        for runner in runners:
            await nursery.start(runner.serve)
        await wait_until(lambda: sum(r.statistics().acked for r in runners) == 1000)
        nursery.cancel_scope.cancel()
    assert sorted(seen) == list(range(1000))
    assert set(seen.values()) == {1}
    assert all(r.statistics().completed > 0 for r in runners), "work was not shared"
    assert await backends[0].length("g") == 0
    assert (await backends[0].group_info("g")).pending == 0
    for b in backends:
        await b.aclose()


async def test_retry_then_handler_then_dead_letter_paths(backend: RedisBackend) -> None:
    handled: list[tuple[Delivery, Exception]] = []
    runner = make(backend, "h", failed_task_handler=lambda d, e: handled.append((d, e)))
    attempts: list[float] = []

    @runner.task(max_retry=2, reservation_timeout=0.5, retry=None)  # retried by reclaim
    async def flaky(payload: None) -> None:
        attempts.append(trio.current_time())
        raise RuntimeError("boom")

    await runner.dispatch("flaky")
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: bool(handled))
        await wait_until(lambda: runner.statistics().acked == 1)
        nursery.cancel_scope.cancel()
    assert len(attempts) == 2
    assert attempts[1] - attempts[0] >= 1.0  # came back after reclaim_delay
    delivery, error = handled[0]
    assert isinstance(error, TaskMaxRetryExceeded)
    assert delivery.delivery_count == 2
    assert (await backend.group_info("g")).pending == 0


async def test_bad_entries_are_dead_lettered_and_the_fetcher_keeps_going(
    backend: RedisBackend,
) -> None:
    runner = make(backend, "h", batch_size=1)
    done: list[int] = []

    @runner.task()
    async def good(payload: int) -> None:
        done.append(payload)

    client = backend.client
    stream = backend.stream_keys("g").stream
    await client.execute("XADD", stream, "*", "other", "x")  # no payload field
    await client.execute("XADD", stream, "*", "payload", "{not json")
    await client.execute("XADD", stream, "*", "payload", "[1, 2, 3]")  # not a task message
    await client.execute("XADD", stream, "*", "payload", b"{" + b" " * (9 << 20) + b"}")  # 9 MiB
    await client.execute("XADD", stream, "*", "payload", '{"task_name":"nope"}')
    await runner.dispatch("good", 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: done == [1] and runner.statistics().acked == 6)
        nursery.cancel_scope.cancel()
    errors = sorted(d.error.split(":")[0] for d in await backend.dead_letters("g"))
    assert errors == ["InvalidTaskPayload"] * 4 + ["TaskNotFound"]
    assert await backend.length("g") == 0


# As the Go library writes it (its struct's field order; the task's unique_for even
# when it is not unique): reservation_timeout in nanoseconds, unique_for in seconds.
# tests/test_wire.py holds the rest of the wire as golden bytes.
GO_MESSAGE = (
    '{"unique":false,"unique_for":60,"unique_key":"","unique_lock_value":"",'
    '"reservation_timeout":30000000000,"task_name":"send_email","payload":{"to":"a@example.com"}}'
)


async def test_a_message_written_by_the_original_library_runs(backend: RedisBackend) -> None:
    runner = make(backend, "h", reclaim_delay=60)
    got: list[object] = []

    @runner.task()
    async def send_email(payload: dict[str, str]) -> None:
        got.append(payload)

    await backend.client.execute(
        "XADD", backend.stream_keys("g").stream, "*", "payload", GO_MESSAGE
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().acked == 1)
        nursery.cancel_scope.cancel()
    assert got == [{"to": "a@example.com"}]

    # ...and what we write has exactly the original's fields.
    await runner.dispatch("send_email", {"to": "a@example.com"})
    ((_, fields),) = await backend.client.execute(
        "XRANGE", backend.stream_keys("g").stream, "-", "+"
    )
    assert fields[0] == b"payload"
    import json

    assert json.loads(fields[1]).keys() == json.loads(GO_MESSAGE).keys()


async def test_crashed_holder_is_reclaimed(redis_url: str) -> None:
    queue = f"q{uuid.uuid4().hex[:8]}"
    first_backend = RedisBackend.from_url(redis_url, queue=queue)
    second_backend = RedisBackend.from_url(redis_url, queue=queue)
    first = make(first_backend, "first", shutdown_grace=0)
    second = make(second_backend, "second")
    runs: list[tuple[str, float]] = []

    async def hang(payload: None) -> None:
        runs.append(("first", trio.current_time()))
        await trio.sleep_forever()

    async def finish(payload: None) -> None:
        runs.append(("second", trio.current_time()))

    first.register(Task(name="job", action=hang, max_retry=2, reservation_timeout=0.3))
    second.register(Task(name="job", action=finish, max_retry=2, reservation_timeout=0.3))
    await first.dispatch("job")
    async with trio.open_nursery() as nursery:
        await nursery.start(first.serve)
        await wait_until(lambda: len(runs) == 1)
        await trio.sleep(1.5)  # longer than reclaim_delay: kept fresh by refreshes
        nursery.cancel_scope.cancel()
    crashed_at = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(second.serve)
        await wait_until(lambda: len(runs) == 2 and second.statistics().acked == 1)
        nursery.cancel_scope.cancel()
    assert runs[1][1] - crashed_at >= 1.0 - 0.05
    assert second.statistics().reclaimed == 1
    await first_backend.aclose()
    await second_backend.aclose()


async def test_graceful_shutdown_acks_in_flight_work(backend: RedisBackend) -> None:
    runner = make(backend, "h", num_workers=4)
    finished = 0

    @runner.task()
    async def work(payload: None) -> None:
        nonlocal finished
        await trio.sleep(0.5)
        finished += 1

    await runner.dispatch_many("work", [None] * 4)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().running == 4)
        nursery.cancel_scope.cancel()
    assert finished == 4
    assert runner.statistics().acked == 4
    assert (await backend.group_info("g")).pending == 0


async def test_delayed_unique_and_stats_on_redis(backend: RedisBackend) -> None:
    runner = make(backend, "h")
    ran: list[float] = []

    @runner.task(unique=True, unique_for=30)
    async def ping(payload: None) -> None:
        ran.append(trio.current_time())
        await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.is_leader, limit=5)
        sent = trio.current_time()
        await runner.dispatch_delayed("ping", None, 0.2)
        await wait_until(lambda: bool(ran))
        assert 0.19 <= ran[0] - sent < 0.6
        await wait_until(lambda: runner.statistics().acked == 1)
        await trio.sleep(0.05)  # the lock is released right after the ack
        await runner.dispatch("ping")
        with pytest.raises(TaskAlreadyDispatched):
            await runner.dispatch("ping")
        await wait_until(lambda: runner.statistics().acked == 2)
        # One bulk-writer flush (about a second after the acks; a sleep of 1.2 s assumed
        # a machine fast enough to keep to it).
        stats = await runner.get_timing_statistics()
        with trio.fail_after(30):
            while "ping" not in stats.per_task_timing:
                await trio.sleep(0.05)
                stats = await runner.get_timing_statistics()
        nursery.cancel_scope.cancel()
    assert stats.per_task_timing["ping"] >= 10
    assert stats.avg_timing >= 10


DOCUMENTED = [
    "taskrunner:{group}:{queue}",  # the default prefix: taskrunner:<group>
    "taskrunner:{group}:{queue}:dead",
    "ring:taskrunner:{group}:metrics:{queue}",
    "taskrunner:{group}:delayed_tasks",
    "taskrunner:{group}:worker_tuning_capacity",
    "taskrunner:{group}:desired_instances",
    "taskrunner:{group}:metrics",
    "taskrunner:{group}:catalog",
    "taskrunner:{group}:delayed_ids",
    "taskrunner:{group}:entry_ids",
    "taskrunner:{group}:cancelled",
    "taskrunner:{group}:result_waiters",
    "taskrunner:{group}:result:*",
    "taskrunner:{group}:notify:*",
    "taskrunner:{group}:schedules",
    "taskrunner:{group}:schedule_specs",
    "taskrunner:leader:*",
    "taskrunner:replication:*",
    "taskrunner:unique:*",
]


async def test_every_key_is_documented_and_flush_leaves_none(backend: RedisBackend) -> None:
    runner = make(
        backend,
        "h",
        min_workers=1,
        max_workers=4,
        desired_wait_time=0.05,
        long_queue_threshold=0.2,
        tuning_cooldown=0,
        target_wait=1.0,
        shutdown_grace=0.2,
    )

    @runner.task(max_retry=1)
    async def work(payload: int) -> None:
        await trio.sleep(0.02)
        if payload == 0:
            raise RuntimeError("to the dead-letter stream")

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: str(p))
    async def unique(payload: int) -> None:
        await trio.sleep(30)  # holds its lock past the snapshot; cancelled at shutdown

    @runner.task(keep_result=60)
    async def kept(payload: int) -> int:
        if payload == 1:
            await trio.sleep(30)  # moved from the delayed set: in the entry index meanwhile
        if payload == 2:
            await trio.sleep(0.5)  # waited for while it runs: its notice is pushed
        return payload

    runner.add_schedule("beat", task="work", every=1.0, payload=1)
    await runner.dispatch_many("work", range(50))
    held = await runner.dispatch("unique", 1)
    await runner.dispatch_delayed("work", 99, 60)  # stays in the delayed set
    done = await runner.dispatch("kept", 2)  # leaves a result and its notice
    waited = await runner.dispatch_delayed("kept", 1, 0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        assert await done.result(timeout=5) == 2
        nursery.start_soon(partial(waited.result, timeout=30))  # registered: result_waiters
        await wait_until(lambda: runner.statistics().completed >= 50)
        await trio.sleep(1.5)  # metrics flushed, tuning published
        keys = await _all_keys(backend)
        nursery.cancel_scope.cancel()
    assert await runner.cancel(held.id), "left pending by the hard stop: a stop request"
    keys = sorted({*keys, *await _all_keys(backend)})

    patterns = [p.format(queue=backend.queue, group="g") for p in DOCUMENTED]
    undocumented = [k for k in keys if not any(fnmatch.fnmatchcase(k, p) for p in patterns)]
    assert undocumented == []
    expected = {
        backend.stream_keys("g").stream,
        backend.stream_keys("g").dead_letter,
        backend.stream_keys("g").claim_delay_ring,
        "taskrunner:g:delayed_tasks",
        "taskrunner:g:metrics",
        "taskrunner:g:worker_tuning_capacity",
        "taskrunner:g:desired_instances",
        "taskrunner:g:catalog",
        "taskrunner:g:schedules",
        "taskrunner:g:schedule_specs",
        "taskrunner:replication:h",
        "taskrunner:unique:unique:1",
        "taskrunner:g:delayed_ids",
        "taskrunner:g:entry_ids",
        "taskrunner:g:cancelled",
        "taskrunner:g:result_waiters",
        f"taskrunner:g:result:{done.id}",
        f"taskrunner:g:notify:{done.id}",
    }
    assert expected <= set(keys), expected - set(keys)
    assert any(k.startswith("taskrunner:leader:") for k in keys)

    with pytest.raises(ValueError, match="confirm=True"):
        await admin.flush(backend, "g")
    deleted = await admin.flush(backend, "g", confirm=True)
    assert backend.stream_keys("g").stream in deleted
    assert await _all_keys(backend) == []


async def _all_keys(backend: RedisBackend) -> list[str]:
    cursor: Any = b"0"
    keys: set[str] = set()
    while True:
        cursor, batch = await backend.client.execute("SCAN", cursor, "COUNT", 1000)
        keys.update(k.decode() for k in batch)
        if cursor == b"0":
            return sorted(keys)


async def test_serving_on_fakeredis_starts_and_stops_cleanly() -> None:
    """A fetcher's blocking read runs in a thread on the redis-py transport; stopping
    serve abandons it mid-read, which must never raise out of serve."""
    import fakeredis

    server = fakeredis.FakeServer()
    for round_ in range(5):
        backend = RedisBackend.from_client(
            fakeredis.FakeRedis(server=server, protocol=2), queue=f"round{round_}"
        )
        await _serve_three(make(backend, "h", block_duration=0.2))
        await backend.aclose()


async def _serve_three(runner: TaskRunner) -> None:
    done: list[int] = []

    @runner.task()
    async def work(payload: int) -> None:
        done.append(payload)

    await runner.dispatch_many("work", [1, 2, 3])
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().acked == 3)
        await trio.sleep(0.05)  # the fetcher is inside a blocking read now
        nursery.cancel_scope.cancel()
    assert sorted(done) == [1, 2, 3]
