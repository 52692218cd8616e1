"""The interfaces a backend implements; their docstrings are the spec.

A backend is one object that is a :class:`MessageQueue` (streams with
consumer groups, like Redis streams), a :class:`SharedState` (the small
amount of fleet-wide state: leases, the delayed set, metrics, heartbeats,
locks, the published pool size), a :class:`~taskrunner.backends.Deferral`
(a run that must wait, a retry or a run held back by a limit, back through
the delayed set, atomically), a :class:`~taskrunner.backends.FlowControl`
(pauses, concurrency slots, rate limits), a
:class:`~taskrunner.backends.TaskCatalog` (the tasks serving runners serve,
for producers that send tasks by name), a :class:`Schedules` (the periodic
schedules' fenced fires and state, :mod:`taskrunner.backends._protocols.schedules`) and a
:class:`~taskrunner.backends.Tracking` (results, lookup by task id,
cancellation, dead-letter replay: :mod:`taskrunner.backends._protocols.tracking`).
That is all a runner needs to serve. The
operator tools (``taskrunner.admin``, the ``stats``, ``top``, ``keys`` and
``flush`` commands) also need an :class:`Inspection`: reads and operations
across the whole store, which both shipped backends implement and a backend
of one's own may leave out. ``taskrunner.testing`` holds the contract suite
every backend must pass.

Every queue method takes the consumer ``group`` first, and a ``queue``
keyword: the backend resolves the two to one stream
(:meth:`MessageQueue.stream_keys`). ``queue=None`` is the backend's own
queue (its ``queue`` setting, ``tasks`` by default), so a runner of one queue
calls every method as before. By default each group has streams of its own
(``taskrunner:<group>:<queue>``); a backend configured with an explicit prefix
gives every group the same ones, and the groups then each receive every entry.

Conventions for every method:

- Times are seconds (float) in the backend's own clock, :meth:`SharedState.now`:
  unix time on Redis, ``trio.current_time()`` in memory, so that trio's
  ``MockClock`` drives an in-memory fleet.
- Failures to reach the store raise :class:`taskrunner.errors.BackendError`
  (or a subclass); backend-native exceptions never escape.
- Cancellation: a call cancelled before it returns may or may not have taken
  effect on the store. Each method says what that leaves behind; all of them
  are safe to repeat.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from taskrunner.backends._protocols.catalog import TaskCatalog
from taskrunner.backends._protocols.deferral import Deferral
from taskrunner.backends._protocols.flow import FlowControl
from taskrunner.backends._protocols.queue import MessageQueue
from taskrunner.backends._protocols.schedules import Schedules
from taskrunner.backends._protocols.state import SharedState
from taskrunner.backends._protocols.tracking import Tracking


@runtime_checkable
class Backend(
    MessageQueue,
    SharedState,
    Deferral,
    FlowControl,
    TaskCatalog,
    Schedules,
    Tracking,
    Protocol,
):
    """What a :class:`taskrunner.TaskRunner` needs: a queue, shared state, the step
    that re-queues a waiting run (:class:`Deferral`), flow control, the task
    catalog it publishes what it serves in, the periodic schedules' state
    (:class:`~taskrunner.backends.Schedules`), and the tracking of tasks by id."""

    async def aclose(self) -> None:
        """Release connections. Idempotent."""
        ...
