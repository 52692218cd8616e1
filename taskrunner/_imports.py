"""Resolving ``module:attribute`` strings (``app.tasks:runner``) for the command line.

The command line names the user's runner the way ASGI servers name an
application: a dotted module path, a colon, and a dotted attribute path inside
the module. Every way that can go wrong is one :class:`ImportTargetError` whose
message is a single line naming the problem, so the CLI can print it without a
traceback. An exception raised *by the user's module* while it is imported is
reported the same way (its type and message), with the original as
``__cause__`` for anyone who wants the traceback (``--log-level debug``).

The current directory is put on ``sys.path`` first (as ``python -m`` does, and
the ``taskrunner`` console script does not), so ``taskrunner worker
app.tasks:runner`` finds ``./app/tasks.py``.
"""

from __future__ import annotations

import importlib
import os
import sys

from taskrunner._runner import TaskRunner
from taskrunner.errors import TaskRunnerError

__all__ = ["ImportTargetError", "load_runner", "resolve"]


class ImportTargetError(TaskRunnerError):
    """A ``module:attribute`` string could not be resolved (the message says why)."""


def _ensure_cwd_on_path() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def resolve(target: str) -> object:
    """The object ``target`` (``"package.module:attr.subattr"``) names.

    Raises:
        ImportTargetError: ``target`` is malformed, the module cannot be found
            or raised while importing, or an attribute is missing.
    """
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise ImportTargetError(
            f"{target!r} is not of the form 'module:attribute' (e.g. 'app.tasks:runner')"
        )
    if not all(part.isidentifier() for part in (*module_name.split("."), *attr_path.split("."))):
        raise ImportTargetError(f"{target!r} is not a valid 'module:attribute' path")
    _ensure_cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only a missing module *on the path we were given* is the user's typo;
        # a missing dependency inside their module is their module's error.
        if exc.name is not None and (
            module_name == exc.name or module_name.startswith(exc.name + ".")
        ):
            raise ImportTargetError(
                f"cannot import module {module_name!r}: no module named {exc.name!r} "
                f"(searched from {os.getcwd()})"
            ) from exc
        raise ImportTargetError(
            f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    except Exception as exc:
        raise ImportTargetError(
            f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    value: object = module
    walked = module_name
    for attr in attr_path.split("."):
        try:
            value = getattr(value, attr)
        except AttributeError:
            raise ImportTargetError(f"{walked!r} has no attribute {attr!r}") from None
        walked = f"{walked}:{attr}" if walked == module_name else f"{walked}.{attr}"
    return value


def load_runner(target: str) -> TaskRunner:
    """The :class:`~taskrunner.TaskRunner` that ``target`` names.

    Raises:
        ImportTargetError: as :func:`resolve`, or the object is not a TaskRunner.
    """
    value = resolve(target)
    if not isinstance(value, TaskRunner):
        raise ImportTargetError(f"{target!r} is a {type(value).__name__}, not a TaskRunner")
    return value
