"""The server's placement over a capacity snapshot. Pure: no I/O, no clock.

Whole GPUs, in order of preference:
1. the GPUs the instance held before, if all of them are free (a restart or a
   start after stop keeps its cards and its container);
2. otherwise the host where the request fits most tightly (fewest free GPUs
   of an acceptable model left over, then least spare CPU), so large holes
   stay open for large requests;
3. on that host, GPUs that share a NUMA node / NVLink with each other.

A share of one GPU goes where it leaves the least over: onto a GPU that
already holds shares, the one with the least free milli that still fits,
before it opens a whole GPU (best fit; whole GPUs stay whole for whole-GPU
requests), then the tightest host. The server places with the registry's
policies (`hosts.HostPlacer`, the house policy by default); it keeps the rules
here for what the policies do not decide: an instance's previous GPUs
(`sticky_placement`), hosts with GPUs of several models, and the wait queue's
"does it fit now" estimate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

WHOLE_MILLI = 1000


@dataclass(frozen=True)
class GpuSlot:
    uuid: str
    model: str
    index: int
    numa_node: int | None = None
    nvlink_peers: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SharedGpu:
    """A GPU that holds shares already, with the milli-GPU still free on it."""

    gpu: GpuSlot
    free_milli: int


@dataclass(frozen=True)
class HostCapacity:
    host_id: str
    free_cpus: float
    free_memory_gb: float
    free_gpus: tuple[GpuSlot, ...]  # whole, unshared, healthy
    gpu_models: frozenset[str] = frozenset()
    shared_gpus: tuple[SharedGpu, ...] = ()
    labels: frozenset[tuple[str, str]] = frozenset()  # the operator's (key, value) pairs


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
    share_milli: int | None = None  # a share of one GPU; None: gpu_count whole GPUs
    other_models: frozenset[str] = frozenset()  # acceptable besides gpu_model
    host_labels: frozenset[tuple[str, str]] = frozenset()  # a host must carry every one

    @property
    def models(self) -> frozenset[str]:
        return frozenset({self.gpu_model}) | self.other_models if self.gpu_model else frozenset()


@dataclass(frozen=True)
class Placement:
    host_id: str
    gpu_uuids: tuple[str, ...]
    # The model of those GPUs (one of the acceptable ones): derived from them, so
    # not part of what makes two placements the same.
    model: str | None = field(default=None, compare=False)


def place(hosts: Sequence[HostCapacity], request: PlacementRequest) -> Placement | None:
    """Choose a host and GPUs for the request, or None if it cannot fit now."""
    candidates = _candidates(hosts, request)
    if not candidates:
        return None
    if request.share_milli is not None:
        return _place_share(candidates, request)
    sticky = _sticky_placement(candidates, request)
    if sticky is not None:
        return sticky
    best = min(candidates, key=lambda h: _tightness(h, request))
    chosen = _choose_gpus(_matching(best, request), request.gpu_count)
    return Placement(best.host_id, chosen, _model_of(best, chosen))


def carries_labels(host: HostCapacity, request: PlacementRequest) -> bool:
    """The host carries every label the request asks for (none asked: any host)."""
    return request.host_labels <= host.labels


def sticky_placement(hosts: Sequence[HostCapacity], request: PlacementRequest) -> Placement | None:
    """Where the instance was, if that fits now: its previous GPUs, all of them
    free, or (no GPUs) its previous host. A share is never sticky."""
    if request.share_milli is not None:
        return None
    return _sticky_placement(_candidates(hosts, request), request)


def after_placement(
    host: HostCapacity, placement: Placement, request: PlacementRequest
) -> HostCapacity:
    """`host` once `placement` of `request` has taken what it asks for."""
    taken = set(placement.gpu_uuids)
    shared = list(host.shared_gpus)
    if request.share_milli is not None:
        (gpu_id,) = placement.gpu_uuids
        fresh = [SharedGpu(g, WHOLE_MILLI) for g in host.free_gpus if g.uuid == gpu_id]
        shared = [
            SharedGpu(s.gpu, s.free_milli - request.share_milli) if s.gpu.uuid == gpu_id else s
            for s in [*shared, *fresh]
        ]
    return replace(
        host,
        free_cpus=host.free_cpus - request.cpus,
        free_memory_gb=host.free_memory_gb - request.memory_gb,
        free_gpus=tuple(g for g in host.free_gpus if g.uuid not in taken),
        shared_gpus=tuple(s for s in shared if s.free_milli > 0),
    )


def _candidates(hosts: Sequence[HostCapacity], request: PlacementRequest) -> list[HostCapacity]:
    candidates = [h for h in hosts if carries_labels(h, request) and _fits(h, request)]
    if request.required_host is not None:
        candidates = [h for h in candidates if h.host_id == request.required_host]
    if request.allowed_hosts is not None:
        candidates = [h for h in candidates if h.host_id in request.allowed_hosts]
    return candidates


def _fits(host: HostCapacity, request: PlacementRequest) -> bool:
    if host.free_cpus + 1e-9 < request.cpus or host.free_memory_gb + 1e-9 < request.memory_gb:
        return False
    if request.share_milli is not None:
        return bool(_share_options(host, request))
    if request.gpu_count == 0:
        return request.gpu_model is None or request.gpu_model in host.gpu_models
    return len(_matching(host, request)) >= request.gpu_count


def _matching(host: HostCapacity, request: PlacementRequest) -> list[GpuSlot]:
    """Free GPUs of one acceptable model: the one this host has most of free
    (a k-GPU instance runs on one model)."""
    by_model: dict[str, list[GpuSlot]] = {}
    for gpu in host.free_gpus:
        if gpu.model in request.models:
            by_model.setdefault(gpu.model, []).append(gpu)
    if not by_model:
        return []
    preferred = request.gpu_model if request.gpu_model in by_model else None
    return by_model[preferred] if preferred else max(by_model.values(), key=len)


def _model_of(host: HostCapacity, uuids: tuple[str, ...]) -> str | None:
    models = {g.model for g in host.free_gpus if g.uuid in uuids}
    return models.pop() if len(models) == 1 else None


def _share_options(host: HostCapacity, request: PlacementRequest) -> list[tuple[int, GpuSlot]]:
    """(free milli left after the share, GPU) for every GPU that can take it."""
    assert request.share_milli is not None
    need = request.share_milli
    options = [
        (s.free_milli - need, s.gpu)
        for s in host.shared_gpus
        if s.gpu.model in request.models and s.free_milli >= need
    ]
    options += [(WHOLE_MILLI - need, g) for g in host.free_gpus if g.model in request.models]
    return options


def _place_share(candidates: Sequence[HostCapacity], request: PlacementRequest) -> Placement:
    def best_on(host: HostCapacity) -> tuple[int, GpuSlot]:
        return min(_share_options(host, request), key=lambda o: (o[0], o[1].index))

    host = min(
        candidates,
        key=lambda h: (best_on(h)[0], len(h.free_gpus), h.free_cpus - request.cpus, h.host_id),
    )
    _left, gpu = best_on(host)
    return Placement(host.host_id, (gpu.uuid,), gpu.model)


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
