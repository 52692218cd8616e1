"""What every ``taskrunner`` subcommand module shares: the command record and
argument types. (Kept apart from ``taskrunner.cli`` so command modules can import it.)"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import attrs

EXIT_USAGE = 2
"""argparse's exit code for bad usage."""
EXIT_FAILURE = 1
"""A command that ran and failed (one line on stderr says why)."""


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
