"""Docker Engine runtime (local socket or a remote engine) through docker-py.

docker-py and requests exceptions are translated here and nowhere else.
"""

from __future__ import annotations

import contextlib
import io
import re
import tarfile
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest

from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime import docker_exec
from gpudock.runtime.base import (
    LABEL_MANAGED,
    BuildJob,
    BuildLine,
    ContainerSpec,
    ContainerState,
    ContainerStats,
    EngineInfo,
    ExecResult,
    ExecStream,
    ImageInfo,
    ImageNotFound,
    NetworkState,
    VolumeState,
)
from gpudock.runtime.build.docker import DockerBuilder
from gpudock.runtime.host_firewall import BRIDGE_OPTION, HostFirewall, bridge_name
from gpudock.runtime.loopvol import LoopVolumes

# Enough to install packages and run services as other users inside the
# instance; everything that reaches the host or the network stack (NET_RAW,
# MKNOD, SYS_ADMIN, SYS_CHROOT, SETFCAP, AUDIT_WRITE, ...) stays dropped.
ALLOWED_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "NET_BIND_SERVICE",
)
KEEPALIVE_COMMAND = ["sleep", "infinity"]
BASE_PROBE_IMAGE = "gpudock/base:bookworm"  # any image will do: the probe is never started
ENGINE_NETWORKS = frozenset({"", "default", "bridge", "host", "none"})
MAX_SHM_MB = 16 * 1024


