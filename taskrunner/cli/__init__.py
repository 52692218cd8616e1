"""The ``taskrunner`` command line (also ``python -m taskrunner``).

Theory of operation: one ``argparse`` parser with a subparser per command.
Each command is a :class:`~taskrunner.cli.base.Command`: a name, a one-line
help, a function that adds its arguments, and a function that runs it from the
parsed namespace and returns the exit code. A command lives in its own module
(``cli/<name>.py``, exposing ``COMMAND``) and is listed in :data:`COMMANDS`.
Bad arguments are argparse's one-line error and exit code 2; a command's own
failures are its exit code and one line on stderr.

This package is an application of the library, not part of its API: its one
interface is :func:`main` (the ``taskrunner`` console script, and
``python -m taskrunner``); the command modules are its implementation. It uses
the library only through what the rest of the package offers, and the library
never imports it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from taskrunner import __version__
from taskrunner.cli import (
    dashboard,
    dead,
    demo,
    dispatch,
    flush,
    keys,
    pause,
    schedules,
    stats,
    tasks,
    top,
    worker,
)
from taskrunner.cli.base import EXIT_USAGE, Command

__all__ = ["main"]

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block: the usage is one --help away.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


COMMANDS: tuple[Command, ...] = (
    demo.COMMAND,
    worker.COMMAND,
    dispatch.COMMAND,
    stats.COMMAND,
    top.COMMAND,
    tasks.INSPECT,
    tasks.CANCEL,
    dead.COMMAND,
    pause.PAUSE,
    pause.RESUME,
    keys.COMMAND,
    schedules.COMMAND,
    flush.COMMAND,
    dashboard.COMMAND,
)


class _LevelGiven(argparse.Action):
    # Records that --log-level was given, so a command's own default level
    # (``default_log_level``, e.g. the worker's info) applies only when it was not.
    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.log_level_given = True


def _log_level_option(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--log-level",
        action=_LevelGiven,
        choices=LOG_LEVELS,
        type=str.lower,
        default=default,
        help="log messages at this level and above to stderr (default: warning; worker: info)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, every subcommand included."""
    parser = _Parser(prog="taskrunner", description="A distributed task runner for trio.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _log_level_option(parser, "warning")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.help)
        # SUPPRESS: given after the command it wins, absent it keeps the global value.
        _log_level_option(sub, argparse.SUPPRESS)
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


def configure_logging(level: str) -> None:
    """Send log records at ``level`` and above to stderr, ``%``-formatted."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr, force=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (argparse exits 2 on bad usage)."""
    args = build_parser().parse_args(argv)
    given = getattr(args, "log_level_given", False)
    configure_logging(args.log_level if given else getattr(args, "default_log_level", "warning"))
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except KeyboardInterrupt:
        print("taskrunner: interrupted", file=sys.stderr)
        return 130
