"""Every queue is a first-class queue (issue 24, section 2), on MemoryBackend under
MockClock: where a task without ``queue=`` goes, lookup and cancel of tasks on any
queue, dead letters of every queue, and a fleet of three runners on two queues.
The same fleet on a real server is tests/redis/test_redis_every_queue.py."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from taskrunner import TaskRunner, TaskState, admin
from taskrunner.backends.memory import MemoryBackend
from tests._fleet import make_runner, serving, wait_until

QUEUES = ("orders", "emails")


def shop(backend: MemoryBackend, ran: list[str], **config: Any) -> TaskRunner:
    runner = make_runner(backend, consumer_group="shop", queues=QUEUES, **config)

    @runner.task("charge", queue="orders", keep_result=600)
    async def charge(value: Any) -> str:
        ran.append(f"charge {value}")
        return f"charged {value}"

    @runner.task("mail", queue="emails", keep_result=600)
    async def mail(value: Any) -> str:
        ran.append(f"mail {value}")
        return f"mailed {value}"

    @runner.task("tidy")  # no queue of its own
    async def tidy(value: Any) -> None:
        ran.append(f"tidy {value}")

    @runner.task("broken", queue="emails", max_retry=0)
    async def broken(value: Any) -> None:
        raise ValueError(f"broken {value}")

    @runner.task("broken_order", queue="orders", max_retry=0)
    async def broken_order(value: Any) -> None:
        raise ValueError(f"broken order {value}")

    return runner


async def test_a_task_without_a_queue_goes_to_the_first_queue_named(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The regression: a periodic schedule beside tasks on ("orders", "emails") fired
    into taskrunner:shop:tasks, which nothing reads; its ticks piled up unrun."""
    backend = MemoryBackend()
    ran: list[str] = []
    runner = shop(backend, ran)

    @runner.periodic(every=5, name="heartbeat")
    async def heartbeat(payload: Any) -> None:
        ran.append("heartbeat")

    handle = await runner.dispatch("tidy", 1)
    assert handle.queue == "orders"
    assert await backend.length("shop", queue="orders") == 1
    assert await backend.length("shop") == 0, "nothing goes to the unread tasks stream"
    later = await runner.dispatch_delayed("tidy", 2, 1.0)
    async with serving(runner):
        await wait_until(lambda: ran.count("heartbeat") >= 2 and "tidy 2" in ran, limit=60)
        catalog = await backend.read_catalog("shop")
        streams = {t.name: t.stream for doc in catalog for t in doc.tasks}
        assert streams["tidy"] == backend.stream_keys("shop", "orders").stream
        assert streams["heartbeat"] == backend.stream_keys("shop", "orders").stream
    assert "tidy 1" in ran
    assert later.queue == "orders"
    assert await backend.length("shop") == 0, "no tick and no retry went to tasks"


async def test_the_backends_queue_stays_the_default_when_the_config_names_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, queues=("critical", "tasks"))

    @runner.task("echo")
    async def echo(value: Any) -> None: ...

    assert (await runner.dispatch("echo", 1)).queue == "tasks"
    assert await backend.length("g") == 1


async def test_lookup_and_cancel_on_every_queue_by_handle_and_by_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = shop(backend, [])
    # Both queues' first entries at the same instant: the same stream id on each.
    order = await runner.dispatch("charge", 1)
    email = await runner.dispatch("mail", 1)
    assert order.id == email.id, "stream ids are unique per stream only"
    assert (await runner.get_task(order)).state is TaskState.QUEUED  # type: ignore[union-attr]
    info = await runner.get_task(email)
    assert info is not None
    assert (info.state, info.task_name) == (TaskState.QUEUED, "mail"), "the handle's queue"
    assert await email.cancel() is True
    assert await backend.length("shop", queue="emails") == 0
    assert await backend.length("shop", queue="orders") == 1, "the other queue's twin stays"
    later = await runner.dispatch("mail", 2)
    assert await runner.cancel(later.id) is True, "by id alone: every queue is looked in"
    assert await admin.cancel(backend, "shop", later.id) is False, "gone"
    assert await admin.get_task(backend, "shop", order.id, queue="orders") is not None
    with pytest.raises(ValueError, match="queue must have no spaces"):
        await runner.get_task(order.id, queue="no such")


