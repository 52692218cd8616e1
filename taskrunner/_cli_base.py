"""What every ``taskrunner`` subcommand module shares: the command record,
argument types, the one-line failure and the defaults the operator commands
assume. (Kept apart from ``_cli`` so command modules can import it.)"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TextIO, cast

import attrs

from taskrunner._config import TaskRunnerConfig

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
