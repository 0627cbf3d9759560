"""Docker Engine runtime (local socket or a remote engine) through docker-py.

docker-py and requests exceptions are translated here and nowhere else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest

from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime.base import (
    ContainerSpec,
    ContainerState,
    EngineInfo,
    ExecResult,
    ImageNotFound,
    VolumeState,
)

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
MAX_SHM_MB = 16 * 1024


class DockerRuntime:
    """Implements `gpudock.runtime.base.Runtime` over one Docker Engine."""

    def __init__(
        self, base_url: str | None = None, timeout_s: float = 120.0, pool_size: int = 16
    ) -> None:
        with _translated("connect to the Docker Engine"):
            if base_url:
                self._client = docker.DockerClient(
                    base_url=base_url, timeout=int(timeout_s), max_pool_size=pool_size
                )
            else:
                self._client = docker.from_env(timeout=int(timeout_s), max_pool_size=pool_size)
        self._engine_cpus: int | None = None

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
        if self.image_present(ref):
            return
        repository, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "")
        with _translated(f"pull image {ref}"):
            try:
                self._client.images.pull(repository, tag=tag or "latest")
            except docker.errors.APIError as exc:
                raise ImageNotFound(
                    f"image {ref!r} is not on the engine and could not be pulled: {_explain(exc)}"
                ) from exc

    def commit_container(self, container_id: str, repository: str, tag: str) -> str:
        with _translated(f"commit container {container_id}"):
            container = self._client.containers.get(container_id)
            container.commit(repository=repository, tag=tag)
        return f"{repository}:{tag}"

    def remove_image(self, ref: str) -> None:
        with contextlib.suppress(ImageNotFound), _translated(f"remove image {ref}"):
            self._client.images.remove(ref, force=True)

    # -- volumes -----------------------------------------------------------
    def ensure_volume(self, name: str, labels: dict[str, str]) -> None:
        with _translated(f"create volume {name}"):
            try:
                self._client.volumes.get(name)
            except docker.errors.NotFound:
                self._client.volumes.create(name=name, labels=labels)

    def remove_volume(self, name: str) -> None:
        with _translated(f"remove volume {name}"):
            try:
                self._client.volumes.get(name).remove(force=True)
            except docker.errors.NotFound:
                return

    def list_volumes(self, labels: dict[str, str]) -> list[VolumeState]:
        with _translated("list volumes"):
            volumes = self._client.volumes.list(filters={"label": _label_filter(labels)})
        return [VolumeState(name=v.name, labels=dict(v.attrs.get("Labels") or {})) for v in volumes]

    # -- containers --------------------------------------------------------
    def create_container(self, spec: ContainerSpec) -> ContainerState:
        existing = self.inspect_container(spec.name)
        if existing is not None:
            return existing
        with _translated(f"create container {spec.name}"):
            try:
                container = self._client.containers.create(**self._create_kwargs(spec))
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # created by a concurrent or earlier attempt
                    container = self._client.containers.get(spec.name)
                else:
                    raise
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
        if spec.real_gpus and spec.gpu_uuids:
            kwargs["device_requests"] = [
                DeviceRequest(
                    driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]]
                )
            ]
        return kwargs

    def _cpus(self) -> int:
        # The engine refuses a CPU limit above its own core count.
        if self._engine_cpus is None:
            self._engine_cpus = self.engine_info().cpus
        return self._engine_cpus

    def start_container(self, container_id: str) -> ContainerState:
        with _translated(f"start container {container_id}"):
            container = self._client.containers.get(container_id)
            if not container.attrs["State"].get("Running"):
                container.start()
                container.reload()
        return _state_of(container.attrs)

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

    def remove_container(self, container_id: str) -> None:
        with _translated(f"remove container {container_id}"):
            try:
                self._client.api.remove_container(container_id, force=True, v=False)
            except docker.errors.NotFound:
                return

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
            )
            for s in summaries
        ]

    def exec_in_container(self, container_id: str, command: list[str]) -> ExecResult:
        with _translated(f"exec in container {container_id}"):
            container = self._client.containers.get(container_id)
            exit_code, output = container.exec_run(command, demux=False)
        return ExecResult(exit_code=int(exit_code), output=bytes(output or b""))


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
