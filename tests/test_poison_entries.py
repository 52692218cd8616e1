"""Issue 10, points 1 and 2 on the in-memory backend: no entry, and no value in
one, stops ``serve`` (trio's MockClock).

Redeliveries are made the way a crash makes them: a "ghost" consumer reads the
entry and never acks it, claims raise its delivery count, and the runner's
fetcher reclaims it once it has been idle for ``reclaim_delay``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import Task, TaskMessage, TaskRunner, TaskRunnerConfig
from taskrunner._serve import intake
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import InvalidTaskPayload

RECLAIM = 30.0


async def ghost_read(backend: MemoryBackend, ids: Sequence[str]) -> None:
    """Deliver the entries ``ids`` (just added, none read yet) to a consumer that dies."""
    got = await backend.read("g", "ghost", len(ids), 0)
    assert [e.id for e in got] == list(ids)


async def ghost_claim(backend: MemoryBackend, times: int = 1) -> None:
    """Deliver every pending entry again, ``times`` times, to consumers that die."""
    for _ in range(times):
        assert await backend.claim_stale("g", "ghost", 0, 100)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes | None]:
    """Every raw entry the worker decodes, in order."""
    seen: list[bytes | None] = []
    decode = intake.decode_message

    def counting(raw: bytes | None) -> TaskMessage:
        seen.append(raw)
        return decode(raw)

    monkeypatch.setattr(intake, "decode_message", counting)
    return seen


def message(task_name: str, payload: Any = None, **fields: Any) -> bytes:
    return json.dumps({"task_name": task_name, "payload": payload, **fields}).encode()


# Point 1: poison entries -----------------------------------------------------------


@attrs.frozen
class Picky:
    n: int = attrs.field()

    @n.validator
    def _check(self, attribute: Any, value: int) -> None:
        if value < 0:
            raise RuntimeError("negative")  # not a ValueError: any exception counts


async def test_any_exception_while_decoding_goes_to_the_failure_path(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, batch_size=1)
    done: list[object] = []

    @runner.task()
    async def good(payload: int) -> None:
        done.append(payload)

    @runner.task()
    async def picky(payload: Picky) -> None:
        done.append(payload)

    nested = b"[" * 100_000
    await backend.add("g", [nested, b'{"task_name":"good","payload":' + nested + b"}"])
    await backend.add("g", [message("picky", {"n": -1})])
    await runner.dispatch("good", 7)
    async with serving(runner):
        await wait_until(lambda: done == [7] and runner.statistics().acked == 4)
        assert runner.statistics().serving

    # Entries run concurrently: the order of their dead letters is not promised.
    dead = {d.payload: d for d in await backend.dead_letters("g")}
    nested_good = b'{"task_name":"good","payload":' + nested + b"}"
    picky_entry = message("picky", {"n": -1})
    assert set(dead) == {nested, nested_good, picky_entry}
    for d in (dead[nested], dead[nested_good]):
        assert d.error.startswith(
            "InvalidTaskPayload: invalid task payload: RecursionError while decoding"
        )
        assert len(d.error) < 400  # readable, not a 100 kB repr
    assert "does not fit Picky: RuntimeError: negative" in dead[picky_entry].error
    assert await backend.length("g") == 0


def two_attempt_job() -> tuple[MemoryBackend, TaskRunner, list[object]]:
    """A backend, and a runner on it with one task, ``job`` (2 attempts), whose runs'
    payloads are listed."""
    backend = MemoryBackend()
    runner = make_runner(backend, reclaim_delay=RECLAIM)
    runs: list[object] = []

    @runner.task(max_retry=2)
    async def job(payload: object) -> None:
        runs.append(payload)

    return backend, runner, runs


async def test_a_redelivery_over_its_tasks_attempts_is_failed_without_decoding(
    autojump_clock: trio.testing.MockClock, decodes: list[bytes | None]
) -> None:
    backend, runner, runs = two_attempt_job()
    # The Go library writes its fields in another order, and may space them.
    over = b'{"payload": "over", "unique": false, "task_name": "job"}'
    within = message("job", "within")
    (over_id,) = await backend.add("g", [over])
    await ghost_read(backend, [over_id])
    await ghost_claim(backend)  # two workers died running it
    (within_id,) = await backend.add("g", [within])
    await ghost_read(backend, [within_id])  # one died: a last attempt is left

    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 2)

    assert runs == ["within"]
    assert decodes == [within]  # the entry that killed two workers was never decoded again
    (dead,) = await backend.dead_letters("g")
    assert dead.message_id == over_id
    assert dead.error == (
        f"TaskMaxRetryExceeded: task 'job' (message {over_id}) delivered 3 times without an "
        "outcome, past its 2 attempt(s): not run again"
    )
    assert (await backend.group_info("g")).pending == 0


async def test_a_retrys_entry_redelivered_past_the_attempts_left_says_it_had_no_outcome(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A retry's entry (one attempt used before it) of a 2-attempt task, delivered twice:
    within the delivery limit (2), so it is decoded, and then given up, its second
    attempt having left no outcome. The reason says so, not "failed"."""
    backend, runner, runs = two_attempt_job()
    (retry_id,) = await backend.add("g", [message("job", "retry", attempts=1)])
    await ghost_read(backend, [retry_id])  # its worker died running attempt 2

    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 1)

    assert runs == []
    (dead,) = await backend.dead_letters("g")
    assert dead.error == (
        f"TaskMaxRetryExceeded: task 'job' (message {retry_id}) delivered 2 times without an "
        "outcome, past its 2 attempt(s): not run again"
    )


