"""Issue 10's two-application scenario, for the memory backend and a real server.

``shop`` and ``mail`` are two applications (consumer groups) on one store. The
mail worker has run before (its group exists) and is stopped; the shop worker
serves while one ``send_mail`` is dispatched. The shop must neither run,
dead-letter nor delete it, and when the mail worker comes back it runs it.
"""

from __future__ import annotations

from typing import Any

import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends import Backend
from tests._fleet import serving, wait_until

FAST: dict[str, Any] = {"block_duration": 0.05, "leader_lease_ttl": 1.0, "reclaim_delay": 60}


class Apps:
    """The two applications, each with a backend of its own on one store."""

    def __init__(self, shop_backend: Backend, mail_backend: Backend) -> None:
        self.charged: list[int] = []
        self.sent: list[dict[str, str]] = []
        self.shop = TaskRunner(
            TaskRunnerConfig(consumer_group="shop", host="shop-1", **FAST), shop_backend
        )
        self.mail = TaskRunner(
            TaskRunnerConfig(consumer_group="mail", host="mail-1", **FAST), mail_backend
        )

        @self.shop.task(name="charge")
        async def charge(payload: int) -> None:
            self.charged.append(payload)

        @self.mail.task(name="send_mail")
        async def send_mail(payload: dict[str, str]) -> None:
            self.sent.append(payload)

    async def mail_ran_before(self, *, limit: float) -> None:
        """The mail worker served once (its consumer group exists) and stopped."""
        backend = self.mail.backend
        async with serving(self.mail):
            with trio.fail_after(limit):
                while "mail" not in await backend.stream_groups("mail"):  # noqa: ASYNC110
                    await trio.sleep(0.01)

    async def shop_serves_while_mail_is_dispatched(self, *, limit: float) -> None:
        """One ``send_mail`` is dispatched while only the shop worker serves;
        returns once the shop had every chance to take it (a charge dispatched
        after it ran, and a little more)."""
        async with serving(self.shop):
            await self.mail.dispatch("send_mail", {"to": "ann@example.com"})
            await self.shop.dispatch("charge", 1)
            await wait_until(lambda: self.charged == [1], limit=limit)
            await trio.sleep(0.5)

    async def mail_comes_back(self, *, limit: float) -> None:
        async with serving(self.mail):
            await wait_until(lambda: self.sent == [{"to": "ann@example.com"}], limit=limit)
        assert self.mail.statistics().completed == 1
