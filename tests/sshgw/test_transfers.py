"""scp, sftp and rsync through the gateway, into the instance's filesystem."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.sshgw import SSH_OPTIONS, World

pytestmark = pytest.mark.docker
SIZE = 50 * 2**20
TRANSFER_DEADLINE_S = 120


@pytest.fixture(scope="module")
def payload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("payload") / "weights.bin"
    data = os.urandom(SIZE)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def _run(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(argv, capture_output=True, timeout=TRANSFER_DEADLINE_S, check=False)
    assert result.returncode == 0, result.stderr
    return result


def _remote_sha256(world: World, path: str) -> str:
    result = world.ssh("train", f"sha256sum {path}")
    assert result.returncode == 0, result.stderr
    return result.stdout.decode().split()[0]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_scp_up_and_down(world: World, payload: tuple[Path, str], tmp_path: Path) -> None:
    source, digest = payload
    scp = ["scp", "-P", str(world.port), "-i", str(world.keys["alice"]), *SSH_OPTIONS]
    _run([*scp, str(source), "train@127.0.0.1:/root/data/scp.bin"])  # scp speaks SFTP
    assert _remote_sha256(world, "/root/data/scp.bin") == digest
    _run([*scp, "train@127.0.0.1:data/scp.bin", str(tmp_path / "back.bin")])  # relative: $HOME
    assert _sha256(tmp_path / "back.bin") == digest


def test_sftp_up_and_down(world: World, payload: tuple[Path, str], tmp_path: Path) -> None:
    source, digest = payload
    batch = tmp_path / "batch"
    batch.write_text(
        f"mkdir /root/sftp-test\nput {source} /root/sftp-test/up.bin\n"
        f"get /root/sftp-test/up.bin {tmp_path / 'down.bin'}\nls -l /root/sftp-test\n"
    )
    sftp = ["sftp", "-P", str(world.port), "-i", str(world.keys["alice"]), *SSH_OPTIONS]
    result = _run([*sftp, "-b", str(batch), "train@127.0.0.1"])
    assert b"up.bin" in result.stdout
    assert _remote_sha256(world, "/root/sftp-test/up.bin") == digest
    assert _sha256(tmp_path / "down.bin") == digest


def test_rsync_is_incremental(world: World, payload: tuple[Path, str], tmp_path: Path) -> None:
    source, digest = payload
    tree = tmp_path / "dataset"
    (tree / "shards").mkdir(parents=True)
    os.link(source, tree / "shards" / "0.bin")
    (tree / "README").write_text("a small dataset\n")
    ssh = " ".join(["ssh", "-p", str(world.port), "-i", str(world.keys["alice"]), *SSH_OPTIONS])
    rsync = ["rsync", "-a", "--stats", "-e", ssh, f"{tree}/", "train@127.0.0.1:/root/dataset/"]

    first = _run(rsync).stdout.decode()
    assert _literal_bytes(first) >= SIZE
    assert _remote_sha256(world, "/root/dataset/shards/0.bin") == digest
    second = _run(rsync).stdout.decode()
    assert _literal_bytes(second) == 0, second
    assert "Number of regular files transferred: 0" in second

    (tree / "README").write_text("a small dataset, now documented\n")
    third = _run(rsync).stdout.decode()
    assert "Number of regular files transferred: 1" in third
    assert _literal_bytes(third) < 1024


def _literal_bytes(stats: str) -> int:
    found = re.search(r"Literal data: ([\d,]+) bytes", stats)
    assert found, stats
    return int(found.group(1).replace(",", ""))