async def test_an_entry_naming_no_task_is_failed_undecoded_after_three_deliveries(
    autojump_clock: trio.testing.MockClock, decodes: list[bytes | None]
) -> None:
    backend = MemoryBackend()
    handled: list[tuple[Any, Exception]] = []
    runner = make_runner(
        backend, reclaim_delay=RECLAIM, failed_task_handler=lambda d, e: handled.append((d, e))
    )

    @runner.task(max_retry=10)
    async def job(payload: object) -> None:
        raise AssertionError("never run")

    fourth, third = b"\x00 kills the decoder", message("someone_elses")
    (fourth_id,) = await backend.add("g", [fourth])
    await ghost_read(backend, [fourth_id])
    await ghost_claim(backend)
    (third_id,) = await backend.add("g", [third])
    await ghost_read(backend, [third_id])
    await ghost_claim(backend)  # fourth_id has had three deliveries now, third_id two

    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 2)

    assert decodes == [third]  # the third delivery is still decoded, the fourth is not
    errors = {d.id: (d, e) for d, e in handled}
    delivery, error = errors[fourth_id]
    assert delivery.delivery_count == 4
    assert delivery.message is None
    assert delivery.raw == fourth
    assert isinstance(error, InvalidTaskPayload)
    assert "delivered 4 times without naming a registered task" in str(error)
    assert "not decoded again" in str(error)
    delivery, error = errors[third_id]
    assert delivery.delivery_count == 3
    assert "someone_elses" in str(error)  # decoded: TaskNotFound names it


async def test_a_poison_delayed_member_is_dead_lettered_and_the_leader_lives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, delayed_poll_interval=1.0)
    done: list[object] = []

    @runner.task()
    async def later(payload: object) -> None:
        done.append(payload)

    nested = b"[" * 100_000
    await backend.add_delayed("g", nested, trio.current_time())
    await runner.dispatch_delayed("later", "fine", 0.5)
    async with serving(runner):
        await wait_until(lambda: done == ["fine"] and runner.statistics().acked == 2)
        assert runner.is_leader

    (dead,) = await backend.dead_letters("g")
    assert dead.payload == nested
    assert "RecursionError while decoding" in dead.error
    assert await backend.next_delayed_at("g") is None


# Point 2: values that cannot be sent -------------------------------------------------


async def test_a_unique_key_with_a_lone_surrogate_runs_and_serve_lives(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "taskrunner._serve.acker")
    backend = MemoryBackend()
    runner = make_runner(backend)
    done: list[object] = []

    @runner.task(unique=True, unique_for=60)
    async def once(payload: object) -> None:
        done.append(payload)

    # JSON allows "\udc80"; the Go library (or anyone) may write it.
    raw = message(
        "once", 1, unique=True, unique_for=60, unique_key="once:\udc80", unique_lock_value="t"
    )
    assert b"\\udc80" in raw
    await backend.add("g", [raw])
    await runner.dispatch("once", 2)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 2)
        await trio.sleep(1)
        assert runner.statistics().serving

    assert sorted(done) == [1, 2]  # type: ignore[type-var]
    assert (await backend.group_info("g")).pending == 0
    (refused,) = [r for r in caplog.records if "could not release unique lock" in r.getMessage()]
    assert "release_lock key is not valid UTF-8 text" in refused.getMessage()
    assert "'taskrunner:unique:once:\\udc80'" in refused.getMessage()  # Go's meaning of unique_key


# Validation at the edges ----------------------------------------------------------


async def _noop(payload: object) -> None:
    return None


def test_names_that_no_backend_could_store_are_refused_where_they_are_written() -> None:
    with pytest.raises(ValueError, match=r"Task.name must be valid UTF-8 text, got 'job\\udc80'"):
        Task(name="job\udc80", action=_noop)
    with pytest.raises(ValueError, match=r"^host must be valid UTF-8 text"):
        TaskRunnerConfig(consumer_group="g", host="h\udc80")
    with pytest.raises(ValueError, match=r"^consumer_group must be valid UTF-8 text"):
        TaskRunnerConfig(consumer_group="g\udc80")
    task = Task(name="job", action=_noop, unique=True, unique_for=1, unique_key=lambda p: p)
    with pytest.raises(InvalidTaskPayload, match="unique_key must return valid UTF-8 text"):
        task.lock_key_for("k\udc80")
    assert task.lock_key_for("clé") == "clé"


async def test_dispatching_a_unique_key_with_a_lone_surrogate_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: p)
    async def once(payload: str) -> None:
        return None

    with pytest.raises(InvalidTaskPayload, match="unique_key must return valid UTF-8 text"):
        await runner.dispatch("once", "k\udc80")
    assert await backend.length("g") == 0
    assert backend.keys() == []
