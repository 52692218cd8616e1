"""The dashboard in a real browser: Debian's chromium driven by playwright (through
``executable_path``: playwright's own browser download is never used), against a
real server with a running fleet (:class:`_dashboard_live.LiveFleet`).

A missing browser skips these tests on a developer's machine and fails them in CI
(``CI`` set), where ``.ci/run`` installs chromium. With ``TASKRUNNER_SCREENSHOTS=DIR``
each page's screenshot is saved into DIR (how docs/images/dashboard-*.png are made).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _dashboard_live import GROUP, HOSTS, QUEUES, SCHEDULE, LiveFleet

from taskrunner import Workflow

CHROMIUM = os.environ.get("TASKRUNNER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
TOKEN = "browser-test-token"
XSS = ["<script>window.__xss = 1</script>", '"><img src=x onerror="window.__xss=1">']
TIMEOUT_MS = 45_000  # a hang guard: a page under a loaded, parallel suite can take 20 s

pytestmark = pytest.mark.slow


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run the browser tests (.ci/run installs chromium)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (the test extra brings it)")
    if not Path(CHROMIUM).exists():
        _missing(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield launched
        launched.close()


@pytest.fixture
def fleet(redis_url: str) -> Iterator[LiveFleet]:
    live = LiveFleet(redis_url, refresh=0.3, sample_interval=0.3)
    live.start()
    try:
        yield live
    finally:
        live.release_held()
        live.stop()


@pytest.fixture
def acting_fleet(redis_url: str) -> Iterator[LiveFleet]:
    live = LiveFleet(redis_url, refresh=0.3, sample_interval=0.3, allow_actions=True, token=TOKEN)
    live.start()
    try:
        yield live
    finally:
        live.release_held()
        live.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    # bypass_csp: the waits below evaluate expressions, which the dashboard's CSP
    # (no eval) refuses. It also means the XSS test holds escaping alone to account,
    # without the CSP's help.
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    opened = context.new_page()
    opened.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    yield opened
    context.close()
    assert errors == [], errors


def screenshot(page: Any, name: str) -> None:
    folder = os.environ.get("TASKRUNNER_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / f"dashboard-{name}.png"), full_page=True)


def wait_for_updates(page: Any, count: int = 2) -> None:
    """Wait until the page applied ``count`` more live updates."""
    for _ in range(count):
        before = page.evaluate("document.body.dataset.updated || ''")
        page.wait_for_function(f"(document.body.dataset.updated || '') !== {before!r}")


def cell_texts(page: Any, selector: str) -> list[str]:
    texts: list[str] = page.locator(selector).all_inner_texts()
    return texts


def test_the_fleet_page_lists_the_group_and_every_instance(fleet: LiveFleet, page: Any) -> None:
    page.goto(fleet.base + "/")
    page.wait_for_function(
        f"document.querySelectorAll('#instances tbody tr').length === {len(HOSTS)}"
    )
    assert cell_texts(page, "#groups tbody tr td:first-child") == [GROUP]
    assert sorted(cell_texts(page, "#instances tbody tr td:first-child")) == sorted(HOSTS)
    assert "read-only" in page.inner_text("header")
    screenshot(page, "fleet")
    page.click(f"#groups a:text-is('{GROUP}')")
    page.wait_for_url(re.compile(rf"/groups/{GROUP}$"))
    assert page.inner_text("h1") == f"Group {GROUP}"


def test_the_group_page_updates_live_without_a_reload(fleet: LiveFleet, page: Any) -> None:
    page.goto(f"{fleet.base}/groups/{GROUP}")
    # Issue 24: the first render knows the sampler runs (it said it did not until the
    # first poll), before any live update.
    assert page.is_hidden("#not-sampling")
    page.evaluate("window.__same_page = true")
    wait_for_updates(page)
    rows = page.locator("#instances tbody tr")
    assert rows.count() == len(HOSTS)
    leaders = [r for r in page.locator("#instances tbody tr").all() if "yes" in r.inner_text()]
    assert leaders, "no instance is shown as the leader"
    assert page.inner_text("[data-bind='leader.host']") in HOSTS

    # Work that stays running: each instance's running count and the pending total rise.
    fleet.dispatch("hold", list(range(6)))
    page.wait_for_function(
        "[...document.querySelectorAll('#instances tbody tr td:nth-child(6)')]"
        ".reduce((n, td) => n + Number(td.textContent), 0) === 6"
    )
    page.wait_for_function(
        "document.querySelector(\".cards [data-bind='queue.pending']\").textContent === '6'"
    )
    consumers = cell_texts(page, "#consumers tbody tr td:nth-child(4)")
    assert sum(int(c) for c in consumers) == 6

    # Work that finishes: the timing table gains the task and the chart draws points.
    fleet.release_held()
    fleet.dispatch("echo", list(range(40)))
    page.wait_for_function(
        "[...document.querySelectorAll('#timing tbody tr td:first-child')]"
        ".some(td => td.textContent === 'echo')"
    )
    page.wait_for_function(
        "document.querySelector(\"[data-chart='charts.throughput']\")"
        ".getAttribute('points').split(' ').length >= 3"
    )
    page.wait_for_function(
        "document.querySelector(\"[data-chart='charts.queue_length']\")"
        ".getAttribute('points').length > 0"
    )
    # The measured throughput is the chart's newest point, the estimate labelled apart.
    page.wait_for_function(
        "document.querySelector('#throughput-measured').textContent.endsWith('/s')"
    )
    assert page.inner_text("#throughput-capacity").endswith("/s")
    assert page.evaluate("window.__same_page") is True  # never reloaded
    assert page.is_visible("#live")
    screenshot(page, "group")


def test_payloads_and_errors_render_as_text_and_no_script_runs(fleet: LiveFleet, page: Any) -> None:
    fleet.dispatch("fail", XSS)
    page.goto(f"{fleet.base}/groups/{GROUP}/dead")
    page.wait_for_function("document.querySelectorAll('#dead tbody tr').length === 2")
    wait_for_updates(page)  # the rows as live.js rebuilt them too
    errors = cell_texts(page, "#dead tbody tr td[data-bind='error']")  # the Error column
    assert len(errors) == len(XSS)
    for bad in XSS:  # the error, as text, exactly as the task raised it
        assert [e for e in errors if e.endswith(f"ValueError: {bad}")], (bad, errors)
    page.locator("#dead summary").first.click()
    payloads = page.locator("#dead pre.payload").all_text_contents()
    assert sorted(payloads) == sorted(json.dumps(bad) for bad in XSS)
    assert page.locator("#dead img").count() == 0
    assert page.locator("main script").count() == 0
    assert page.evaluate("window.__xss") is None
    screenshot(page, "dead")


def test_a_task_is_looked_up_by_id_from_the_group_page(fleet: LiveFleet, page: Any) -> None:
    (done_id,) = fleet.dispatch("echo", [{"order": 7, "note": XSS[1]}])
    (held_id,) = fleet.dispatch("hold", ["held"])
    page.goto(f"{fleet.base}/groups/{GROUP}")
    page.fill("input[name=id]", done_id)
    page.click("text=Look up")
    page.wait_for_url(re.compile(rf"/groups/{GROUP}/tasks/{re.escape(done_id)}$"))
    assert page.inner_text("h1") == f"Task {done_id}"
    page.wait_for_selector("#task-state:text-is('succeeded')")
    assert page.inner_text("[data-bind='task_name']") == "echo"
    assert page.inner_text("[data-bind='attempts']") == "1"
    assert json.loads(page.inner_text("[data-bind='result']")) == {"order": 7, "note": XSS[1]}
    assert page.locator("#task img").count() == 0  # the result's markup is text
    assert page.evaluate("window.__xss") is None
    screenshot(page, "task")

    # A running task, then the same page once it finished, by live updates alone.
    page.goto(f"{fleet.base}/groups/{GROUP}/tasks/{held_id}")
    page.evaluate("window.__same_page = true")
    page.wait_for_selector("#task-state:text-is('running')")
    assert page.inner_text("[data-bind='consumer']").startswith(f"{GROUP}_")
    fleet.release_held()
    page.wait_for_selector("#task-state:text-is('succeeded')")
    assert json.loads(page.inner_text("[data-bind='result']")) == "held"
    assert page.evaluate("window.__same_page") is True

    page.goto(f"{fleet.base}/groups/{GROUP}/tasks/1-0")
    assert "No task 1-0 in group g" in page.inner_text("main")


def test_a_running_task_is_cancelled_from_its_page(acting_fleet: LiveFleet, page: Any) -> None:
    log_in(page, acting_fleet.base)
    (held_id,) = acting_fleet.dispatch("hold", ["to be cancelled"])
    page.goto(f"{acting_fleet.base}/groups/{GROUP}/tasks/{held_id}")
    page.wait_for_selector("#task-state:text-is('running')")
    page.click("#cancel")
    page.wait_for_url(re.compile(r"\?done=cancelled$"))
    assert "Cancel requested." in page.inner_text(".notice")
    page.evaluate("window.__same_page = true")
    # Runners look up stop requests once a second: the page shows the outcome live.
    page.wait_for_selector("#task-state:text-is('cancelled')")
    assert not page.is_visible("#cancel")  # nothing left to cancel
    assert page.evaluate("window.__same_page") is True
    screenshot(page, "task-cancelled")


def test_a_workflow_page_shows_its_dag_live_and_cancels_it(
    acting_fleet: LiveFleet, page: Any
) -> None:
    log_in(page, acting_fleet.base)
    dag = (
        Workflow("nightly")
        .step("first", "echo", {"n": 1})
        .step("wait", "hold", {"n": 2}, after=["first"])
        .step("last", "echo", after=["wait"])
    )

    async def dispatch() -> str:
        return (await acting_fleet.runners[0].dispatch_workflow(dag)).id

    workflow_id: str = acting_fleet.call(dispatch)
    page.goto(f"{acting_fleet.base}/groups/{GROUP}/workflows/{workflow_id}")
    # The DAG in layers, each step's state live: "first" runs, then "wait" holds.
    page.wait_for_selector("#step-0-0 .step-state:text-is('succeeded')")
    assert [page.get_attribute(f"#step-{i}-0", "data-step") for i in range(3)] == [
        "first", "wait", "last",
    ]  # fmt: skip
    assert "after first" in page.inner_text("#step-1-0")
    assert page.inner_text("#workflow-state") == "running"
    assert page.inner_text("#count-pending") == "1"
    # A step's task page links back to its workflow. (A step's task link is drawn
    # with the page: "wait" may have had no task id yet when it loaded.)
    page.wait_for_selector("#step-1-0 .step-state:text-is('queued')")
    page.reload()
    page.click("#step-1-0 a.id")
    page.wait_for_selector("#task-state:text-is('running')")
    assert page.inner_text("#task-workflow") == workflow_id
    page.click("#task-workflow")
    page.wait_for_selector("#cancel-workflow")
    screenshot(page, "workflow")
    page.click("#cancel-workflow")
    page.wait_for_url(re.compile(r"\?done=workflow-cancelled$"))
    assert "Workflow cancelled" in page.inner_text(".notice")
    assert page.inner_text("#workflow-state") == "cancelled"
    assert not page.is_visible("#cancel-workflow")
    # The running step is stopped fleet-wide: the page shows it without a reload.
    page.evaluate("window.__same_page = true")
    page.wait_for_selector("#step-1-0 .step-state:text-is('cancelled')")
    assert page.inner_text("#step-2-0 .step-state") == "cancelled"
    assert page.inner_text("#count-cancelled") == "2"
    assert page.evaluate("window.__same_page") is True
    page.goto(f"{acting_fleet.base}/groups/{GROUP}/workflows/nope")
    assert "No workflow nope in group" in page.inner_text("main")


def test_dead_letters_are_replayed_and_purged(acting_fleet: LiveFleet, page: Any) -> None:
    base = f"{acting_fleet.base}/groups/{GROUP}/dead"
    log_in(page, acting_fleet.base)
    ids = acting_fleet.dispatch("flaky", ["a", "b", "c"])
    # A second tab watches the list: it sees every change by live updates only.
    watcher = page.context.new_page()
    watcher.set_default_timeout(TIMEOUT_MS)
    watcher.goto(base)
    watcher.evaluate("window.__same_page = true")
    watcher.wait_for_function("document.querySelectorAll('#dead tbody tr').length === 3")
    assert sorted(cell_texts(watcher, "#dead tbody tr td:nth-child(2)")) == sorted(ids)

    acting_fleet.broken = False
    page.goto(base)
    replayed = page.locator("#dead tbody tr").first
    replayed_task = replayed.locator("td:nth-child(2)").inner_text()
    replayed.locator("input[type=checkbox]").check()
    # The first live update rebuilds the rows (the page's own render has no
    # signature yet): what was ticked stays ticked.
    wait_for_updates(page, 1)
    assert page.locator("#dead tbody tr").first.locator("input[type=checkbox]").is_checked()
    page.click("button:text-is('Replay selected')")
    page.wait_for_url(re.compile(r"\?done=replayed$"))
    assert "Dead letters dispatched again." in page.inner_text(".notice")
    watcher.wait_for_function("document.querySelectorAll('#dead tbody tr').length === 2")
    assert replayed_task not in cell_texts(watcher, "#dead tbody tr td:nth-child(2)")
    # It ran again, as the same task: its page follows it to its result.
    page.goto(f"{acting_fleet.base}/groups/{GROUP}/tasks/{replayed_task}")
    page.wait_for_selector("#task-state:text-is('succeeded')")
    assert len(acting_fleet.mended) == 1

    page.goto(base)
    page.locator("#dead tbody tr").first.locator("input[type=checkbox]").check()
    wait_for_updates(page, 1)  # as above: once seen lost, and "none-purged"
    assert page.locator("#dead tbody tr").first.locator("input[type=checkbox]").is_checked()
    page.click("button:text-is('Purge selected')")
    page.wait_for_url(re.compile(r"\?done=purged$"))
    watcher.wait_for_function("document.querySelectorAll('#dead tbody tr').length === 1")
    page.click("button:text-is('Purge all')")
    page.wait_for_url(re.compile(r"\?done=purged$"))
    assert page.locator("#dead tbody tr").count() == 0
    watcher.wait_for_function("document.querySelectorAll('#dead tbody tr').length === 0")
    assert watcher.inner_text("[data-bind='shown']") == "0"
    assert len(acting_fleet.mended) == 1  # purged, not run
    assert watcher.evaluate("window.__same_page") is True
    watcher.close()


def test_the_schedules_page_shows_next_and_last_fire_and_outcome_live(
    fleet: LiveFleet, page: Any
) -> None:
    page.goto(f"{fleet.base}/groups/{GROUP}/schedules")
    page.evaluate("window.__same_page = true")
    row = f"#schedules tbody tr:has(td:text-is('{SCHEDULE}'))"
    page.wait_for_selector(f"{row} td.outcome:text-is('succeeded')")
    first = page.inner_text(f"{row} td.last-fire")
    # The leader fires every 2 s: the page shows each new fire without a reload.
    page.wait_for_function(
        "([name, first]) => [...document.querySelectorAll('#schedules tbody tr')].some("
        "tr => tr.cells[0].textContent === name && tr.cells[4].textContent !== first)",
        arg=[SCHEDULE, first],
    )
    cells = page.locator(f"{row} td").all_inner_texts()
    name, task, spec, next_fire, last_fire, fired_at, outcome, of_tick, _ = cells
    assert (name, task, spec) == (SCHEDULE, "ping", "every 2s")
    assert next_fire > last_fire  # both "YYYY-MM-DD HH:MM:SS", UTC
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d[02468]", last_fire), last_fire
    assert fired_at >= last_fire
    assert outcome == "succeeded"
    assert of_tick <= last_fire
    assert page.evaluate("window.__same_page") is True
    screenshot(page, "schedules")


def log_in(page: Any, base: str) -> None:
    page.goto(base + "/login")
    page.fill("input[name=token]", TOKEN)
    page.click("button:text-is('Log in')")
    page.wait_for_url(re.compile(r"/\?done=logged-in$"))


def queue_cell(page: Any, queue: str, column: str) -> str:
    """The text of ``column`` (``state``, ``lag``, ...) in the row of ``queue``."""
    index = {"length": 3, "pending": 4, "lag": 5, "state": 7}[column]
    text: str = page.inner_text(
        f"#queues tbody tr:has(td:text-is('{queue}')) td:nth-child({index})"
    )
    return text


def wait_for_queue(page: Any, queue: str, column: str, value: str) -> None:
    page.wait_for_function(
        "([queue, index, value]) => [...document.querySelectorAll('#queues tbody tr')].some("
        "tr => tr.cells[0].textContent === queue && tr.cells[index].textContent === value)",
        arg=[queue, {"length": 2, "pending": 3, "lag": 4, "state": 6}[column], value],
    )


def test_a_queue_is_paused_and_resumed_and_the_fleet_stops_and_starts_its_work(
    acting_fleet: LiveFleet, page: Any
) -> None:
    base = f"{acting_fleet.base}/groups/{GROUP}"
    log_in(page, acting_fleet.base)
    # A second tab watches the group page: it sees every change by live updates only.
    watcher = page.context.new_page()
    watcher.set_default_timeout(TIMEOUT_MS)
    watcher.goto(base)
    watcher.evaluate("window.__same_page = true")
    assert cell_texts(watcher, "#queues tbody tr td:first-child") == list(QUEUES)
    assert queue_cell(watcher, "bulk", "state") == "active"

    page.goto(base)
    page.click("#queues tbody tr:has(td:text-is('bulk')) button:text-is('Pause')")
    page.wait_for_url(re.compile(r"\?done=paused$"))
    assert "Queue paused" in page.inner_text(".notice")
    assert queue_cell(page, "bulk", "state") == "paused"
    assert page.is_visible("#queues tbody tr:has(td:text-is('bulk')) button:text-is('Resume')")
    assert not page.is_visible("#queues tbody tr:has(td:text-is('bulk')) button:text-is('Pause')")
    wait_for_queue(watcher, "bulk", "state", "paused")
    assert queue_cell(watcher, "tasks", "state") == "active"

    # The fleet stops taking bulk's work (within about a second of the pause) and
    # goes on with the other queue's.
    watcher.wait_for_timeout(1500)
    acting_fleet.dispatch("batch", list(range(5)))
    acting_fleet.dispatch("echo", list(range(5)))
    wait_for_queue(watcher, "bulk", "lag", "5")
    wait_for_updates(watcher, 4)
    assert queue_cell(watcher, "bulk", "lag") == "5"
    assert queue_cell(watcher, "tasks", "lag") == "0"
    assert acting_fleet.batches == []
    screenshot(watcher, "group-paused")

    page.click("#queues tbody tr:has(td:text-is('bulk')) button:text-is('Resume')")
    page.wait_for_url(re.compile(r"\?done=resumed$"))
    assert queue_cell(page, "bulk", "state") == "active"
    wait_for_queue(watcher, "bulk", "state", "active")
    wait_for_queue(watcher, "bulk", "lag", "0")
    assert sorted(acting_fleet.batches) == list(range(5))
    assert watcher.evaluate("window.__same_page") is True  # never reloaded
    watcher.close()


def test_a_task_is_paused_and_resumed_from_the_tasks_table(
    acting_fleet: LiveFleet, page: Any
) -> None:
    base = f"{acting_fleet.base}/groups/{GROUP}"
    log_in(page, acting_fleet.base)
    page.goto(base)
    row = "#timing tbody tr:has(td:text-is('batch'))"
    page.click(f"{row} button:text-is('Pause')")
    page.wait_for_url(re.compile(r"\?done=task-paused$"))
    page.evaluate("window.__same_page = true")
    assert page.inner_text(f"{row} td.state") == "paused"
    page.wait_for_timeout(1500)  # the runners notice within about a second
    acting_fleet.dispatch("batch", ["parked"])
    wait_for_updates(page, 6)
    assert acting_fleet.batches == []  # parked, not run
    assert page.inner_text(f"{row} td.state") == "paused"
    page.click(f"{row} button:text-is('Resume')")
    page.wait_for_url(re.compile(r"\?done=task-resumed$"))
    assert page.inner_text(f"{row} td.state") == "active"
    for _ in range(40):
        if acting_fleet.batches:
            break
        page.wait_for_timeout(250)
    assert acting_fleet.batches == ["parked"]


def test_actions_need_the_token_and_the_session_ends_at_log_out(
    acting_fleet: LiveFleet, page: Any
) -> None:
    opened = page.goto(acting_fleet.base + "/")
    assert opened.status == 200, page.content()
    page.click("text=Log in to act")
    page.fill("input[name=token]", TOKEN + "-wrong")
    page.click("button:text-is('Log in')")
    assert "That is not the action token." in page.inner_text("main")
    page.fill("input[name=token]", TOKEN)
    page.click("button:text-is('Log in')")
    page.wait_for_url(re.compile(r"/\?done=logged-in$"))
    assert "Logged in: actions are enabled." in page.inner_text("body")
    assert TOKEN not in page.url
    page.click("button:text-is('Log out')")
    page.wait_for_url(re.compile(r"/\?done=logged-out$"))
    assert page.locator("text=Log in to act").count() == 1
