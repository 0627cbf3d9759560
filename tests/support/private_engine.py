"""A second Docker Engine of the test's own, on a file system the test chooses.

For what the suite's engine cannot show: its data root is the host's ext4,
where no storage driver caps a container's writable layer. This one runs on a
btrfs file system with quotas in a sparse file, so `--storage-opt size=` is
enforced. It has its own data root, a short exec root (Unix socket paths are
limited to 108 bytes), its own containerd, a default bridge of its own, no
iptables rules (the suite's engine owns those), and the base image copied in.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from gpudock.images.base_image import BASE_IMAGE

START_TIMEOUT_S = 60


@contextlib.contextmanager
def btrfs_engine(workdir: Path, size: str = "6G") -> Iterator[str]:
    """Yield the engine's base URL; everything is removed afterwards."""
    for tool in ("mkfs.btrfs", "btrfs", "dockerd"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: the test command installs btrfs-progs and docker.io")
    image, root = workdir / "engine.btrfs", workdir / "root"
    root.mkdir()
    subprocess.run(["truncate", "-s", size, str(image)], check=True)
    subprocess.run(["mkfs.btrfs", "-q", str(image)], check=True, capture_output=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(root)], check=True)
    exec_root = Path(tempfile.mkdtemp(prefix="gde-", dir="/tmp"))
    socket = exec_root / "d.sock"
    # Its own default bridge: with --bridge=none dockerd deletes any docker0,
    # which is the suite's engine's.
    bridge = "gdq" + exec_root.name.removeprefix("gde-")[:8].lower()
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    engine = None
    try:
        subprocess.run(["btrfs", "quota", "enable", str(root)], check=True, capture_output=True)
        engine = _start(root, exec_root, socket, bridge, workdir / "dockerd.log")
        _copy_base_image(f"unix://{socket}")
        yield f"unix://{socket}"
    finally:
        if engine is not None:
            _stop(engine, f"unix://{socket}")
        subprocess.run(["umount", "-R", str(root)], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], check=False, capture_output=True)
        shutil.rmtree(exec_root, ignore_errors=True)
        image.unlink(missing_ok=True)


def _start(
    root: Path, exec_root: Path, socket: Path, bridge: str, log: Path
) -> subprocess.Popen[bytes]:
    command = [
        "dockerd",
        f"--data-root={root}",
        f"--exec-root={exec_root}",
        f"--pidfile={exec_root / 'd.pid'}",
        f"--host=unix://{socket}",
        "--storage-driver=btrfs",
        f"--bridge={bridge}",
        "--iptables=false",
        "--ip-masq=false",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the private dockerd exited: {log.read_text()[-2000:]}")
        try:
            docker.DockerClient(base_url=f"unix://{socket}", timeout=5).ping()
            return process
        except docker.errors.DockerException:
            time.sleep(0.2)
    process.kill()
    pytest.fail(f"the private dockerd did not answer in {START_TIMEOUT_S} s")


def _copy_base_image(url: str) -> None:
    source = docker.from_env(timeout=300)
    target = docker.DockerClient(base_url=url, timeout=300)
    target.images.load(source.images.get(BASE_IMAGE).save(named=True))
    assert target.images.get(BASE_IMAGE)


def _stop(process: subprocess.Popen[bytes], url: str) -> None:
    with contextlib.suppress(docker.errors.DockerException):
        client = docker.DockerClient(base_url=url, timeout=30)
        for container in client.containers.list(all=True):
            container.remove(force=True)
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)
