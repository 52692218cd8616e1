"""Backend interfaces and value types.

- :class:`Backend` (:class:`MessageQueue` + :class:`SharedState` + :class:`Deferral` +
  :class:`FlowControl` + :class:`TaskCatalog` + :class:`Schedules` +
  :class:`Tracking`): what a runner serves on.
- :class:`Inspection`: the operator reads and operations (``taskrunner.admin``, the CLI).
- :class:`EventLog`: tasks' progress and the group's event stream.
- :mod:`taskrunner.backends.memory`: :class:`MemoryBackend`, in-process, on trio's clock.
- :mod:`taskrunner.backends.redis`: Redis Streams, for production.
"""

from taskrunner._flow.limits import Paused as Paused
from taskrunner._keys import StreamKeys as StreamKeys
from taskrunner._wire import CatalogDocument as CatalogDocument
from taskrunner._wire import CatalogTask as CatalogTask
from taskrunner._wire import TimingFields as TimingFields
from taskrunner._wire import TimingIncrement as TimingIncrement
from taskrunner.backends._protocols import Backend as Backend
from taskrunner.backends._protocols.catalog import TaskCatalog as TaskCatalog
from taskrunner.backends._protocols.deferral import Deferral as Deferral
from taskrunner.backends._protocols.events import EventBatch as EventBatch
from taskrunner.backends._protocols.events import EventLog as EventLog
from taskrunner.backends._protocols.events import ProgressUpdate as ProgressUpdate
from taskrunner.backends._protocols.events import TaskEvent as TaskEvent
from taskrunner.backends._protocols.events import TaskProgress as TaskProgress
from taskrunner.backends._protocols.flow import Admission as Admission
from taskrunner.backends._protocols.flow import FlowControl as FlowControl
from taskrunner.backends._protocols.flow import LimitedBy as LimitedBy
from taskrunner.backends._protocols.flow import ParkOutcome as ParkOutcome
from taskrunner.backends._protocols.flow import SlotHold as SlotHold
from taskrunner.backends._protocols.inspection import Heartbeat as Heartbeat
from taskrunner.backends._protocols.inspection import Inspection as Inspection
from taskrunner.backends._protocols.inspection import KeyCounts as KeyCounts
from taskrunner.backends._protocols.inspection import KeyInfo as KeyInfo
from taskrunner.backends._protocols.inspection import KeyKind as KeyKind
from taskrunner.backends._protocols.inspection import Lease as Lease
from taskrunner.backends._protocols.inspection import MessageCounts as MessageCounts
from taskrunner.backends._protocols.queue import ConsumerInfo as ConsumerInfo
from taskrunner.backends._protocols.queue import DeadLetter as DeadLetter
from taskrunner.backends._protocols.queue import DelayedMove as DelayedMove
from taskrunner.backends._protocols.queue import GroupInfo as GroupInfo
from taskrunner.backends._protocols.queue import MessageQueue as MessageQueue
from taskrunner.backends._protocols.queue import QueueEntry as QueueEntry
from taskrunner.backends._protocols.queue import QueueMetrics as QueueMetrics
from taskrunner.backends._protocols.schedules import FireResult as FireResult
from taskrunner.backends._protocols.schedules import FireStatus as FireStatus
from taskrunner.backends._protocols.schedules import RunOutcome as RunOutcome
from taskrunner.backends._protocols.schedules import ScheduleRecords as ScheduleRecords
from taskrunner.backends._protocols.schedules import Schedules as Schedules
from taskrunner.backends._protocols.schedules import ScheduleState as ScheduleState
from taskrunner.backends._protocols.schedules import TickFire as TickFire
from taskrunner.backends._protocols.state import SharedState as SharedState
from taskrunner.backends._protocols.tracking import Cancellation as Cancellation
from taskrunner.backends._protocols.tracking import Outcome as Outcome
from taskrunner.backends._protocols.tracking import Replay as Replay
from taskrunner.backends._protocols.tracking import Replayed as Replayed
from taskrunner.backends._protocols.tracking import TaskSnapshot as TaskSnapshot
from taskrunner.backends._protocols.tracking import Tracking as Tracking
from taskrunner.backends._protocols.workflows import StepAudit as StepAudit
from taskrunner.backends._protocols.workflows import StepRecord as StepRecord
from taskrunner.backends._protocols.workflows import StepSources as StepSources
from taskrunner.backends._protocols.workflows import WorkflowEnds as WorkflowEnds
from taskrunner.backends._protocols.workflows import WorkflowRecord as WorkflowRecord
from taskrunner.backends._protocols.workflows import WorkflowStates as WorkflowStates
from taskrunner.backends._protocols.workflows import WorkflowStore as WorkflowStore
