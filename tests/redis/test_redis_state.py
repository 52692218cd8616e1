"""RedisState (the SharedState half of the Redis backend) on every transport.

The shared-state contract checks run against the :class:`RedisState` half of
:class:`RedisBackend` (the two ``move_delayed`` checks also read the stream,
through its queue half). The direct tests pin what the contract cannot see: the
key names and TTLs on the server, the scripts surviving ``SCRIPT FLUSH``, the
integer bytes of the metrics hash next to what a Go writer (or 0.1.0) leaves
there, and which calls reach Redis.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import pytest
import trio

from taskrunner._wire import task_fields, task_timing
from taskrunner.backends import DelayedMove, TimingIncrement
from taskrunner.backends.redis._backend import RedisBackend
from taskrunner.backends.redis._connection import CommandArg, Reply
from taskrunner.backends.redis._errors import WrongTypeError
from taskrunner.backends.redis._protocol import DedicatedRedisConnection, RedisClient
from taskrunner.backends.redis._state import ADD_TIMINGS, RedisState, _ms
from taskrunner.testing import CONTRACT_CHECKS, ContractCheck, contract_parametrize

STREAM = "taskrunner:tasks"
METRICS = "taskrunner:g:metrics"
T = task_fields("t")

STATE_CHECKS = {
    "check_now_advances",
    "check_lease_ownership",
    "check_lease_expiry",
    "check_delayed_set",
    "check_move_delayed",
    "check_move_delayed_unique_lock",
    "check_metrics_hash",
    "check_heartbeats",
    "check_locks",
    "check_tuning",
    "check_desired_instances",
}


def _fields(flat: Sequence[Any]) -> dict[bytes, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


class _Recorder:
    """A RedisClient that passes every call on and records it (the real protocol,
    not a mock), to see which commands and round trips reach the server."""

    def __init__(self, inner: RedisClient) -> None:
        self.inner = inner
        self.calls: list[tuple[str, list[tuple[CommandArg, ...]]]] = []

    async def execute(self, *args: CommandArg) -> Reply:
        self.calls.append(("execute", [args]))
        return await self.inner.execute(*args)

    async def pipeline(
        self, commands: Sequence[Sequence[CommandArg]], *, raise_on_error: bool = True
    ) -> list[Reply]:
        self.calls.append(("pipeline", [tuple(c) for c in commands]))
        return await self.inner.pipeline(commands, raise_on_error=raise_on_error)

    def dedicated(self) -> DedicatedRedisConnection:
        return self.inner.dedicated()

    async def masters(self) -> list[RedisClient]:
        return [self]  # one server: its SCAN calls are recorded too

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None

    def command_names(self) -> list[str]:
        return [str(command[0]) for _, commands in self.calls for command in commands]


async def _all_keys(client: RedisClient) -> set[str]:
    keys: set[str] = set()
    cursor: bytes | int = 0
    while True:
        cursor, batch = await client.execute("SCAN", cursor, "COUNT", 1000)
        keys.update(k.decode() for k in batch)
        if int(cursor) == 0:
            return keys


def _leader_key(group: str) -> str:
    digest = hashlib.sha1(group.encode()).digest()
    return "taskrunner:leader:" + base64.b32encode(digest).decode()


# Contract -------------------------------------------------------------------


def test_state_check_names_exist() -> None:
    assert STATE_CHECKS <= {check.__name__ for check in CONTRACT_CHECKS}


@contract_parametrize(
    exclude=[c.__name__ for c in CONTRACT_CHECKS if c.__name__ not in STATE_CHECKS]
)
async def test_contract(check: ContractCheck, client: RedisClient) -> None:
    backend = RedisBackend(client, prefix="taskrunner", owns_client=False)
    assert backend.stream_keys("any").stream == STREAM
    try:
        await check(backend)
    finally:
        await backend.aclose()


# Key names and expiries ----------------------------------------------------


async def test_key_names_are_the_documented_ones(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    expected: set[str] = set()

    async def expect(*keys: str) -> None:
        expected.update(keys)
        assert await _all_keys(client) == expected

    await state.acquire_lease("g", "me", 5.0)
    await expect(_leader_key("g"))
    assert _leader_key("g") == "taskrunner:leader:KT6ROEJAT6Y4A6AQSI3UCMWGNZ46EJA3"
    await state.add_delayed("g", b"m1", 1.0)
    await state.add_delayed("g", b"m2", 2.0)
    await expect("taskrunner:g:delayed_tasks")
    await state.increment_metrics("g", [TimingIncrement(fields=T, micros=1500, count=1)])
    await expect("taskrunner:g:metrics")
    await state.heartbeat("host-1", "i1", 5.0)
    await expect("taskrunner:replication:host-1")
    await state.acquire_lock("taskrunner:unique:t:k", "tok", 5.0)
    await expect("taskrunner:unique:t:k")
    await state.publish_tuning("g", 4, 5.0)
    await expect("taskrunner:g:worker_tuning_capacity")
    await state.publish_desired_instances("g", 3, 5.0)
    await expect("taskrunner:g:desired_instances")
    lock = "taskrunner:unique:t:other"
    move = DelayedMove(member=b"m1", message=b"p", lock_key=lock, lock_token="x", lock_ttl=5.0)
    assert await state.move_delayed("g", [move]) == 1
    await expect(STREAM, lock)
    assert await state.move_delayed("g", [DelayedMove(member=b"m2", message=b"q")]) == 1
    expected.discard("taskrunner:g:delayed_tasks")  # an empty ZSET is no key
    await expect()
    types = {k: (await client.execute("TYPE", k)).decode() for k in sorted(expected)}
    assert types == {
        _leader_key("g"): "string",
        "taskrunner:g:metrics": "hash",
        "taskrunner:g:worker_tuning_capacity": "string",
        "taskrunner:g:desired_instances": "string",
        "taskrunner:replication:host-1": "string",
        "taskrunner:tasks": "stream",
        "taskrunner:unique:t:k": "string",
        lock: "string",
    }
    await state.resign_lease("g", "me")
    await state.remove_heartbeat("host-1", "i1")
    await state.release_lock("taskrunner:unique:t:k", "tok")
    expected -= {_leader_key("g"), "taskrunner:replication:host-1", "taskrunner:unique:t:k"}
    await expect()


async def test_values_and_ttls(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)

    async def pttl(key: str) -> int:
        value: int = await client.execute("PTTL", key)
        return value

    await state.acquire_lease("g", "owner-1", 5.0)
    assert await client.execute("GET", _leader_key("g")) == b"owner-1"
    assert 4000 < await pttl(_leader_key("g")) <= 5000
    await client.execute("PEXPIRE", _leader_key("g"), 1000)
    assert await state.renew_lease("g", "owner-1", 7.5)
    assert 6500 < await pttl(_leader_key("g")) <= 7500

    await state.heartbeat("h", "instance-1", 15.0)
    assert await client.execute("GET", "taskrunner:replication:h") == b"instance-1"
    assert 14000 < await pttl("taskrunner:replication:h") <= 15000

    await state.acquire_lock("taskrunner:unique:t", "token-1", 3.0)
    assert await client.execute("GET", "taskrunner:unique:t") == b"token-1"
    assert 2000 < await pttl("taskrunner:unique:t") <= 3000

    await state.publish_tuning("g", 12, 20.0)
    assert await client.execute("GET", "taskrunner:g:worker_tuning_capacity") == b"12"
    assert 19000 < await pttl("taskrunner:g:worker_tuning_capacity") <= 20000

    await state.publish_desired_instances("g", 6, 240.0)
    assert await client.execute("GET", "taskrunner:g:desired_instances") == b"6"
    assert 239000 < await pttl("taskrunner:g:desired_instances") <= 240000

    await state.add_delayed("g", b"m", 100.0)
    lock = "taskrunner:unique:moved"
    move = DelayedMove(member=b"m", message=b"p", lock_key=lock, lock_token="mv", lock_ttl=60.0)
    assert await state.move_delayed("g", [move]) == 1
    assert await client.execute("GET", lock) == b"mv"
    assert 59000 < await pttl(lock) <= 60000
    entries = await client.execute("XRANGE", STREAM, "-", "+")
    assert [_fields(flat) for _, flat in entries] == [{b"payload": b"p"}]

    await state.acquire_lock("taskrunner:unique:tiny", "t", 0.0001)  # rounds up to PX 1
    assert await pttl("taskrunner:unique:tiny") <= 1


@pytest.mark.parametrize(
    ("seconds", "ms"),
    [(0.0, 1), (0.0001, 1), (0.001, 1), (0.0011, 2), (0.3, 300), (1.1, 1100), (5.0, 5000)],
)
def test_durations_round_up_to_whole_milliseconds(seconds: float, ms: int) -> None:
    assert _ms(seconds) == ms


# Delayed set ----------------------------------------------------------------


async def test_locked_member_stays_in_the_set(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    lock = "taskrunner:unique:t:k"
    await state.add_delayed("g", b"locked", 10.0)
    await state.add_delayed("g", b"free", 11.0)
    await client.execute("SET", lock, "holder")
    moves = [
        DelayedMove(member=b"locked", message=b"1", lock_key=lock, lock_token="mv", lock_ttl=5.0),
        DelayedMove(member=b"free", message=b"2"),
    ]
    assert await state.move_delayed("g", moves) == 1
    assert await client.execute("ZSCORE", "taskrunner:g:delayed_tasks", b"locked") == b"10"
    assert await client.execute("ZSCORE", "taskrunner:g:delayed_tasks", b"free") is None
    assert await client.execute("GET", lock) == b"holder", "a skipped move touched the lock"
    assert await client.execute("PTTL", lock) == -1
    assert await client.execute("XLEN", STREAM) == 1


async def test_two_moves_sharing_a_lock_move_one(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    lock = "taskrunner:unique:t:k"
    await state.add_delayed("g", b"a", 1.0)
    await state.add_delayed("g", b"b", 2.0)
    moves = [
        DelayedMove(member=m, message=m, lock_key=lock, lock_token=m.decode(), lock_ttl=5.0)
        for m in (b"a", b"b")
    ]
    assert await state.move_delayed("g", moves) == 1
    assert await state.due_delayed("g", 100.0, 10) == [b"b"]
    assert await client.execute("GET", lock) == b"a"


async def test_failed_xadd_leaves_member_and_lock(client: RedisClient) -> None:
    """A script error keeps the server's message; the failing move's member
    stays and the lock it just took is dropped; earlier moves are complete."""
    stream = "not-a-stream"
    state = RedisState(client, stream_of=lambda group, queue: stream)
    await client.execute("SET", stream, "a string")
    await state.add_delayed("g", b"m", 1.0)
    lock = "taskrunner:unique:t:k"
    move = DelayedMove(member=b"m", message=b"p", lock_key=lock, lock_token="mv", lock_ttl=5.0)
    with pytest.raises(WrongTypeError) as caught:
        await state.move_delayed("g", [move])
    assert "wrong kind of value" in caught.value.message
    assert await state.due_delayed("g", 100.0, 10) == [b"m"]
    assert await client.execute("EXISTS", lock) == 0


async def test_delayed_scores_keep_fractions(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    run_at = 1_764_503_000.123456
    await state.add_delayed("g", b"m", run_at)
    assert await state.next_delayed_at("g") == run_at
    assert await state.due_delayed("g", run_at - 1e-6, 10) == []
    assert await state.due_delayed("g", run_at, 10) == [b"m"]


async def test_scripts_survive_script_flush(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    flush = ("SCRIPT", "FLUSH")
    await client.execute(*flush)
    assert await state.acquire_lease("g", "me", 5.0)
    await client.execute(*flush)
    assert await state.renew_lease("g", "me", 5.0)
    await client.execute(*flush)
    assert await state.resign_lease("g", "me")
    await client.execute(*flush)
    await state.add_delayed("g", b"m", 1.0)
    assert await state.move_delayed("g", [DelayedMove(member=b"m", message=b"p")]) == 1
    await client.execute(*flush)
    await state.acquire_lock("taskrunner:unique:t", "tok", 5.0)
    assert await state.release_lock("taskrunner:unique:t", "tok")
    await client.execute(*flush)
    await state.heartbeat("h", "i", 5.0)
    await state.remove_heartbeat("h", "i")
    assert await state.count_heartbeats() == 0


# Metrics ------------------------------------------------------------------------


async def _metrics_bytes(client: RedisClient) -> dict[bytes, bytes]:
    return _fields(await client.execute("HGETALL", METRICS))


def _add(micros: int, count: int = 1) -> list[TimingIncrement]:
    return [TimingIncrement(fields=T, micros=micros, count=count)]


async def test_a_flush_is_one_script_call_leaving_integers(client: RedisClient) -> None:
    recorder = _Recorder(client)
    state = RedisState(recorder, stream_of=lambda group, queue: STREAM)
    await state.increment_metrics(
        "g", [*_add(100), TimingIncrement(fields=task_fields("u"), micros=2500, count=2)]
    )
    assert recorder.command_names() == ["EVALSHA", "EVAL"], "the server had no scripts yet"
    recorder.calls.clear()
    await state.increment_metrics("g", _add(1200, 2))
    args: list[CommandArg] = ["t_sum", "t_sum_us", "t_count", 1200, 2]
    assert recorder.calls == [("execute", [ADD_TIMINGS.evalsha_command([METRICS], args)])]
    assert await _metrics_bytes(client) == {
        b"t_sum": b"1", b"t_sum_us": b"1300", b"t_count": b"3",
        b"u_sum": b"2", b"u_sum_us": b"2500", b"u_count": b"2",
    }  # fmt: skip

    await state.reset_metrics("g", ["t_sum", "t_sum_us", "t_count"])
    await state.increment_metrics("g", _add(7))  # after a reset too
    assert (await _metrics_bytes(client))[b"t_sum_us"] == b"7"


async def test_whole_milliseconds_added_by_a_go_worker_are_kept(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    await state.increment_metrics("g", _add(1500))
    # A Go worker's flush: HINCRBY of whole milliseconds, on _sum and _count only.
    await client.pipeline([("HINCRBY", METRICS, "t_sum", 7), ("HINCRBY", METRICS, "t_count", 1)])
    assert task_timing(await state.read_metrics("g"), "t") == (8.0, 2.0), "_sum wins over _sum_us"
    await state.increment_metrics("g", _add(400))
    got = await _metrics_bytes(client)
    assert (got[b"t_sum"], got[b"t_sum_us"], got[b"t_count"]) == (b"8", b"8400", b"3")
    assert task_timing(await state.read_metrics("g"), "t") == (8.4, 3.0)


async def test_a_float_sum_left_by_0_1_0_is_read_then_cut_to_whole_ms(
    client: RedisClient,
) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    await client.execute("HSET", METRICS, "t_sum", "205.26254101423546999", "t_count", "3")
    assert task_timing(await state.read_metrics("g"), "t") == (205.26254101423547, 3.0)
    with pytest.raises(Exception, match="not an integer"):
        await client.execute("HINCRBY", METRICS, "t_sum", 1)  # what broke Go's flush
    await state.increment_metrics("g", _add(500))
    got = await _metrics_bytes(client)
    assert (got[b"t_sum"], got[b"t_sum_us"], got[b"t_count"]) == (b"205", b"205500", b"4")
    assert await client.execute("HINCRBY", METRICS, "t_sum", 1) == 206, "Go can add again"


async def test_a_sum_that_is_no_number_is_zeroed(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    await client.execute("HSET", METRICS, "t_sum", "abc", "t_sum_us", "x")
    await state.increment_metrics("g", _add(2500))
    got = await _metrics_bytes(client)
    assert (got[b"t_sum"], got[b"t_sum_us"], got[b"t_count"]) == (b"2", b"2500", b"1")


async def test_large_totals_stay_integers(client: RedisClient) -> None:
    # Lua prints such doubles as 1e+15: the script must format them itself.
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    await client.execute("HSET", METRICS, "t_sum", 10**12)
    await state.increment_metrics("g", _add(1))
    got = await _metrics_bytes(client)
    assert (got[b"t_sum"], got[b"t_sum_us"]) == (b"1000000000000", b"1000000000000001")


async def test_read_metrics_skips_non_numeric_fields(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    await client.execute("HSET", "taskrunner:g:metrics", "a_sum", "2.5", "junk", "abc")
    assert await state.read_metrics("g") == {"a_sum": 2.5}


async def test_read_tuning_ignores_a_non_integer(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    await client.execute("SET", "taskrunner:g:worker_tuning_capacity", "lots")
    assert await state.read_tuning("g") is None


async def test_read_desired_instances_ignores_a_non_integer(client: RedisClient) -> None:
    state = RedisState(client, stream_of=lambda group, queue: STREAM)
    await client.execute("SET", "taskrunner:g:desired_instances", "many")
    assert await state.read_desired_instances("g") is None


async def test_empty_batches_do_not_reach_redis(client: RedisClient) -> None:
    recorder = _Recorder(client)
    state = RedisState(recorder, stream_of=lambda group, queue: STREAM)
    assert await state.move_delayed("g", []) == 0
    await state.increment_metrics("g", [])
    await state.reset_metrics("g", [])
    assert recorder.calls == []
    await state.reset_metrics("g", ["a", "b"])
    assert recorder.calls == [("execute", [("HSET", "taskrunner:g:metrics", "a", 0, "b", 0)])]


# Heartbeats -------------------------------------------------------------------


async def test_count_heartbeats_scans_every_key_once(client: RedisClient) -> None:
    recorder = _Recorder(client)
    state = RedisState(recorder, stream_of=lambda group, queue: STREAM)
    hosts = 2500  # several SCAN pages
    commands: list[tuple[CommandArg, ...]] = [
        ("SET", f"taskrunner:replication:h{i}", "i", "PX", 60_000) for i in range(hosts)
    ]
    commands += [("SET", f"other:{i}", "x") for i in range(500)]
    await client.pipeline(commands)
    await client.execute("SET", "taskrunner:replicationX", "not a heartbeat")
    assert await state.count_heartbeats() == hosts
    names = recorder.command_names()
    assert set(names) == {"SCAN"}
    assert len(names) > 1
    await state.heartbeat("h0", "i", 0.05)  # a renew of one of them, with a short ttl
    await trio.sleep(0.2)
    assert await state.count_heartbeats() == hosts - 1