async def fleet_round(backends: list[Any], runners: list[TaskRunner], ran: list[str]) -> None:
    """For each queue: a queued, a delayed and a finished task looked up and cancelled
    (the finished one is not); dead letters of both queues listed, replayed, purged."""
    first = runners[0]
    for task in ("charge", "mail"):
        await trio.sleep(0.01)  # as below: ids of two queues a millisecond apart
        done = await first.dispatch(task, "done")
        assert await done.result(timeout=30) in ("charged done", "mailed done")
        info = await runners[1].get_task(done.id)
        assert info is not None
        assert info.state is TaskState.SUCCEEDED, f"{task}: {info!r}"
        assert await runners[2].cancel(done.id) is False, "a finished task is not cancelled"
    async with trio.open_nursery() as paused:
        # Pause both queues so that queued tasks stay queued while they are looked up.
        for queue in QUEUES:
            await admin.pause(backends[0], "shop", queue=queue)
        await trio.sleep(2)
        for task, queue in (("charge", "orders"), ("mail", "emails")):
            # A millisecond apart: ids (and so kept results) are unique per stream
            # only, so two queues' entries of one millisecond could share one.
            await trio.sleep(0.01)
            queued = await first.dispatch(task, "queued")
            delayed = await first.dispatch_delayed(task, "delayed", 600)
            for handle, state in ((queued, TaskState.QUEUED), (delayed, TaskState.SCHEDULED)):
                info = await runners[2].get_task(handle.id)
                assert info is not None
                assert info.state is state, f"{task} on {queue}: {info!r}"
                assert await admin.get_task(backends[1], "shop", handle.id) is not None
                assert await runners[1].cancel(handle.id) is True
                gone = await admin.get_task(backends[2], "shop", handle.id)
                assert gone is not None
                assert gone.state is TaskState.CANCELLED, f"{task}: kept result records it"
        for queue in QUEUES:
            await admin.resume(backends[0], "shop", queue=queue)
        paused.cancel_scope.cancel()
    for task in ("broken", "broken_order"):
        await first.dispatch(task, 1)
    letters: list[Any] = []

    async def two_letters() -> bool:
        letters[:] = await admin.dead_letters(backends[1], "shop")
        return len(letters) == 2

    with trio.fail_after(60):
        while not await two_letters():  # noqa: ASYNC110
            await trio.sleep(0.1)
    assert sorted(d.queue for d in letters) == ["emails", "orders"], letters
    assert [d.task_name for d in await admin.dead_letters(backends[0], "shop", queue="emails")] == [
        "broken"
    ]
    shown = await admin.dead_letter(backends[2], "shop", letters[0].id, queue=letters[0].queue)
    assert shown is not None
    assert shown.queue == letters[0].queue
    replayed = await admin.replay_dead_letters(
        backends[0], "shop", [letters[0].id], queue=letters[0].queue
    )
    assert [r.replayed for r in replayed] == [True]
    with trio.fail_after(60):
        while len(await admin.dead_letters(backends[0], "shop")) < 2:  # noqa: ASYNC110 - it fails again
            await trio.sleep(0.1)
    assert await admin.purge_dead_letters(backends[2], "shop", confirm=True) == 2
    assert await admin.dead_letters(backends[1], "shop") == []


async def test_a_fleet_of_three_on_two_queues(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    ran: list[str] = []
    runners = [shop(backend, ran, block_duration=0.05) for _ in range(3)]
    async with serving(*runners):
        await fleet_round([backend] * 3, runners, ran)


async def running_round(runners: list[TaskRunner], started: list[str]) -> None:
    """For each queue, a running task without a timeout is looked up and cancelled:
    it stops within 2 s and its slot is free (issue 24 section 1: the cancel branch)."""
    for task, queue in (("hang_order", "orders"), ("hang_mail", "emails")):
        await trio.sleep(0.01)
        handle = await runners[0].dispatch(task, queue)
        with trio.fail_after(30):
            while queue not in started:  # noqa: ASYNC110
                await trio.sleep(0.01)
        info = await runners[1].get_task(handle.id)
        assert info is not None
        assert info.state is TaskState.RUNNING, f"{task}: {info!r}"
        assert await runners[2].cancel(handle.id) is True
        cancelled_at = trio.current_time()
        with trio.fail_after(10):
            while (found := await runners[1].get_task(handle.id)) is None or (  # noqa: ASYNC110
                found.state is not TaskState.CANCELLED
            ):
                await trio.sleep(0.05)
        assert trio.current_time() - cancelled_at < 2.0, f"{task} stopped late"
        assert all(r.statistics().running == 0 for r in runners), "its slot is free"


def hanging(runner: TaskRunner, started: list[str]) -> None:
    for task, queue in (("hang_order", "orders"), ("hang_mail", "emails")):

        @runner.task(task, queue=queue, keep_result=600)
        async def hang(value: Any) -> None:
            started.append(value)
            await trio.sleep_forever()


async def test_a_running_task_without_timeout_stops_on_every_queue(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    started: list[str] = []
    runners = [shop(backend, [], block_duration=0.05, shutdown_grace=0.5) for _ in range(3)]
    for runner in runners:
        hanging(runner, started)
    async with serving(*runners):
        await running_round(runners, started)