class DockerRuntime:
    """Implements `gpudock.runtime.base.Runtime` over one Docker Engine."""

    def __init__(
        self,
        base_url: str | None = None,
        timeout_s: float = 120.0,
        pool_size: int = 16,
        volume_root: Path | None = None,
        host_firewall: bool = True,
    ) -> None:
        """`volume_root`: where size-limited data volumes live on the Docker host
        (see `gpudock.runtime.loopvol`); None: volumes without a size limit.
        `host_firewall`: keep tenant networks from connecting to this host (a
        local engine only; see `gpudock.runtime.host_firewall`)."""
        with _translated("connect to the Docker Engine"):
            if base_url:
                self._client = docker.DockerClient(
                    base_url=base_url, timeout=int(timeout_s), max_pool_size=pool_size
                )
            else:
                self._client = docker.from_env(timeout=int(timeout_s), max_pool_size=pool_size)
        self._engine_cpus: int | None = None
        self._size_opt: bool | None = None  # does the engine honour storage_opt size=?
        self._seen_images: set[str] = set()
        self._loop = LoopVolumes(volume_root, timeout_s) if volume_root else None
        self._network_locks: dict[str, threading.Lock] = {}
        self._network_guard = threading.Lock()
        local = docker_exec.engine_is_local(base_url)
        self._exec_streams = docker_exec.ExecStreams(self._client.api, local=local)
        self._firewall = HostFirewall() if host_firewall and local else None
        if self._firewall is not None and self._firewall.install():
            self._firewall.cover_bridges(self._tenant_bridges())

    def close(self) -> None:
        self._client.close()

    # -- engine and images -------------------------------------------------
    def engine_info(self) -> EngineInfo:
        with _translated("read the engine's info"):
            info = self._client.info()
        return EngineInfo(
            cpus=int(info.get("NCPU", 1)),
            memory_bytes=int(info.get("MemTotal", 0)),
            server_version=str(info.get("ServerVersion", "")),
        )

    def image_present(self, ref: str) -> bool:
        try:
            with _translated(f"inspect image {ref}"):
                self._client.images.get(ref)
        except ImageNotFound:
            return False
        return True

    def image_pullable(self, ref: str) -> bool:
        try:
            with _translated(f"look up {ref} in its registry"):
                self._client.api.inspect_distribution(ref)
        except RuntimeFailure:
            return False
        return True

    def ensure_image(self, ref: str) -> None:
        # Seen present before: skip the round trip (create_container forgets it
        # again if the engine says otherwise).
        if ref in self._seen_images or self.image_present(ref):
            self._seen_images.add(ref)
            return
        repository, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "")
        with _translated(f"pull image {ref}"):
            try:
                self._client.images.pull(repository, tag=tag or "latest")
            except docker.errors.APIError as exc:
                raise ImageNotFound(
                    f"image {ref!r} is not on the engine and could not be pulled: {_explain(exc)}"
                ) from exc

    def image_info(self, ref: str) -> ImageInfo | None:
        try:
            with _translated(f"inspect image {ref}"):
                attrs = self._client.api.inspect_image(ref)
        except ImageNotFound:
            return None
        except RuntimeFailure:
            return None  # the engine refused the name itself: it has no such image
        return ImageInfo(
            id=str(attrs["Id"]),
            tags=tuple(attrs.get("RepoTags") or ()),
            labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
            size_bytes=int(attrs.get("Size") or 0),
            config=dict(attrs.get("Config") or {}),
        )

    def commit_container(
        self, container_id: str, repository: str, tag: str, labels: dict[str, str] | None = None
    ) -> str:
        with _translated(f"commit container {container_id}"):
            container = self._client.containers.get(container_id)
            container.commit(
                repository=repository, tag=tag, conf={"Labels": labels} if labels else None
            )
        return f"{repository}:{tag}"

    def remove_image(self, ref: str) -> None:
        self._seen_images.discard(ref)
        with contextlib.suppress(ImageNotFound), _translated(f"remove image {ref}"):
            self._client.images.remove(ref, force=True)

    # -- volumes -----------------------------------------------------------
    def ensure_volume(self, name: str, labels: dict[str, str], size_gb: int | None = None) -> None:
        # The engine's volume create is idempotent for an existing name (whatever
        # its options): one round trip.
        options: dict[str, str] | None = None
        if self._loop is not None and size_gb is not None and not self._plain_volume(name):
            data = self._loop.ensure(name, size_gb)
            options = {"type": "none", "o": "bind", "device": str(data)}
        with _translated(f"create volume {name}"):
            self._client.api.create_volume(
                name=name, driver="local", driver_opts=options, labels=labels
            )

    def _plain_volume(self, name: str) -> bool:
        """True for a volume made before quotas were on: it stays as it is."""
        with _translated(f"inspect volume {name}"):
            try:
                attrs = self._client.api.inspect_volume(name)
            except docker.errors.NotFound:
                return False
        return not (attrs.get("Options") or {}).get("device")

    def remove_volume(self, name: str) -> None:
        with _translated(f"remove volume {name}"), contextlib.suppress(docker.errors.NotFound):
            self._client.volumes.get(name).remove(force=True)
        if self._loop is not None:
            self._loop.remove(name)

    def list_volumes(self, labels: dict[str, str]) -> list[VolumeState]:
        with _translated("list volumes"):
            volumes = self._client.volumes.list(filters={"label": _label_filter(labels)})
        return [VolumeState(name=v.name, labels=dict(v.attrs.get("Labels") or {})) for v in volumes]

    # -- containers --------------------------------------------------------
    def create_container(self, spec: ContainerSpec) -> ContainerState:
        if self._loop is not None:
            self._loop.ensure_mounted(spec.volume_name)
        lock = self._network_lock(spec.network) if spec.network else contextlib.nullcontext()
        with lock, _translated(f"create container {spec.name}"):
            if spec.network:
                self._ensure_network(spec.network, spec.network_labels)
            try:
                container = self._client.containers.create(**self._create_kwargs(spec))
            except docker.errors.ImageNotFound:
                self._seen_images.discard(spec.image)
                raise
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
                # The name is taken: created by an earlier attempt (e.g. before a crash).
                container = self._client.containers.get(spec.name)
        return _state_of(container.attrs)

    def _create_kwargs(self, spec: ContainerSpec) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "image": spec.image,
            "command": KEEPALIVE_COMMAND,
            "name": spec.name,
            "hostname": spec.hostname,
            "labels": spec.labels,
            "environment": spec.env,
            "detach": True,
            "init": True,
            "privileged": False,
            "cap_drop": ["ALL"],
            "cap_add": list(ALLOWED_CAPABILITIES),
            "security_opt": ["no-new-privileges:true"],
            "pids_limit": spec.pids_limit,
            "mem_limit": f"{spec.memory_mb}m",
            "memswap_limit": f"{spec.memory_mb}m",
            "shm_size": f"{min(spec.memory_mb // 2, MAX_SHM_MB)}m",
            "nano_cpus": int(min(spec.cpus, self._cpus()) * 1e9),
            "volumes": {spec.volume_name: {"bind": spec.volume_mount, "mode": "rw"}},
            "stop_signal": "SIGTERM",
        }
        if spec.network:
            kwargs["network"] = spec.network
        if spec.system_disk_gb and self.limits_system_disks():
            kwargs["storage_opt"] = {"size": f"{spec.system_disk_gb}G"}
        if spec.real_gpus and spec.gpu_uuids:
            kwargs["device_requests"] = [
                DeviceRequest(
                    driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]]
                )
            ]
        return kwargs

    def limits_system_disks(self) -> bool:
        """Probed once: overlay2 honours `size=` only over XFS mounted with pquota,
        btrfs with quotas on, and the engine says so only by refusing (or not) a
        container that asks for it."""
        if self._size_opt is None:
            self._size_opt = self._probe_size_opt()
        return self._size_opt

    def _probe_size_opt(self) -> bool:
        with _translated("probe the engine's storage options"):
            try:
                probe = self._client.api.create_container(
                    BASE_PROBE_IMAGE,
                    command=["true"],
                    host_config=self._client.api.create_host_config(storage_opt={"size": "1G"}),
                    labels={LABEL_MANAGED: "true"},
                )
            except docker.errors.APIError:
                return False
            self._client.api.remove_container(probe["Id"], force=True)
        return True

    def writable_layer_bytes(self, container_id: str) -> int | None:
        with _translated(f"measure container {container_id}"):
            found = self._client.api.containers(all=True, size=True, filters={"id": container_id})
        return int(found[0].get("SizeRw") or 0) if found else None

    def _cpus(self) -> int:
        # The engine refuses a CPU limit above its own core count.
        if self._engine_cpus is None:
            self._engine_cpus = self.engine_info().cpus
        return self._engine_cpus

    def start_container(self, container_id: str) -> ContainerState:
        with _translated(f"start container {container_id}"):
            self._client.api.start(container_id)  # a no-op (304) when already running
            return _state_of(self._client.api.inspect_container(container_id))

    def stop_container(self, container_id: str, timeout_s: int) -> ContainerState | None:
        with _translated(f"stop container {container_id}"):
            try:
                container = self._client.containers.get(container_id)
            except docker.errors.NotFound:
                return None
            if container.attrs["State"].get("Running"):
                container.stop(timeout=timeout_s)
                container.reload()
        return _state_of(container.attrs)

    def remove_container(self, container_id: str, *, keep_network: bool = False) -> None:
        with _translated(f"remove container {container_id}"):
            try:
                attrs = self._client.api.inspect_container(container_id)
                self._client.api.remove_container(container_id, force=True, v=False)
            except docker.errors.NotFound:
                return
        network = str((attrs.get("HostConfig") or {}).get("NetworkMode") or "")
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        if keep_network:
            return
        if labels.get(LABEL_MANAGED) == "true" and network not in ENGINE_NETWORKS:
            self.remove_network(network)

    # -- tenant networks --------------------------------------------
    def ensure_network(self, name: str, labels: dict[str, str]) -> None:
        with self._network_lock(name), _translated(f"create network {name}"):
            self._ensure_network(name, labels)

    def _ensure_network(self, name: str, labels: dict[str, str]) -> None:
        try:
            self._client.api.inspect_network(name)
            return
        except docker.errors.NotFound:
            pass
        # A bridge of its own: containers on it reach each other and the
        # internet (NAT); the engine's isolation rules drop traffic to other bridges,
        # and the host firewall new connections to the host (its bridge name).
        options = {BRIDGE_OPTION: bridge_name(name)}
        try:
            self._client.api.create_network(
                name, driver="bridge", labels=labels, options=options, check_duplicate=True
            )
        except docker.errors.APIError as exc:
            if "address pool" not in _explain(exc):
                raise
            # The engine's address pools are full (its defaults hold ~30 bridges):
            # free the ones gpudock left unused (crashes, any cluster), then retry once.
            self._remove_unused_networks()
            self._client.api.create_network(
                name, driver="bridge", labels=labels, options=options, check_duplicate=True
            )

    def _tenant_bridges(self) -> list[str]:
        """The Linux bridges of gpudock's networks (Docker names unnamed ones br-<id>)."""
        with _translated("list networks"):
            found = self._client.api.networks(filters={"label": f"{LABEL_MANAGED}=true"})
        return [(n.get("Options") or {}).get(BRIDGE_OPTION) or f"br-{n['Id'][:12]}" for n in found]

    def _remove_unused_networks(self) -> None:
        """gpudock networks that no container, running or not, is on. Not the
        engine's `network prune`: it would take those of stopped containers."""
        for network in self._client.api.networks(filters={"label": f"{LABEL_MANAGED}=true"}):
            if not self._client.api.containers(all=True, filters={"network": network["Name"]}):
                with contextlib.suppress(docker.errors.APIError):
                    self._client.api.remove_network(network["Id"])

    def remove_network(self, name: str) -> None:
        with self._network_lock(name), _translated(f"remove network {name}"):
            # Stopped containers keep their network by id: never pull it from under them.
            if self._client.api.containers(all=True, filters={"network": name}):
                return
            try:
                self._client.api.remove_network(name)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if exc.status_code in (403, 409):  # an endpoint appeared: still in use
                    return
                raise

    def list_networks(self, labels: dict[str, str]) -> list[NetworkState]:
        with _translated("list networks"):
            found = self._client.api.networks(filters={"label": _label_filter(labels)})
        return [NetworkState(name=n["Name"], labels=dict(n.get("Labels") or {})) for n in found]

    def _network_lock(self, name: str) -> threading.Lock:
        """One lock per network: creating a container on it and removing it never interleave."""
        with self._network_guard:
            return self._network_locks.setdefault(name, threading.Lock())

    def inspect_container(self, name_or_id: str) -> ContainerState | None:
        with _translated(f"inspect container {name_or_id}"):
            try:
                attrs = self._client.api.inspect_container(name_or_id)
            except docker.errors.NotFound:
                return None
        return _state_of(attrs)

    def list_containers(self, labels: dict[str, str]) -> list[ContainerState]:
        with _translated("list containers"):
            summaries = self._client.api.containers(
                all=True, filters={"label": _label_filter(labels)}
            )
        return [
            ContainerState(
                id=s["Id"],
                name=s["Names"][0].lstrip("/") if s.get("Names") else s["Id"],
                running=s.get("State") == "running",
                status=str(s.get("State", "")),
                labels=dict(s.get("Labels") or {}),
                created_at=datetime.fromtimestamp(int(s["Created"]), UTC)
                if s.get("Created")
                else None,
            )
            for s in summaries
        ]

    def exec_in_container(self, container_id: str, command: list[str]) -> ExecResult:
        with _translated(f"exec in container {container_id}"):
            container = self._client.containers.get(container_id)
            exit_code, output = container.exec_run(command, demux=False)
        return ExecResult(exit_code=int(exit_code), output=bytes(output or b""))

    # -- images ----------------------------------------------------
    def build_image(self, job: BuildJob) -> Iterator[BuildLine]:
        builder = DockerBuilder(self._client.api, self._cpus(), ALLOWED_CAPABILITIES)
        return builder.run(job)

    def image_size(self, ref: str) -> int | None:
        try:
            with _translated(f"inspect image {ref}"):
                return int(self._client.images.get(ref).attrs.get("Size", 0))
        except ImageNotFound:
            return None

    def put_file(self, container_id: str, path: str, data: bytes, mode: int = 0o755) -> None:
        directory, _, name = path.rpartition("/")
        with _translated(f"copy {path} into {container_id}"):
            container = self._client.containers.get(container_id)
            container.put_archive(directory or "/", _tar_of({name: data}, mode))

    def run_once(
        self, image: str, command: list[str], files: dict[str, bytes], timeout_s: float
    ) -> ExecResult:
        with _translated(f"run a check in {image}"):
            container = self._client.containers.create(
                image, command, network_mode="none", labels={"gpudock.check": "1"}
            )
            try:
                for path, data in files.items():
                    directory, _, name = path.rpartition("/")
                    container.put_archive(directory or "/", _tar_of({name: data}, 0o755))
                container.start()
                status = container.wait(timeout=timeout_s)
                output = container.logs(stdout=True, stderr=True)
            finally:
                container.remove(force=True)
        return ExecResult(exit_code=int(status.get("StatusCode", 1)), output=bytes(output))

    # -- exec streams (the SSH gateway) -------------------------------
    def open_exec_stream(
        self, container_id: str, command: list[str], *, tty: bool, env: dict[str, str]
    ) -> ExecStream:
        with _translated(f"start a session in container {container_id}"):
            return self._exec_streams.open(container_id, command, tty, env)

    def resize_exec(self, exec_id: str, width: int, height: int) -> None:
        with _translated(f"resize the terminal of exec {exec_id}"):
            self._exec_streams.resize(exec_id, width, height)

    def exec_exit_code(self, exec_id: str) -> int | None:
        with _translated(f"inspect exec {exec_id}"):
            return self._exec_streams.exit_code(exec_id)

    # -- data moves (migration) -----------------------------------------
    def copy_volume(
        self,
        source: str,
        target: str,
        *,
        image: str,
        helper_name: str,
        labels: dict[str, str],
        on_progress: Callable[[int, int], None] | None = None,
    ) -> int:
        api = self._client.api
        if self._loop is not None:  # size-limited volumes unmounted by a reboot
            self._loop.ensure_mounted(source)
            self._loop.ensure_mounted(target)
        with _translated(f"copy volume {source} to {target}"):
            with contextlib.suppress(docker.errors.NotFound):
                api.remove_container(helper_name, force=True)  # a copy cut short earlier
            container = api.create_container(
                image,
                ["sh", "-c", _COPY_SCRIPT],
                name=helper_name,
                labels=labels,
                network_disabled=True,
                host_config=api.create_host_config(
                    binds={
                        source: {"bind": "/from", "mode": "ro"},
                        target: {"bind": "/to", "mode": "rw"},
                    },
                    network_mode="none",
                    security_opt=["no-new-privileges"],
                    pids_limit=256,
                ),
            )
            try:
                api.start(container["Id"])
                code = self._wait_for_copy(container["Id"], on_progress)
                output = api.logs(container["Id"], stdout=True, stderr=True)
            finally:
                with contextlib.suppress(docker.errors.APIError):
                    api.remove_container(container["Id"], force=True)
        text = bytes(output).decode(errors="replace")
        if code != 0:
            raise RuntimeFailure(
                f"copying volume {source} to {target} failed ({code}): {text[-500:]}"
            )
        total = _copy_total(text)
        if on_progress is not None:
            on_progress(total, total)
        return total

    def _wait_for_copy(
        self, container_id: str, on_progress: Callable[[int, int], None] | None
    ) -> int:
        """Wait for the helper to exit, reporting progress from its log meanwhile."""
        api = self._client.api
        while True:
            try:
                return int(api.wait(container_id, timeout=1)["StatusCode"])
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                pass  # still copying: report where it is and wait again
            if on_progress is not None:
                text = bytes(api.logs(container_id, stdout=True, stderr=True)).decode(
                    errors="replace"
                )
                done, total = _copy_progress(text)
                if total:
                    on_progress(done, total)

    # -- usage (the instance page) ------------------------------------
    def container_stats(self, container_id: str) -> ContainerStats | None:
        api = self._client.api
        with _translated(f"read the usage of container {container_id}"):
            try:
                attrs = api.inspect_container(container_id)
                if not (attrs.get("State") or {}).get("Running"):
                    return None
                # one_shot: no second sample for precpu_stats (that costs 1 s); a call
                # within a second of the last may still wait for the engine's next sample
                stats = api.stats(container_id, stream=False, one_shot=True)
            except docker.errors.NotFound:
                return None
        return _stats_of(attrs.get("HostConfig") or {}, stats)


