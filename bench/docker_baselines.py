"""The `docker run`s that gpudock's create → running is measured against.

- `Bare`: `docker run -d --init IMAGE sleep infinity`, through the CLI and
  through docker-py (the client library gpudock uses, without the CLI's start-up);
- `Hardened`: the same `docker run` (CLI) with what gpudock asks of the engine
  for an instance — its own bridge network (made once, as a tenant's is made
  by its first instance), every capability dropped but gpudock's allow-list,
  no-new-privileges, pids/memory/swap/shm/CPU limits — and a size-limited data
  volume made by hand in the same timed run, the way gpudock makes one: a
  sparse file formatted ext4, loop-mounted, bound through a `local` volume.

The hardening is not restated here: it is read from a container gpudock made
(`Hardening.of`), so the two cannot drift apart.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors

BENCH_LABEL = "gpudock-bench"
DATA_MOUNT = "/root/data"
GIB = 1024**3
# What gpudock's loop volumes run (runtime/docker/volumes.py), by hand.
MKFS = ["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1"]
MOUNT_OPTIONS = "loop,noinit_itable,nodev,nosuid"


class BenchError(Exception):
    """Something failed: the run's figures are not to be trusted."""


@dataclass(frozen=True)
class Hardening:
    """The sandbox and limits of one gpudock container, as `docker run` flags."""

    flags: tuple[str, ...]

    @classmethod
    def of(cls, attrs: dict[str, Any]) -> Hardening:
        """From the engine's inspect answer for a container gpudock made."""
        host = attrs.get("HostConfig") or {}
        flags = ["--cap-drop", "ALL"] if "ALL" in (host.get("CapDrop") or []) else []
        for capability in host.get("CapAdd") or []:
            flags += ["--cap-add", capability]
        for option in host.get("SecurityOpt") or []:
            flags += ["--security-opt", option]
        limits = {
            "--pids-limit": host.get("PidsLimit"),
            "--memory": host.get("Memory"),
            "--memory-swap": host.get("MemorySwap"),
            "--shm-size": host.get("ShmSize"),
        }
        for flag, value in limits.items():
            if value:
                flags += [flag, str(value)]
        if host.get("NanoCpus"):
            flags += ["--cpus", f"{int(host['NanoCpus']) / 1e9:g}"]
        size = (host.get("StorageOpt") or {}).get("size")
        if size:
            flags += ["--storage-opt", f"size={size}"]
        if "--cap-drop" not in flags or "--memory" not in flags:
            raise BenchError(f"the gpudock container is not hardened as expected: {host}")
        return cls(tuple(flags))


@dataclass
class Bare:
    client: Any  # docker.DockerClient (docker-py ships no type hints)
    image: str
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    count: int = 0

    @property
    def label(self) -> str:
        return f"{BENCH_LABEL}={self.run_id}"

    def name(self, kind: str) -> str:
        self.count += 1
        return f"gpudock-bench-{self.run_id}-{kind}-{self.count}"

    def measure_cli(self) -> tuple[float, str]:
        name = self.name("cli")
        command = ["docker", "run", "-d", "--init", "--name", name, "--label", self.label]
        t0 = time.perf_counter()
        done = subprocess.run(
            [*command, self.image, "sleep", "infinity"], capture_output=True, check=False
        )
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            raise BenchError(f"docker run failed: {done.stderr.decode(errors='replace')}")
        return seconds, name

    def measure_sdk(self) -> tuple[float, str]:
        name = self.name("sdk")
        t0 = time.perf_counter()
        self.client.containers.run(
            self.image,
            ["sleep", "infinity"],
            detach=True,
            init=True,
            name=name,
            labels={BENCH_LABEL: self.run_id},
        )
        return time.perf_counter() - t0, name

    def remove(self, name: str) -> None:
        self.client.api.remove_container(name, force=True)

    def remove_all(self) -> int:
        found = self.client.api.containers(all=True, filters={"label": self.label})
        for container in found:
            self.client.api.remove_container(container["Id"], force=True)
        return len(found)


@dataclass
class Hardened:
    """`docker run` with gpudock's hardening and a loop-mounted ext4 volume
    made in the same timed run; everything it made goes in `remove_all`."""

    bare: Bare
    hardening: Hardening
    disk_gb: int
    work_dir: Path
    network: str = ""
    volumes: list[str] = field(default_factory=list)

    def make_network(self) -> None:
        self.network = f"gpudock-bench-{self.bare.run_id}-net"
        _run(["docker", "network", "create", "--label", self.bare.label, self.network])

    def measure(self) -> tuple[float, str]:
        name = self.bare.name("hardened")
        image, mountpoint = self.work_dir / f"{name}.img", self.work_dir / name
        self.volumes.append(name)
        t0 = time.perf_counter()
        with image.open("wb") as handle:
            handle.truncate(self.disk_gb * GIB)
        _run([*MKFS, "-L", "bench-data", str(image)])
        mountpoint.mkdir()
        _run(["mount", "-o", MOUNT_OPTIONS, str(image), str(mountpoint)])
        (mountpoint / "data").mkdir()
        volume = ",".join(
            [
                f"type=volume,source={name},destination={DATA_MOUNT}",
                "volume-opt=type=none,volume-opt=o=bind",
                f"volume-opt=device={mountpoint / 'data'}",
            ]
        )
        command = ["docker", "run", "-d", "--init", "--name", name, "--label", self.bare.label]
        command += ["--network", self.network, *self.hardening.flags, "--mount", volume]
        _run([*command, self.bare.image, "sleep", "infinity"])
        return time.perf_counter() - t0, name

    def remove(self, name: str) -> None:
        self.bare.remove(name)
        _remove_volume(self.bare.client, name, self.work_dir)
        self.volumes.remove(name)

    def remove_all(self) -> None:
        """After `Bare.remove_all` took the containers: volumes, mounts, network."""
        for name in list(self.volumes):
            _remove_volume(self.bare.client, name, self.work_dir)
        self.volumes.clear()
        if self.network:
            subprocess.run(["docker", "network", "rm", self.network], capture_output=True)


def _remove_volume(client: Any, name: str, work_dir: Path) -> None:
    with contextlib.suppress(docker.errors.NotFound):  # the run failed before its docker run
        client.api.remove_volume(name, force=True)
    mountpoint = work_dir / name
    if os.path.ismount(mountpoint):
        _run(["umount", str(mountpoint)])
    if mountpoint.is_dir():
        mountpoint.rmdir()
    (work_dir / f"{name}.img").unlink(missing_ok=True)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, check=False)
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip()
        raise BenchError(f"{' '.join(command[:3])} … failed: {detail}")
