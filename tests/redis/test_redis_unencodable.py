"""Issue 10, point 2 on Redis: a value that cannot be sent is refused at the client
boundary, and nothing the backend raises ends ``serve``.

Client tests run on every transport (``client`` fixture: native, redis-py,
fakeredis); runner tests on the native client and redis-py against the real
server, with short real timings.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis
import trio

from taskrunner import TaskRunner, TaskRunnerConfig, _keys
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._errors import RETRYABLE_CODES, error_from_reply
from taskrunner.backends.redis._protocol import RedisClient
from taskrunner.errors import BackendError, InvalidCommandArgument

FAST = {
    "reclaim_delay": 1.0,
    "block_duration": 0.1,
    "leader_lease_ttl": 1.0,
    "delayed_poll_interval": 0.5,
    "shutdown_grace": 5.0,
}
BAD = "\udc80"  # a lone surrogate: valid in JSON ("\\udc80"), no UTF-8 form


# The client boundary -----------------------------------------------------------------


async def test_an_unencodable_argument_is_refused_before_anything_is_sent(
    client: RedisClient,
) -> None:
    with pytest.raises(InvalidCommandArgument) as caught:
        await client.execute("SET", "k", f"value{BAD}")
    error = caught.value
    assert (error.command, error.argument, error.value) == ("SET", 2, "'value\\udc80'")
    assert str(error) == (
        "SET argument 2 is not valid UTF-8 text (surrogates not allowed): 'value\\udc80'"
    )
    assert isinstance(error, BackendError)
    assert (error.maybe_applied, error.retryable) == (False, False)

    with pytest.raises(InvalidCommandArgument, match=r"^HSET argument 1 ") as caught:
        await client.pipeline([("SET", "a", "1"), ("HSET", f"h{BAD}" * 50, "f", "v")])
    assert caught.value.value.endswith("... (100 characters)")  # a long value is cut
    assert await client.execute("EXISTS", "k", "a") == 0  # no command of the pipeline ran

    async with client.dedicated() as dedicated:
        with pytest.raises(InvalidCommandArgument, match=r"^GET argument 1 "):
            await dedicated.execute("GET", BAD)
        assert await dedicated.execute("PING") == b"PONG"  # still usable
    assert await client.execute("SET", "k", "é") == b"OK"  # other text is fine
    assert await client.execute("GET", "k") == "é".encode()


@pytest.mark.parametrize(
    ("reply", "retryable"),
    [
        ("ERR syntax error", False),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", False),
        ("NOGROUP No such key 'k' or consumer group 'g'", False),
        ("LOADING Redis is loading the dataset in memory", True),
        ("READONLY You can't write against a read only replica.", True),
        ("OOM command not allowed when used memory > 'maxmemory'.", True),
        ("BUSY Redis is busy running a script.", True),
        ("NOPERM this user has no permissions to run the 'xack' command", True),
    ],
)
def test_error_replies_say_whether_retrying_can_help(reply: str, retryable: bool) -> None:
    error = error_from_reply(reply)
    assert error.retryable is retryable
    assert (error.code in RETRYABLE_CODES) is retryable


# Nothing the backend raises ends serve ----------------------------------------------


@pytest.fixture(params=["native", "redis-py"])
async def backend(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[RedisBackend]:
    queue = f"q{uuid.uuid4().hex[:8]}"
    if request.param == "native":
        async with RedisBackend.from_url(redis_url, queue=queue) as native:
            yield native
        return
    client = redis.Redis.from_url(redis_url, protocol=2)
    try:
        async with RedisBackend.from_client(client, queue=queue) as threaded:
            yield threaded
    finally:
        client.close()  # the backend leaves a client it was given open


def make(backend: RedisBackend, **config: Any) -> TaskRunner:
    return TaskRunner(
        TaskRunnerConfig(consumer_group="g", host=f"h{uuid.uuid4().hex[:6]}", **{**FAST, **config}),
        backend,
    )


async def wait_until(predicate: Callable[[], bool], limit: float = 30) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_a_unique_key_with_a_lone_surrogate_runs_is_acked_and_serve_lives(
    backend: RedisBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "taskrunner._serve.acker")
    runner = make(backend)
    done: list[object] = []

    @runner.task(unique=True, unique_for=60)
    async def once(payload: object) -> None:
        done.append(payload)

    doc = {
        "task_name": "once",
        "payload": 1,
        "unique": True,
        "unique_for": 60,
        "unique_key": f"once:{BAD}",
        "unique_lock_value": "token",
        "reservation_timeout": 0,
    }
    await backend.add("g", [json.dumps(doc).encode()])  # as the Go library could write it
    await runner.dispatch("once", 2)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().acked == 2)
        await trio.sleep(0.5)
        assert runner.statistics().serving
        nursery.cancel_scope.cancel()  # and the final flush does not fail either

    assert sorted(done) == [1, 2]  # type: ignore[type-var]
    assert (await backend.group_info("g")).pending == 0
    refused = [r.getMessage() for r in caplog.records if "could not release" in r.getMessage()]
    assert len(refused) == 1
    assert "EVALSHA argument 3 is not valid UTF-8 text" in refused[0]


async def test_a_delayed_unique_member_with_an_unencodable_key_does_not_block_the_others(
    backend: RedisBackend,
) -> None:
    # A stream read by two groups: entries must not be deleted on ack (SharedStreamError).
    backend = RedisBackend(
        backend.client, queue=backend.queue, delete_on_ack=False, owns_client=False
    )
    runner = make(backend)
    done: list[object] = []

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: str(p))
    async def once(payload: object) -> None:
        done.append(payload)

    # Written by hand (or by another producer): the key is already in the member.
    member = json.dumps(
        {"id": "m1", "task": "once", "time": 0, "payload": "x", "unique_key": f"k{BAD}"}
    ).encode()
    await backend.add_delayed("g", member, backend.now() - 1)
    await runner.dispatch_delayed("once", "fine", 0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().acked == 2)
        assert runner.statistics().serving
        nursery.cancel_scope.cancel()

    assert done == ["fine"]
    (dead,) = await backend.dead_letters("g")
    assert dead.payload == member  # moved as it was, for the failure path to report
    assert dead.error.startswith("InvalidTaskPayload")
    assert await backend.next_delayed_at("g") is None


async def test_a_refused_metrics_write_is_dropped_not_counted_again(
    backend: RedisBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "taskrunner._serve.bulk_writer")
    runner = make(backend)
    key = _keys.metrics("g")
    # A field the Go library (or an operator) left holding something that is no number.
    await backend.client.execute("HSET", key, "job_count", "not a number")

    @runner.task()
    async def job(payload: object) -> None:
        await trio.sleep(0.05)

    for _ in range(3):
        await runner.dispatch("job")
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().acked == 3)
        await trio.sleep(3.5)  # three more flushes
        nursery.cancel_scope.cancel()

    fields = await backend.read_metrics("g")
    # The sum landed once (the pipeline is not atomic); restoring the batch would have
    # added it again at every flush since.
    assert 150 <= fields["job_sum"] < 300, fields
    assert "job_count" not in fields  # still not a number: nothing can fix that here
    refused = [r.getMessage() for r in caplog.records if "flush refused" in r.getMessage()]
    assert len(refused) == 1, refused
    assert "hash value is not an integer" in refused[0]


async def test_names_on_the_server_that_are_not_utf8_do_not_stop_the_leader(
    backend: RedisBackend,
) -> None:
    # A stream read by two groups: entries must not be deleted on ack (SharedStreamError).
    backend = RedisBackend(
        backend.client, queue=backend.queue, delete_on_ack=False, owns_client=False
    )
    runner = make(backend)
    done: list[object] = []

    @runner.task()
    async def job(payload: object) -> None:
        done.append(payload)

    # Another client's consumer, and another group on the same stream, named in bytes
    # that are not UTF-8: consumer cleanup (leader only) reads both names.
    stream = backend.stream_keys("g").stream
    await backend.client.execute("XGROUP", "CREATE", stream, "g", "0", "MKSTREAM")
    await backend.client.execute("XGROUP", "CREATECONSUMER", stream, "g", b"odd\xff")
    await backend.client.execute("XGROUP", "CREATE", stream, b"other\xfe", "0")
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.is_leader)
        await runner.dispatch("job", 1)
        await wait_until(lambda: done == [1])
        await trio.sleep(0.5)  # the first cleanup pass ran at the start of the term
        assert runner.statistics().serving
        nursery.cancel_scope.cancel()

    info = await backend.group_info("g")
    assert "odd\\xff" in [c.name for c in info.consumers]  # shown escaped, not refused
    metrics = await backend.get_metrics("g")
    assert sorted(g.name for g in metrics.groups) == ["g", "other\\xfe"]
