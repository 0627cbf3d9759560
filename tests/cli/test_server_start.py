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
from gpudock.settings import Settings
from tests.support.server_process import GPUDOCK, ServerProcess, free_port


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


def _healthz(conn: socket.socket) -> bytes:
    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: gpudock\r\n\r\n")
    answer = b""
    while b'{"status":"ok"}' not in answer:
        chunk = conn.recv(4096)
        assert chunk, f"closed after {answer!r}"
        answer += chunk
    return answer


@pytest.mark.slow
def test_an_idle_connection_outlives_the_clients_keep_alive(tmp_path: Path) -> None:
    # Clients keep theirs 5 s (httpx) to 60 s (load balancers): the server must keep
    # its end longer (uvicorn's own default is 5 s), or it closes one just as a client
    # sends on it and the client sees a reset.
    assert Settings().http_keep_alive_s > 60
    server = ServerProcess(tmp_path, "1x1xA100-80GB", env={"GPUDOCK_RUNTIME": "fake"})
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
            assert b"connection: close" not in _healthz(conn).lower()
            conn.settimeout(7)  # past uvicorn's default
            with pytest.raises(TimeoutError):
                conn.recv(1)  # nothing: not closed
            conn.settimeout(30)
            assert _healthz(conn).startswith(b"HTTP/1.1 200")
    finally:
        server.kill()