def _stats_of(host_config: dict[str, Any], stats: dict[str, Any]) -> ContainerStats | None:
    """A reading from the engine's stats (cgroup v1 or v2); None for the empty
    reading the engine gives for a container that stopped meanwhile."""
    read_at = parse_docker_time(stats.get("read"))
    if read_at is None:
        return None
    memory = stats.get("memory_stats") or {}
    return ContainerStats(
        cpu_total_ns=int(
            ((stats.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage") or 0
        ),
        cpu_limit=_cpu_limit(host_config),
        memory_bytes=_memory_in_use(memory),
        memory_limit_bytes=int(host_config.get("Memory") or 0) or None,
        pids=int((stats.get("pids_stats") or {}).get("current") or 0),
        read_at=read_at,
    )


def _cpu_limit(host_config: dict[str, Any]) -> float | None:
    nano = int(host_config.get("NanoCpus") or 0)
    if nano > 0:
        return nano / 1e9
    quota, period = int(host_config.get("CpuQuota") or 0), int(host_config.get("CpuPeriod") or 0)
    return quota / period if quota > 0 and period > 0 else None


def _memory_in_use(memory: dict[str, Any]) -> int:
    """Usage less the reclaimable page cache, as `docker stats` computes it:
    `total_inactive_file` on cgroup v1, `inactive_file` on v2."""
    usage = int(memory.get("usage") or 0)
    detail = memory.get("stats") or {}
    cache = detail.get("total_inactive_file", detail.get("inactive_file", 0))
    cache = int(cache or 0)
    return usage - cache if cache < usage else usage


def _tar_of(files: dict[str, bytes], mode: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _label_filter(labels: dict[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in labels.items()]


def _state_of(attrs: dict[str, Any]) -> ContainerState:
    state = attrs.get("State") or {}
    return ContainerState(
        id=attrs["Id"],
        name=str(attrs.get("Name", "")).lstrip("/"),
        running=bool(state.get("Running")),
        status=str(state.get("Status", "")),
        labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
        started_at=parse_docker_time(state.get("StartedAt")),
        finished_at=parse_docker_time(state.get("FinishedAt")),
        exit_code=state.get("ExitCode"),
        oom_killed=bool(state.get("OOMKilled")),
    )


def parse_docker_time(value: str | None) -> datetime | None:
    """Docker's RFC 3339 with nanoseconds; its zero time means 'never'."""
    if not value or value.startswith("0001-01-01"):
        return None
    main, _, rest = value.rstrip("Z").partition(".")
    fraction = "".join(ch for ch in rest if ch.isdigit())[:6].ljust(6, "0")
    parsed = datetime.fromisoformat(f"{main}.{fraction}")
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


# A fresh target gets `cp -a` (fastest); a target a cut-short copy left behind
# gets rsync, which skips the files already complete (resume), or a clean
# `cp -a` where the image has no rsync. A background `du` reports progress.
_COPY_SCRIPT = r"""
set -e
echo "total $(du -sb /from | cut -f1)"
( while sleep 1; do echo "done $(du -sb /to 2>/dev/null | cut -f1)"; done ) &
watcher=$!
if [ -z "$(find /to -mindepth 1 -maxdepth 1 ! -name lost+found -print -quit)" ]; then
  cp -a /from/. /to/
elif command -v rsync >/dev/null 2>&1; then
  rsync -a --delete --inplace --exclude=/lost+found /from/ /to/
else
  find /to -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {} +
  cp -a /from/. /to/
fi
kill "$watcher" 2>/dev/null || true
echo "copied"
"""
_COPY_TOTAL = re.compile(r"^total (\d+)", re.MULTILINE)
_COPY_DONE = re.compile(r"^done (\d+)", re.MULTILINE)


def _copy_total(log: str) -> int:
    match = _COPY_TOTAL.search(log)
    return int(match[1]) if match else 0


def _copy_progress(log: str) -> tuple[int, int]:
    """(bytes done, total) from the helper's log so far."""
    done = _COPY_DONE.findall(log)
    total = _copy_total(log)
    return (min(int(done[-1]), total) if done else 0), total


@contextlib.contextmanager
def _translated(action: str) -> Iterator[None]:
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageNotFound(f"could not {action}: {_explain(exc)}") from exc
    except docker.errors.NotFound as exc:
        raise RuntimeFailure(f"could not {action}: {_explain(exc)}") from exc
    except docker.errors.APIError as exc:
        raise RuntimeFailure(f"could not {action}: {_explain(exc)}") from exc
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        raise RuntimeUnavailable(
            f"could not {action}: the Docker Engine is unreachable ({exc}); "
            "is dockerd running and GPUDOCK_DOCKER_HOST right?"
        ) from exc
    except docker.errors.DockerException as exc:
        raise RuntimeUnavailable(
            f"could not {action}: {exc}; is dockerd running and GPUDOCK_DOCKER_HOST right?"
        ) from exc
