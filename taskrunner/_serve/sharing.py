"""Streams read by several consumer groups: never delete what another group needs.

Theory of operation. By default each consumer group has a stream of its own
(``taskrunner:<group>:<queue>``), and nothing here ever finds another group.
With an explicit, shared ``prefix`` several groups read one stream, each
receiving every entry; then this runner must neither delete an entry another
group has not read yet nor treat the other groups' tasks as failures:

- at serve start, a backend that deletes on ack on a stream another group
  reads is refused with :class:`~taskrunner.errors.SharedStreamError` (XDEL
  on ack would remove entries before the other groups read them; with
  ``delete_on_ack=False`` every group just acks for itself);
- an entry naming a task this runner does not know, on a stream another group
  reads, is the other group's: it is acked for this group only (never
  dead-lettered), and logged once per task name. The worker asks
  :meth:`StreamSharing.others` before it dead-letters an unknown task, so a
  group that appeared since the last look is seen;
- :func:`run` looks again every :data:`RECHECK_INTERVAL` and logs an error
  when a group appears while this backend deletes on ack (refusing then would
  stop a serving fleet; the operator has to choose).

The decision itself is :func:`sharing_problem`, a pure function.
"""

from __future__ import annotations

import logging

import trio

from taskrunner._config import ConfigHolder
from taskrunner.backends import Backend
from taskrunner.errors import BackendError, SharedStreamError

log = logging.getLogger(__name__)

RECHECK_INTERVAL = 60.0
"""Seconds between two looks at the groups reading the stream."""


def sharing_problem(
    stream: str, group: str, groups: list[str], *, deletes_on_ack: bool
) -> SharedStreamError | None:
    """The error to refuse serving with, if any (pure).

    Args:
        stream: The group's stream key.
        group: This runner's consumer group.
        groups: Every group reading the stream (``group`` may be among them).
        deletes_on_ack: Whether the backend deletes entries when acked.
    """
    others = tuple(g for g in groups if g != group)
    if others and deletes_on_ack:
        return SharedStreamError(stream, group, others)
    return None


def deletes_on_ack(backend: Backend) -> bool:
    """Whether ``backend`` deletes entries on ack (a backend without the
    attribute is taken to keep them, as the contract suite does)."""
    return bool(getattr(backend, "delete_on_ack", False))


class StreamSharing:
    """The other groups reading this runner's stream, as last seen.

    Args:
        backend: The runner's backend.
        config: The runner's configuration (its consumer group).
    """

    def __init__(self, backend: Backend, config: ConfigHolder) -> None:
        self._backend = backend
        self._config = config
        self.seen: tuple[str, ...] = ()
        """The other groups, as of the last look."""
        self._skipped: set[str] = set()

    @property
    def _group(self) -> str:
        return self._config.current.consumer_group

    async def others(self) -> tuple[str, ...]:
        """Look now: the other groups reading the stream.

        Raises:
            BackendError: the backend could not be reached.
        """
        groups = await self._backend.stream_groups(self._group)
        self.seen = tuple(g for g in groups if g != self._group)
        return self.seen

    def skip_unknown(self, task_name: str, message_id: str) -> None:
        """Note an entry of another group's task, acked for this group only
        (logged once per task name)."""
        if task_name in self._skipped:
            return
        self._skipped.add(task_name)
        log.info(
            "task %r (message %s) is not registered here and the stream is shared with "
            "group(s) %s: acking it for group %s only, not dead-lettering it "
            "(logged once per task name)",
            task_name,
            message_id,
            ", ".join(self.seen),
            self._group,
        )

    async def check_start(self) -> None:
        """Refuse to serve on a stream another group reads while deleting on ack.

        Raises:
            SharedStreamError: see :func:`sharing_problem`.

        A backend error is logged and serving goes on: :func:`run` looks again.
        """
        try:
            others = await self.others()
        except BackendError as exc:
            log.warning("could not list the groups of group %s's stream: %s", self._group, exc)
            return
        problem = sharing_problem(
            self._backend.stream_keys(self._group).stream,
            self._group,
            list(others),
            deletes_on_ack=deletes_on_ack(self._backend),
        )
        if problem is not None:
            raise problem
        if others:
            log.info(
                "stream %s is shared with group(s) %s; unknown tasks are theirs",
                self._backend.stream_keys(self._group).stream,
                ", ".join(others),
            )


async def run(
    sharing: StreamSharing,
    backend: Backend,
    group: str,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Look at the stream's groups every :data:`RECHECK_INTERVAL` until cancelled;
    log an error each time the set of other groups changes while deleting on ack."""
    task_status.started()
    reported = sharing.seen
    while True:
        await trio.sleep(RECHECK_INTERVAL)
        try:
            others = await sharing.others()
        except BackendError as exc:
            log.warning("could not list the groups of group %s's stream: %s", group, exc)
            continue
        problem = sharing_problem(
            backend.stream_keys(group).stream, group, list(others),
            deletes_on_ack=deletes_on_ack(backend),
        )  # fmt: skip
        if problem is not None and others != reported:
            log.error("%s; entries are being deleted before those groups read them", problem)
        reported = others
