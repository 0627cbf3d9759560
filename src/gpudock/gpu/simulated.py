"""A simulated fleet described by a spec string, for machines without GPUs.

`2x8xA100-80GB,1x4xRTX4090-24GB` means two hosts with eight A100-80GB each
and one host with four RTX4090-24GB. UUIDs are derived from the host name,
index and model, so they are stable across restarts and identical specs.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from gpudock.errors import InvalidRequest
from gpudock.gpu.base import (
    GpuInfo,
    GpuProcess,
    GpuReading,
    GpuUtilisation,
    HealthEvent,
    HostInfo,
)

_UUID_NAMESPACE = uuid.UUID("6f1c2a56-1d1e-4b8e-9a52-7c9a0f3b9d10")
_PART = re.compile(r"^(?P<hosts>\d+)x(?P<gpus>\d+)x(?P<model>[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*)$")
_MODEL = re.compile(r"^[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*-(?P<mem>\d+)GB$")
_NVLINK_CHIPS = ("A100", "A800", "H100", "H800", "H200", "B200", "V100")

SIMULATED_DRIVER_VERSION = "550.54.15"
SIMULATED_CUDA_VERSION = "12.4"
CPUS_PER_GPU = 12
MEMORY_GB_PER_GPU = 90
MAX_HOSTS = 4096
MAX_GPUS_PER_HOST = 16


@dataclass(frozen=True)
class FleetPart:
    hosts: int
    gpus_per_host: int
    model: str
    memory_mb: int


def parse_fleet_spec(spec: str) -> list[FleetPart]:
    """Parse a fleet spec; raise `InvalidRequest` naming the bad part."""
    parts: list[FleetPart] = []
    for raw in (p.strip() for p in spec.split(",")):
        match = _PART.match(raw)
        if not match:
            raise InvalidRequest(
                f"bad fleet spec part {raw!r}: expected HOSTSxGPUSxMODEL-MEMGB, "
                "e.g. '2x8xA100-80GB,1x4xRTX4090-24GB'",
                field="simulate",
            )
        model = match["model"].upper()
        model_match = _MODEL.match(model)
        if not model_match:
            raise InvalidRequest(
                f"bad GPU model {model!r} in fleet spec: the model must end in its "
                "memory, e.g. 'A100-80GB'",
                field="simulate",
            )
        hosts, gpus = int(match["hosts"]), int(match["gpus"])
        if not (1 <= hosts <= MAX_HOSTS and 1 <= gpus <= MAX_GPUS_PER_HOST):
            raise InvalidRequest(
                f"bad fleet spec part {raw!r}: hosts must be 1..{MAX_HOSTS} and "
                f"GPUs per host 1..{MAX_GPUS_PER_HOST}",
                field="simulate",
            )
        parts.append(FleetPart(hosts, gpus, model, int(model_match["mem"]) * 1024))
    return parts


class SimulatedGpuSource:
    """Implements `GpuSource` over a parsed fleet spec."""

    hosts_change = False

    def __init__(self, spec: str) -> None:
        self._hosts = _build_hosts(parse_fleet_spec(spec))

    def discover(self) -> list[HostInfo]:
        return list(self._hosts)

    def poll_health(self, timeout_ms: int) -> list[HealthEvent]:
        """Simulated GPUs report nothing by themselves: faults are injected
        through the admin API (`gpudock admin gpus fault`)."""
        return []

    def process_memory(self) -> list[GpuProcess]:
        """Simulated GPUs run no processes: shares are modelled in placement
        and in the containers' limits, not in memory use."""
        return []

    def read_utilisation(self) -> GpuUtilisation:
        """Nothing to measure: the sampler models a simulated GPU's figures
        from its container's real CPU and memory use (`modelled_readings`)."""
        return GpuUtilisation()


def modelled_readings(
    gpu_uuids: list[str],
    card_memory_mb: dict[str, int],
    cpu_percent: float | None,
    memory_bytes: int,
    share_milli: int | None = None,
) -> list[GpuReading]:
    """What the simulated GPUs of one container report (docs/monitoring.md):
    one busy CPU core keeps one GPU busy, so each of n GPUs is
    min(1, cores busy / n) busy; the container's resident memory is spread
    evenly over its GPUs as their memory in use, capped at the card's. A share
    of a GPU is busy for its fraction of the card at most, and its memory is
    capped at that fraction of the card's. No CPU figure yet (the first
    reading): no utilisation either."""
    fraction = 1.0 if share_milli is None else share_milli / 1000
    count = max(len(gpu_uuids), 1)
    resident_mb = memory_bytes / 2**20 / count
    readings = []
    for gpu_uuid in gpu_uuids:
        busy = None if cpu_percent is None else min(1.0, cpu_percent / 100 / count)
        capacity_mb = card_memory_mb.get(gpu_uuid, 0) * fraction
        readings.append(
            GpuReading(
                gpu_uuid,
                None if busy is None else round(100 * busy * fraction, 1),
                int(min(resident_mb, capacity_mb)),
            )
        )
    return readings


def _build_hosts(parts: list[FleetPart]) -> list[HostInfo]:
    hosts: list[HostInfo] = []
    for part in parts:
        for _ in range(part.hosts):
            name = f"sim{len(hosts)}-{part.model.lower()}"
            hosts.append(_build_host(name, part))
    return hosts


def _build_host(name: str, part: FleetPart) -> HostInfo:
    uuids = [
        "GPU-" + str(uuid.uuid5(_UUID_NAMESPACE, f"{name}/{i}/{part.model}"))
        for i in range(part.gpus_per_host)
    ]
    has_nvlink = part.model.upper().startswith(_NVLINK_CHIPS)
    half = max(1, part.gpus_per_host // 2)
    gpus = tuple(
        GpuInfo(
            uuid=gpu_uuid,
            index=i,
            model=part.model,
            memory_mb=part.memory_mb,
            pci_bus_id=f"00000000:{0x18 + i * 0x08:02X}:00.0",
            numa_node=0 if i < half else 1,
            nvlink_peers=tuple(u for u in uuids if u != gpu_uuid) if has_nvlink else (),
        )
        for i, gpu_uuid in enumerate(uuids)
    )
    return HostInfo(
        name=name,
        cpus=float(CPUS_PER_GPU * part.gpus_per_host),
        memory_gb=MEMORY_GB_PER_GPU * part.gpus_per_host,
        driver_version=SIMULATED_DRIVER_VERSION,
        cuda_version=SIMULATED_CUDA_VERSION,
        simulated=True,
        gpus=gpus,
    )
