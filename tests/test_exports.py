"""The public surface, pinned (in the manner of trio's test_exports).

Each public module's names are listed here: adding, removing or renaming one is a
decision to make on purpose (and to note in docs/changelog.md), not a side effect.
A module's surface is its ``__all__`` when it has one; otherwise the public names
it binds to classes and functions of taskrunner (its own, or re-exported).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import types
from pathlib import Path

import pytest

import taskrunner

PUBLIC: dict[str, set[str]] = {
    "taskrunner": {
        "AlreadyServing",
        "Schedule",
        "BackendError",
        "Delivery",
        "DuplicateHost",
        "Backoff",
        "InvalidTaskPayload",
        "InvalidTaskResult",
        "RateLimit",
        "LifespanError",
        "Retry",
        "RunnerStatistics",
        "SharedStreamError",
        "Stats",
        "Task",
        "TaskAlreadyDispatched",
        "TaskCancelled",
        "TaskError",
        "TaskContext",
        "TaskEvent",
        "TaskExecutionError",
        "TaskFailed",
        "TaskHandle",
        "TaskInfo",
        "TaskMaxRetryExceeded",
        "TaskMessage",
        "TaskNotFound",
        "TaskProgress",
        "TaskRunner",
        "TaskRunnerConfig",
        "TaskRunnerError",
        "TaskState",
        "TaskTimeout",
        "WrongAsyncLibrary",
        # Workflows (issue 28)
        "InvalidWorkflow",
        "StepFailed",
        "StepState",
        "StepStatus",
        "Workflow",
        "WorkflowCancelled",
        "WorkflowFailed",
        "WorkflowHandle",
        "WorkflowState",
        "WorkflowStatus",
        "chain",
        "chord",
        "group",
    },
    "taskrunner.errors": {
        "AlreadyServing",
        "BackendError",
        "DuplicateHost",
        "InvalidCommandArgument",
        "InvalidTaskPayload",
        "InvalidTaskResult",
        "LifespanError",
        "NotReplicated",
        "ResultTimeout",
        "Retry",
        "SharedStreamError",
        "TaskAlreadyDispatched",
        "TaskCancelled",
        "TaskExecutionError",
        "TaskFailed",
        "TaskMaxRetryExceeded",
        "TaskNotFound",
        "TaskRunnerError",
        "TaskTimeout",
        "WrongAsyncLibrary",
    },
    "taskrunner.backends": {
        "Admission",
        "Backend",
        "Cancellation",
        "FireResult",
        "FireStatus",
        "RunOutcome",
        "ScheduleRecords",
        "ScheduleState",
        "Schedules",
        "TickFire",
        "CatalogDocument",
        "CatalogTask",
        "ConsumerInfo",
        "DeadLetter",
        "Deferral",
        "DelayedMove",
        "EventBatch",
        "EventLog",
        "FlowControl",
        "GroupInfo",
        "Heartbeat",
        "Inspection",
        "KeyCounts",
        "KeyInfo",
        "KeyKind",
        "Lease",
        "LimitedBy",
        "MessageCounts",
        "MessageQueue",
        "Outcome",
        "ParkOutcome",
        "Paused",
        "ProgressUpdate",
        "QueueEntry",
        "QueueMetrics",
        "Replay",
        "Replayed",
        "SharedState",
        "SlotHold",
        "StreamKeys",
        "TaskCatalog",
        "TaskEvent",
        "TaskProgress",
        "TaskSnapshot",
        "TimingFields",
        "TimingIncrement",
        "Tracking",
        "StepAudit",
        "StepRecord",
        "StepSources",
        "WorkflowEnds",
        "WorkflowRecord",
        "WorkflowStates",
        "WorkflowStore",
    },
    "taskrunner.backends.memory": {
        "MemoryBackend",
        "MemoryDefer",
        "MemoryEvents",
        "MemoryFlow",
        "MemoryCatalog",
        "MemoryInspection",
        "MemoryState",
        "MemoryStream",
        "MemoryTracking",
    },
    "taskrunner.backends.redis": {"RedisBackend"},
    "taskrunner.testing": {
        "CHECK_TIMEOUT",
        "CONTRACT_CHECKS",
        "ClusterNode",
        "ClusterProcess",
        "ContractCheck",
        "INSPECTION_CHECKS",
        "PartitionedBackend",
        "ServerProcess",
        "contract_parametrize",
        "find_server_binary",
        "free_port",
        "running_cluster",
        "running_server",
        "running_sentinel_deployment",
        "SentinelDeployment",
        "SentinelProcess",
        "sync_command",
    },
    "taskrunner.admin": {
        "DeadLetterInfo",
        "GroupListing",
        "KeyInfo",
        "ReplayResult",
        "ScheduleRow",
        "cancel",
        "cancel_workflow",
        "dead_letter",
        "dead_letters",
        "desired_instances",
        "documented_keys",
        "events",
        "flush",
        "get_task",
        "get_workflow",
        "list_groups",
        "list_keys",
        "purge_dead_letters",
        "queues",
        "replay_all_dead_letters",
        "replay_dead_letters",
        "pause",
        "paused",
        "resume",
        "schedules",
    },
    "taskrunner.producer": {
        "AsyncProducer",
        "AsyncProducerHandle",
        "Producer",
        "ProducerHandle",
        "ResultTimeout",
    },
    "taskrunner.prometheus": {"DURATION_BUCKETS", "RunnerCollector", "Snapshot", "serve_metrics"},
    "taskrunner.cli": {"main"},
    "taskrunner.dashboard": {"TOKEN_ENV", "Sampler", "create_app", "redact_url"},
    "taskrunner.otel": {"OUTCOME", "instrument"},
}
"""Every public module, and its public names."""


def surface(module: types.ModuleType) -> set[str]:
    names: list[str] | None = getattr(module, "__all__", None)
    if names is not None:
        return set(names)
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", "").startswith("taskrunner")
    }


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_surface(name: str) -> None:
    assert surface(importlib.import_module(name)) == PUBLIC[name]


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_name_resolves_to_a_taskrunner_object(name: str) -> None:
    """Classes and functions only: constants and type aliases have no home module."""
    module = importlib.import_module(name)
    for public in PUBLIC[name]:
        value = getattr(module, public)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("taskrunner."), (public, value.__module__)


def test_the_top_level_names_are_the_same_objects_as_their_homes() -> None:
    from taskrunner import errors

    for public in PUBLIC["taskrunner.errors"] & PUBLIC["taskrunner"]:
        assert getattr(taskrunner, public) is getattr(errors, public)


def test_the_version_comes_from_the_metadata() -> None:
    from importlib.metadata import version

    assert taskrunner.__version__ == version("trio-taskrunner")


PACKAGES = [
    "taskrunner",
    "taskrunner.backends",
    "taskrunner.backends.redis",
    "taskrunner.dashboard",
    "taskrunner.producer",
    "taskrunner.testing",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_reexports_are_explicit(name: str) -> None:
    """A package's ``__init__`` re-exports as ``from x import Y as Y`` (or lists Y in
    ``__all__``), so type checkers see the name as public (mypy's
    ``--no-implicit-reexport``, part of ``--strict``)."""
    module = importlib.import_module(name)
    listed = set(getattr(module, "__all__", ()))
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text())
    implicit = [
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("taskrunner")
        for alias in node.names
        if not alias.name.startswith("_")
        and alias.asname != alias.name
        and alias.name not in listed
        and alias.name in PUBLIC[name]
    ]
    assert implicit == []


def test_the_library_never_imports_the_command_line() -> None:
    """Nothing outside taskrunner/cli/ imports it: the command line is an application."""
    package = Path(taskrunner.__file__).parent
    importers = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "cli" not in path.relative_to(package).parts[:1]
        and path.name != "__main__.py"
        and "taskrunner.cli" in path.read_text()
    ]
    assert importers == []
