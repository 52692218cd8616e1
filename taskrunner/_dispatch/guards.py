"""Turning the first mistakes a new user makes into one-line errors that say what to do.

Three checks, each cheap enough for where it runs: :func:`check_runner_arguments`
once per :class:`~taskrunner.TaskRunner`, :func:`require_trio` at the top of
every public ``async`` method of the runner, and :func:`require_inspection` where
an operator tool is handed a backend. taskrunner runs on trio; awaited
under asyncio its coroutines would otherwise fail deep inside with asyncio's
``RuntimeError: Task got bad yield``, which names neither the cause nor the cure.
"""

from __future__ import annotations

from typing import TypeGuard, cast

import sniffio
import trio

from taskrunner._config import TaskRunnerConfig
from taskrunner.backends import Backend, Inspection
from taskrunner.backends._protocols.events import EventLog
from taskrunner.backends._protocols.replication import ReplicatedAdd
from taskrunner.errors import WrongAsyncLibrary

BACKEND_METHODS = sorted(
    {
        name
        for protocol in Backend.__mro__
        if getattr(protocol, "_is_protocol", False) and protocol.__module__.startswith("taskrunner")
        for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_")
    }
)
"""What an object needs to serve as a backend. Looked up with ``getattr`` rather than
``isinstance(x, Backend)``, which on Python >= 3.12 does not see attributes a wrapper
provides through ``__getattr__``."""


INSPECTION_METHODS = sorted(
    name for name, value in vars(Inspection).items() if callable(value) and not name.startswith("_")
)
"""What an object needs to serve the operator tools (looked up as :data:`BACKEND_METHODS` is)."""


def _lacks(backend: object, names: list[str]) -> list[str]:
    return [name for name in names if not callable(getattr(backend, name, None))]


def missing_inspection(backend: object) -> list[str]:
    """The methods of :class:`~taskrunner.backends.Inspection` that ``backend`` lacks."""
    return _lacks(backend, INSPECTION_METHODS)


def implements_inspection(backend: object) -> TypeGuard[Inspection]:
    """Whether ``backend`` has every method of :class:`~taskrunner.backends.Inspection`."""
    return not missing_inspection(backend)


def require_inspection(backend: object, tool: str) -> Inspection:
    """``backend``, for ``tool`` (``"taskrunner.admin.flush"``), which needs its inspection.

    Raises:
        TypeError: ``backend`` lacks methods of the protocol; the one line names
            the tool, the protocol and the methods missing.
    """
    missing = missing_inspection(backend)
    if missing:
        raise TypeError(
            f"{tool} needs a backend implementing taskrunner.backends.Inspection; "
            f"{type(backend).__name__} {backend!r} has no {', '.join(missing)}"
        )
    return cast(Inspection, backend)


def check_runner_arguments(config: object, backend: object) -> None:
    """Refuse the arguments of ``TaskRunner(config, backend)`` that cannot work.

    Raises:
        TypeError: ``config`` is not a :class:`TaskRunnerConfig`, or ``backend``
            lacks the :class:`~taskrunner.backends.Backend` methods (a URL string,
            say); the message says what to pass instead.
    """
    if not isinstance(config, TaskRunnerConfig):
        if isinstance(config, dict):
            hint = "TaskRunnerConfig(**config)"
        else:
            group = config if isinstance(config, str) else "app"
            hint = f"e.g. TaskRunnerConfig(consumer_group={group!r})"
        raise TypeError(
            f"TaskRunner's config must be a TaskRunnerConfig, got {type(config).__name__} "
            f"{config!r}; pass {hint}"
        )
    missing = _lacks(backend, BACKEND_METHODS)
    if not missing:
        if config.min_replicas and not isinstance(backend, ReplicatedAdd):
            raise ValueError(
                f"min_replicas={config.min_replicas} needs a backend with replicas "
                f"(RedisBackend); {type(backend).__name__} has none"
            )
        if config.events and not isinstance(backend, EventLog):
            raise ValueError(
                f"events=True needs a backend with an event log (RedisBackend, "
                f"MemoryBackend); {type(backend).__name__} has none"
            )
        return
    if isinstance(backend, str):
        hint = f"RedisBackend.from_url({backend!r}) (from taskrunner.backends.redis)"
    else:
        hint = "RedisBackend.from_url(url) or MemoryBackend()"
    # A partial backend of one's own is told what it lacks; anything else, what to pass.
    lacks = "" if len(missing) == len(BACKEND_METHODS) else f" (it has no {', '.join(missing)})"
    raise TypeError(
        f"TaskRunner's backend must be a Backend, got {type(backend).__name__} "
        f"{backend!r}{lacks}; pass {hint}"
    )


def require_trio(method: str) -> None:
    """Raise :class:`WrongAsyncLibrary` unless trio is running this thread.

    ``method`` names the caller in the message (``"TaskRunner.dispatch"``). Costs
    one thread-local lookup when trio runs; only the failure asks sniffio which
    library it is.

    Raises:
        WrongAsyncLibrary: called from asyncio (or another library), or outside
            any event loop.
    """
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        try:
            library: str | None = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            library = None
        raise WrongAsyncLibrary(method, library) from None
