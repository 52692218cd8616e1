"""Every queue is a first-class queue (issue 24), on a real server: a fleet of three
runners on two queues (the rounds of tests/test_every_queue.py), and a flush of one of
two fully used groups that leaves the other's keys byte for byte as they were."""

from __future__ import annotations

from typing import Any

import redis
import trio

from taskrunner import RateLimit, TaskRunner, _keys, admin
from taskrunner.backends.redis import RedisBackend
from tests._fleet import make_runner, serving, wait_until
from tests.test_every_queue import QUEUES, fleet_round, hanging, running_round, shop


async def test_a_fleet_of_three_on_two_queues(redis_url: str) -> None:
    backends = [RedisBackend.from_url(redis_url) for _ in range(3)]
    ran: list[str] = []
    runners = [shop(b, ran, block_duration=0.05, leader_lease_ttl=2.0) for b in backends]
    async with serving(*runners):
        await fleet_round(backends, runners, ran)
    for backend in backends:
        await backend.aclose()


async def test_a_running_task_without_timeout_stops_on_every_queue(redis_url: str) -> None:
    backends = [RedisBackend.from_url(redis_url) for _ in range(3)]
    started: list[str] = []
    runners = [shop(b, [], block_duration=0.05, shutdown_grace=0.5) for b in backends]
    for runner in runners:
        hanging(runner, started)
    try:
        with trio.fail_after(60):
            async with serving(*runners):
                await running_round(runners, started)
    finally:
        for backend in backends:
            await backend.aclose()


def fully_used(backend: RedisBackend, group: str, ran: list[str]) -> TaskRunner:
    """A runner of ``group`` using every feature that leaves keys: two queues (streams,
    rings, dead letters), kept results, delayed tasks, a periodic schedule, pauses and
    parked runs, concurrency and rate limits, the catalog, metrics, tuning."""
    runner = make_runner(
        backend,
        consumer_group=group,
        queues=QUEUES,
        block_duration=0.05,
        leader_lease_ttl=2.0,
        desired_wait_time=1.0,
        max_workers=4,
    )

    @runner.task("kept", queue="emails", keep_result=600, max_concurrency=2)
    async def kept(value: Any) -> str:
        ran.append(f"{group} kept {value}")
        return "ok"

    @runner.task("limited", rate_limit=RateLimit(1, per=600.0))
    async def limited(value: Any) -> None:
        ran.append(f"{group} limited {value}")

    @runner.task("broken", queue="emails", max_retry=0)
    async def broken(value: Any) -> None:
        raise ValueError("broken")

    @runner.task("broken_order", queue="orders", max_retry=0)
    async def broken_order(value: Any) -> None:
        raise ValueError("broken")

    @runner.task("held", queue="orders")
    async def held(value: Any) -> None:
        ran.append(f"{group} held {value}")

    @runner.periodic(every=3600, name="hourly")
    async def hourly(value: Any) -> None:
        ran.append(f"{group} hourly")

    return runner


async def use_everything(backend: RedisBackend, group: str, ran: list[str]) -> None:
    runner = fully_used(backend, group, ran)
    async with serving(runner):
        await runner.dispatch("kept", 1)
        await runner.dispatch("limited", 1)
        await runner.dispatch("limited", 2)  # refused by the rate limit: paced, delayed
        await runner.dispatch("broken", 1)
        await runner.dispatch("broken_order", 1)
        await runner.dispatch_delayed("kept", 2, 3600)
        await admin.pause(backend, group, task="held")
        # Noticed by the runner (its gate reads the paused set every second: a sleep of
        # 1.5 s assumed a machine fast enough to keep to it).
        await wait_until(lambda: "held" in runner._parts.gate.paused.tasks, limit=30)
        await runner.dispatch("held", 1)  # parked
        # Either run of "limited" may be admitted first; the other waits 600 s.
        await wait_until(
            lambda: f"{group} kept 1" in ran and any(f"{group} limited" in r for r in ran),
            limit=30,
        )
        with trio.fail_after(30):
            while len(await admin.dead_letters(backend, group)) < 2:  # noqa: ASYNC110
                await trio.sleep(0.05)
        await trio.sleep(1.5)  # the bulk writer's flush, the parking
        await admin.pause(backend, group, queue="emails")
        await runner.dispatch("kept", 3)  # queued on a paused queue


def snapshot(client: redis.Redis) -> dict[bytes, bytes]:
    return {key: client.dump(key) for key in client.scan_iter(count=1000)}  # type: ignore[misc]


def is_of(group: str, key: bytes) -> bool:
    text = key.decode()
    return text.startswith(
        (f"taskrunner:{group}:", f"ring:taskrunner:{group}:")
    ) or text == _keys.leader(group)


async def test_flush_of_one_fully_used_group_leaves_the_other_byte_for_byte(
    redis_url: str,
) -> None:
    ran: list[str] = []
    async with RedisBackend.from_url(redis_url) as backend:
        for group in ("shop", "mail"):
            await use_everything(backend, group, ran)
        client = redis.Redis.from_url(redis_url)
        before = snapshot(client)
        shop_keys = sorted(k for k in before if is_of("shop", k))
        kinds = {k.kind.value for k in await admin.list_keys(backend, "shop")}
        for kind in (
            "stream",
            "dead_letter",
            "claim_delay_ring",
            "delayed_tasks",
            "delayed_index",
            "metrics",
            "result",
            "schedules",
            "schedule_specs",
            "paused",
            "rate",
            "parked",
        ):
            assert kind in kinds, f"the test must use {kind}: {sorted(kinds)}"
        listed = {k.name.encode() for k in await admin.list_keys(backend, "shop")}
        assert set(shop_keys) <= listed, f"list_keys misses {set(shop_keys) - listed}"
        await admin.flush(backend, "shop", confirm=True, replication=False)
        after = snapshot(client)
        left = sorted(k for k in after if is_of("shop", k))
        assert left == [], f"flush left keys of the group: {left}"
        kept = {k: v for k, v in before.items() if not is_of("shop", k)}
        changed = sorted(k for k in kept if after.get(k) != kept[k])
        assert changed == [], f"flush touched another group's keys: {changed}"
        assert set(after) == set(kept), f"new keys: {sorted(set(after) - set(kept))}"
        assert any(is_of("mail", k) for k in after), "the other group had keys"
        client.close()
