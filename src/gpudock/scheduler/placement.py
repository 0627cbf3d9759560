"""Whole-GPU placement over a capacity snapshot. Pure: no I/O, no clock.

The policy, in order of preference:
1. the GPUs the instance held before, if all of them are free (a restart or a
   start after stop keeps its cards and its container);
2. otherwise the host where the request fits most tightly (fewest free GPUs
   of that model left over, then least spare CPU), so large holes stay open
   for large requests;
3. on that host, GPUs that share a NUMA node / NVLink with each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuSlot:
    uuid: str
    model: str
    index: int
    numa_node: int | None = None
    nvlink_peers: frozenset[str] = frozenset()


@dataclass(frozen=True)
class HostCapacity:
    host_id: str
    free_cpus: float
    free_memory_gb: float
    free_gpus: tuple[GpuSlot, ...]
    gpu_models: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PlacementRequest:
    gpu_model: str | None
    gpu_count: int
    cpus: float
    memory_gb: float
    preferred_gpus: frozenset[str] = field(default_factory=frozenset)
    preferred_host: str | None = None
    required_host: str | None = None
    allowed_hosts: frozenset[str] | None = None  # None: any; e.g. where the image can run


@dataclass(frozen=True)
class Placement:
    host_id: str
    gpu_uuids: tuple[str, ...]


def place(hosts: Sequence[HostCapacity], request: PlacementRequest) -> Placement | None:
    """Choose a host and GPUs for the request, or None if it cannot fit now."""
    candidates = [h for h in hosts if _fits(h, request)]
    if request.required_host is not None:
        candidates = [h for h in candidates if h.host_id == request.required_host]
    if request.allowed_hosts is not None:
        candidates = [h for h in candidates if h.host_id in request.allowed_hosts]
    if not candidates:
        return None
    sticky = _sticky_placement(candidates, request)
    if sticky is not None:
        return sticky
    best = min(candidates, key=lambda h: _tightness(h, request))
    return Placement(best.host_id, _choose_gpus(_matching(best, request), request.gpu_count))


def _fits(host: HostCapacity, request: PlacementRequest) -> bool:
    if host.free_cpus + 1e-9 < request.cpus or host.free_memory_gb + 1e-9 < request.memory_gb:
        return False
    if request.gpu_count == 0:
        return request.gpu_model is None or request.gpu_model in host.gpu_models
    return len(_matching(host, request)) >= request.gpu_count


def _matching(host: HostCapacity, request: PlacementRequest) -> list[GpuSlot]:
    return [g for g in host.free_gpus if g.model == request.gpu_model]


def _sticky_placement(
    candidates: Sequence[HostCapacity], request: PlacementRequest
) -> Placement | None:
    if not request.preferred_gpus and request.preferred_host is None:
        return None
    for host in candidates:
        if host.host_id != request.preferred_host and request.preferred_gpus.isdisjoint(
            g.uuid for g in host.free_gpus
        ):
            continue
        free = {g.uuid for g in _matching(host, request)}
        exact = len(request.preferred_gpus) == request.gpu_count
        if request.preferred_gpus and exact and request.preferred_gpus <= free:
            return Placement(host.host_id, tuple(sorted(request.preferred_gpus)))
        if request.gpu_count == 0 and host.host_id == request.preferred_host:
            return Placement(host.host_id, ())
    return None


def _tightness(host: HostCapacity, request: PlacementRequest) -> tuple[float, float, str]:
    leftover_gpus = len(_matching(host, request)) - request.gpu_count
    if request.gpu_count == 0:
        # No-GPU instances go where GPUs are already taken, keeping CPU and
        # memory next to free GPUs for the GPU requests that need them.
        leftover_gpus = len(host.free_gpus)
    return (leftover_gpus, host.free_cpus - request.cpus, host.host_id)


def _choose_gpus(free: list[GpuSlot], count: int) -> tuple[str, ...]:
    if count == 0:
        return ()
    ordered = sorted(free, key=lambda g: g.index)
    best = max(_candidate_groups(ordered, count), key=_affinity)
    return tuple(g.uuid for g in sorted(best, key=lambda g: g.index))


def _candidate_groups(ordered: list[GpuSlot], count: int) -> Iterable[list[GpuSlot]]:
    """Greedy groups grown from every seed GPU: each step adds the free GPU with
    the most NVLink links into the group, then one on the same NUMA node, then
    the lowest index. O(n² k) for n ≤ 16 GPUs on a host: microseconds."""
    for seed in ordered:
        group = [seed]
        rest = [g for g in ordered if g is not seed]
        while len(group) < count:
            members = {g.uuid for g in group}
            pick = max(
                rest,
                key=lambda g: (
                    len(g.nvlink_peers & members),
                    g.numa_node == seed.numa_node,
                    -g.index,
                ),
            )
            group.append(pick)
            rest.remove(pick)
        yield group


def _affinity(group: list[GpuSlot]) -> tuple[int, int, int]:
    uuids = {g.uuid for g in group}
    nvlink_pairs = sum(len(g.nvlink_peers & uuids) for g in group)
    same_numa = int(len({g.numa_node for g in group}) == 1)
    return (nvlink_pairs, same_numa, -min(g.index for g in group))
