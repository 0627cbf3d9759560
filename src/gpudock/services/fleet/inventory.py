"""Hosts and GPUs: sync the database with the GPU source, summarise, snapshot."""

from __future__ import annotations

import json
import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass, replace

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from gpudock.billing.money import format_amount
from gpudock.db.models import (
    AgentHostModel,
    AgentHostState,
    GpuAllocationModel,
    GpuDeviceModel,
    GpuShareModel,
    GpuState,
    HostModel,
    InstanceModel,
    MetaModel,
)
from gpudock.errors import GpudockError
from gpudock.gpu.base import HostInfo
from gpudock.scheduler.placement import WHOLE_MILLI, HostCapacity, SharedGpu
from gpudock.services.billing import intervals as metering
from gpudock.services.context import ServiceContext
from gpudock.services.fleet.shape import FleetShape, HostShape, fleet_shape, load_shape

log = logging.getLogger(__name__)


def ensure_cluster_id(ctx: ServiceContext) -> str:
    """A random id per database; it labels every container and volume we make,
    so two installations sharing one engine never touch each other's."""
    with ctx.sessions.begin() as session:
        row = session.get(MetaModel, "cluster_id")
        if row is None:
            row = MetaModel(key="cluster_id", value=uuid.uuid4().hex[:12])
            session.add(row)
        return row.value


