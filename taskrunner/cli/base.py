"""What every ``taskrunner`` subcommand module shares: the command record, argument
types, the one-line failure, the defaults the operator commands assume, and the
check for an optional dependency. (Kept apart from
``taskrunner.cli`` so command modules can import it.)

Theory of operation (optional dependencies). ``rich`` (``top``, ``demo``) and
``prometheus-client`` (``worker --metrics-port``) come with extras, so no command
module imports them at import time: building the parser imports every
command, and ``taskrunner worker`` and ``dispatch`` must work without either.
The command that needs one calls :func:`import_extra` first, which turns a
missing module into :class:`MissingExtra`, one line naming the extra to install.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TextIO, cast

import attrs

from taskrunner._config import TaskRunnerConfig
from taskrunner._flow.limits import Paused

EXIT_USAGE = 2
"""argparse's exit code for bad usage."""
EXIT_FAILURE = 1
"""A command that ran and failed (one line on stderr says why)."""

DEFAULT_WORKERS = cast(int, attrs.fields(TaskRunnerConfig).num_workers.default)
"""Pool size per instance that ``stats`` and ``top`` assume when no tuning capacity is
published: ``TaskRunnerConfig.num_workers``'s default."""


def fail(prog: str, message: str, stderr: TextIO | None = None) -> int:
    """Print ``<prog>: error: <message>`` as one line on ``stderr`` (default:
    ``sys.stderr``) and return :data:`EXIT_FAILURE`."""
    one_line = message.replace("\n", " ")
    print(f"{prog}: error: {one_line}", file=sys.stderr if stderr is None else stderr)
    return EXIT_FAILURE


@attrs.frozen(kw_only=True)
class Command:
    """One subcommand of ``taskrunner``."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    """Runs the command; returns the process exit code."""


def paused_text(paused: Paused) -> str:
    """What is paused, in one line: ``nothing``, or e.g. ``queues low; tasks charge``."""
    parts = []
    if paused.queues:
        parts.append("queues " + ", ".join(sorted(paused.queues)))
    if paused.tasks:
        parts.append("tasks " + ", ".join(sorted(paused.tasks)))
    return "; ".join(parts) or "nothing"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


DISTRIBUTION = "trio-taskrunner"
"""The name taskrunner is installed by (``pip install trio-taskrunner``)."""


class MissingExtra(Exception):
    """A command needs an optional dependency that is not installed; the message
    names the extra that brings it."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"{module} is not installed; it comes with the {extra!r} extra: "
            f"python -m pip install '{DISTRIBUTION}[{extra}]'"
        )
        self.module = module
        self.extra = extra


def import_extra(module: str, extra: str) -> ModuleType:
    """Import ``module``, an optional dependency that ``extra`` installs.

    Raises:
        MissingExtra: ``module`` is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != module.partition(".")[0]:
            raise  # a module it needs is missing: a broken install, not a missing extra
        raise MissingExtra(module.partition(".")[0], extra) from exc
