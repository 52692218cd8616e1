"""The pure-decision modules stay pure: nothing in them awaits, and none imports trio,
a network library or a serve service (their decisions are table-tested each in a test
module of its own)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import taskrunner

PURE = [
    "_execution/backoff",
    "_dispatch/dead",
    "_dispatch/enqueue",
    "_fleet/lease",
    "_flow/limits",
    "_execution/outcomes",
    "_execution/poison",
    "_flow/priorities",
    "_dispatch/results",
    "_schedules/delayed",
    "_schedules/ticks",
    "_flow/slots",
    "_fleet/stats",
    "_fleet/tuning",
    "_keys",
    "_shards",
    "_dispatch/routing",
    "_fleet/scaling",
    "backends/redis/_failover",
]
"""The modules of pure decisions (see docs/concepts.md, "Where things live")."""
FORBIDDEN = (
    "trio",
    "socket",
    "hiredis",
    "redis",
    "taskrunner._serve",
    "taskrunner.backends.memory",
    "taskrunner.backends.redis",
)
"""Imports a pure module may not make, nor of their submodules. (``taskrunner.backends``
itself is allowed, for value types such as ``DelayedMove``.)"""


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def _imports(tree: ast.Module) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_does_no_io(module: str) -> None:
    path = Path(taskrunner.__file__).parent / f"{module}.py"
    tree = ast.parse(path.read_text())
    awaits = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.AsyncFunctionDef | ast.Await | ast.AsyncWith | ast.AsyncFor)
    ]
    assert awaits == [], f"{module} awaits (lines {awaits})"
    bad = [name for name in _imports(tree) if _forbidden(name)]
    assert bad == [], f"{module} imports {bad}"
