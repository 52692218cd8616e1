"""Which consumer groups a Redis server holds: the ``--group`` check of ``stats``, ``top``
and ``keys``.

Theory of operation: those commands read a group's keys by name, so a misspelt
``--group`` reads nothing and shows an empty, healthy-looking fleet. Before reading,
they call :func:`require_group`, which is quiet when the group is on the server and
otherwise fails with the one line ``no group 'typo' on this server; groups: mail,
shop``. What "on the server" means is the backend's to say, in one place:
:meth:`Inspection.list_groups <taskrunner.backends.Inspection.list_groups>` (a
consumer group on any stream, or a key named after the group; ``SCAN``, never
``KEYS``).
"""

from __future__ import annotations

from taskrunner.backends import Inspection
from taskrunner.errors import TaskRunnerError

MAX_LISTED = 20
"""Most group names one error lists."""


class UnknownGroup(TaskRunnerError):
    """``--group`` names no group on the server (the message lists those that are)."""


async def require_group(backend: Inspection, group: str) -> None:
    """Return when ``group`` is on ``backend``'s server.

    Raises:
        UnknownGroup: it is not; the message lists the groups that are.
        BackendError: the server could not be read.
    """
    groups = await backend.list_groups()
    if group in groups:
        return
    listed = ", ".join(groups[:MAX_LISTED]) or "none"
    if len(groups) > MAX_LISTED:
        listed += f" and {len(groups) - MAX_LISTED} more"
    raise UnknownGroup(f"no group {group!r} on this server; groups: {listed}")
