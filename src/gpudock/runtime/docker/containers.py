"""Instance containers: created hardened from a `ContainerSpec`, started,
stopped, removed, inspected, listed, measured, committed and written into.

What an instance may do inside its container is decided here, in
`create_arguments` (capabilities, no-new-privileges, limits, devices).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.types import DeviceRequest

from gpudock.runtime.base import (
    ALLOWED_CAPABILITIES,
    LABEL_MANAGED,
    ContainerSpec,
    ContainerState,
    ContainerStats,
    ExecResult,
    shm_size_mb,
)
from gpudock.runtime.docker.translate import (
    label_filter,
    listed_state_of,
    state_of,
    stats_of,
    tar_of,
    translated,
)

KEEPALIVE_COMMAND = ["sleep", "infinity"]
JOB_SHELL = ["/bin/sh", "-c"]
BASE_PROBE_IMAGE = "gpudock/base:bookworm"  # any image will do: the probe is never started
CONFLICT = 409


# A container's cgroup path names its id: /docker/<id> (cgroupfs, v1 or v2),
# /<parent>/<id> (cgroupfs under dockerd's --cgroup-parent) or
# /system.slice/docker-<id>.scope (systemd); nested engines: the innermost.
_CGROUP_CONTAINER = re.compile(r"(?:docker-|/)([0-9a-f]{64})(?:\.scope)?(?=/|$)")


def container_of_pid(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The Docker container id in `/proc/<pid>/cgroup`, or None (in no
    container, or the process has gone)."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    found = [m.group(1) for line in text.splitlines() for m in _CGROUP_CONTAINER.finditer(line)]
    return found[-1] if found else None


def host_config_arguments(spec: ContainerSpec, engine_cpus: int, cap_disk: bool) -> dict[str, Any]:
    """The container's host configuration: its sandbox and its limits. The CPU
    limit is capped at the engine's cores (it refuses more); `cap_disk`: the
    engine enforces `storage_opt` size."""
    arguments: dict[str, Any] = {
        "init": True,
        "privileged": False,
        "cap_drop": ["ALL"],
        "cap_add": list(ALLOWED_CAPABILITIES),
        "security_opt": ["no-new-privileges:true"],
        "pids_limit": spec.pids_limit,
        "mem_limit": f"{spec.memory_mb}m",
        "memswap_limit": f"{spec.memory_mb}m",
        "shm_size": f"{shm_size_mb(spec)}m",
        "nano_cpus": int(min(spec.cpus, engine_cpus) * 1e9),
        "binds": {spec.volume_name: {"bind": spec.volume_mount, "mode": "rw"}},
    }
    if spec.network:
        arguments["network_mode"] = spec.network
    if spec.system_disk_gb and cap_disk:
        arguments["storage_opt"] = {"size": f"{spec.system_disk_gb}G"}
    if spec.real_gpus and spec.gpu_uuids:
        arguments["device_requests"] = [
            DeviceRequest(driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]])
        ]
    return arguments


def main_command(spec: ContainerSpec) -> list[str]:
    """The container's command: the job's shell line, or the keep-alive. Either is
    passed to the image's entry point when it has one (the services image starts
    JupyterLab and TensorBoard, then `exec`s it)."""
    return [*JOB_SHELL, spec.command] if spec.command else list(KEEPALIVE_COMMAND)


def create_arguments(spec: ContainerSpec) -> dict[str, Any]:
    """The container's own configuration (all but the host configuration)."""
    arguments: dict[str, Any] = {
        "image": spec.image,
        "command": main_command(spec),
        "name": spec.name,
        "hostname": spec.hostname,
        "labels": spec.labels,
        "environment": spec.env,
        "detach": True,
        "volumes": [spec.volume_mount],
        "stop_signal": "SIGTERM",
    }
    if spec.network:
        arguments["networking_config"] = {spec.network: None}
    return arguments


