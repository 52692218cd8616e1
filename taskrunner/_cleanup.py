"""Consumer cleanup (leader only): forget consumers that are long gone.

Every fetcher of every process that ever ran left a consumer in the group.
Once a minute the leader removes consumers idle for over 10 minutes that have
nothing pending. One that still has pending entries is left alone: the
fetchers' reclaim (entries idle past ``reclaim_delay``) takes its entries
over first, and a later pass removes it.
"""

from __future__ import annotations

import logging

import trio

from taskrunner.backends import Backend, GroupInfo
from taskrunner.errors import BackendError

log = logging.getLogger("taskrunner.cleanup")

CONSUMER_MAX_IDLE = 600.0
CLEANUP_INTERVAL = 60.0


def consumers_to_delete(info: GroupInfo, max_idle: float = CONSUMER_MAX_IDLE) -> list[str]:
    """Consumers idle longer than ``max_idle`` with nothing pending (pure)."""
    return [c.name for c in info.consumers if c.idle > max_idle and c.pending == 0]


async def run(backend: Backend, group: str) -> None:
    """Clean up every minute until cancelled (at the end of the term)."""
    while True:
        try:
            info = await backend.group_info(group)
            for name in consumers_to_delete(info):
                await backend.delete_consumer(group, name)
                log.info("removed idle consumer %s from group %s", name, group)
        except BackendError as exc:
            log.warning("consumer cleanup for group %s failed: %s", group, exc)
        await trio.sleep(CLEANUP_INTERVAL)
