"""The in-memory backend: a whole fleet in one process, on trio's clock.

It mirrors :mod:`taskrunner.backends.redis`, one module per protocol it implements:
:mod:`._queue` (streams with consumer groups), :mod:`._state` (leases, the delayed set,
metrics, heartbeats, locks), :mod:`._defer`, :mod:`._flow`, :mod:`._catalog`,
:mod:`._schedules`, :mod:`._tracking`, :mod:`._events` and :mod:`._inspect`;
:mod:`._backend` puts them together as :class:`MemoryBackend`.
"""

from taskrunner.backends.memory._backend import MemoryBackend as MemoryBackend
from taskrunner.backends.memory._catalog import MemoryCatalog as MemoryCatalog
from taskrunner.backends.memory._defer import MemoryDefer as MemoryDefer
from taskrunner.backends.memory._events import MemoryEvents as MemoryEvents
from taskrunner.backends.memory._flow import MemoryFlow as MemoryFlow
from taskrunner.backends.memory._inspect import MemoryInspection as MemoryInspection
from taskrunner.backends.memory._queue import MemoryStream as MemoryStream
from taskrunner.backends.memory._state import MemoryState as MemoryState
from taskrunner.backends.memory._tracking import MemoryTracking as MemoryTracking
