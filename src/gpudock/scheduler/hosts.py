"""The server's hosts under the registry's policies.

The server sees its fleet as `HostCapacity` rows (free CPU, memory, whole GPUs
and shares per host, read from the database each pass) and asks for
`PlacementRequest`s; the policies work on a `Snapshot` in integer units and on
`Demand`s. `HostPlacer` is the bridge. The server keeps one for the life of its
process, so that the policy's online state (the workload it has learned, with
decay; the admission balance; FGD's estimate) carries over from pass to pass:

- `sync(builds, hosts)` rebuilds the snapshot only when the fleet as built
  changes (a host or GPU comes or goes; the house policy's learned workload is
  kept across the rebuild). Otherwise it mirrors each host's free state and
  touches only the nodes whose free CPU, memory or per-GPU milli moved, so the
  house policy's per-state scores stay cached.
- `place(request, arrival=..., may_defer=...)` keeps what the server did before
  the policies: an instance's previous GPUs first (`sticky_placement`), allowed
  and required hosts as a node mask, sets of acceptable models as the demand's
  models, shares in milli that never add up to more than a GPU (the snapshot
  refuses it), NVLink/NUMA groups for k GPUs (the topology in `NodeSpec`). The
  policy picks the host and, for a share, the GPU.
- `placed(placement, request)` applies what the database committed.

A host with GPUs of several models is shown to the policy with its most common
model only; its other GPUs are placed by `placement.place` when no node can
take the request in the policy's view. GPU index i of a node is the i-th GPU of
that model on the host, by index.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gpudock.scheduler.choosing import Policy, candidates
from gpudock.scheduler.demand import (
    MIB_PER_GB,
    MILLI_PER_GPU,
    Demand,
    cpu_milli_of,
    cpu_only,
    memory_mib_of,
    whole_gpus,
)
from gpudock.scheduler.names import POLICY_NAMES, unknown_policy
from gpudock.scheduler.placement import (
    GpuSlot,
    HostCapacity,
    Placement,
    PlacementRequest,
    after_placement,
    place,
    sticky_placement,
)
from gpudock.scheduler.registry import PolicyContext, make_policy
from gpudock.scheduler.snapshot import Assignment, BoolArray, IntArray, NodeSpec, Snapshot
from gpudock.scheduler.workload import WorkloadEstimate

HOUSE_POLICIES = ("gpudock", "gpudock-place")


@dataclass(frozen=True)
class HostBuild:
    """A present host as built: its CPUs, memory and every present GPU."""

    host_id: str
    cpus: float
    memory_gb: float
    gpus: tuple[GpuSlot, ...] = ()


def demand_of(request: PlacementRequest) -> Demand:
    """The request in the policies' integer units (CPU and memory rounded up)."""
    cpu, memory = cpu_milli_of(request.cpus), memory_mib_of(request.memory_gb)
    models = request.models or None
    if request.share_milli is not None:
        return Demand(1, request.share_milli, cpu, memory, models)
    if request.gpu_count:
        return whole_gpus(request.gpu_count, models, cpu_milli=cpu, memory_mib=memory)
    return cpu_only(cpu_milli=cpu, memory_mib=memory)


