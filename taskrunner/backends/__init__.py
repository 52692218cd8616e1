"""Backend interfaces and value types.

- :class:`Backend` (:class:`MessageQueue` + :class:`SharedState` + :class:`Deferral` +
  :class:`FlowControl` + :class:`TaskCatalog` + :class:`Schedules` +
  :class:`Tracking`): what a runner serves on.
- :class:`Inspection`: the operator reads and operations (``taskrunner.admin``, the CLI).
- :mod:`taskrunner.backends.memory`: :class:`MemoryBackend`, in-process, on trio's clock.
- :mod:`taskrunner.backends.redis`: Redis Streams, for production.
"""

from taskrunner._keys import StreamKeys as StreamKeys
from taskrunner._limits import Paused as Paused
from taskrunner._wire import CatalogDocument as CatalogDocument
from taskrunner._wire import CatalogTask as CatalogTask
from taskrunner._wire import TimingFields as TimingFields
from taskrunner._wire import TimingIncrement as TimingIncrement
from taskrunner.backends._catalog import TaskCatalog as TaskCatalog
from taskrunner.backends._deferral import Deferral as Deferral
from taskrunner.backends._flow import Admission as Admission
from taskrunner.backends._flow import FlowControl as FlowControl
from taskrunner.backends._flow import LimitedBy as LimitedBy
from taskrunner.backends._flow import ParkOutcome as ParkOutcome
from taskrunner.backends._flow import SlotHold as SlotHold
from taskrunner.backends._inspection import Heartbeat as Heartbeat
from taskrunner.backends._inspection import KeyCounts as KeyCounts
from taskrunner.backends._inspection import KeyInfo as KeyInfo
from taskrunner.backends._inspection import KeyKind as KeyKind
from taskrunner.backends._inspection import Lease as Lease
from taskrunner.backends._protocols import Backend as Backend
from taskrunner.backends._protocols import ConsumerInfo as ConsumerInfo
from taskrunner.backends._protocols import DeadLetter as DeadLetter
from taskrunner.backends._protocols import DelayedMove as DelayedMove
from taskrunner.backends._protocols import GroupInfo as GroupInfo
from taskrunner.backends._protocols import Inspection as Inspection
from taskrunner.backends._protocols import MessageQueue as MessageQueue
from taskrunner.backends._protocols import QueueEntry as QueueEntry
from taskrunner.backends._protocols import QueueMetrics as QueueMetrics
from taskrunner.backends._protocols import SharedState as SharedState
from taskrunner.backends._schedules import FireResult as FireResult
from taskrunner.backends._schedules import FireStatus as FireStatus
from taskrunner.backends._schedules import RunOutcome as RunOutcome
from taskrunner.backends._schedules import ScheduleRecords as ScheduleRecords
from taskrunner.backends._schedules import Schedules as Schedules
from taskrunner.backends._schedules import ScheduleState as ScheduleState
from taskrunner.backends._schedules import TickFire as TickFire
from taskrunner.backends._tracking import Cancellation as Cancellation
from taskrunner.backends._tracking import Outcome as Outcome
from taskrunner.backends._tracking import Replay as Replay
from taskrunner.backends._tracking import Replayed as Replayed
from taskrunner.backends._tracking import TaskSnapshot as TaskSnapshot
from taskrunner.backends._tracking import Tracking as Tracking
