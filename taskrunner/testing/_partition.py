"""A backend wrapper whose link can be cut, for partition and crash tests."""

from __future__ import annotations

from typing import Any

import trio

from taskrunner._keys import StreamKeys
from taskrunner.backends import Backend
from taskrunner.errors import BackendError


class PartitionedBackend:
    """A backend seen through a link that can be cut.

    While :attr:`cut` is true every call raises
    :class:`~taskrunner.errors.BackendError`, as a lost connection would (a
    call in flight when the link is cut loses its reply). Several runners can
    share one backend, each through its own link, to simulate a network
    partition or a crashed process deterministically under ``MockClock``::

        link = PartitionedBackend(backend)
        runner = TaskRunner(config, link)
        ...
        link.cut = True   # the runner can no longer reach the store
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.cut = False

    def now(self) -> float:
        return self._backend.now()

    def stream_keys(self, group: str) -> StreamKeys:
        return self._backend.stream_keys(group)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._backend, name)
        if not callable(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            await trio.lowlevel.checkpoint()
            if self.cut:
                raise BackendError(f"partitioned: {name} not sent", maybe_applied=False)
            result = await target(*args, **kwargs)
            if self.cut:  # the reply is lost on the way back
                raise BackendError(f"partitioned: no reply to {name}")
            return result

        return call
