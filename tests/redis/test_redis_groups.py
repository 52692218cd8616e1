"""Two applications on one Redis (issue 10, point 5), on a real server.

(a) With default settings each consumer group has a stream of its own, so the
shop never sees the mail's tasks. (b) Configured on purpose to share one
stream (explicit prefix), a runner that deletes on ack refuses to start, and
one that keeps entries acks the other group's task for itself only. (c) Flushing
one group keeps the stream the other reads.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from taskrunner import _keys, admin
from taskrunner.backends.redis import RedisBackend
from taskrunner.errors import SharedStreamError
from tests._groups import Apps

LIMIT = 20.0


async def test_default_settings_give_each_application_its_own_stream(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as shop, RedisBackend.from_url(redis_url) as mail:
        apps = Apps(shop, mail)
        await apps.mail_ran_before(limit=LIMIT)
        await apps.shop_serves_while_mail_is_dispatched(limit=LIMIT)

        assert shop.stream_keys("shop").stream == "taskrunner:shop:tasks"
        assert mail.stream_keys("mail").stream == "taskrunner:mail:tasks"
        assert await shop.dead_letters("shop") == []
        assert await mail.length("mail") == 1, "the mail's task must wait in its stream"
        assert apps.shop.statistics().dead_lettered == 0

        await apps.mail_comes_back(limit=LIMIT)


async def test_a_shared_stream_refuses_delete_on_ack(redis_url: str) -> None:
    prefix = f"shared-{uuid.uuid4().hex[:6]}"
    async with (
        RedisBackend.from_url(redis_url, prefix=prefix) as shop,
        RedisBackend.from_url(redis_url, prefix=prefix, delete_on_ack=False) as mail,
    ):
        apps = Apps(shop, mail)
        await apps.mail_ran_before(limit=LIMIT)
        with pytest.raises(SharedStreamError) as caught:
            await apps.shop.serve()
        assert caught.value.stream == f"{prefix}:tasks"
        assert caught.value.other_groups == ("mail",)
        assert "delete_on_ack=False" in str(caught.value)
        assert "\n" not in str(caught.value)
        assert not apps.shop.statistics().serving


async def test_a_shared_stream_acks_another_groups_task_for_itself_only(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"shared-{uuid.uuid4().hex[:6]}"
    async with (
        RedisBackend.from_url(redis_url, prefix=prefix, delete_on_ack=False) as shop,
        RedisBackend.from_url(redis_url, prefix=prefix, delete_on_ack=False) as mail,
    ):
        apps = Apps(shop, mail)
        await apps.mail_ran_before(limit=LIMIT)
        with caplog.at_level(logging.INFO, "taskrunner._serve.sharing"):
            await apps.shop_serves_while_mail_is_dispatched(limit=LIMIT)

        assert await shop.dead_letters("shop") == []
        assert apps.shop.statistics().dead_lettered == 0
        assert (await shop.group_info("shop")).pending == 0, "acked for the shop"
        assert (await shop.group_info("mail")).lag == 2, "still there for the mail"
        skipped = [r for r in caplog.records if "is not registered here" in r.getMessage()]
        assert len(skipped) == 1
        assert "'send_mail'" in skipped[0].getMessage()

        await apps.mail_comes_back(limit=LIMIT)


async def test_flush_one_group_keeps_the_stream_of_another(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url, prefix="taskrunner") as backend:
        await backend.add("A", [b"x", b"y", b"z"])
        await backend.read("A", "a1", 10, 0)
        (b_entry,) = await backend.read("B", "b1", 1, 0)
        await backend.dead_letter("A", "1-0", b"dead", "boom")
        await backend.get_metrics("A")  # pushes the claim delays to the ring
        await backend.client.execute("ZADD", _keys.delayed_tasks("A"), 1, "t")
        await backend.client.execute("ZADD", _keys.delayed_tasks("B"), 1, "t")
        keys = backend.stream_keys("A")
        shared = [keys.stream, keys.dead_letter, keys.claim_delay_ring]
        assert [await backend.client.execute("EXISTS", k) for k in shared] == [1, 1, 1]

        deleted = await admin.flush(backend, "A", confirm=True)

        assert deleted == [_keys.delayed_tasks("A")]
        assert [await backend.client.execute("EXISTS", k) for k in shared] == [1, 1, 1]
        assert await backend.client.execute("EXISTS", _keys.delayed_tasks("B")) == 1
        assert [g.name for g in (await backend.get_metrics("B")).groups] == ["B"]
        info = await backend.group_info("B")
        assert (info.pending, info.lag) == (1, 2)
        assert await backend.length("B") == 3
        assert [e.payload for e in await backend.read("B", "b1", 10, 0)] == [b"y", b"z"]
        assert await backend.ack("B", [b_entry.id]) == 1

        # the last group's flush takes the stream with it
        deleted = await admin.flush(backend, "B", confirm=True)
        assert set(deleted) == {*shared, _keys.delayed_tasks("B")}
        assert [await backend.client.execute("EXISTS", k) for k in shared] == [0, 0, 0]
