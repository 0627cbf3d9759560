"""The data path into the instance: runc directly for streams without a terminal
(local engine, server as root), `docker exec` otherwise, confined alike."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from gpudock.runtime.docker.exec import ExecStreams, RuncExec
from tests.support.sshgw import DEADLINE_S, World

pytestmark = pytest.mark.docker

# Everything that confines a process, as the process itself sees it.
PROBE = (
    "grep -E '^(Uid|Gid|Groups|Cap[A-Za-z]+|NoNewPrivs|Seccomp|Seccomp_filters):' "
    "/proc/self/status; cat /proc/self/cgroup /proc/self/limits /proc/self/oom_score_adj; "
    "for ns in /proc/self/ns/*; do echo ${ns##*/} $(readlink $ns); done; "
    "echo lsm=$(cat /proc/self/attr/current 2>/dev/null) ppid=$PPID pwd=$(pwd) user=$(id)"
)


@pytest.fixture
def runc_usable() -> None:
    """The suite runs as root beside a local engine (scripts/test.sh): the runc path
    must be there. Fail, never skip, when it is not: a skip would hide the fallback."""
    assert RuncExec.usable(), "the runc exec path is unusable: run the tests as root"


needs_runc = pytest.mark.usefixtures("runc_usable")


def _container_id(world: World) -> str:
    assert world.instance.container_id
    return world.instance.container_id


def _read_all(sock: socket.socket) -> bytes:
    sock.setblocking(True)
    sock.settimeout(DEADLINE_S)
    chunks = []
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _exit_code(streams: ExecStreams, exec_id: str) -> int:
    deadline = time.monotonic() + DEADLINE_S
    while (code := streams.exit_code(exec_id)) is None:
        assert time.monotonic() < deadline, "no exit status"
        time.sleep(0.01)
    return code


@needs_runc
def test_a_command_through_the_gateway_is_confined_like_docker_exec(world: World) -> None:
    through_gateway = world.ssh("train", f"cd /; {PROBE}")
    assert through_gateway.returncode == 0, through_gateway.stderr
    through_docker = world.container_exec(world.instance.id, f"cd /; {PROBE}")
    assert "NoNewPrivs:\t1" in through_docker and "Seccomp:\t2" in through_docker
    assert through_gateway.stdout.decode() == through_docker


@needs_runc
def test_streams_without_a_terminal_go_through_runc_with_stderr_apart(world: World) -> None:
    streams = ExecStreams(world.engine.api, local=True)
    command = ["sh", "-c", 'cat; echo "to stderr $GPUDOCK_PROBE" >&2; exit 7']
    stream = streams.open(_container_id(world), command, False, {"GPUDOCK_PROBE": "x"})
    assert RuncExec.owns(stream.exec_id) and stream.err_sock is not None
    stream.sock.setblocking(True)
    stream.sock.sendall(b"through stdin\n")
    stream.sock.shutdown(socket.SHUT_WR)  # closes the process's stdin
    assert _read_all(stream.sock) == b"through stdin\n"
    assert _read_all(stream.err_sock) == b"to stderr x\n"
    assert _exit_code(streams, stream.exec_id) == 7
    stream.sock.close()
    stream.err_sock.close()


@needs_runc
def test_no_host_descriptor_reaches_the_process(world: World) -> None:
    streams = ExecStreams(world.engine.api, local=True)
    stream = streams.open(_container_id(world), ["ls", "/proc/self/fd"], False, {})
    assert RuncExec.owns(stream.exec_id)
    assert _read_all(stream.sock).split() == [b"0", b"1", b"2", b"3"]  # 3: ls's own listing
    assert _exit_code(streams, stream.exec_id) == 0


@needs_runc
def test_a_killed_process_reports_128_plus_the_signal(world: World) -> None:
    assert world.ssh("train", "kill -KILL $$").returncode == 137


def test_terminals_and_remote_engines_use_docker_exec(world: World) -> None:
    remote = ExecStreams(world.engine.api, local=False)
    for streams, tty in ((remote, False), (ExecStreams(world.engine.api, local=True), True)):
        stream = streams.open(_container_id(world), ["sh", "-c", "exit 3"], tty, {})
        assert not RuncExec.owns(stream.exec_id) and stream.err_sock is None
        _read_all(stream.sock)
        assert _exit_code(streams, stream.exec_id) == 3
        stream.sock.close()


def test_no_runc_target_without_the_containers_runc_state(tmp_path: Path) -> None:
    assert RuncExec(state_dirs=(tmp_path,)).find("0123abcd") is None
    assert RuncExec().find("../../etc") is None
