"""Taking one sample of every running instance.

Per instance: the container's CPU, memory, block I/O and network counters
(`Runtime.container_stats`, one reading each; rates come from the previous
reading of the same container, kept in `SamplerState`), the use of its data
volume and system disk (every `GPUDOCK_METRICS_DISK_INTERVAL_S`: the system
disk's measure walks the layer), and its GPUs:

- whole GPUs on a real host: NVML's utilisation and memory in use per GPU;
- a share of one GPU: only what the container's own processes use of it, the
  PIDs NVML reports mapped to containers through their cgroups
  (`Runtime.container_of_pid`), as the share watchdog does;
- simulated GPUs: modelled from the container's real CPU and memory use
  (`gpu.simulated.modelled_readings`, docs/monitoring.md), so demos and tests
  see curves that follow the work done in the container.

NVML is read once per round for all instances. Containers are read by a
small pool (`GPUDOCK_METRICS_WORKERS`): each read is an engine round trip.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import select

from gpudock.db.models import GpuDeviceModel, HostModel, InstanceModel, InstanceStatus
from gpudock.errors import GpudockError
from gpudock.gpu.base import GpuDiscoveryError, GpuReading, GpuUtilisation
from gpudock.gpu.simulated import modelled_readings
from gpudock.runtime.base import ContainerStats
from gpudock.services.context import ServiceContext
from gpudock.services.metrics.store import GpuFigure, Sample, record_samples

log = logging.getLogger(__name__)

# A container that cannot be read stays unreadable for a while (it is being
# removed, the engine is busy): say so once per instance per this many seconds,
# not on every round.
WARNING_REPEAT_S = 600.0
# Containers read between two chances to step aside for requests (`services.foreground`).
SAMPLE_CHUNK = 50


@dataclass(frozen=True)
class Target:
    """A running instance as the sampler needs it."""

    instance_id: str
    container_id: str
    gpu_uuids: tuple[str, ...]  # in the container's order
    share_milli: int | None
    simulated: bool
    data_volume: str | None
    host_id: str | None = None  # whose engine (an agent host's, or this server's) runs it


@dataclass
class _Disks:
    measured_at: float  # monotonic
    data_bytes: int | None
    system_bytes: int | None


@dataclass
class SamplerState:
    """What one round leaves for the next: each container's last reading (for
    rates) and each instance's last disk measure. Entries of instances no
    longer running are dropped every round, so it stays as large as the fleet."""

    previous: dict[str, ContainerStats] = field(default_factory=dict)
    disks: dict[str, _Disks] = field(default_factory=dict)
    warned_at: dict[str, float] = field(default_factory=dict)  # key -> monotonic

    def warn(self, key: str, message: str, *args: object) -> None:
        """Log a warning for `key` at most once per `WARNING_REPEAT_S`; the
        repeats go to debug."""
        now = time.monotonic()
        last = self.warned_at.get(key)
        if last is not None and now - last < WARNING_REPEAT_S:
            log.debug(message, *args)
            return
        self.warned_at[key] = now
        log.warning(message, *args)


def sample_running(ctx: ServiceContext, state: SamplerState) -> list[Sample]:
    """Sample every running instance and store the samples in one transaction;
    returns them. An instance whose container cannot be read is left out."""
    targets = running_targets(ctx)
    live = {t.container_id for t in targets}
    state.previous = {cid: s for cid, s in state.previous.items() if cid in live}
    sampled = {t.instance_id for t in targets}
    state.disks = {i: d for i, d in state.disks.items() if i in sampled}
    if not targets:
        return []
    gpu_use = _read_gpus(ctx, state, targets)
    card_mb = _card_memory(ctx, targets)
    readings: list[tuple[Target, ContainerStats | None]] = []
    with ThreadPoolExecutor(ctx.settings.metrics_workers, "gpudock-sampler") as pool:
        for start in range(0, len(targets), SAMPLE_CHUNK):
            ctx.foreground.step_aside()
            chunk = targets[start : start + SAMPLE_CHUNK]
            readings += pool.map(lambda t: (t, _container_reading(ctx, state, t)), chunk)
    samples = [
        _sample(ctx, state, target, stats, gpu_use, card_mb)
        for target, stats in readings
        if stats is not None
    ]
    with ctx.sessions.begin() as session:
        record_samples(session, samples)
    return samples


def running_targets(ctx: ServiceContext) -> list[Target]:
    with ctx.reader() as session:
        rows = session.execute(
            select(
                InstanceModel.id,
                InstanceModel.container_id,
                InstanceModel.container_gpus,
                InstanceModel.gpu_share_milli,
                InstanceModel.data_volume,
                HostModel.simulated,
                InstanceModel.host_id,
            )
            .join(HostModel, HostModel.id == InstanceModel.host_id)
            .where(InstanceModel.status == InstanceStatus.RUNNING)
            .where(InstanceModel.container_id.is_not(None))
        ).all()
    return [
        Target(
            instance_id=instance_id,
            container_id=container_id,
            gpu_uuids=tuple(g for g in gpus.split(",") if g),
            share_milli=share_milli,
            simulated=simulated,
            data_volume=data_volume,
            host_id=host_id,
        )
        for instance_id, container_id, gpus, share_milli, data_volume, simulated, host_id in rows
        if container_id is not None
    ]


def _read_gpus(ctx: ServiceContext, state: SamplerState, targets: list[Target]) -> GpuUtilisation:
    if all(t.simulated or not t.gpu_uuids for t in targets):
        return GpuUtilisation()
    try:
        return ctx.gpu_source.read_utilisation()
    except GpuDiscoveryError as exc:
        state.warn("gpus", "samples: could not read the GPUs: %s", exc)
        return GpuUtilisation()


def _card_memory(ctx: ServiceContext, targets: list[Target]) -> dict[str, int]:
    uuids = {u for t in targets for u in t.gpu_uuids}
    if not uuids:
        return {}
    with ctx.reader() as session:
        rows = session.execute(
            select(GpuDeviceModel.id, GpuDeviceModel.memory_mb).where(GpuDeviceModel.id.in_(uuids))
        ).all()
    return {gpu_id: memory_mb for gpu_id, memory_mb in rows}


def _container_reading(
    ctx: ServiceContext, state: SamplerState, target: Target
) -> ContainerStats | None:
    try:
        return ctx.runtime_for(target.host_id).container_stats(target.container_id)
    except GpudockError as exc:
        state.warn(
            f"stats:{target.instance_id}",
            "samples: could not read instance %s: %s",
            target.instance_id,
            exc,
        )
        return None


def _sample(
    ctx: ServiceContext,
    state: SamplerState,
    target: Target,
    stats: ContainerStats,
    gpu_use: GpuUtilisation,
    card_mb: dict[str, int],
) -> Sample:
    previous = state.previous.get(target.container_id)
    state.previous[target.container_id] = stats
    rates = _rates(previous, stats)
    disks = _disks(ctx, state, target)
    cpu = rates.get("cpu")
    if target.simulated:
        gpus = modelled_readings(
            list(target.gpu_uuids), card_mb, cpu, stats.memory_bytes, target.share_milli
        )
    elif target.share_milli is not None:
        gpus = _share_readings(ctx, target, gpu_use)
    else:
        by_uuid = {g.gpu_uuid: g for g in gpu_use.gpus}
        gpus = [by_uuid.get(u, GpuReading(u, None, None)) for u in target.gpu_uuids]
    return Sample(
        instance_id=target.instance_id,
        at=stats.read_at,
        cpu_percent=cpu,
        memory_bytes=stats.memory_bytes,
        data_disk_bytes=disks.data_bytes,
        system_disk_bytes=disks.system_bytes,
        disk_read_bps=rates.get("read"),
        disk_write_bps=rates.get("write"),
        net_rx_bps=rates.get("rx"),
        net_tx_bps=rates.get("tx"),
        gpus=tuple(GpuFigure(g.utilisation_percent, g.memory_used_mb) for g in gpus),
    )


def _rates(previous: ContainerStats | None, now: ContainerStats) -> dict[str, float]:
    """Per second since the previous reading (CPU: 100 = one core busy). None
    of them on the first reading, or when a counter went back (a restart)."""
    if previous is None:
        return {}
    seconds = (now.read_at - previous.read_at) / timedelta(seconds=1)
    deltas = {
        "cpu": (now.cpu_total_ns - previous.cpu_total_ns) / 1e7,  # ns -> % of a core-second
        "read": now.block_read_bytes - previous.block_read_bytes,
        "write": now.block_write_bytes - previous.block_write_bytes,
        "rx": now.net_rx_bytes - previous.net_rx_bytes,
        "tx": now.net_tx_bytes - previous.net_tx_bytes,
    }
    if seconds <= 0 or any(delta < 0 for delta in deltas.values()):
        return {}
    return {name: delta / seconds for name, delta in deltas.items()}


def _disks(ctx: ServiceContext, state: SamplerState, target: Target) -> _Disks:
    now = time.monotonic()
    known = state.disks.get(target.instance_id)
    if known is not None and now - known.measured_at < ctx.settings.metrics_disk_interval_s:
        return known
    try:
        runtime = ctx.runtime_for(target.host_id)
        data = runtime.volume_used_bytes(target.data_volume) if target.data_volume else None
        system = runtime.writable_layer_bytes(target.container_id)
    except GpudockError as exc:
        state.warn(
            f"disks:{target.instance_id}",
            "samples: could not measure the disks of %s: %s",
            target.instance_id,
            exc,
        )
        data = system = None
    measured = _Disks(now, data, system)
    state.disks[target.instance_id] = measured
    return measured


def _share_readings(
    ctx: ServiceContext, target: Target, gpu_use: GpuUtilisation
) -> list[GpuReading]:
    """The share's GPU as its own processes use it: their memory and SM % added up."""
    memory: dict[str, int] = defaultdict(int)
    busy: dict[str, float] = defaultdict(float)
    for process in gpu_use.processes:
        if process.gpu_uuid not in target.gpu_uuids:
            continue
        if ctx.runtime.container_of_pid(process.pid) != target.container_id:
            continue
        memory[process.gpu_uuid] += process.used_memory_mb or 0
        busy[process.gpu_uuid] += process.utilisation_percent or 0.0
    # A GPU NVML did not answer for has no figure; one without the share's
    # processes on it is idle (0 %, 0 MiB) as far as the share is concerned.
    measured = {g.gpu_uuid for g in gpu_use.gpus}
    return [
        GpuReading(u, min(busy[u], 100.0), memory[u])
        if u in measured
        else GpuReading(u, None, None)
        for u in target.gpu_uuids
    ]
