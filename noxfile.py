"""Developer sessions: `nox -s tests lint typecheck docs bench peers`."""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.default_venv_backend = "venv"

ROOT = Path(__file__).parent


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite (the README's test command, inside a fresh venv)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint rules and formatting) and import-linter (the layers in pyproject.toml)."""
    session.install("ruff>=0.6", "import-linter>=2.1")
    paths = ["taskrunner", "tests", "benchmarks", "examples", "noxfile.py"]
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)
    session.run("lint-imports")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install("-e", ".[test]", "mypy>=1.10")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site with every warning an error (into site/)."""
    session.install("-e", ".[docs]")
    session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Every script under benchmarks/ (or those named: `nox -s bench -- core`)."""
    session.install("-e", ".[test]")
    names = session.posargs or sorted(
        p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.stem.startswith("_")
    )
    for name in names:
        session.run("python", f"benchmarks/{name}.py")


@nox.session
def peers(session: nox.Session) -> None:
    """The comparison with arq, saq, streaq, taskiq, Celery and Dramatiq
    (benchmarks/peers/run.py; its options after `--`, e.g.
    `nox -s peers -- --only saq,taskrunner --repeat 1`)."""
    session.install("-e", ".")
    session.run("python", "benchmarks/peers/run.py", *session.posargs)
