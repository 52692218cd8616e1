"""Resolving ``module:attribute`` strings (``app.tasks:runner``) for the command line.

The command line names the user's runner the way ASGI servers name an
application: a dotted module path, a colon, and a dotted attribute path inside
the module. Every way that can go wrong is one :class:`ImportTargetError` whose
message is a single line naming the problem, so the CLI can print it without a
traceback. An exception raised *by the user's module* while it is imported is
reported the same way: its type, its message, and where it was raised, as the
file and line of the user's code (the innermost frame outside the standard
library, site-packages, taskrunner and importlib, so an error raised inside a
library points at the user's line that called it), or a ``SyntaxError``'s own
file and line.
The original is ``__cause__`` for anyone who wants the traceback
(``--log-level debug``).

The current directory is put on ``sys.path`` first (as ``python -m`` does, and
the ``taskrunner`` console script does not), so ``taskrunner worker
app.tasks:runner`` finds ``./app/tasks.py``.
"""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import traceback

from taskrunner._runner import TaskRunner
from taskrunner.errors import TaskRunnerError

__all__ = ["ImportTargetError", "load_runner", "resolve"]


class ImportTargetError(TaskRunnerError):
    """A ``module:attribute`` string could not be resolved (the message says why)."""


def _ensure_cwd_on_path() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _library_dirs() -> tuple[str, ...]:
    """Where code that is not the user's lives: the standard library, site-packages,
    and taskrunner itself (installed editable, it is in neither)."""
    paths = sysconfig.get_paths()
    dirs = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib") if name in paths}
    dirs.add(os.path.dirname(os.path.dirname(__file__)))  # taskrunner/, not just cli/
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


def _shown(filename: str) -> str:
    """``filename`` relative to the current directory when it is below it."""
    path = os.path.realpath(filename)
    cwd = os.path.join(os.path.realpath(os.getcwd()), "")
    return path.removeprefix(cwd) if path.startswith(cwd) else path


def where_raised(exc: BaseException) -> str | None:
    """``"app/tasks.py, line 7"``: where in the user's code ``exc`` was raised, if known."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f"{_shown(exc.filename)}, line {exc.lineno}"
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<")  # <frozen importlib._bootstrap>
    ]
    libraries = _library_dirs()
    own = [f for f in frames if not os.path.realpath(f.filename).startswith(libraries)]
    chosen = own or frames
    if not chosen:
        return None
    return f"{_shown(chosen[-1].filename)}, line {chosen[-1].lineno}"


def _import_failed(module_name: str, exc: BaseException) -> ImportTargetError:
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    where = where_raised(exc)
    at = f" at {where}" if where else ""
    return ImportTargetError(
        f"importing module {module_name!r} failed{at}: {type(exc).__name__}: {message}"
    )


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
        raise _import_failed(module_name, exc) from exc
    except Exception as exc:
        raise _import_failed(module_name, exc) from exc
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
