"""The optional capability behind ``TaskRunnerConfig(min_replicas=N)``.

A backend whose store has replicas (``RedisBackend``) can add messages and wait
until ``replicas`` replicas hold them, in one step on one connection (Redis's
``WAIT`` counts the replicas that acknowledged the connection's own writes, so
it must follow the ``XADD`` on the same connection). The in-memory backend has
no replicas and does not offer it; a runner configured with ``min_replicas``
refuses such a backend when it is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class ReplicatedAdd(Protocol):
    """Adding messages that replicas confirmed."""

    async def add_replicated(
        self,
        group: str,
        payloads: Sequence[bytes],
        *,
        queue: str | None = None,
        replicas: int,
        wait_timeout: float,
    ) -> list[str]:
        """As ``Queue.add``, then wait up to ``wait_timeout`` s for ``replicas`` replicas.

        Returns:
            The ids of the added messages, in order.

        Raises:
            NotReplicated: Fewer replicas confirmed within ``wait_timeout``; the messages are on
                the master (``maybe_applied``) and may be lost if it fails now.
            BackendError: As for ``Queue.add``.

        Cancellation: as for ``Queue.add``: the messages may have been added.
        """
        ...

    async def add_delayed_replicated(
        self,
        group: str,
        member: bytes,
        run_at: float,
        *,
        task_id: str,
        replicas: int,
        wait_timeout: float,
    ) -> None:
        """As ``Deferral.add_delayed`` with ``task_id``, then wait as :meth:`add_replicated`.

        Raises:
            NotReplicated: Fewer replicas confirmed within ``wait_timeout``.
            BackendError: As for ``add_delayed``.

        Cancellation: the member may have been added; a repeat is harmless.
        """
        ...
