"""`gpudock server`'s two stages as a user meets them: a bad setting fails before
anything listens (exit 2); a failure while the rest loads, with the socket
already open, stops the server with the reason (exit 1)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudock.cli.commands import server as server_command
from gpudock.cli.main import app
from tests.support.server_process import GPUDOCK, free_port


def test_a_bad_database_url_fails_before_the_server_listens(tmp_path: Path) -> None:
    port = free_port()
    args = ["server", "--data-dir", str(tmp_path), "--port", str(port)]
    result = CliRunner().invoke(app, [*args, "--database-url", "nosuchdb://x"])
    assert result.exit_code == 2
    assert "cannot start the server: bad database URL 'nosuchdb://x'" in result.stderr


def test_a_failure_after_listening_stops_the_server_with_the_reason(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = {
            **os.environ,
            "GPUDOCK_RUNTIME": "fake",
            "GPUDOCK_SSH_HOST": "127.0.0.1",
            "GPUDOCK_SSH_PORT": str(taken.getsockname()[1]),  # the gateway cannot listen
        }
        command = [GPUDOCK, "server", "--data-dir", str(tmp_path), "--port", str(free_port())]
        done = subprocess.run(
            [*command, "--simulate", "1x1xA100-80GB"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1, done.stderr
    assert "Uvicorn running on" in done.stderr  # it had listened: stage 2 failed
    assert "error: cannot start the server:" in done.stderr
    assert "address already in use" in done.stderr.lower()


@pytest.mark.parametrize(
    ("level", "shown", "hidden"),
    [
        ("info", ["gpudock.reconcile.moves INFO moved 3 MiB", "WARNING slow"], ["step 1"]),
        ("warning", ["slow"], ["moved 3 MiB", "WARNING"]),  # as before: the message alone
    ],
)
def test_the_log_level_setting_decides_what_the_server_says(
    capsys: pytest.CaptureFixture[str], level: str, shown: list[str], hidden: list[str]
) -> None:
    root = logging.getLogger("gpudock")
    before = (list(root.handlers), root.level)
    try:
        server_command._log_to_stderr(level)
        moves = logging.getLogger("gpudock.reconcile.moves")
        moves.debug("step 1")
        moves.info("moved %d MiB", 3)
        moves.warning("slow")
    finally:
        root.handlers[:], root.level = before
    said = capsys.readouterr().err
    assert all(line in said for line in shown), said
    assert not any(line in said for line in hidden), said
