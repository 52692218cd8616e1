"""Every script in ``examples/`` runs by itself, quickly, and prints what the docs say."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("test_"))
TEST_MODULES = sorted(p.name for p in EXAMPLES.glob("test_*.py"))
RUN_TIMEOUT = 30

EXPECTED: dict[str, list[str]] = {
    "quickstart.py": [
        "hello, Ada",
        "hello, Alan",
        "hello, Grace",
        "hello, Edsger",
        "hello, Barbara",
        "done: 5 completed, 5 acked",
    ],
    "typed_payload.py": [
        "refused at dispatch: InvalidTaskPayload",
        "invoice for Ada: 2 line(s), 3 item(s)",
        "invoice for Alan: 1 line(s), 5 item(s)",
        "done: 2 completed",
    ],
    "failure_handling.py": [
        "  on_error: charge attempt 1 raised ConnectionError('card processor unreachable')",
        "  on_error: charge attempt 2 raised ConnectionError('card processor unreachable')",
        "  charge: 1250 cents charged on attempt 3",
        "  on_error: refund attempt 1 raised ValueError('refund window closed')",
        "  on_error: refund attempt 2 raised ValueError('refund window closed')",
        "  failed_task_handler: refund gave up: TaskMaxRetryExceeded",
        "  completed 1, failed attempts 4, handled 1",
    ],
    "graceful_shutdown.py": [
        "  a: Q1 done",
        "  a: Q2 done",
        "  a: building Q3...",
        "  b: building Q3...",
        "  b: Q3 done",
        "  a: completed 0, acked 0, reclaimed 0",
        "  b: completed 1, acked 1, reclaimed 1",
    ],
    "unique_tasks.py": [
        "refused: taskrunner:unique:sync_account:1 is held",
        "syncing account 1",
        "syncing account 2",
        "account 1 dispatched again after its first run finished",
    ],
}
"""Lines each script must print (in any order: tasks run concurrently)."""


@functools.cache
def run_example(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def section(stdout: str, number: int) -> list[str]:
    """The lines of a script's numbered part (``"2. ..."`` up to ``"3. ..."``)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{number}. "))
    end = next(
        (i for i, line in enumerate(lines) if line.startswith(f"{number + 1}. ")), len(lines)
    )
    return lines[start:end]


def test_every_example_has_expectations() -> None:
    assert SCRIPTS == sorted(EXPECTED)


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_runs(name: str) -> None:
    result = run_example(name)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    missing = [line for line in EXPECTED[name] if line not in printed]
    assert not missing, result.stdout
    assert "Traceback" not in result.stderr


def test_failure_handling_dead_letters_without_a_handler() -> None:
    part = section(run_example("failure_handling.py").stdout, 2)
    (letter,) = [line for line in part if line.startswith("  dead letter for message ")]
    assert re.fullmatch(
        r"  dead letter for message (\S+): TaskMaxRetryExceeded: task 'refund' \(message \1\) "
        r"failed after 2 attempt\(s\): ValueError: refund window closed",
        letter,
    )


def test_shutdown_acks_the_task_that_finished() -> None:
    part = section(run_example("graceful_shutdown.py").stdout, 1)
    assert part[-1] == "  serve returned: completed 1, acked 1, reclaimed 0"


def test_cancelling_serve_acks_the_task_that_finished() -> None:
    part = section(run_example("graceful_shutdown.py").stdout, 2)
    assert part[-1] == "  serve returned: completed 1, acked 1, reclaimed 0"


@pytest.mark.parametrize("name", TEST_MODULES)
def test_example_test_module_passes(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        cwd=EXAMPLES.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout.splitlines()[-1]
    assert "failed" not in result.stdout.splitlines()[-1]


DOCS = ["README.md", "docs/index.md", "docs/getting-started.md", "docs/concepts.md"]
DOCS += ["docs/testing-your-tasks.md"]


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", markdown, re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("doc", DOCS)
def test_doc_code_is_taken_from_a_tested_example(doc: str) -> None:
    """Each Python block in the docs is a verbatim excerpt (at some indent) of an example."""
    sources = [p.read_text() for p in EXAMPLES.glob("*.py")]
    for block in python_blocks((EXAMPLES.parent / doc).read_text()):
        found = any(
            textwrap.indent(block, " " * indent) in source
            for source in sources
            for indent in (0, 4, 8)
        )
        assert found, f"{doc}: this block is not in any examples/*.py:\n{block}"
