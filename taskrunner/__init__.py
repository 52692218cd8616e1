"""taskrunner: a distributed task runner for trio.

Register async tasks on a :class:`TaskRunner`, ``dispatch`` them, and run
``trio.run(runner.serve)`` in as many processes as you like. Backends:
:class:`taskrunner.backends.memory.MemoryBackend` (in-process, on trio's
clock) and ``taskrunner.backends.redis.RedisBackend`` (Redis Streams).
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from taskrunner._config import TaskRunnerConfig as TaskRunnerConfig
from taskrunner._dispatch.handle import TaskError as TaskError
from taskrunner._dispatch.handle import TaskHandle as TaskHandle
from taskrunner._dispatch.handle import TaskInfo as TaskInfo
from taskrunner._dispatch.workflows import StepStatus as StepStatus
from taskrunner._dispatch.workflows import WorkflowHandle as WorkflowHandle
from taskrunner._dispatch.workflows import WorkflowStatus as WorkflowStatus
from taskrunner._execution.context import TaskContext as TaskContext
from taskrunner._execution.retry import Backoff as Backoff
from taskrunner._fleet.stats import Stats as Stats
from taskrunner._flow.limits import RateLimit as RateLimit
from taskrunner._runner import RunnerStatistics as RunnerStatistics
from taskrunner._runner import TaskRunner as TaskRunner
from taskrunner._schedules.periodic import Schedule as Schedule
from taskrunner._task import Delivery as Delivery
from taskrunner._task import Task as Task
from taskrunner._wire import TaskMessage as TaskMessage
from taskrunner._wire import TaskState as TaskState
from taskrunner._workflows import InvalidWorkflow as InvalidWorkflow
from taskrunner._workflows import StepFailed as StepFailed
from taskrunner._workflows import StepState as StepState
from taskrunner._workflows import Workflow as Workflow
from taskrunner._workflows import WorkflowCancelled as WorkflowCancelled
from taskrunner._workflows import WorkflowFailed as WorkflowFailed
from taskrunner._workflows import WorkflowState as WorkflowState
from taskrunner._workflows import chain as chain
from taskrunner._workflows import chord as chord
from taskrunner._workflows import group as group
from taskrunner.backends._protocols.events import TaskEvent as TaskEvent
from taskrunner.backends._protocols.events import TaskProgress as TaskProgress
from taskrunner.errors import AlreadyServing as AlreadyServing
from taskrunner.errors import BackendError as BackendError
from taskrunner.errors import DuplicateHost as DuplicateHost
from taskrunner.errors import InvalidTaskPayload as InvalidTaskPayload
from taskrunner.errors import InvalidTaskResult as InvalidTaskResult
from taskrunner.errors import LifespanError as LifespanError
from taskrunner.errors import Retry as Retry
from taskrunner.errors import SharedStreamError as SharedStreamError
from taskrunner.errors import TaskAlreadyDispatched as TaskAlreadyDispatched
from taskrunner.errors import TaskCancelled as TaskCancelled
from taskrunner.errors import TaskExecutionError as TaskExecutionError
from taskrunner.errors import TaskFailed as TaskFailed
from taskrunner.errors import TaskMaxRetryExceeded as TaskMaxRetryExceeded
from taskrunner.errors import TaskNotFound as TaskNotFound
from taskrunner.errors import TaskRunnerError as TaskRunnerError
from taskrunner.errors import TaskTimeout as TaskTimeout
from taskrunner.errors import WrongAsyncLibrary as WrongAsyncLibrary

try:
    __version__ = _version("trio-taskrunner")
    """The installed version (the distribution's metadata, set in pyproject.toml)."""
except _PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
