"""The pool of pre-formatted data volume images (`runtime.docker.volume_pool`),
with real ext4 images, loop mounts and, at the end, a real instance.

Loop devices and mounts need root on the engine's host, like the engine
tests: these run in the Docker tier.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.runtime.docker import DockerRuntime
from gpudock.runtime.docker.volume_pool import POOL_DIR, VolumePool
from gpudock.runtime.docker.volumes import LoopVolumes
from gpudock.services.instances import container_spec as containers
from tests.support.docker import remove_cluster_objects, unmount_everything_under
from tests.support.factories import make_tenant
from tests.support.platforms import PlatformFactory

pytestmark = pytest.mark.docker

SETTLE_S = 60.0
GIB = 1024**3


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    volumes = tmp_path / "volumes"
    yield volumes
    unmount_everything_under(tmp_path)


@pytest.fixture
def loops(root: Path) -> Iterator[LoopVolumes]:
    made = LoopVolumes(root)
    yield made
    made.close()


def pooled(root: Path) -> dict[str, int]:
    """The pool's files now: name → inode."""
    directory = root / POOL_DIR
    return {p.name: p.stat().st_ino for p in directory.iterdir()} if directory.exists() else {}


def superblock(image: Path) -> dict[str, str]:
    """The ext4 superblock's fields (`dumpe2fs -h`)."""
    done = subprocess.run(["dumpe2fs", "-h", str(image)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    fields = (line.partition(":") for line in done.stdout.splitlines())
    return {key.strip(): value.strip() for key, _, value in fields}


def open_settled(loops: LoopVolumes, per_size: int, sizes: tuple[int, ...]) -> VolumePool:
    pool = loops.open_pool(per_size, sizes)
    assert pool.settle(SETTLE_S), "the pool did not fill"
    return pool


def test_a_new_volume_gets_a_fresh_pooled_image_and_the_pool_refills(
    loops: LoopVolumes, root: Path
) -> None:
    pool = open_settled(loops, 2, (1,))
    before = pooled(root)
    assert pool.ready_count(1) == 2 and len(before) == 2
    assert all(name.startswith("1g-") and name.endswith(".img") for name in before)

    loops.provision("vol-a", 1)
    image = root / "vol-a.img"
    assert image.stat().st_ino in before.values()  # moved out of the pool, not formatted now
    fresh = superblock(image)
    assert fresh["Mount count"] == "0" and fresh["Last mounted on"] == "<not available>"
    assert int(fresh["Block count"]) * int(fresh["Block size"]) == GIB

    assert pool.settle(SETTLE_S) and pool.ready_count(1) == 2
    after = pooled(root)
    assert len(after) == 2 and image.stat().st_ino not in after.values()
    # The pooled images were never mounted: nothing in the pool is.
    assert not any(line.split()[1].startswith(str(root)) for line in _mounts())


def test_quota_is_enforced_on_a_pooled_volume(loops: LoopVolumes, root: Path) -> None:
    pool = open_settled(loops, 1, (1,))
    loops.provision("vol-q", 1)
    assert pool.ready_count(1) == 0  # taken
    loops.ensure_mounted("vol-q")
    data = loops.data_dir("vol-q")
    assert os.path.ismount(data.parent) and list(data.iterdir()) == []
    fs = os.statvfs(data)
    assert 0.9 * GIB < fs.f_blocks * fs.f_frsize <= GIB
    with (data / "fill").open("wb") as handle:
        with pytest.raises(OSError) as full:
            os.posix_fallocate(handle.fileno(), 0, 2 * GIB)
        assert full.value.errno == errno.ENOSPC
    (data / "fill").unlink()
    (data / "small").write_bytes(b"x" * 4096)
    assert (data / "small").read_bytes() == b"x" * 4096


def test_the_pool_stays_bounded(loops: LoopVolumes, root: Path) -> None:
    """2 per size, at most 4 sizes: the pinned default and the 3 last asked for."""
    pool = open_settled(loops, 2, (1,))
    for number, size in enumerate((2, 3, 4, 5)):
        loops.provision(f"vol-{number}", size)
    assert pool.settle(SETTLE_S)
    sizes = sorted(name.partition("g-")[0] for name in pooled(root))
    assert sizes == ["1", "1", "3", "3", "4", "4", "5", "5"]  # 2 dropped out, its images gone
    assert pool.ready_count(2) == 0


def test_a_volumes_data_is_never_touched_by_the_pool(loops: LoopVolumes, root: Path) -> None:
    """A stopped instance's volume: provisioned again, its image and data stay,
    no pooled image is taken; reopening the pool (a restart) leaves it alone."""
    loops.provision("vol-keep", 1)  # no pool yet: formatted now
    loops.ensure_mounted("vol-keep")
    (loops.data_dir("vol-keep") / "marker").write_text("precious")
    image = root / "vol-keep.img"
    inode = image.stat().st_ino
    subprocess.run(["umount", str(root / "vol-keep")], check=True)  # as after a reboot

    pool = open_settled(loops, 1, (1,))
    loops.provision("vol-keep", 1)
    assert pool.ready_count(1) == 1  # not taken
    loops.ensure_mounted("vol-keep")
    assert (loops.data_dir("vol-keep") / "marker").read_text() == "precious"
    assert image.stat().st_ino == inode
    pool.close()
    open_settled(loops, 1, (1,))
    assert image.stat().st_ino == inode
    assert (loops.data_dir("vol-keep") / "marker").read_text() == "precious"


CHILD = """
import sys, time
from pathlib import Path
from gpudock.runtime.docker.volumes import LoopVolumes
pool = LoopVolumes(Path(sys.argv[1])).open_pool(2, (1,))
assert pool.settle(60)
print("ready", flush=True)
time.sleep(600)
"""


def test_leftovers_of_a_killed_process_are_deleted_when_the_pool_opens(
    loops: LoopVolumes, root: Path
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    left = pooled(root)
    assert len(left) == 2
    half = root / POOL_DIR / "1g-cut-short.img.tmp"  # what a kill during mkfs leaves
    half.write_bytes(b"\0" * 4096)

    pool = open_settled(loops, 2, (1,))
    now = pooled(root)
    assert len(now) == 2 and not set(now) & {*left, half.name}
    assert pool.ready_count(1) == 2


def _mounts() -> list[str]:
    return Path("/proc/self/mounts").read_text().splitlines()


def test_an_instance_starts_on_a_pooled_volume_and_keeps_it_across_stop_and_start(
    docker_platform_factory: PlatformFactory, engine: docker.DockerClient, root: Path
) -> None:
    runtime = DockerRuntime(volume_root=root, volume_pool_size=1, volume_pool_sizes=(1,))
    try:
        real = docker_platform_factory(runtime)
        api = TestClient(create_app(real, run_reconciler=False))
        carol = make_tenant(real, "carol")
        assert runtime.wait_for_volume_pool(SETTLE_S)
        ready = pooled(root)
        body = {"name": "pool", "gpu_count": 0, "disk_gb": 1}
        created = api.post("/api/v1/instances", json=body, headers=carol.headers)
        assert created.status_code == 201, created.text
        real.reconciler.drain()
        instance_id = created.json()["id"]
        image = root / f"{containers.volume_name(real.ctx.cluster_id, instance_id)}.img"
        inode = image.stat().st_ino
        assert inode in ready.values()  # the pool's image, not one formatted on the way
        name = containers.container_name(real.ctx.cluster_id, instance_id)
        fill = "echo kept > /root/data/marker && fallocate -l 2G /root/data/big"
        code, output = engine.containers.get(name).exec_run(["sh", "-c", fill])
        assert code != 0 and b"No space left" in output, output

        api.post(f"/api/v1/instances/{instance_id}/stop", headers=carol.headers)
        real.reconciler.drain()
        assert runtime.wait_for_volume_pool(SETTLE_S)
        refilled = pooled(root)
        api.post(f"/api/v1/instances/{instance_id}/start", headers=carol.headers)
        real.reconciler.drain()
        shown = api.get(f"/api/v1/instances/{instance_id}", headers=carol.headers).json()
        assert shown["status"] == "running", shown
        assert image.stat().st_ino == inode
        assert pooled(root) == refilled  # the start drew nothing from the pool
        marker = engine.containers.get(name).exec_run(["cat", "/root/data/marker"])
        assert marker.output == b"kept\n"
    finally:
        runtime.close()


def test_an_image_with_files_at_the_mount_point_seeds_the_size_limited_volume(
    docker_platform_factory: PlatformFactory,
    engine: docker.DockerClient,
    root: Path,
    tmp_path: Path,
) -> None:
    """The engine copies such files into a new volume at create, so it needs the
    file system then: a create that ran ahead of the mount is tried again."""
    (tmp_path / "Dockerfile").write_text(
        "FROM gpudock/base:bookworm\nRUN mkdir -p /root/data && echo seed > /root/data/seed\n"
    )
    runtime = DockerRuntime(volume_root=root, volume_pool_size=1, volume_pool_sizes=(1,))
    try:
        real = docker_platform_factory(runtime)
        tag = f"gpudock-test/pool-seeded:{real.ctx.cluster_id}"
        engine.images.build(path=str(tmp_path), tag=tag, network_mode="none", rm=True)
        try:
            api = TestClient(create_app(real, run_reconciler=False))
            dave = make_tenant(real, "dave")
            body = {"name": "seeded", "gpu_count": 0, "disk_gb": 1, "image": tag}
            created = api.post("/api/v1/instances", json=body, headers=dave.headers)
            assert created.status_code == 201, created.text
            real.reconciler.drain()
            shown = api.get("/api/v1/instances/seeded", headers=dave.headers).json()
            assert shown["status"] == "running", shown
            volume = containers.volume_name(real.ctx.cluster_id, shown["id"])
            assert (root / volume / "data" / "seed").read_text() == "seed\n"  # in the image file
            name = containers.container_name(real.ctx.cluster_id, shown["id"])
            size = engine.containers.get(name).exec_run(
                ["df", "-B1", "--output=size", "/root/data"]
            )
            assert 0.9 * GIB < int(size.output.split()[-1]) <= GIB
        finally:
            remove_cluster_objects(engine, real.ctx.cluster_id)
            engine.images.remove(tag, force=True)
    finally:
        runtime.close()
