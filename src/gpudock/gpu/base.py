"""The one interface both GPU sources implement; the rest of gpudock never
knows which one it is talking to."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from gpudock.errors import GpudockError


class GpuDiscoveryError(GpudockError):
    """The GPU source could not be read (driver missing, NVML failure)."""

    code = "gpu_discovery_failed"


@dataclass(frozen=True)
class GpuInfo:
    uuid: str
    index: int
    model: str
    memory_mb: int
    pci_bus_id: str = ""
    numa_node: int | None = None
    nvlink_peers: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostInfo:
    name: str
    cpus: float
    memory_gb: int
    driver_version: str
    cuda_version: str
    simulated: bool
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class HealthEvent:
    """Something a GPU reported about its own health.

    `kind` is 'xid' (with `xid` set) or one of the keys of
    `gpudock.gpu.xid.KIND_ACTIONS` (e.g. 'ecc_dbe', 'gpu_lost')."""

    gpu_uuid: str
    kind: str
    xid: int | None = None
    message: str = ""


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU, as the driver sees it (`pid` is the host's)."""

    gpu_uuid: str
    pid: int
    used_memory_mb: int | None  # None: the driver does not say (NVML_VALUE_NOT_AVAILABLE)


@dataclass(frozen=True)
class GpuReading:
    """One GPU's figures now; None where the driver does not say."""

    gpu_uuid: str
    utilisation_percent: float | None  # the share of time a kernel ran (NVML's "gpu")
    memory_used_mb: int | None


@dataclass(frozen=True)
class ProcessReading:
    """One compute process's part of a GPU (`pid` is the host's)."""

    gpu_uuid: str
    pid: int
    used_memory_mb: int | None
    utilisation_percent: float | None  # SM %, averaged since the last reading; None: no sample


@dataclass(frozen=True)
class GpuUtilisation:
    gpus: tuple[GpuReading, ...] = ()
    processes: tuple[ProcessReading, ...] = ()


class GpuSource(Protocol):
    # True where hosts join and leave while the server runs (a cluster's nodes,
    # cordoned and uncordoned): the inventory is read again every
    # `GPUDOCK_INVENTORY_INTERVAL_S`. A host's own GPUs are read once at start.
    hosts_change: bool

    def discover(self) -> list[HostInfo]:
        """Return every host this source knows, with its GPUs.

        Fast and side-effect free; raises `GpuDiscoveryError` when the
        source cannot be read.
        """
        ...

    def poll_health(self, timeout_ms: int) -> list[HealthEvent]:
        """Return the health events seen since the last call, waiting at most
        `timeout_ms` for the first one. A condition that persists (pending
        row remapping, a lost GPU) is reported on every call; the caller
        de-duplicates. Raises `GpuDiscoveryError` when the source cannot be read."""
        ...

    def process_memory(self) -> list[GpuProcess]:
        """Return every compute process on this source's GPUs with the GPU
        memory it holds now (a GPU that cannot say contributes none). Fast;
        raises `GpuDiscoveryError` when the source cannot be read."""
        ...

    def read_utilisation(self) -> GpuUtilisation:
        """Every GPU's utilisation and memory in use now, and each compute
        process's part of them (what a share of one GPU is measured by). A
        source that measures nothing (the simulated fleet) returns empty lists:
        its figures are modelled by the sampler. Fast; raises
        `GpuDiscoveryError` when the source cannot be read."""
        ...


_MEMORY_TOKEN = re.compile(r"(\d+)\s*GB", re.IGNORECASE)
_FORM_FACTORS = {"SXM", "SXM2", "SXM4", "SXM5", "PCIE", "NVL", "HBM3", "HBM3E"}


def canonical_model_name(raw_name: str, memory_mb: int) -> str:
    """'NVIDIA A100-SXM4-80GB' → 'A100-80GB'; 'NVIDIA H200' (143771 MiB) → 'H200-140GB'.

    gpudock names a model by its chip and its memory so that users can ask
    for 'A100-80GB' whichever board vendor or form factor a host carries.
    """
    name = raw_name.replace("NVIDIA ", "").replace("GeForce ", "").replace("Tesla ", "")
    tokens = [t for t in re.split(r"[\s\-_]+", name.strip()) if t]
    memory_token = next((t for t in tokens if _MEMORY_TOKEN.fullmatch(t)), None)
    chip = [t for t in tokens if t.upper() not in _FORM_FACTORS and t is not memory_token]
    gigabytes = memory_token.upper() if memory_token else f"{round(memory_mb / 1024)}GB"
    return f"{''.join(chip)}-{gigabytes}"
