"""Consumer cleanup: which consumers go, that a runner's leader removes them, and that
it never drops a pending entry (issue 10, point 4).

The cleanup reads the group's consumers, then deletes the idle ones with
nothing pending. ``XGROUP DELCONSUMER`` drops a consumer's pending entries for
good, so a consumer that reads between the check and the delete (a process
that came back) would lose what it read. Each test puts exactly that read
between the two, on the memory backend and on a real server.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving

from taskrunner._serve import cleanup
from taskrunner.backends import Backend, ConsumerInfo, GroupInfo
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend

GROUP = "g"


async def _two_quiet_consumers(backend: Backend) -> None:
    """``late`` and ``idle`` each read and acked one entry: consumers with
    nothing pending."""
    for consumer in ("late", "idle"):
        await backend.add(GROUP, [consumer.encode()])
        (entry,) = await backend.read(GROUP, consumer, 1, 0)
        await backend.ack(GROUP, [entry.id])


def _late_reads_after_the_check(backend: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """After the cleanup's first look at the group, ``late`` reads (and so holds)
    every new entry. Returns the ids it read."""
    read: list[str] = []
    group_info = backend.group_info

    async def look_then_read(group: str) -> GroupInfo:
        info = await group_info(group)
        if not read:
            read.extend(e.id for e in await backend.read(group, "late", 10, 0))
        return info

    monkeypatch.setattr(backend, "group_info", look_then_read)
    return read


async def _one_pass(backend: Backend) -> None:
    with trio.move_on_after(1):  # run() sleeps a minute after its first pass
        await cleanup.run(backend, GROUP)


async def _check_nothing_was_lost(backend: Backend, new_id: str, read: list[str]) -> None:
    assert read == [new_id], "late did not read between the check and the delete"
    info = await backend.group_info(GROUP)
    consumers = {c.name: c.pending for c in info.consumers}
    assert consumers == {"late": 1}, f"idle must go, late must stay with its entry: {consumers}"
    claimed = await backend.claim_stale(GROUP, "rescuer", 0, 10)
    assert [e.id for e in claimed] == [new_id], "the entry late read was dropped"


async def test_a_read_between_check_and_delete_keeps_its_entry(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = MemoryBackend()
    await _two_quiet_consumers(backend)
    await trio.sleep(cleanup.CONSUMER_MAX_IDLE + 1)
    (new_id,) = await backend.add(GROUP, [b"read by late after the check"])
    read = _late_reads_after_the_check(backend, monkeypatch)

    await _one_pass(backend)

    await _check_nothing_was_lost(backend, new_id, read)


async def test_a_read_between_check_and_delete_keeps_its_entry_on_redis(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Real time: consumers count as gone after 0.3 s instead of 10 minutes.
    original = cleanup.consumers_to_delete
    monkeypatch.setattr(cleanup, "CONSUMER_MAX_IDLE", 0.3)
    monkeypatch.setattr(cleanup, "consumers_to_delete", lambda info, *_: original(info, 0.3))
    async with RedisBackend.from_url(redis_url, queue=f"q{uuid.uuid4().hex[:8]}") as backend:
        await _two_quiet_consumers(backend)
        await trio.sleep(0.5)
        (new_id,) = await backend.add(GROUP, [b"read by late after the check"])
        read = _late_reads_after_the_check(backend, monkeypatch)

        await _one_pass(backend)

        await _check_nothing_was_lost(backend, new_id, read)


@pytest.mark.parametrize(
    ("idle", "pending", "deleted"),
    [(601.0, 0, True), (599.0, 0, False), (601.0, 1, False)],
)
async def test_clean_once_deletes_only_idle_consumers_with_nothing_pending(
    idle: float, pending: int, deleted: bool, autojump_clock: trio.testing.MockClock
) -> None:
    backend = MemoryBackend()
    await backend.add(GROUP, [b"a", b"b"])
    for entry in await backend.read(GROUP, "c", 2, 0):
        if pending == 0:
            await backend.ack(GROUP, [entry.id])
    await trio.sleep(idle)
    assert await cleanup.clean_once(backend, GROUP) == int(deleted)
    names = [c.name for c in (await backend.group_info(GROUP)).consumers]
    assert names == ([] if deleted else ["c"])


def test_cleanup_keeps_consumers_with_pending_entries() -> None:
    info = GroupInfo(
        name="g",
        pending=1,
        lag=0,
        consumers=(
            ConsumerInfo(name="a", pending=0, idle=601),
            ConsumerInfo(name="b", pending=1, idle=9000),
            ConsumerInfo(name="c", pending=0, idle=600),
        ),
    )
    assert cleanup.consumers_to_delete(info) == ["a"]


async def test_idle_consumers_without_pending_are_cleaned_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    gone = make_runner(backend, host="gone", num_fetchers=2)
    async with serving(gone):
        await trio.sleep(1)
    runner = make_runner(backend, host="live")
    async with serving(runner):
        await trio.sleep(300)
        names = {c.name for c in (await backend.group_info("g")).consumers}
        assert {"g_gone_1", "g_gone_2"} <= names
        await trio.sleep(400)
        names = {c.name for c in (await backend.group_info("g")).consumers}
    assert names == {"g_live_1"}
