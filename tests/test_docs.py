"""The documentation site builds with ``mkdocs build --strict`` (every link, nav entry,
snippet include and API reference resolves) and has its key pages."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT = 900
"""A hang guard, not a speed limit: the build takes about 9 s of CPU (34 s on the 2-core
machine at load 7.5), and CI ran it past 120 s at load 20, so the bound leaves room for
a machine ten times as busy; a build that is stuck fails, showing what it printed."""

KEY_PAGES = [
    "index.html",
    "getting-started/index.html",
    "dispatching/index.html",
    "flow-control/index.html",
    "concepts/index.html",
    "life-of-a-run/index.html",
    "coming-from-arq-or-celery/index.html",
    "backends/index.html",
    "testing-your-tasks/index.html",
    "redis-key-layout/index.html",
    "go-interop/index.html",
    "timing-metrics/index.html",
    "tuning/index.html",
    "performance/index.html",
    "operations/index.html",
    "prometheus/index.html",
    "examples/index.html",
    "changelog/index.html",
    "reference/taskrunner/index.html",
    "reference/errors/index.html",
    "reference/backends/index.html",
    "reference/memory/index.html",
    "reference/redis/index.html",
    "reference/admin/index.html",
    "reference/producer/index.html",
    "reference/testing/index.html",
    "reference/prometheus/index.html",
    "reference/otel/index.html",
]

REFERENCED = {
    "reference/taskrunner/index.html": [
        "taskrunner.TaskRunner.dispatch",
        "taskrunner.TaskRunner.serve",
        "taskrunner.TaskRunnerConfig.consumer_group",
        "taskrunner.TaskRunnerConfig.target_wait",
        "taskrunner.Stats",
        "taskrunner.TaskRunner.get_task",
        "taskrunner.TaskRunner.cancel",
        "taskrunner.TaskHandle.result",
        "taskrunner.TaskInfo",
    ],
    "reference/errors/index.html": ["taskrunner.errors.TaskRunnerError"],
    "reference/backends/index.html": [
        "taskrunner.backends.MessageQueue",
        "taskrunner.backends.Inspection",
        "taskrunner.backends.Inspection.list_keys",
        "taskrunner.backends.KeyInfo",
        "taskrunner.backends.Tracking",
        "taskrunner.backends.Tracking.cancel",
    ],
    "reference/memory/index.html": ["taskrunner.backends.memory.MemoryBackend"],
    "reference/redis/index.html": ["taskrunner.backends.redis.RedisBackend.from_client"],
    "reference/admin/index.html": [
        "taskrunner.admin.flush",
        "taskrunner.admin.get_task",
        "taskrunner.admin.replay_dead_letters",
        "taskrunner.admin.desired_instances",
    ],
    "reference/producer/index.html": [
        "taskrunner.producer.Producer.dispatch",
        "taskrunner.producer.Producer.from_url",
        "taskrunner.producer.AsyncProducer.dispatch",
        "taskrunner.producer.ProducerHandle",
        "taskrunner.producer.ProducerHandle.result",
        "taskrunner.producer.Producer.cancel",
        "taskrunner.producer.AsyncProducerHandle.result",
    ],
    "reference/testing/index.html": ["taskrunner.testing.contract_parametrize"],
    "reference/prometheus/index.html": ["taskrunner.prometheus.RunnerCollector"],
    "reference/otel/index.html": ["taskrunner.otel.instrument"],
}
"""Objects each API reference page must document (their HTML anchors)."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        )
    except subprocess.TimeoutExpired as exc:
        printed = b"".join(
            part if isinstance(part, bytes) else part.encode()
            for part in (exc.stdout, exc.stderr)
            if part
        )
        pytest.fail(f"mkdocs build hung ({BUILD_TIMEOUT} s); it printed:\n{printed.decode()}")
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.mark.parametrize("page", KEY_PAGES)
def test_page_is_built(site: Path, page: str) -> None:
    assert (site / page).is_file()


@pytest.mark.parametrize("page", sorted(REFERENCED))
def test_reference_documents_the_api(site: Path, page: str) -> None:
    html = (site / page).read_text()
    missing = [name for name in REFERENCED[page] if f'id="{name}"' not in html]
    assert not missing, f"{page} does not document {missing}"


def test_snippets_are_expanded(site: Path) -> None:
    """Included example code is in the pages, and no include marker is left over."""
    for page in ("getting-started", "backends", "redis-key-layout", "tuning", "examples"):
        html = (site / page / "index.html").read_text()
        assert "--8&lt;--" not in html, page
        assert "8&lt;" not in html, page
    assert "make_thumbnail" in (site / "getting-started" / "index.html").read_text()


def test_key_layout_lists_every_key() -> None:
    """Every key family of taskrunner._keys is on the key-layout page."""
    text = (ROOT / "docs" / "redis-key-layout.md").read_text()
    for key in [
        "`<prefix>:<queue>`",
        "`<prefix>:<queue>:dead`",
        "`ring:<prefix>:metrics:<queue>`",
        "`taskrunner:<group>:delayed_tasks`",
        "`taskrunner:leader:<base32(sha1(<group>))>`",
        "`taskrunner:<group>:worker_tuning_capacity`",
        "`taskrunner:<group>:desired_instances`",
        "`taskrunner:<group>:metrics`",
        "`taskrunner:<group>:catalog`",
        "`taskrunner:<group>:delayed_ids`",
        "`taskrunner:<group>:entry_ids`",
        "`taskrunner:<group>:cancelled`",
        "`taskrunner:<group>:result:<task id>`",
        "`taskrunner:<group>:notify:<task id>`",
        "`taskrunner:<group>:paused`",
        "`taskrunner:<group>:concurrency:<task>`",
        "`taskrunner:<group>:rate:<task>`",
        "`taskrunner:<group>:rate_pace:<task>`",
        "`taskrunner:<group>:parked:<task>`",
        "`taskrunner:<group>:schedules`",
        "`taskrunner:<group>:schedule_specs`",
        "`taskrunner:replication:<host>`",
        "`taskrunner:unique:<task>:<key>`",
    ]:
        assert key in text, key


@pytest.mark.parametrize("module", ["admin", "prometheus"])
def test_a_reference_page_listing_its_members_lists_every_public_name(module: str) -> None:
    """The admin and prometheus pages name their members (so that the names their
    package imports from its private modules, beyond ``__all__``, are shown as before
    the split): a public name added to ``__all__`` must be added there too."""
    page = (ROOT / "docs" / "reference" / f"{module}.md").read_text()
    listed = {line.strip()[2:] for line in page.splitlines() if line.strip().startswith("- ")}
    public = set(importlib.import_module(f"taskrunner.{module}").__all__)
    assert public - listed == set()