class DockerContainers:
    """The containers of one engine."""

    def __init__(self, api: docker.APIClient) -> None:
        self._api = api
        self._size_opt: bool | None = None  # does the engine honour storage_opt size=?

    def create(self, spec: ContainerSpec, engine_cpus: int) -> ContainerState:
        """Create it, or return the one an earlier attempt made (e.g. before a
        crash) as the engine describes it: its labels may not be `spec`'s."""
        cap_disk = bool(spec.system_disk_gb) and self.limits_system_disks()
        host_config = host_config_arguments(spec, engine_cpus, cap_disk)
        with translated(f"create container {spec.name}"):
            try:
                created = self._api.create_container(
                    **create_arguments(spec),
                    host_config=self._api.create_host_config(**host_config),
                )
            except docker.errors.APIError as exc:
                if exc.status_code != CONFLICT:
                    raise
                # The name is taken: by that earlier attempt.
                return state_of(self._api.inspect_container(spec.name))
        # Just made from `spec`: no round trip to be told what it was given.
        return ContainerState(
            id=str(created["Id"]),
            name=spec.name,
            running=False,
            status="created",
            labels=dict(spec.labels),
        )

    def limits_system_disks(self) -> bool:
        """Probed once: overlay2 honours `size=` only over XFS mounted with pquota,
        btrfs with quotas on, and the engine says so only by refusing (or not) a
        container that asks for it."""
        if self._size_opt is None:
            self._size_opt = self._probe_size_opt()
        return self._size_opt

    def _probe_size_opt(self) -> bool:
        with translated("probe the engine's storage options"):
            try:
                probe = self._api.create_container(
                    BASE_PROBE_IMAGE,
                    command=["true"],
                    host_config=self._api.create_host_config(storage_opt={"size": "1G"}),
                    labels={LABEL_MANAGED: "true"},
                )
            except docker.errors.APIError:
                return False
            self._api.remove_container(probe["Id"], force=True)
        return True

    def start(self, container_id: str) -> ContainerState:
        with translated(f"start container {container_id}"):
            self._api.start(container_id)  # a no-op (304) when already running
            return state_of(self._api.inspect_container(container_id))

    def stop(self, container_id: str, timeout_s: int) -> ContainerState | None:
        with translated(f"stop container {container_id}"):
            try:
                attrs = self._api.inspect_container(container_id)
            except docker.errors.NotFound:
                return None
            if attrs["State"].get("Running"):
                self._api.stop(attrs["Id"], timeout=timeout_s)
                attrs = self._api.inspect_container(attrs["Id"])
        return state_of(attrs)

    def remove(self, container_id: str) -> dict[str, Any] | None:
        """Remove it (stopping it first); what the engine knew of it, or None if
        there was no such container."""
        with translated(f"remove container {container_id}"):
            try:
                attrs: dict[str, Any] = self._api.inspect_container(container_id)
                self._api.remove_container(container_id, force=True, v=False)
            except docker.errors.NotFound:
                return None
        return attrs

    def inspect(self, name_or_id: str) -> ContainerState | None:
        with translated(f"inspect container {name_or_id}"):
            try:
                attrs = self._api.inspect_container(name_or_id)
            except docker.errors.NotFound:
                return None
        return state_of(attrs)

    def with_labels(self, labels: dict[str, str]) -> list[ContainerState]:
        with translated("list containers"):
            summaries = self._api.containers(all=True, filters={"label": label_filter(labels)})
        return [listed_state_of(summary) for summary in summaries]

    def writable_layer_bytes(self, container_id: str) -> int | None:
        with translated(f"measure container {container_id}"):
            found = self._api.containers(all=True, size=True, filters={"id": container_id})
        return int(found[0].get("SizeRw") or 0) if found else None

    def stats(self, container_id: str) -> ContainerStats | None:
        with translated(f"read the usage of container {container_id}"):
            try:
                attrs = self._api.inspect_container(container_id)
                if not (attrs.get("State") or {}).get("Running"):
                    return None
                # one_shot: no second sample for precpu_stats (that costs 1 s); a call
                # within a second of the last may still wait for the engine's next sample
                stats = self._api.stats(container_id, stream=False, one_shot=True)
            except docker.errors.NotFound:
                return None
        return stats_of(attrs.get("HostConfig") or {}, stats)

    def commit(
        self, container_id: str, repository: str, tag: str, labels: dict[str, str] | None
    ) -> str:
        with translated(f"commit container {container_id}"):
            self._api.commit(
                container_id,
                repository=repository,
                tag=tag,
                conf={"Labels": labels} if labels else None,
            )
        return f"{repository}:{tag}"

    def exec(self, container_id: str, command: list[str]) -> ExecResult:
        """Run `command` to completion; its exit code and output (stdout and stderr)."""
        with translated(f"exec in container {container_id}"):
            created = self._api.exec_create(container_id, command, stdout=True, stderr=True)
            output = self._api.exec_start(created["Id"])
            exit_code = self._api.exec_inspect(created["Id"]).get("ExitCode")
        return ExecResult(exit_code=int(exit_code), output=bytes(output or b""))

    def put_file(self, container_id: str, path: str, data: bytes, mode: int) -> None:
        directory, _, name = path.rpartition("/")
        with translated(f"copy {path} into {container_id}"):
            self._api.put_archive(container_id, directory or "/", tar_of({name: data}, mode))
