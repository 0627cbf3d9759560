"""The wait queue: who is tried first, and how a big request is kept from starving.

Requests that cannot be placed wait in arrival order (FIFO within each set of
acceptable models: requests for different models never block each other).
Smaller requests may overtake a waiting one, which keeps the fleet busy, but
only for `overtake_limit_s`: after that the waiting request is *starving*. A
starving request is tried first, with the policy's admission rule off; if it
still does not fit, it reserves the host nearest to fitting it (most fully
free GPUs of an acceptable model, then most free CPU), and nothing else is
placed there until it has been placed. So a big request waits at most for
that host to drain, however many small ones arrive.

A request that no host could hold even when empty is refused at once, with the
largest request of its kind that some host could hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpudock.scheduler.choosing import Policy, best_fit_gpus
from gpudock.scheduler.demand import MILLI_PER_GPU, Demand
from gpudock.scheduler.snapshot import Assignment, Snapshot
from gpudock.scheduler.workload import class_key

DEFAULT_OVERTAKE_LIMIT_S = 3600.0


@dataclass(frozen=True)
class Waiting:
    request_id: str
    demand: Demand
    since: float  # when it started waiting, in the caller's clock (seconds)


def queue_order(
    waiting: Sequence[Waiting], now: float, overtake_limit_s: float = DEFAULT_OVERTAKE_LIMIT_S
) -> list[Waiting]:
    """Starving requests first (oldest first), then the rest in arrival order."""

    def key(w: Waiting) -> tuple[bool, float, str]:
        return (now - w.since < overtake_limit_s, w.since, w.request_id)

    return sorted(waiting, key=key)


def is_starving(w: Waiting, now: float, overtake_limit_s: float) -> bool:
    return now - w.since >= overtake_limit_s


def placement_pass(
    waiting: Sequence[Waiting],
    policy: Policy,
    snapshot: Snapshot,
    now: float,
    overtake_limit_s: float = DEFAULT_OVERTAKE_LIMIT_S,
) -> list[tuple[Waiting, Assignment]]:
    """Place what can be placed now, in queue order; allocates on `snapshot`.

    Within one pass a request is skipped when one of the same class already
    failed (the snapshot only fills up during a pass), which keeps a pass over
    a long queue of similar requests short.
    """
    placed: list[tuple[Waiting, Assignment]] = []
    reserved: set[int] = set()
    failed: set[tuple[object, ...]] = set()
    for w in queue_order(waiting, now, overtake_limit_s):
        starving = is_starving(w, now, overtake_limit_s)
        key = (*class_key(w.demand), starving)
        if key in failed:
            continue
        choice = policy.choose(w.demand, may_defer=not starving)
        if choice is not None and choice.node in reserved:
            choice = _elsewhere(snapshot, w.demand, reserved)
        if choice is None:
            failed.add(key)
            if starving:
                host = nearest_to_fitting(snapshot, w.demand, reserved)
                if host is not None:
                    reserved.add(host)
            continue
        snapshot.allocate(choice)
        placed.append((w, choice))
    return placed


def _elsewhere(snapshot: Snapshot, demand: Demand, reserved: set[int]) -> Assignment | None:
    """A first fit off the reserved hosts, when the policy's choice is reserved."""
    ok = snapshot.feasible(demand)
    ok[list(reserved)] = False
    nodes = np.flatnonzero(ok)
    if not len(nodes):
        return None
    node = int(nodes[0])
    return Assignment(node, best_fit_gpus(snapshot, node, demand), demand)


def nearest_to_fitting(snapshot: Snapshot, demand: Demand, taken: set[int]) -> int | None:
    """The host that could hold `demand` when empty and is closest to holding it now."""
    ok = snapshot.fits_when_empty(demand)
    ok[list(taken)] = False
    nodes = np.flatnonzero(ok)
    if not len(nodes):
        return None
    fitting_gpus = (snapshot.gpu_free[nodes] >= max(demand.milli, 1)).sum(1)
    order = np.lexsort((snapshot.cpu_free[nodes], fitting_gpus))
    return int(nodes[order[-1]])


def largest_that_fits(snapshot: Snapshot, demand: Demand) -> Demand | None:
    """None if some host could hold `demand` when empty; otherwise the largest
    request of the same kind (fewer GPUs, then less CPU and memory) that one
    could hold, to tell the user what to ask for instead."""
    if snapshot.fits_when_empty(demand).any():
        return None
    hosts = np.flatnonzero(snapshot.model_mask(demand.models)) if demand.gpus else None
    if hosts is None:
        hosts = np.arange(snapshot.size)
    if not len(hosts):
        return None
    cpu = int(min(demand.cpu_milli, snapshot.cpu_cap[hosts].max()))
    memory = int(min(demand.memory_mib, snapshot.mem_cap[hosts].max()))
    if not demand.gpus:
        return replace(demand, cpu_milli=cpu, memory_mib=memory)
    room = hosts[(snapshot.cpu_cap[hosts] >= cpu) & (snapshot.mem_cap[hosts] >= memory)]
    if not len(room):
        room = hosts
    gpus = int(min(demand.gpus, snapshot.num_gpus[room].max()))
    if gpus == 0:
        return None
    milli = demand.milli if gpus == 1 else MILLI_PER_GPU
    return Demand(gpus, milli, cpu, memory, demand.models)
