"""`ssh -L` reaches services on the instance's own loopback, and nothing else."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support.sshgw import World, wait_for

pytestmark = pytest.mark.docker
HTTP_PORT = 8765
VERBOSE = ("-o", "LogLevel=INFO")  # ssh prints the server's reason for a refused channel


@pytest.fixture(scope="module")
def web_server(world: World) -> Iterator[int]:
    """`python3 -m http.server` bound to 127.0.0.1 inside the instance."""
    start = (
        "mkdir -p /root/www && echo 'hello from inside' > /root/www/hello.txt && "
        f"(nohup python3 -m http.server {HTTP_PORT} --bind 127.0.0.1 --directory /root/www "
        ">/dev/null 2>&1 &)"
    )
    assert world.ssh("train", start).returncode == 0
    yield HTTP_PORT
    world.ssh("train", f"pkill -f 'http.server {HTTP_PORT}'")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _fetch(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (http to loopback)
            return bytes(response.read())
    except OSError:
        return None


@pytest.mark.parametrize("target", ["localhost", "127.0.0.1", "train"])
def test_local_forward_reaches_a_server_on_the_instance_loopback(
    world: World, web_server: int, target: str
) -> None:
    local = _free_port()
    tunnel = subprocess.Popen(
        world.ssh_argv(
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"{local}:{target}:{web_server}",
            "train@127.0.0.1",
        ),
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{local}/hello.txt"
        assert wait_for(lambda: _fetch(url), f"{url} through the tunnel") == b"hello from inside\n"
        assert _fetch(url) == b"hello from inside\n"  # a second connection on the same tunnel
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)


@pytest.mark.parametrize("destination", ["example.com:80", "172.17.0.1:2375", "10.1.2.3:22"])
def test_forwards_anywhere_else_are_refused_and_audited(world: World, destination: str) -> None:
    result = world.ssh("train", options=("-W", destination, *VERBOSE), input=b"")
    assert result.returncode == 255
    assert b"administratively prohibited" in result.stderr, result.stderr
    assert b"forwards only to ports inside instance train" in result.stderr
    wait_for(
        lambda: any(
            s.outcome == "refused" and f"port forwarding to {destination} refused" in s.reason
            for s in world.sessions(world.instance.id)
        ),
        "the refusal in the audit trail",
    )


def test_a_closed_port_inside_fails_with_the_reason(world: World) -> None:
    result = world.ssh("train", options=("-W", "localhost:1", *VERBOSE), input=b"")
    assert result.returncode == 255
    assert b"cannot connect to 127.0.0.1:1 inside train: Connection refused" in result.stderr


def test_remote_forwarding_is_refused_and_audited(world: World) -> None:
    options = ("-o", "ExitOnForwardFailure=yes", "-R", "0:localhost:22")
    result = world.ssh("train", "true", options=options)
    assert result.returncode == 255
    assert b"remote port forwarding failed" in result.stderr
    wait_for(
        lambda: any(
            "remote port forwarding" in s.reason for s in world.sessions(world.instance.id)
        ),
        "the refusal in the audit trail",
    )
