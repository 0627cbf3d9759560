"""Shells and commands through the gateway: exit codes, stdio, PTYs, signals."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess

import asyncssh
import pytest

from tests.sshgw.terminal import Terminal
from tests.support.sshgw import World, wait_for

pytestmark = pytest.mark.docker


def test_exec_returns_stdout_stderr_and_the_exit_status(world: World) -> None:
    result = world.ssh("train", "echo out; echo err >&2; exit 7")
    assert result.returncode == 7, result.stderr
    assert result.stdout == b"out\n"
    assert result.stderr == b"err\n"
    assert world.ssh("train", "true").returncode == 0


def test_login_by_instance_id_or_name_lands_in_home_with_ssh_variables(world: World) -> None:
    by_id = world.ssh(world.instance.id, 'pwd; hostname; echo "$SSH_CONNECTION"')
    by_name = world.ssh("train", "hostname")
    assert by_id.returncode == 0, by_id.stderr
    pwd, hostname, connection = by_id.stdout.decode().splitlines()
    assert (pwd, hostname) == ("/root", "train")
    assert connection.startswith("127.0.0.1 ") and connection.endswith(f" {world.port}")
    assert by_name.stdout == b"train\n"


def test_stdin_is_piped_through_and_closed_at_its_end(world: World) -> None:
    data = os.urandom(3 * 2**20)
    result = world.ssh("train", "sha256sum | cut -d' ' -f1", input=data)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == hashlib.sha256(data).hexdigest()


def test_interactive_shell_through_a_pty(world: World) -> None:
    terminal = Terminal(world.ssh_argv("-tt", "train@127.0.0.1"), rows=24, cols=80)
    try:
        terminal.send(b"echo $((6 * 7))x; tty\r")
        terminal.expect(rb"42x\r\n/dev/pts/\d+")
        terminal.send(b"stty size\r")
        terminal.expect(rb"[\r\n]24 80\r\n")
        terminal.resize(40, 120)  # ssh sends the change when its loop next runs: poll for it
        wait_for(lambda: _asks(terminal, b"stty size\r", rb"[\r\n]40 120\r\n"), "the new size")
        terminal.send(b"sleep 297\r")  # then interrupt it with ^C, as a person would
        wait_for(
            lambda: "sleep 297" in world.container_exec(world.instance.id, "ps -eo args"), "sleep"
        )
        terminal.send(b"\x03")
        terminal.send(b"echo status=$?x\r")
        terminal.expect(rb"status=130x")
        terminal.send(b"exit 3\r")
        assert terminal.wait() == 3
    finally:
        terminal.close()


def test_many_concurrent_sessions_on_one_instance(world: World) -> None:
    argv = [world.ssh_argv("train@127.0.0.1", f"echo session-{n}") for n in range(8)]
    processes = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for a in argv]
    outputs = [p.communicate(timeout=60) for p in processes]
    assert [p.returncode for p in processes] == [0] * 8, outputs
    assert sorted(out for out, _ in outputs) == sorted(f"session-{n}\n".encode() for n in range(8))


def test_a_signal_request_reaches_the_process(world: World) -> None:
    async def run() -> int | None:
        async with asyncssh.connect(
            "127.0.0.1",
            world.port,
            username="train",
            client_keys=[str(world.keys["alice"])],
            known_hosts=None,
            agent_path=None,
            config=[],
        ) as conn:
            process = await conn.create_process("sleep 296")
            await asyncio.to_thread(_wait_for_process, world, "sleep 296")
            process.send_signal("TERM")
            completed = await asyncio.wait_for(process.wait(), 20)
            return completed.exit_status

    assert asyncio.run(run()) == 128 + 15


def test_a_client_that_vanishes_hangs_up_its_session(world: World) -> None:
    client = subprocess.Popen(
        world.ssh_argv("-tt", "train@127.0.0.1", "sleep 295"),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_process(world, "sleep 295")
    finally:
        client.kill()
        client.wait()
    wait_for(
        lambda: "sleep 295" not in world.container_exec(world.instance.id, "ps -eo args"),
        "the session's process to end after SIGHUP",
    )


def _asks(terminal: Terminal, command: bytes, answer: bytes) -> bool:
    terminal.send(command)
    return terminal.search(answer, deadline_s=2) is not None


def _wait_for_process(world: World, args: str) -> None:
    wait_for(lambda: args in world.container_exec(world.instance.id, "ps -eo args"), args)
