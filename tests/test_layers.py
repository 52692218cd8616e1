"""The package's layers hold: the import-linter contracts declared in pyproject.toml
(``lint-imports``), and no operator tool reaching past the backend protocols to a client."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = ["cli", "dashboard", "admin", "otel.py", "prometheus"]


def test_the_declared_layers_and_forbidden_imports_hold() -> None:
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert command, "lint-imports is missing: install the test extra (import-linter)"
    done = subprocess.run(
        [command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _app_modules() -> list[Path]:
    package = ROOT / "taskrunner"
    found: list[Path] = []
    for app in APPS:
        path = package / app
        found.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return found


@pytest.mark.parametrize("path", _app_modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_an_app_never_reaches_a_backends_client(path: Path) -> None:
    """``backend.client`` is the Redis backend's own connection: an app that used it
    would work on Redis only and bypass what the protocols promise."""
    tree = ast.parse(path.read_text(), str(path))
    reached = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "client"
    ]
    assert reached == [], f"{path.name} reads .client at lines {reached}"
