"""The SSH gateway on the Kubernetes runtime: a session is pod exec over
WebSocket against the fake cluster, whose kubelet runs the pod as a real
container; the real OpenSSH client on the other end."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.platform import default_runtime, open_platform
from gpudock.settings import Settings
from gpudock.sshgw.gateway import SshGateway
from tests.support.docker import docker_client
from tests.support.kube_fake import TEST_IMAGE, FakeKubeCluster, tag_test_image
from tests.support.sshgw import SSH_OPTIONS, GatewayThread, World, populate_world, wait_for

pytestmark = pytest.mark.docker


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    engine = docker_client()
    tag_test_image(engine.api)
    with FakeKubeCluster(engine.api) as cluster:
        cluster.add_node("gpu-a", gpus=2, product="NVIDIA-A100-SXM4-80GB")
        settings = Settings(
            data_dir=tmp_path / "data",
            runtime="kubernetes",
            kubeconfig=cluster.kubeconfig(tmp_path),
            default_image=TEST_IMAGE,
            image_pull="missing",
            ssh_port=0,
            rate_limits_enabled=False,
            no_gpu_memory_gb=1,
        )
        platform = open_platform(settings, runtime=default_runtime(settings))
        gateway = GatewayThread(SshGateway(platform.ctx))
        try:
            made = populate_world(platform, gateway, engine, tmp_path)
            gateway.start()
            yield made
        finally:
            gateway.stop()
            platform.close()


def test_a_command_runs_in_the_pod_with_its_streams_and_exit_code(world: World) -> None:
    result = world.ssh("train", "echo out; echo err >&2; hostname; exit 7")
    assert result.returncode == 7, result.stderr
    assert result.stdout == b"out\ntrain\n"
    assert b"err\n" in result.stderr


def test_input_reaches_the_pod_whole(world: World) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB, every byte value
    result = world.ssh("train", "sha256sum | cut -d' ' -f1", input=data)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == hashlib.sha256(data).hexdigest()


def test_scp_and_rsync_through_pod_exec(world: World, tmp_path: Path) -> None:
    source = tmp_path / "weights.bin"
    source.write_bytes(os.urandom(4 * 2**20))
    scp = ["scp", "-P", str(world.port), "-i", str(world.keys["alice"]), *SSH_OPTIONS]
    _run([*scp, str(source), "train@127.0.0.1:/root/data/w.bin"])  # scp speaks SFTP
    _run([*scp, "train@127.0.0.1:/root/data/w.bin", str(tmp_path / "back.bin")])
    assert (tmp_path / "back.bin").read_bytes() == source.read_bytes()
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("one\n")
    ssh = " ".join(["ssh", "-p", str(world.port), "-i", str(world.keys["alice"]), *SSH_OPTIONS])
    _run(["rsync", "-a", "-e", ssh, f"{tree}/", "train@127.0.0.1:/root/data/tree/"])
    assert world.ssh("train", "cat /root/data/tree/a.txt").stdout == b"one\n"


def _run(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result


def test_a_local_forward_reaches_a_server_in_the_pod(world: World) -> None:
    start = (
        "mkdir -p /root/www && echo 'hello from the pod' > /root/www/hello.txt && "
        "(nohup python3 -m http.server 8765 --bind 127.0.0.1 --directory /root/www "
        ">/dev/null 2>&1 &)"
    )
    assert world.ssh("train", start).returncode == 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local = int(probe.getsockname()[1])
    tunnel = subprocess.Popen(
        world.ssh_argv(
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"{local}:localhost:8765",
            "train@127.0.0.1",
        ),
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{local}/hello.txt"
        assert wait_for(lambda: _fetch(url), f"{url} through the tunnel") == b"hello from the pod\n"
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)


def _fetch(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (http to loopback)
            return bytes(response.read())
    except OSError:
        return None
