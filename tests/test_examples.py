"""Every script in ``examples/`` runs by itself, quickly, and prints what the docs say."""

from __future__ import annotations

import functools
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PRODUCER_EXAMPLES: dict[str, list[str]] = {
    "producer_script.py": [
        "worker: resized cat.png to 100 px",
        "worker: resized 1.png to 50 px",
        "worker: resized 2.png to 50 px",
        "refused: taskrunner:unique:sync_account:acct-1 is held",
        "refused: no live runner of group 'shop' serves task 'resise' on stream "
        "'taskrunner:shop:tasks'",
        "worker: synced account acct-1",
        "worker: synced account acct-2",
        "worker: reminded user 7",
        "worker: reminded user 8",
    ],
    "producer_workflow.py": [
        "producer: workflow result: https://cdn.example/7-small.png",
        "worker: resized image 7",
        "worker: uploaded 7-small.png",
        "worker: workflow result: https://cdn.example/7-small.png",
    ],
    "producer_threads.py": [
        "8 threads answered 80 requests, 80 distinct task ids",
        "worker: sent 80 receipts",
    ],
    "fastapi_app.py": [
        "HTTP 200: cat.png queued",
        "HTTP 200: dog.png queued",
        "HTTP 200: owl.png queued",
        "HTTP 200: thumbs/64/fox.png made",
        "worker: made cat.png at 128 px",
        "worker: made dog.png at 128 px",
        "worker: made fox.png at 64 px",
        "worker: made owl.png at 128 px",
    ],
}
"""The producers' examples (a trio runner on the test server runs what they send), and
what each must print."""
NEEDS_REDIS = [
    "bring_your_client.py",
    "redis_connection.py",
    "two_processes.py",
    *PRODUCER_EXAMPLES,
]
"""Scripts that talk to a Redis server at ``$REDIS_URL``: run against the test server."""
SCRIPTS = sorted(
    p.name
    for p in EXAMPLES.glob("*.py")
    if not p.name.startswith(("test_", "_")) and p.name not in NEEDS_REDIS
)
"""Every script but the test modules, those run against ``$REDIS_URL``, and the modules
that examples share (``_*.py``, not run by themselves)."""
TEST_MODULES = sorted(p.name for p in EXAMPLES.glob("test_*.py"))
DOCS_DIR = EXAMPLES.parent / "docs"
RUN_TIMEOUT = 300
"""A hang guard for one example script (or a wait for one of its lines), not a speed
limit: the slowest took 15 s of wall time for 2 s of CPU on the 2-core machine at load 12,
so 30 s was within reach at CI's load 20."""
MODULE_TIMEOUT = 900
"""A hang guard for an example's whole test module in a pytest of its own, not a speed
limit: at load 12 on the 2-core machine the four modules took 66 to 118 s of wall time
for 3 to 5.5 s of CPU each (mostly the real-time contract checks waiting on a loaded
server), a hair under the 120 s this was."""

