"""The runtime seam. Contracts, for every implementation:

- Every method is idempotent and returns quickly (bounded by the runtime's
  call timeout); none waits for a condition that may never come.
- Vendor exceptions never leave `gpudock.runtime`: they become
  `RuntimeFailure` (the engine answered with an error), `RuntimeUnavailable`
  (the engine cannot be reached) or a more specific subclass below.
- Removing something that does not exist returns silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from gpudock.errors import RuntimeFailure

LABEL_MANAGED = "gpudock.managed"
LABEL_CLUSTER = "gpudock.cluster"
LABEL_INSTANCE = "gpudock.instance"
LABEL_HOST = "gpudock.host"
LABEL_GPUS = "gpudock.gpus"
LABEL_OWNER = "gpudock.user"


class ImageNotFound(RuntimeFailure):
    code = "image_not_found"


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to create one instance's container."""

    name: str
    hostname: str
    image: str
    labels: dict[str, str]
    env: dict[str, str]
    gpu_uuids: tuple[str, ...]
    real_gpus: bool
    cpus: float
    memory_mb: int
    pids_limit: int
    volume_name: str
    volume_mount: str = "/root/data"
    stop_timeout_s: int = 5


@dataclass(frozen=True)
class ContainerState:
    id: str
    name: str
    running: bool
    status: str
    labels: dict[str, str] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    oom_killed: bool = False


@dataclass(frozen=True)
class VolumeState:
    name: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: bytes


@dataclass(frozen=True)
class EngineInfo:
    cpus: int
    memory_bytes: int
    server_version: str


class Runtime(Protocol):
    def engine_info(self) -> EngineInfo:
        """Describe the engine; raises `RuntimeUnavailable` if it cannot be reached."""
        ...

    def image_present(self, ref: str) -> bool:
        """True if the image is on the engine now (no pull)."""
        ...

    def image_pullable(self, ref: str) -> bool:
        """True if a registry says the reference exists (asks the registry, no download)."""
        ...

    def ensure_image(self, ref: str) -> None:
        """Make the image present, pulling it if needed; `ImageNotFound` if impossible."""
        ...

    def ensure_volume(self, name: str, labels: dict[str, str]) -> None:
        """Create the named volume unless it exists."""
        ...

    def remove_volume(self, name: str) -> None:
        """Remove the volume; silent if it does not exist."""
        ...

    def create_container(self, spec: ContainerSpec) -> ContainerState:
        """Create (not start) the container. If one with `spec.name` exists, return it."""
        ...

    def start_container(self, container_id: str) -> ContainerState:
        """Start it (no-op if running) and return its state, with the engine's start time."""
        ...

    def stop_container(self, container_id: str, timeout_s: int) -> ContainerState | None:
        """Stop it (SIGTERM, then SIGKILL after timeout_s); None if it does not exist."""
        ...

    def remove_container(self, container_id: str) -> None:
        """Remove it, stopping it first if needed; silent if it does not exist."""
        ...

    def inspect_container(self, name_or_id: str) -> ContainerState | None:
        """Its state, or None if it does not exist."""
        ...

    def list_containers(self, labels: dict[str, str]) -> list[ContainerState]:
        """All containers (running or not) carrying every given label."""
        ...

    def list_volumes(self, labels: dict[str, str]) -> list[VolumeState]:
        """All volumes carrying every given label."""
        ...

    def commit_container(self, container_id: str, repository: str, tag: str) -> str:
        """Commit the container's writable layer as `repository:tag`; return the reference."""
        ...

    def remove_image(self, ref: str) -> None:
        """Remove the image; silent if it does not exist."""
        ...

    def exec_in_container(self, container_id: str, command: list[str]) -> ExecResult:
        """Run a command to completion inside a running container."""
        ...