def within_engine(ctx: ServiceContext, hosts: list[HostInfo]) -> list[HostInfo]:
    """Simulated hosts with no more memory than the engine that runs their
    containers has (their CPUs stay as simulated: each instance's CPU limit is
    held to the engine's count when it is sized, `instances.actions`). A real
    (NVML) host reports its own machine and is left as it is."""
    if not any(h.simulated for h in hosts):
        return hosts
    try:
        engine = ctx.runtime.engine_info()
    except GpudockError as exc:  # sized as described; the engine is asked again at start
        log.warning("engine not reachable to size simulated hosts: %s", exc)
        return hosts
    memory_gb = max(1, engine.memory_bytes // 2**30)
    return [replace(h, memory_gb=min(h.memory_gb, memory_gb)) if h.simulated else h for h in hosts]


def sync_inventory(ctx: ServiceContext, hosts: list[HostInfo]) -> None:
    """Upsert discovered hosts and GPUs; mark the ones no longer seen absent.
    Hosts with agents of their own are theirs to report (`agent_inventory`)."""
    hosts = within_engine(ctx, hosts)
    with ctx.sessions.begin() as session:
        known = {
            h.name: h for h in session.scalars(select(HostModel).where(HostModel.agent.is_(False)))
        }
        seen_gpus: set[str] = set()
        for info in hosts:
            host = known.get(info.name) or _new_host(ctx, session, info)
            host.cpus, host.memory_gb = info.cpus, info.memory_gb
            host.driver_version, host.cuda_version = info.driver_version, info.cuda_version
            host.simulated, host.present = info.simulated, True
            for gpu_info in info.gpus:
                seen_gpus.add(gpu_info.uuid)
                gpu = session.get(GpuDeviceModel, gpu_info.uuid) or GpuDeviceModel(id=gpu_info.uuid)
                gpu.host_id, gpu.index, gpu.model = host.id, gpu_info.index, gpu_info.model
                gpu.memory_mb, gpu.pci_bus_id = gpu_info.memory_mb, gpu_info.pci_bus_id
                gpu.numa_node, gpu.nvlink_peers = (
                    gpu_info.numa_node,
                    ",".join(gpu_info.nvlink_peers),
                )
                gpu.present = True
                gpu.first_seen_at = gpu.first_seen_at or ctx.clock()  # MTBF
                session.add(gpu)
        seen_hosts = {h.name for h in hosts}
        for name, host in known.items():
            host.present = name in seen_hosts
        for gpu in session.scalars(
            select(GpuDeviceModel).join(HostModel).where(HostModel.agent.is_(False))
        ):
            gpu.present = gpu.id in seen_gpus


def _new_host(ctx: ServiceContext, session: Session, info: HostInfo) -> HostModel:
    host = HostModel(
        id=uuid.uuid4().hex[:16],
        name=info.name,
        cpus=info.cpus,
        memory_gb=info.memory_gb,
        driver_version=info.driver_version,
        cuda_version=info.cuda_version,
        simulated=info.simulated,
        present=True,
        created_at=ctx.clock(),
    )
    session.add(host)
    session.flush()
    return host


@dataclass(frozen=True)
class ModelSummary:
    model: str
    memory_mb: int
    total: int
    free: int
    hosts: int
    max_per_host: int
    price_per_hour: str | None = None  # per GPU, a decimal string; None: no price set
    share_free_milli: int = 0  # milli-GPU free for shares, on healthy GPUs not held whole
    largest_share_milli: int = 0  # the largest share one GPU of this model takes now


def gpu_summary(ctx: ServiceContext) -> list[ModelSummary]:
    with ctx.sessions() as session:
        gpus = session.scalars(
            select(GpuDeviceModel)
            .join(HostModel)
            .where(GpuDeviceModel.present.is_(True), HostModel.present.is_(True))
            .options(selectinload(GpuDeviceModel.allocation), selectinload(GpuDeviceModel.shares))
        ).all()
        prices = metering.gpu_prices(session)
    per_model: dict[str, list[GpuDeviceModel]] = defaultdict(list)
    for gpu in gpus:
        per_model[gpu.model].append(gpu)
    summaries = []
    for model, members in sorted(per_model.items()):
        per_host: dict[str, int] = defaultdict(int)
        for gpu in members:
            per_host[gpu.host_id] += 1
        summaries.append(
            ModelSummary(
                model=model,
                memory_mb=members[0].memory_mb,
                total=len(members),
                free=sum(1 for g in members if _is_free(g)),
                hosts=len(per_host),
                max_per_host=max(per_host.values()),
                price_per_hour=format_amount(prices[model]) if model in prices else None,
                share_free_milli=sum(share_free(g) for g in members),
                largest_share_milli=max(share_free(g) for g in members),
            )
        )
    return summaries


def _is_free(gpu: GpuDeviceModel) -> bool:
    """Free to be allocated whole: healthy, held neither whole nor in shares."""
    return gpu.allocation is None and not gpu.shares and gpu.state == GpuState.HEALTHY


def share_free(gpu: GpuDeviceModel) -> int:
    """Milli-GPU a new share may take on this GPU now."""
    if gpu.allocation is not None or gpu.state != GpuState.HEALTHY or not gpu.present:
        return 0
    return WHOLE_MILLI - gpu.shared_milli


def list_hosts(ctx: ServiceContext) -> list[HostModel]:
    with ctx.sessions() as session:
        return list(
            session.scalars(
                select(HostModel)
                .options(
                    selectinload(HostModel.gpus).selectinload(GpuDeviceModel.allocation),
                    selectinload(HostModel.gpus).selectinload(GpuDeviceModel.shares),
                )
                .order_by(HostModel.name)
            )
        )


def keep_fleet_shape(ctx: ServiceContext) -> None:
    """Read the fleet's shape into the server's copy now, at start-up: otherwise the
    first request after a start pays for it (~0.2 s at 300 hosts under load), and
    the heap settled once the server is ready (`api.heap`) freezes it with the rest."""
    with ctx.reader() as session:
        fleet_shape(ctx, session)


def current_capacity(ctx: ServiceContext, session: Session) -> list[HostCapacity]:
    """`capacity_snapshot` over the server's copy of the fleet's shape."""
    return capacity_snapshot(session, fleet_shape(ctx, session))


class KeptCapacity:
    """The rows of the last snapshot, with what each was made from: a host whose
    inputs have not moved gets the very same row again, so the placement
    policy's mirror (`HostPlacer.sync`) skips it too. A placement pass at fleet
    scale then costs its reads and the hosts that changed, not every host."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[tuple[object, ...], HostCapacity]] = {}


def capacity_snapshot(
    session: Session, shape: FleetShape | None = None, kept: KeptCapacity | None = None
) -> list[HostCapacity]:
    """Free CPU, memory and healthy unallocated GPUs per present host that takes
    new instances (an agent host that is pending or draining does not), with its
    labels.

    `shape`: the fleet as the server keeps it (`shape.fleet_shape`); None reads
    it here. Only what moves by the second is read each time, as plain columns
    and sums: the CPUs and memory placed instances hold per host, the GPUs held
    whole and the milli-GPU held in shares — and the agent hosts' state and
    labels (one small row per agent host, written outside `hosts`, so outside
    what moves the shape's generation). `kept`: the last snapshot's rows, reused
    for hosts whose inputs are the same (`KeptCapacity`)."""
    shape = shape or load_shape(session)
    closed: set[str] = set()
    labels: dict[str, frozenset[tuple[str, str]]] = {}
    for host_id, state, text in session.execute(
        select(AgentHostModel.id, AgentHostModel.state, AgentHostModel.labels)
    ):
        if state != AgentHostState.ACTIVE:
            closed.add(host_id)
        labels[host_id] = frozenset(json.loads(text).items())
    used = {
        host_id: (float(cpu or 0), float(memory or 0))
        for host_id, cpu, memory in session.execute(
            select(
                InstanceModel.host_id,
                func.sum(InstanceModel.cpu),
                func.sum(InstanceModel.memory_gb),
            )
            .where(InstanceModel.placed.is_(True), InstanceModel.host_id.is_not(None))
            .group_by(InstanceModel.host_id)
        )
    }
    whole = set(session.scalars(select(GpuAllocationModel.gpu_id)))
    shared = {
        gpu_id: int(milli or 0)
        for gpu_id, milli in session.execute(
            select(GpuShareModel.gpu_id, func.sum(GpuShareModel.milli)).group_by(
                GpuShareModel.gpu_id
            )
        )
    }
    present = [host for host in shape.hosts if host.id not in closed]
    if kept is None:
        return [_capacity(h, used.get(h.id, (0.0, 0.0)), whole, shared, labels) for h in present]
    return _reusing(kept, shape, present, (used, whole, shared, labels))


def _reusing(
    kept: KeptCapacity,
    shape: FleetShape,
    present: list[HostShape],
    read: tuple[
        dict[str | None, tuple[float, float]],
        set[str],
        dict[str, int],
        dict[str, frozenset[tuple[str, str]]],
    ],
) -> list[HostCapacity]:
    """`_capacity` of each host, or its kept row where its inputs are the same:
    the host's shape (the same object while the generation stands), what its
    instances hold, its GPUs held whole or in shares, and its labels."""
    used, whole, shared, labels = read
    host_of = shape.derived("gpu hosts", _host_of_gpu)
    held: defaultdict[str, list[object]] = defaultdict(list)
    for gpu_id in whole:
        held[host_of.get(gpu_id, "")].append(gpu_id)
    for gpu_id, milli in shared.items():
        held[host_of.get(gpu_id, "")].append((gpu_id, milli))
    rows: dict[str, tuple[tuple[object, ...], HostCapacity]] = {}
    for host in present:
        inputs = (
            host,
            used.get(host.id, (0.0, 0.0)),
            frozenset(held.get(host.id, ())),
            labels.get(host.id),
        )
        last = kept.rows.get(host.id)
        if last is not None and last[0][0] is host and last[0][1:] == inputs[1:]:
            rows[host.id] = last
        else:
            rows[host.id] = (inputs, _capacity(host, inputs[1], whole, shared, labels))
    kept.rows = rows
    return [row for _inputs, row in rows.values()]


def _host_of_gpu(shape: FleetShape) -> dict[str, str]:
    return {gpu.slot.uuid: host.id for host in shape.hosts for gpu in host.gpus}


def _capacity(
    host: HostShape,
    used: tuple[float, float],
    whole: set[str],
    shared: dict[str, int],
    labels: dict[str, frozenset[tuple[str, str]]],
) -> HostCapacity:
    usable = [
        (gpu.slot, shared.get(gpu.slot.uuid, 0))
        for gpu in host.gpus
        if gpu.state == GpuState.HEALTHY and gpu.slot.uuid not in whole
    ]
    return HostCapacity(
        host_id=host.id,
        free_cpus=host.cpus - used[0],
        free_memory_gb=host.memory_gb - used[1],
        free_gpus=tuple(slot for slot, milli in usable if not milli),
        gpu_models=frozenset(gpu.slot.model for gpu in host.gpus),
        shared_gpus=tuple(
            SharedGpu(slot, WHOLE_MILLI - milli)
            for slot, milli in usable
            if milli and WHOLE_MILLI - milli > 0
        ),
        labels=labels.get(host.id, frozenset()),
    )


def allocated_gpu_ids(session: Session, instance_id: str) -> list[str]:
    """The GPUs the instance holds, whole or (one) in a share."""
    whole = session.scalars(
        select(GpuAllocationModel.gpu_id)
        .where(GpuAllocationModel.instance_id == instance_id)
        .order_by(GpuAllocationModel.gpu_id)
    )
    share = session.scalar(
        select(GpuShareModel.gpu_id).where(GpuShareModel.instance_id == instance_id)
    )
    return [*whole, *([share] if share else [])]