EXPECTED: dict[str, list[str]] = {
    "workflows.py": [
        "periodic: nightly-sizes (cron 0 3 * * * (Europe/Berlin)), thumbs (every 600s)",
        "chain: https://cdn.example/thumbs/7.png",
        "chord: 54",
        "dag: to ops: sizes: 22, chart: failed (RuntimeError)",
        "dag status: succeeded {'failed': 1, 'succeeded': 2}",
        "cancelled: result() raised WorkflowCancelled",
        "cancelled status: {'crunch': 'cancelled', 'upload': 'cancelled'}",
    ],
    "dashboard_mount.py": [
        "home: the shop",
        "groups: ['shop']",
        "instance web-1: leader True, serves send_receipt",
        "task send_receipt: 3 runs",
        "group page: HTTP 200, links under the mount: True",
        "a POST to an action while read-only: 403",
    ],
    "results_and_cancel.py": [
        "resize: thumbs/7.png at 128 px",
        "get_task: succeeded, 1 attempt(s), result {'path': 'thumbs/7.png', 'width': 128}",
        "charge failed: ValueError: card declined for 1250 cents",
        "delayed: scheduled; cancel -> True",
        "crunch: running; cancel -> True",
        "crunch: result() raised TaskCancelled",
        "cancel again -> False",
        "dead letter: charge {'cents': 1250} (TaskMaxRetryExceeded)",
        "dead letter: import_row 13 (TaskMaxRetryExceeded)",
        "replayed: True",
        "purged: 1; dead letters left: 0",
        "rows imported: [12, 13, 14]",
    ],
    "progress_and_events.py": [
        "transcode returned 150 frames",
        "last report: 100% (frame 150 of 150)",
        "event: transcode dispatched (attempt 0)",
        "event: transcode started (attempt 1)",
        "event: transcode succeeded (attempt 1)",
        "event: upload dispatched (attempt 0)",
        "event: upload started (attempt 1)",
        "event: upload retried (attempt 1)",
        "event: upload started (attempt 2)",
        "event: upload succeeded (attempt 2)",
    ],
    "periodic_tasks.py": [
        "cleanup for the 03-30 01:00 UTC tick",
        "daily report for the 03-30 01:00 UTC tick (nightly-report)",
        "ping for the 03-30 01:10 UTC tick",
        "cleanup for the 03-30 01:15 UTC tick",
        "ping for the 03-30 01:30 UTC tick",
        "cleanup: cron */15 * * * * (UTC), last fired 03-30 01:30 UTC "
        "(succeeded at 03-30 01:30 UTC), next 03-30 01:45 UTC",
        "heartbeat: every 600s, last fired 03-30 01:30 UTC (succeeded at 03-30 01:30 UTC), "
        "next 03-30 01:40 UTC",
        "nightly-report: cron 30 2 * * * (Europe/Berlin), last fired 03-30 01:00 UTC "
        "(succeeded at 03-30 01:00 UTC), next 03-31 00:30 UTC",
    ],
    "sharded.py": [
        "customer c-7: shard 10 for all 3: True",
        "160 customers over 16 shards",
        "invoice A-17 again: refused, its lock is held",
        "delayed charge: scheduled; cancel -> True",
        "producer: customer c-7 on shard 10 too; cancel -> True",
        "16 streams in 16 slots, e.g. taskrunner:{shop:0:4}:tasks",
        "groups: shop (16 shards)",
        "c-7's charges ran with their own ids: True",
        "in the order dispatched: [0, 1, 2]",
    ],
    "redis_cluster.py": [
        "on a cluster: True; key layout cluster",
        "dispatched 60, shipped 60",
        "the group's master moved to its replica: True",
    ],
    "redis_sentinel.py": [
        "dispatched 60, shipped 60",
        "the master moved: True; the runner talks to a master",
    ],
    "quickstart.py": [
        "hello, Ada",
        "hello, Alan",
        "hello, Grace",
        "hello, Edsger",
        "hello, Barbara",
        "done: 5 completed, 5 acked",
    ],
    "typed_payload.py": [
        "refused at dispatch: payload for 'send_invoice' does not fit "
        "Invoice: lines: missing required field",
        "refused at dispatch: (\"lines[0].quantity: expected int, got 'two'\",)",
        "refused at dispatch: ('archived_by: unknown field',)",
        "invoice for Ada: 2 line(s), 3 item(s)",
        "invoice for Alan: 1 line(s), 5 item(s)",
        "archived the invoice for Barbara",
        "done: 3 completed",
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
    "poison_entries.py": [
        "  delivery 1: InvalidTaskPayload: invalid task payload: RecursionError while decoding",
        "  delivery 3: TaskMaxRetryExceeded: task 'resize' (message <id>) delivered 3 times "
        "without an outcome, past its 2 attempt(s): not run again",
        """  decoded: False, raw: b'{"task_name": "resize", "payload": {"path": "x.tif"}}'""",
        "  hello, Ada",
        "  serving: True",
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
    "tuning.py": [
        "pool capacity over time: 4 -> 17 -> 4 -> 2",
        "long_queue_hook called 1 time(s)",
        "completed 400",
    ],
    "autoscaling.py": [
        " 3 tasks/s for 100 s: 2 instance(s)",
        "11 tasks/s for 200 s: 6 instance(s)",
        " 3 tasks/s for 300 s: 2 instance(s)",
        # (The path between, "desired instances over time: 2 -> 4 -> 5 -> 7 -> 6 -> 3 -> 2",
        # varies by a step with trio's scheduling order.)
    ],
    "inspect_keys.py": [
        "shop:orders                        stream size 1   ttl -      "
        "main stream (+ consumer group state)",
        "taskrunner:billing:delayed_tasks   zset   size 1   ttl -      "
        "delayed tasks (score = run-at)",
        "taskrunner:billing:delayed_ids     hash   size 1   ttl -      delayed tasks by task id",
        "taskrunner:unique:invoice:A-17     string size 32  ttl 60 s   unique-job lock",
        "flushed 4 key(s); left: []",
    ],
    "cluster_layout.py": [
        "taskrunner:{shop}:tasks                  slot 3808",
        "taskrunner:{shop}:delayed_tasks          slot 3808",
        "taskrunner:{shop}:delayed_ids            slot 3808",
        "taskrunner:{shop}:unique:invoice:A-17    slot 3808",
        "4 keys, 1 slot",
        "refused: consumer_group must not contain '{' or '}' (the cluster layout's hash tag "
        "is {<group>}), got 'shop{eu}'",
    ],
    "inspect_fleet.py": [
        "groups on the store: ['billing']",
        "instance on worker-1, heartbeat 15 s left",
        "leader lease: held, 5.0 s left",
        "keys of billing: 6 (stream 1, delayed_tasks 1, delayed_index 1, leader 1, catalog 1, "
        "heartbeat 1)",
    ],
    "go_interop.py": [
        "our message: unique_key 'echo:C-3', lock taskrunner:unique:echo:C-3 held: True",
        "our delayed member: time 4102444800, score 4102444800.25",
        "ran echo A-17",
        "ran echo B-2",
        "ran echo C-3",
        "locks left: []",
        "metrics fields: echo_count, echo_sum, echo_sum_us, "
        "taskrunner:interop:delayed_tasks_schedule_count, "
        "taskrunner:interop:delayed_tasks_schedule_sum, "
        "taskrunner:interop:delayed_tasks_schedule_sum_us",
        "every value an integer: True",
    ],
    "several_applications.py": [
        "  shop reads taskrunner:shop:tasks",
        "  mail reads taskrunner:mail:tasks",
        "  shop charged 1250 cents",
        "  shop dead letters: 0",
        "  waiting in the mail's stream: 1",
        "  mail sent to ann@example.com",
        "  refused: ('mail',) read orders:tasks, and delete_on_ack is on",
        "  mail sent to bob@example.com",
    ],
    "retries_and_timeouts.py": [
        "  t=  0.0s charge attempt 1 of 4",
        "  t=  2.0s charge attempt 2 of 4",
        "  t=  8.0s charge attempt 3 of 4",
        "  t=  0.0s poll_export attempt 1: not ready",
        "  t= 30.0s poll_export attempt 2: not ready",
        "  t= 60.0s poll_export attempt 3: not ready",
        "  t=  0.0s validate 'A-??'",
        "  t=  0.0s fetch https://slow.example (the server never answers)",
        "  t= 15.0s fetch https://slow.example (the server never answers)",
        "completed 1, failed attempts 5, retried 5",
    ],
    "context_lifespan_middleware.py": [
        "lifespan: opening the client",
        "fetch: message True, attempt 1 of 1, deadline in 30s",
        "audit: fetch returned '200 OK /index.html'",
        "lifespan: closing the client",
        "served",
    ],
    "sync_tasks.py": [
        "convert: TaskMaxRetryExceeded on attempt 1 (TaskTimeout)",
        "thumbnails made: 6, at most 2 threads at once",
        "completed 6, failed 1",
    ],
    "opentelemetry_tracing.py": [
        "send send_email (PRODUCER)",
        "  process send_email (CONSUMER) attempt 1: error, child of the dispatch: True, "
        "recorded ConnectionError",
        "  process send_email (CONSUMER) attempt 2: success, child of the dispatch: True",
    ],
    "flow_control.py": [
        "while low is paused: 0 report(s) ran, 1 waiting in low",
        "charge: 6 runs, at most 2 at once",
        "email to a.example: 15 sent, at most 5 in any second",
        "email to b.example: 15 sent, at most 5 in any second",
        "report ran after the resume: True",
        "waits (not attempts): True; failed: 0",
    ],
    "every_queue.py": [
        "receipt queued on emails: queued",
        "cancelled by id on any queue: True",
        "charge on orders: charged order-1",
        "queues: tasks, emails, orders",
        "dead letter on orders: charge, card declined",
        "dead letter on emails: receipt, mail server down",
        "replayed from orders: 1",
        "purged: 1 (the receipt's)",
        "tidy ran 2 times on orders; tasks stream: 0",
    ],
    "prometheus_export.py": [
        'taskrunner_tasks_completed_total{group="emails"} 1.0',
        'taskrunner_queue_size{group="emails"} 0.0',
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
    # -n 0: the example's tests in this process, without xdist workers of their own
    # (pyproject's addopts run the suite in parallel, and they apply here too).
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [*pytest_command, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=MODULE_TIMEOUT,
        check=False,
        cwd=EXAMPLES.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout.splitlines()[-1]
    assert "failed" not in result.stdout.splitlines()[-1]


def test_redis_examples_run(redis_url: str) -> None:
    """The Redis examples against the test server: a worker process serves what a
    producer process dispatched, and stops on SIGINT; a redis-py client serves too."""
    env = {**os.environ, "REDIS_URL": redis_url}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "bring_your_client.py")],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "rendered weekly",
        "stream taskrunner:reports:reports: 0 entries left",
    ]

    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "redis_connection.py")],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["b'OK'", "[1, b'1']", "[b'payload', b'hello']", "b'v'"]

    script = str(EXAMPLES / "two_processes.py")
    lines: queue.Queue[str] = queue.Queue()
    with subprocess.Popen(
        [sys.executable, "-u", script, "worker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as worker:
        assert worker.stdout is not None
        assert worker.stderr is not None
        reader = threading.Thread(target=lambda: [lines.put(line) for line in worker.stdout])
        reader.start()
        try:
            assert lines.get(timeout=RUN_TIMEOUT) == "worker: serving, Ctrl-C to stop\n"
            produced = subprocess.run(
                [sys.executable, script, "produce", "5"],
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
                check=False,
                env=env,
            )
            assert produced.stdout == "produced 5 task(s)\n", produced.stderr
            done = sorted(lines.get(timeout=RUN_TIMEOUT).strip() for _ in range(5))
            assert done == [f"thumbnail for img-{i}.png" for i in range(5)]
            worker.send_signal(signal.SIGINT)
            assert worker.wait(timeout=RUN_TIMEOUT) == 0
        finally:
            worker.kill()
            reader.join()
            stderr = worker.stderr.read()
    assert lines.get(timeout=1) == "worker: stopped after 5 task(s)\n", stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("name", sorted(PRODUCER_EXAMPLES))
def test_producer_examples_run(name: str, redis_url: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        env={**os.environ, "REDIS_URL": redis_url},
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    missing = [line for line in PRODUCER_EXAMPLES[name] if line not in printed]
    assert not missing, result.stdout
    assert "Traceback" not in result.stderr


DOCS = ["README.md", *sorted(str(p.relative_to(EXAMPLES.parent)) for p in DOCS_DIR.glob("*.md"))]
UNCHECKED_DOCS: set[str] = set()
"""Pages whose Python blocks are exempt from the check below: none."""
SNIPPET = re.compile(r'--8<-- "(examples/[^":]+\.py)(?::(\w+))?"')


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", markdown, re.MULTILINE | re.DOTALL)


def test_every_docs_page_is_checked() -> None:
    assert "docs/index.md" in DOCS
    assert UNCHECKED_DOCS <= set(DOCS)


@pytest.mark.parametrize("doc", [d for d in DOCS if d not in UNCHECKED_DOCS])
def test_doc_code_is_taken_from_a_tested_example(doc: str) -> None:
    """Each Python block in the docs is a verbatim excerpt (at some indent) of an example,
    or includes one (``--8<-- "examples/x.py:section"``, pymdownx.snippets)."""
    sources = [p.read_text() for p in EXAMPLES.glob("*.py")]
    for block in python_blocks((EXAMPLES.parent / doc).read_text()):
        if "--8<--" in block:
            for line in block.splitlines():
                match = SNIPPET.fullmatch(line.strip())
                assert match, f"{doc}: not an include of an example: {line!r}"
                path, part = match.groups()
                source = (EXAMPLES.parent / path).read_text()
                if part:
                    assert f"# --8<-- [start:{part}]" in source, f"{doc}: no {part} in {path}"
                    assert f"# --8<-- [end:{part}]" in source, f"{doc}: no {part} in {path}"
            continue
        found = any(
            textwrap.indent(block, " " * indent) in source
            for source in sources
            for indent in (0, 4, 8)
        )
        assert found, f"{doc}: this block is not in any examples/*.py:\n{block}"
