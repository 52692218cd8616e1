"""Consumer cleanup (leader only): forget consumers that are long gone.

Every fetcher of every process that ever ran left a consumer in the group.
Once a minute the leader removes consumers idle for over 10 minutes that have
nothing pending. One that still has pending entries is left alone: the
fetchers' reclaim (entries idle past ``reclaim_delay``) takes its entries
over first, and a later pass removes it.

``XGROUP DELCONSUMER`` drops the consumer's pending entries, so the check
(nothing pending, idle long enough) and the delete are one atomic backend call,
:meth:`~taskrunner.backends.MessageQueue.delete_idle_consumer`: the
:class:`~taskrunner.backends.GroupInfo` read first only picks the candidates.
A consumer that reads again in between (a process that came back) is simply
not deleted, and its entries are never lost.
"""

from __future__ import annotations

import logging

import trio

from taskrunner import _shards
from taskrunner.backends import Backend, GroupInfo
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

CONSUMER_MAX_IDLE = 600.0
CLEANUP_INTERVAL = 60.0


def consumers_to_delete(info: GroupInfo, max_idle: float = CONSUMER_MAX_IDLE) -> list[str]:
    """Consumers idle longer than ``max_idle`` with nothing pending (pure)."""
    return [c.name for c in info.consumers if c.idle > max_idle and c.pending == 0]


async def clean_once(backend: Backend, group: str, max_idle: float | None = None) -> int:
    """One pass: delete the group's idle consumers that have nothing pending.

    Args:
        max_idle: Seconds a consumer must have been idle (default
            :data:`CONSUMER_MAX_IDLE`).

    Returns:
        How many consumers were deleted.

    Raises:
        BackendError: the backend could not be reached (the pass stops there).
    """
    if max_idle is None:
        max_idle = CONSUMER_MAX_IDLE
    deleted = 0
    for name in consumers_to_delete(await backend.group_info(group), max_idle):
        if await backend.delete_idle_consumer(group, name, max_idle):
            deleted += 1
            log.info("removed idle consumer %s from group %s", name, group)
        else:
            log.debug("consumer %s of group %s became active again; kept", name, group)
    return deleted


async def run(
    backend: Backend,
    group: str,
    *,
    shards: int = 1,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Clean up every minute until cancelled (at the end of the term): the group's
    consumers, and with ``shards > 1`` every shard's too (one leader works them all).

    The leader's job (:meth:`Leadership.run_as_leader
    <taskrunner._serve.leadership.Leadership.run_as_leader>` runs it in every
    term). Calls ``task_status.started()`` before the first pass.
    """
    task_status.started()
    while True:
        for each in _shards.served_groups(group, shards):
            try:
                await clean_once(backend, each)
            except BackendError as exc:
                log.warning("consumer cleanup for group %s failed: %s", each, exc)
        await trio.sleep(CLEANUP_INTERVAL)