class HostPlacer:
    def __init__(self, policy: str, *, seed: int = 0) -> None:
        if policy not in POLICY_NAMES:
            raise ValueError(unknown_policy(policy))
        self.policy_name = policy
        self._seed = seed
        self._learned = WorkloadEstimate() if policy in HOUSE_POLICIES else None
        self._builds: tuple[HostBuild, ...] | None = None
        self._given: Sequence[HostBuild] | None = None  # as `sync` was last given them
        self._hosts: dict[str, HostCapacity] = {}
        self._rebuild(())

    @property
    def snapshot(self) -> Snapshot:
        return self._snap

    @property
    def policy(self) -> Policy:
        """The policy that decides, over `snapshot` (rebuilt with it)."""
        return self._policy

    @property
    def workload(self) -> WorkloadEstimate | None:
        """The house policy's learned workload (None for the other policies)."""
        return self._learned

    @property
    def hosts(self) -> list[HostCapacity]:
        """The hosts' free capacity as of the last `sync` and `placed` since."""
        return list(self._hosts.values())

    # -- keeping the snapshot in step with the database ----------------------------
    def sync(self, builds: Sequence[HostBuild], hosts: Sequence[HostCapacity]) -> None:
        """Mirror the fleet: `builds` as built, `hosts` free now (both of present hosts)."""
        mirrored = self._hosts
        # The same tuple as last time (the server's kept fleet): nothing was rebuilt.
        if not (isinstance(builds, tuple) and builds is self._given):
            self._given = builds
            ordered = tuple(sorted(builds, key=lambda b: b.host_id))
            if ordered != self._builds:
                self._rebuild(ordered)
                mirrored = {}
        self._hosts = {h.host_id: h for h in hosts}
        snap = self._snap
        cpu = snap.cpu_free.copy()
        memory = snap.mem_free.copy()
        free = snap.gpu_free.copy()
        seen = np.zeros(snap.size, bool)
        for host in hosts:
            node = self._node_of.get(host.host_id)
            if node is None:
                continue
            seen[node] = True
            # The very object mirrored last time (a snapshot that reuses the rows of
            # unchanged hosts): its row is as it was.
            if mirrored.get(host.host_id) is not host:
                cpu[node], memory[node], free[node] = self._free_of(node, host)
        cpu[~seen], memory[~seen], free[~seen] = 0, 0, 0  # built, but no free state: full
        moved = (cpu != snap.cpu_free) | (memory != snap.mem_free)
        moved |= (free != snap.gpu_free).any(1)
        for node in np.flatnonzero(moved).tolist():
            snap.set_free(node, int(cpu[node]), int(memory[node]), free[node].tolist())

    def placed(self, placement: Placement, request: PlacementRequest) -> None:
        """The database committed `placement` of `request`: take it from the host."""
        host = after_placement(self._hosts[placement.host_id], placement, request)
        self._hosts[host.host_id] = host
        node = self._node_of.get(host.host_id)
        if node is not None:
            cpu, memory, free = self._free_of(node, host)
            self._snap.set_free(node, cpu, memory, free.tolist())

    def warm(self, requests: Iterable[PlacementRequest]) -> None:
        """Let the policy learn from requests made before it existed (a server
        restart: the instances that run now), oldest first."""
        for request in requests:
            if not request.gpu_count or request.models:
                self._policy.observe(demand_of(request))

    # -- choosing --------------------------------------------------------------------
    def place(
        self, request: PlacementRequest, *, arrival: bool, may_defer: bool = True
    ) -> Placement | None:
        """Where `request` goes now, or None (it does not fit, or the policy holds it
        back, which only an `arrival` with `may_defer` may be). An arrival is the
        first try of a request: the policy learns the workload from those."""
        if request.gpu_count and not request.models:
            return None  # GPUs of no model: nothing matches (as before the policies)
        demand = demand_of(request)
        if arrival:
            self._policy.observe(demand)
        sticky = self._sticky(request)
        if sticky is not None:
            return sticky
        allowed = self._allowed(request)
        choice = self._policy.choose(demand, may_defer=may_defer, allowed=allowed)
        if choice is not None:
            return self._placement_of(choice)
        if self._mixed and not len(candidates(self._snap, demand, allowed)):
            return place([self._hosts[h] for h in self._mixed if h in self._hosts], request)
        return None

    def _sticky(self, request: PlacementRequest) -> Placement | None:
        host_id = request.preferred_host
        if host_id is None and request.preferred_gpus:
            slot = self._slot_of.get(next(iter(request.preferred_gpus)))
            host_id = self._snap.specs[slot[0]].name if slot else None
        host = self._hosts.get(host_id) if host_id is not None else None
        return sticky_placement([host], request) if host is not None else None

    def _allowed(self, request: PlacementRequest) -> BoolArray | None:
        mask: BoolArray | None = None
        for hosts in (
            None if request.required_host is None else (request.required_host,),
            request.allowed_hosts,
        ):
            if hosts is not None:
                only = np.zeros(self._snap.size, bool)
                only[[self._node_of[h] for h in hosts if h in self._node_of]] = True
                mask = only if mask is None else mask & only
        if not request.gpu_count and request.share_milli is None and request.gpu_model:
            # No GPU, but on a host with this model (as before the policies).
            with_model = self._with_model.get(request.gpu_model, self._none)
            mask = with_model if mask is None else mask & with_model
        return mask

    def _placement_of(self, choice: Assignment) -> Placement:
        spec = self._snap.specs[choice.node]
        uuids = self._uuids[choice.node]
        gpus = tuple(uuids[g] for g in sorted(choice.gpus))
        return Placement(spec.name, gpus, spec.model if gpus else None)

    # -- the fleet as built ------------------------------------------------------------
    def _rebuild(self, builds: tuple[HostBuild, ...]) -> None:
        specs: list[NodeSpec] = []
        self._uuids: list[tuple[str, ...]] = []
        self._slot_of: dict[str, tuple[int, int]] = {}
        mixed: list[str] = []
        with_model: dict[str, list[int]] = {}
        for node, build in enumerate(builds):
            slots = _policy_gpus(build.gpus)
            if len(slots) < len(build.gpus):
                mixed.append(build.host_id)
            for model in {g.model for g in build.gpus}:
                with_model.setdefault(model, []).append(node)
            self._uuids.append(tuple(g.uuid for g in slots))
            self._slot_of.update({g.uuid: (node, i) for i, g in enumerate(slots)})
            specs.append(_spec_of(build, slots))
        self._builds = builds
        self._mixed = tuple(mixed)
        self._node_of = {b.host_id: n for n, b in enumerate(builds)}
        self._snap = Snapshot(specs)
        self._none: BoolArray = np.zeros(self._snap.size, bool)
        self._with_model: dict[str, BoolArray] = {}
        for model, nodes in with_model.items():
            mask = self._none.copy()
            mask[nodes] = True
            self._with_model[model] = mask
        context = PolicyContext(self._seed, learned=self._learned)
        self._policy: Policy = make_policy(self.policy_name, self._snap, context)

    def _free_of(self, node: int, host: HostCapacity) -> tuple[int, int, IntArray]:
        """A host's free CPU (milli), memory (MiB) and per-GPU milli, rounded down."""
        free = np.zeros(self._snap.width, np.int64)
        for gpu in host.free_gpus:
            slot = self._slot_of.get(gpu.uuid)
            if slot is not None and slot[0] == node:
                free[slot[1]] = MILLI_PER_GPU
        for shared in host.shared_gpus:
            slot = self._slot_of.get(shared.gpu.uuid)
            if slot is not None and slot[0] == node:
                free[slot[1]] = max(0, shared.free_milli)
        cpu = max(0, math.floor(round(host.free_cpus * 1000, 6)))
        memory = max(0, math.floor(round(host.free_memory_gb * MIB_PER_GB, 6)))
        return cpu, memory, free


def _policy_gpus(gpus: Sequence[GpuSlot]) -> list[GpuSlot]:
    """The GPUs the policy sees on a host: those of its most common model
    (the first by name among equals), by index."""
    if not gpus:
        return []
    counts = Counter(g.model for g in gpus)
    model = min(counts, key=lambda m: (-counts[m], m))
    return sorted((g for g in gpus if g.model == model), key=lambda g: g.index)


def _spec_of(build: HostBuild, slots: Sequence[GpuSlot]) -> NodeSpec:
    position = {g.uuid: i for i, g in enumerate(slots)}
    numa = tuple(g.numa_node for g in slots)
    nvlink = tuple(frozenset(position[p] for p in g.nvlink_peers if p in position) for g in slots)
    return NodeSpec(
        name=build.host_id,
        model=slots[0].model if slots else "",
        gpus=len(slots),
        cpu_milli=math.floor(round(build.cpus * 1000, 6)),
        memory_mib=math.floor(round(build.memory_gb * MIB_PER_GB, 6)),
        numa=numa if any(n is not None for n in numa) else (),
        nvlink=nvlink if any(nvlink) else (),
    )
