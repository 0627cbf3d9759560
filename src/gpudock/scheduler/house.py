"""gpudock's own placement policy (the default, named "gpudock").

1. Loss. Each candidate (node, GPUs) is charged the expected usable capacity
   it strands (`UsableCapacity`: FGD's idea with CPU and memory counted, over a
   workload learned online). Losses closer than `resolution` milli count as
   equal: the estimate is not finer than that, and an exact argmin would
   scatter requests over nodes on noise.
2. Packing among equals: the node with least free GPU first (most used), so
   that whole nodes stay whole for 8-GPU requests; then, for a share, the GPU
   left with least free; then a seeded order of node names. No rule depends on
   the order in which nodes are listed.
3. Admission. A share that would open a fully free GPU and leave a hole that
   few requests fit (less than `poor_hole_mass` of the estimated workload) is
   held back while fully free GPUs are scarce, i.e. fewer than the whole-GPU
   requests' part of the demand would need to fill the idle capacity that is
   left. Such a share waits instead of spending a GPU that a whole-GPU request
   could use in full. `may_defer=False` (the wait queue's anti-starvation rule)
   turns this off for one request.
"""

from __future__ import annotations

import numpy as np

from gpudock.scheduler.choosing import TieRule, best_fit_gpus, seeded_order
from gpudock.scheduler.demand import MILLI_PER_GPU, Demand
from gpudock.scheduler.snapshot import Assignment, IntArray, Snapshot
from gpudock.scheduler.usable import FloatArray, UsableCapacity
from gpudock.scheduler.workload import WorkloadEstimate


class HousePolicy:
    def __init__(
        self,
        snapshot: Snapshot,
        seed: int,
        *,
        workload: WorkloadEstimate | None = None,
        resolution: float = 40.0,
        poor_hole_mass: float = 0.05,
        admission: bool = True,
    ) -> None:
        self._snap = snapshot
        self._workload = workload or WorkloadEstimate()
        self._usable = UsableCapacity(snapshot, self._workload)
        self._ties = TieRule(seeded_order(snapshot, seed), np.random.default_rng(seed))
        self._resolution = resolution
        self._poor_hole_mass = poor_hole_mass
        self._admission = admission

    def observe(self, demand: Demand) -> None:
        self._workload.observe(demand)

    def choose(self, demand: Demand, *, may_defer: bool = True) -> Assignment | None:
        nodes = np.flatnonzero(self._snap.feasible(demand))
        if not len(nodes):
            return None
        self._usable.refresh()
        if demand.is_share:
            choice = self._choose_share(nodes, demand)
            if may_defer and self._admission and self._holds_back(choice):
                return None
            return choice
        node = self._choose_node(nodes, demand)
        return Assignment(node, best_fit_gpus(self._snap, node, demand), demand)

    def _choose_node(self, nodes: IntArray, demand: Demand) -> int:
        snap, usable = self._snap, self._usable
        full = usable.full_free[nodes] - demand.gpus
        idle = usable.whole_after(nodes, demand.gpus)
        loss = usable.loss(
            nodes,
            idle,
            full,
            snap.cpu_free[nodes] - demand.cpu_milli,
            snap.mem_free[nodes] - demand.memory_mib,
        )
        keys = (self._coarse(loss), snap.gpu_free[nodes].sum(1))
        return self._best(nodes, keys)

    def _choose_share(self, nodes: IntArray, demand: Demand) -> Assignment:
        snap, usable = self._snap, self._usable
        rows, gpus = share_candidates(snap.gpu_free[nodes], demand.milli)
        cand = nodes[rows]
        before = snap.gpu_free[cand, gpus]
        loss = usable.loss(
            cand,
            usable.share_after(cand, before, demand.milli),
            usable.full_free[cand] - (before >= MILLI_PER_GPU),
            snap.cpu_free[cand] - demand.cpu_milli,
            snap.mem_free[cand] - demand.memory_mib,
        )
        hole = before - demand.milli
        keys = (self._coarse(loss), snap.gpu_free[cand].sum(1), hole)
        pick = self._best_row(cand, keys)
        return Assignment(int(cand[pick]), (int(gpus[pick]),), demand)

    def _coarse(self, loss: FloatArray) -> FloatArray:
        return np.asarray(np.round(loss / self._resolution), np.float64)

    def _best(self, nodes: IntArray, keys: tuple[np.ndarray, ...]) -> int:
        return int(nodes[self._best_row(nodes, keys)])

    def _best_row(self, nodes: IntArray, keys: tuple[np.ndarray, ...]) -> int:
        """Row with the smallest keys, compared in order, ties to the seeded order."""
        assert self._ties.rank is not None
        order = np.lexsort((self._ties.rank[nodes], *reversed(keys)))
        return int(order[0])

    def _holds_back(self, choice: Assignment) -> bool:
        node, (gpu,) = choice.node, choice.gpus
        if self._snap.gpu_free[node, gpu] < MILLI_PER_GPU:
            return False  # it fills a used GPU: nothing whole is spent
        hole = MILLI_PER_GPU - choice.demand.milli
        return self._hole_mass(hole) < self._poor_hole_mass and self._whole_gpus_scarce()

    def _hole_mass(self, hole: int) -> float:
        u = self._usable
        if not u.classes:
            return 1.0
        fits = u.is_share & (u.d <= hole)
        return float(u.weights()[fits].sum())

    def _whole_gpus_scarce(self) -> bool:
        """Fewer usable fully free GPUs than whole-GPU requests would take of the idle rest."""
        u, snap = self._usable, self._snap
        if not u.classes or u.is_share.all():
            return False
        weights = u.weights()
        whole = ~u.is_share
        demand = weights * u.k * u.d
        whole_part = float(demand[whole].sum() / demand.sum())
        usable_whole = float((u.usable[:, whole] @ weights[whole]).sum() / weights[whole].sum())
        idle = snap.capacity_milli - snap.used_milli
        return usable_whole < whole_part * idle


def share_candidates(free: IntArray, milli: int) -> tuple[IntArray, IntArray]:
    """Up to three GPUs per node row worth scoring for a share: the tightest fit,
    the fullest partly used one, and a fully free one. Other GPUs differ from
    these only in how much they leave over, which the loss ranks between them."""
    fits = free >= milli
    rows = np.arange(len(free))
    tight = np.where(fits, free, MILLI_PER_GPU + 1).argmin(1)
    partial = np.where(fits & (free < MILLI_PER_GPU), free, -1).argmax(1)
    fresh = (free >= MILLI_PER_GPU).argmax(1)
    has_partial = (fits & (free < MILLI_PER_GPU)).any(1)
    has_fresh = (free >= MILLI_PER_GPU).any(1)
    all_rows = np.concatenate((rows, rows[has_partial], rows[has_fresh]))
    all_gpus = np.concatenate((tight, partial[has_partial], fresh[has_fresh]))
    return all_rows, all_gpus
