"""Issue 10, point 1 with real processes: entries that kill the worker that reads them.

Two ``taskrunner worker poison_app:runner`` processes on a real server (reclaim
after 1 s), kept running by the test as a supervisor would: a process that
dies is started again. Three poison entries are added beside a steady trickle
of ordinary tasks:

- a ``payload`` field of ``b"[" * 100_000``, whose decoding raises
  ``RecursionError`` (it used to end every worker that read it, forever);
- a ``die_running`` task whose action ends the process (``os._exit``);
- a ``die_structuring`` task whose typed payload SIGKILLs the process while it
  is structured.

Both killers allow two attempts. Checked: each poison ends in the dead-letter
stream, the killers after exactly three deliveries (two deaths each at most,
the third delivery failed without being decoded), the nested one at once;
every ordinary task ran; nothing is left pending; the survivors stop cleanly.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from test_cli import ROOT, app_env

from taskrunner import _keys
from taskrunner.testing import ServerProcess, sync_command

APP = "poison_app:runner"
GROUP = "poison"
STEADY = 60
LIMIT = 90.0  # seconds for the whole scenario; about 10 on an idle machine


class Worker:
    """One worker process, its log in a file of its own."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "taskrunner", "worker", APP],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self._log.close()


def test_entries_that_kill_workers_stop_after_a_bounded_number_of_deliveries(
    redis_server: ServerProcess, redis_url: str, tmp_path: Path
) -> None:
    queue = f"q{uuid.uuid4().hex[:8]}"
    env = app_env(redis_url, queue, group=GROUP)
    keys = _keys.stream_keys(None, GROUP, queue)
    port, stream = redis_server.port, keys.stream

    def add(raw: bytes) -> str:
        return bytes(sync_command(port, "XADD", stream, "*", "payload", raw)).decode()

    def dead_letters() -> dict[str, dict[bytes, bytes]]:
        rows = sync_command(port, "XRANGE", keys.dead_letter, "-", "+")
        found = {}
        for _id, flat in rows:
            fields = dict(zip(flat[::2], flat[1::2], strict=True))
            found[fields[b"message_id"].decode()] = fields
        return found

    def done() -> set[int]:
        return {json.loads(x) for x in sync_command(port, "LRANGE", f"{queue}:done", 0, -1)}

    def pending() -> int:
        summary = sync_command(port, "XPENDING", stream, GROUP)
        return int(summary[0])

    started: list[Worker] = []

    def start() -> Worker:
        worker = Worker(env, tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker

    try:
        fleet = [start(), start()]
        deadline = time.monotonic() + 20
        while not all("serving group" in w.log() for w in fleet):
            assert time.monotonic() < deadline, [w.log() for w in fleet]
            assert all(w.process.poll() is None for w in fleet), [w.log() for w in fleet]
            time.sleep(0.05)

        nested = add(b"[" * 100_000)
        running = add(json.dumps({"task_name": "die_running", "payload": {"die": True}}).encode())
        structuring = add(
            json.dumps({"task_name": "die_structuring", "payload": {"die": True}}).encode()
        )
        poisons = {nested, running, structuring}

        deaths: list[int] = []
        sent = 0
        deadline = time.monotonic() + LIMIT
        while True:
            for i, worker in enumerate(fleet):
                code = worker.process.poll()
                if code is not None:  # a supervisor starts it again
                    deaths.append(code)
                    fleet[i] = start()
            for _ in range(min(3, STEADY - sent)):  # ordinary work keeps coming meanwhile
                add(json.dumps({"task_name": "steady", "payload": sent}).encode())
                sent += 1
            if poisons <= set(dead_letters()) and done() == set(range(STEADY)) and not pending():
                break
            assert time.monotonic() < deadline, (
                f"after {LIMIT}s: {len(deaths)} death(s), dead letters {sorted(dead_letters())} "
                f"of {sorted(poisons)}, {len(done())}/{STEADY} ran, {pending()} pending"
            )
            time.sleep(0.1)

        # Each killer has two attempts: at most two deaths each (fewer when both were
        # in the process that died), and the nested entry never killed anyone.
        print(f"\n{len(deaths)} death(s) {deaths}; {len(started)} processes started")
        assert 2 <= len(deaths) <= 4, deaths
        assert set(deaths) <= {1, -signal.SIGKILL}, deaths
        letters = dead_letters()
        assert set(letters) == poisons
        assert letters[nested][b"error"].startswith(
            b"InvalidTaskPayload: invalid task payload: RecursionError while decoding"
        )
        for message_id, name in ((running, "die_running"), (structuring, "die_structuring")):
            assert (
                letters[message_id][b"error"]
                == (
                    f"TaskMaxRetryExceeded: task '{name}' (message {message_id}) delivered 3 "
                    "times without an outcome, past its 2 attempt(s): not run again"
                ).encode()
            )
        logs = "\n".join(w.log() for w in started)
        for message_id in (running, structuring):
            line = rf"message {message_id} delivered 3 times, over its limit of 2: failing it"
            assert re.search(line, logs), logs
        assert "Traceback" not in logs  # killed outright, or handled: never crashed

        # A worker started again above may still be importing (a loaded machine, a
        # parallel suite): SIGTERM before its signal receiver is open would kill it
        # outright. "serving group" is logged after the receiver opened.
        deadline = time.monotonic() + 20
        while not all("serving group" in w.log() for w in fleet):
            assert time.monotonic() < deadline, [w.log() for w in fleet]
            time.sleep(0.05)
        for worker in fleet:
            worker.process.send_signal(signal.SIGTERM)
            assert worker.process.wait(timeout=20) == 0, worker.log()
        assert pending() == 0
    finally:
        for worker in started:
            worker.close()
