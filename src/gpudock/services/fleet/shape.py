"""The fleet's shape — present hosts, their GPUs, how those are wired and how
healthy they are — kept in the process between reads.

It changes when the inventory is synced or a GPU's health moves, a few times a
day, yet the placement pass, every create's sizing and pre-flight read it:
thousands of rows each time at fleet scale. So a server keeps the last copy it
read (`ServiceContext.memo`) with the generation it was read at. Triggers on
`hosts` and `gpus` (migration 0018) count every write to either in
`meta.fleet_generation`, whoever makes it — this server, another on the same
database, an operator's SQL — and a read costs that one row unless it moved.

The database stays the truth: the generation is read before the rows, so a copy
is never older than the generation it is filed under, and a write that lands in
between is seen at the next read. What changes by the second (allocations,
shares, instances' CPUs) is never cached here (`inventory.capacity_snapshot`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import GpuDeviceModel, GpuState, HostModel, MetaModel
from gpudock.scheduler.placement import GpuSlot
from gpudock.services.context import ServiceContext

GENERATION_KEY = "fleet_generation"
T = TypeVar("T")


@dataclass(frozen=True)
class GpuShape:
    slot: GpuSlot  # uuid, model, index, NUMA node, NVLink peers
    memory_mb: int
    state: GpuState


@dataclass(frozen=True)
class HostShape:
    id: str
    name: str
    cpus: float
    memory_gb: int
    driver_version: str
    simulated: bool
    gpus: tuple[GpuShape, ...]  # present ones, by index


@dataclass(frozen=True)
class FleetShape:
    generation: str | None  # None: the database keeps no generation; never reused
    hosts: tuple[HostShape, ...]  # present ones, in the database's order
    _derived: dict[object, Any] = field(
        default_factory=dict, init=False, compare=False, hash=False, repr=False
    )

    def derived(self, key: object, compute: Callable[[FleetShape], T]) -> T:
        """`compute(self)`, worked out once per shape: what every create, list or
        placement pass derives from the fleet (host names, models' hosts, drivers)
        is then a lookup while the generation stands still. Threads may race to
        compute it; each gets an equal value, as the shape never changes."""
        try:
            return self._derived[key]  # type: ignore[no-any-return]
        except KeyError:
            value = self._derived[key] = compute(self)
            return value

    @property
    def host_names(self) -> dict[str, str]:
        return self.derived("host names", lambda shape: {h.id: h.name for h in shape.hosts})

    @property
    def models(self) -> frozenset[str]:
        return frozenset(g.slot.model for h in self.hosts for g in h.gpus)

    @property
    def simulated(self) -> bool:
        return any(h.simulated for h in self.hosts)


def read_generation(session: Session) -> str | None:
    return session.scalar(select(MetaModel.value).where(MetaModel.key == GENERATION_KEY))


def load_shape(session: Session) -> FleetShape:
    """Read the whole shape now (the generation first: see the module's docstring)."""
    generation = read_generation(session)
    gpus: defaultdict[str, list[GpuShape]] = defaultdict(list)
    rows = session.execute(
        select(
            GpuDeviceModel.host_id,
            GpuDeviceModel.id,
            GpuDeviceModel.model,
            GpuDeviceModel.index,
            GpuDeviceModel.numa_node,
            GpuDeviceModel.nvlink_peers,
            GpuDeviceModel.memory_mb,
            GpuDeviceModel.state,
        )
        .where(GpuDeviceModel.present.is_(True))
        .order_by(GpuDeviceModel.host_id, GpuDeviceModel.index)
    )
    for host_id, gpu_id, model, index, numa_node, nvlink_peers, memory_mb, state in rows:
        peers = frozenset(p for p in nvlink_peers.split(",") if p)
        slot = GpuSlot(gpu_id, model, index, numa_node, peers)
        gpus[host_id].append(GpuShape(slot, memory_mb, state))
    hosts = session.execute(
        select(
            HostModel.id,
            HostModel.name,
            HostModel.cpus,
            HostModel.memory_gb,
            HostModel.driver_version,
            HostModel.simulated,
        ).where(HostModel.present.is_(True))
    )
    return FleetShape(
        generation,
        tuple(
            HostShape(host_id, name, cpus, memory_gb, driver, simulated, tuple(gpus[host_id]))
            for host_id, name, cpus, memory_gb, driver, simulated in hosts
        ),
    )


class FleetShapeCache:
    """The last shape read, reused while the generation stands still. Threads
    may race to refresh it: each reads a whole shape, and the last one stored
    wins; none is ever older than its generation."""

    def __init__(self) -> None:
        self._shape: FleetShape | None = None
        self.loads = 0  # how often the rows were read (tests)

    def shape(self, session: Session) -> FleetShape:
        kept = self._shape
        if (
            kept is not None
            and kept.generation is not None
            and (read_generation(session) == kept.generation)
        ):
            return kept
        fresh = load_shape(session)
        self.loads += 1
        self._shape = fresh
        return fresh


def fleet_shape(ctx: ServiceContext, session: Session) -> FleetShape:
    """The fleet's shape as of this session's reads, from the server's copy
    when nothing has changed since it was read."""
    return ctx.memo.get(FleetShapeCache).shape(session)
