"""Two applications on one store (issue 10, point 5), on the memory backend.

The same scenario as tests/redis/test_redis_groups.py, on trio's MockClock,
plus the pure decision and the periodic re-check.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from taskrunner._serve import sharing
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import SharedStreamError
from tests._fleet import serving
from tests._groups import Apps

LIMIT = 60.0


@pytest.mark.parametrize(
    ("groups", "deletes", "others"),
    [
        ([], True, None),
        (["shop"], True, None),
        (["mail", "shop"], False, None),
        (["mail", "shop"], True, ("mail",)),
        (["audit", "mail"], True, ("audit", "mail")),  # shop's group not created yet
    ],
)
def test_sharing_problem(groups: list[str], deletes: bool, others: tuple[str, ...] | None) -> None:
    problem = sharing.sharing_problem("s", "shop", groups, deletes_on_ack=deletes)
    assert (problem.other_groups if problem else None) == others


async def test_default_settings_give_each_application_its_own_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()  # one store, both applications
    apps = Apps(backend, backend)
    await apps.mail_ran_before(limit=LIMIT)
    await apps.shop_serves_while_mail_is_dispatched(limit=LIMIT)
    assert await backend.dead_letters("shop") == []
    assert await backend.length("mail") == 1
    await apps.mail_comes_back(limit=LIMIT)


async def test_a_shared_stream_refuses_delete_on_ack(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend(prefix="shared")  # deletes on ack, the default
    apps = Apps(backend, backend)
    await apps.mail_ran_before(limit=LIMIT)
    with pytest.raises(SharedStreamError, match=r"'shared:tasks' is also read by .* mail"):
        await apps.shop.serve()


async def test_a_shared_stream_acks_another_groups_task_for_itself_only(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = MemoryBackend(prefix="shared", delete_on_ack=False)
    apps = Apps(backend, backend)
    await apps.mail_ran_before(limit=LIMIT)
    with caplog.at_level(logging.INFO, "taskrunner._serve.sharing"):
        await apps.shop_serves_while_mail_is_dispatched(limit=LIMIT)
        await apps.mail.dispatch("send_mail", {"to": "bob@example.com"})
        async with serving(apps.shop):
            await trio.sleep(1)
    assert await backend.dead_letters("shop") == []
    assert (await backend.group_info("shop")).pending == 0
    skipped = [r for r in caplog.records if "is not registered here" in r.getMessage()]
    assert len(skipped) == 1, "logged once per task name"
    assert apps.sent == []
    async with serving(apps.mail):
        await trio.sleep(1)
    assert sorted(p["to"] for p in apps.sent) == ["ann@example.com", "bob@example.com"]


async def test_an_unknown_task_on_a_stream_of_its_own_is_still_dead_lettered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    apps = Apps(backend, backend)
    await backend.add("shop", [b'{"task_name": "send_mail", "payload": null}'])
    async with serving(apps.shop):
        await trio.sleep(1)
    (dead,) = await backend.dead_letters("shop")
    assert dead.error.startswith("TaskNotFound")


async def test_a_group_that_appears_while_deleting_on_ack_is_an_error(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = MemoryBackend(prefix="shared")
    apps = Apps(backend, backend)
    with caplog.at_level(logging.ERROR, "taskrunner._serve.sharing"):
        async with serving(apps.shop):
            await backend.read("audit", "auditor", 10, 0)  # a new group on the stream
            await trio.sleep(sharing.RECHECK_INTERVAL * 3)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert "'shared:tasks' is also read by consumer group(s) audit" in errors[0]


async def test_memory_flush_keeps_a_stream_another_group_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from taskrunner import admin

    backend = MemoryBackend(prefix="shared", delete_on_ack=False)
    await backend.add("A", [b"a", b"b"])
    await backend.read("A", "ca", 10, 0)
    await backend.read("B", "cb", 1, 0)
    await admin.flush(backend, "A", confirm=True)
    assert await backend.length("B") == 2
    info = await backend.group_info("B")
    assert (info.pending, info.lag) == (1, 1)
    await admin.flush(backend, "B", confirm=True)
    assert await backend.length("B") == 0
