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

from collections.abc import Callable

import numpy as np

from gpudock.scheduler.choosing import best_fit_gpus, seeded_order
from gpudock.scheduler.demand import MILLI_PER_GPU, Demand
from gpudock.scheduler.nodestates import NodeStates
from gpudock.scheduler.snapshot import Assignment, IntArray, Snapshot
from gpudock.scheduler.usable import FloatArray, UsableCapacity, share_after
from gpudock.scheduler.workload import ClassKey, WorkloadEstimate, class_key

SLOTS = 3  # GPUs scored per node for a share: see `share_candidates`
Scorer = Callable[[IntArray, Demand], tuple[FloatArray, IntArray]]
CACHED_CLASSES = 256  # request classes whose scores are kept; beyond, the oldest go


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
        self._states = NodeStates(snapshot)
        self._usable = UsableCapacity(snapshot, self._workload, self._states)
        self._scores = _Scores(self._states.capacity)
        self._whole_usable = np.zeros(snapshot.size)  # per node, see _whole_gpus_scarce
        self._whole_at: tuple[object, int] = (None, -1)  # (model version, snapshot clock)
        self._rank = seeded_order(snapshot, seed)
        self._resolution = resolution
        self._poor_hole_mass = poor_hole_mass
        self._admission = admission

    def observe(self, demand: Demand) -> None:
        self._workload.observe(demand)

    def choose(self, demand: Demand, *, may_defer: bool = True) -> Assignment | None:
        nodes = np.flatnonzero(self._snap.feasible(demand))
        if not len(nodes):
            return None
        self._states.refresh()
        nodes = self._states.representatives(nodes, self._rank)
        self._usable.refresh()
        self._scores.follow(self._usable.version)
        if demand.is_share:
            choice = self._choose_share(nodes, demand)
            if may_defer and self._admission and self._holds_back(choice):
                return None
            return choice
        node = self._choose_node(nodes, demand)
        return Assignment(node, best_fit_gpus(self._snap, node, demand), demand)

    # -- scoring, once per (request class, node state) -------------------------------
    def _choose_node(self, nodes: IntArray, demand: Demand) -> int:
        ids = self._states.ids[nodes]
        loss, _ = self._scores.lookup(class_key(demand), ids, nodes, demand, self._score_node)
        keys = (self._coarse(loss[:, 0]), self._snap.gpu_free[nodes].sum(1))
        return int(nodes[self._best_row(nodes, keys)])

    def _choose_share(self, nodes: IntArray, demand: Demand) -> Assignment:
        ids = self._states.ids[nodes]
        loss, gap = self._scores.lookup(class_key(demand), ids, nodes, demand, self._score_share)
        rows, slots = np.nonzero(gap >= 0)
        cand, hole = nodes[rows], gap[rows, slots]
        keys = (
            self._coarse(loss[rows, slots]),
            self._snap.gpu_free[cand].sum(1),
            hole - demand.milli,
        )
        pick = self._best_row(cand, keys)
        node = int(cand[pick])
        gpu = int(np.argmax(self._snap.gpu_free[node] == hole[pick]))
        return Assignment(node, (gpu,), demand)

    def _score_node(self, nodes: IntArray, demand: Demand) -> tuple[FloatArray, IntArray]:
        snap, usable = self._snap, self._usable
        before, idle = usable.of_states(nodes)
        after = usable.usable_of(
            nodes,
            idle - demand.gpus * MILLI_PER_GPU,
            (snap.gpu_free[nodes] >= MILLI_PER_GPU).sum(1) - demand.gpus,
            snap.cpu_free[nodes] - demand.cpu_milli,
            snap.mem_free[nodes] - demand.memory_mib,
        )
        loss = self._loss(before, after)[:, None]
        return loss, np.zeros(loss.shape, np.int64)

    def _score_share(self, nodes: IntArray, demand: Demand) -> tuple[FloatArray, IntArray]:
        snap, usable = self._snap, self._usable
        before, idle = usable.of_states(nodes)
        free = snap.gpu_free[nodes]
        gaps = share_candidates(free, demand.milli)  # rows x SLOTS, -1 where none
        rows, slots = np.nonzero(gaps >= 0)
        gap = gaps[rows, slots]
        cand = nodes[rows]
        after = usable.usable_of(
            cand,
            share_after(idle[rows], usable.sizes, gap, demand.milli),
            (free[rows] >= MILLI_PER_GPU).sum(1) - (gap >= MILLI_PER_GPU),
            snap.cpu_free[cand] - demand.cpu_milli,
            snap.mem_free[cand] - demand.memory_mib,
        )
        loss = np.full(gaps.shape, np.inf)
        loss[rows, slots] = self._loss(before[rows], after)
        return loss, gaps

    def _loss(self, before: FloatArray, after: FloatArray) -> FloatArray:
        """Expected usable capacity each candidate (row) loses."""
        if not self._usable.classes:
            return np.zeros(len(before))
        return np.asarray((before - after) @ self._usable.weights, np.float64)

    def _coarse(self, loss: FloatArray) -> FloatArray:
        return np.asarray(np.round(loss / self._resolution), np.float64)

    def _best_row(self, nodes: IntArray, keys: tuple[np.ndarray, ...]) -> int:
        """Row with the smallest keys, compared in order, ties to the seeded order."""
        order = np.lexsort((self._rank[nodes], *reversed(keys)))
        return int(order[0])

    # -- admission -------------------------------------------------------------------
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
        return float(u.weights[fits].sum())

    def _whole_gpus_scarce(self) -> bool:
        """Fewer usable fully free GPUs than whole-GPU requests would take of the idle rest."""
        u, snap = self._usable, self._snap
        if not u.classes or u.is_share.all():
            return False
        weights = u.weights
        whole = ~u.is_share
        demand = weights * u.k * u.d
        whole_part = float(demand[whole].sum() / demand.sum())
        version, clock = self._whole_at
        changed = snap.changed_since(clock) if version == u.version else np.arange(snap.size)
        if len(changed):
            self._whole_usable[changed] = u.of_states(changed)[0][:, whole] @ weights[whole]
        self._whole_at = (u.version, snap.clock)
        usable_whole = float(self._whole_usable.sum() / weights[whole].sum())
        idle = snap.capacity_milli - snap.used_milli
        return usable_whole < whole_part * idle


class _Scores:
    """Candidate losses per (request class, node state), valid while the usable-
    capacity model keeps its version. Each entry has SLOTS candidates: a loss
    (inf: none) and the candidate GPU's free milli (-1: none)."""

    def __init__(self, states: int) -> None:
        self._states = states
        self._version: object = None
        self._tables: dict[ClassKey, tuple[np.ndarray, FloatArray, IntArray]] = {}

    def follow(self, version: object) -> None:
        if version != self._version:
            self._version = version
            self._tables.clear()

    def lookup(
        self, key: ClassKey, ids: IntArray, nodes: IntArray, demand: Demand, score: Scorer
    ) -> tuple[FloatArray, IntArray]:
        """The SLOTS losses and candidate free milli of `nodes` (one per state,
        `ids` their states) for `demand`; `score` computes those not kept yet."""
        table = self._tables.pop(key, None)  # re-inserted last: the dict is in LRU order
        if table is None:
            if len(self._tables) >= CACHED_CLASSES:
                del self._tables[next(iter(self._tables))]
            table = (
                np.zeros(self._states, bool),
                np.zeros((self._states, SLOTS)),
                np.zeros((self._states, SLOTS), np.int64),
            )
        self._tables[key] = table
        known, loss, gap = table
        new = ~known[ids]
        if new.any():
            new_loss, new_gap = score(nodes[new], demand)
            width = new_loss.shape[1]
            loss[ids[new], :width] = new_loss
            gap[ids[new], :width] = new_gap
            known[ids[new]] = True
        return loss[ids], gap[ids]


def share_candidates(free: IntArray, milli: int) -> IntArray:
    """Up to three GPUs per node row worth scoring for a share, by their free
    milli (-1: none): the tightest fit, the fullest partly used one, and a fully
    free one. Other GPUs differ from these only in how much they leave over,
    which the loss ranks between them."""
    fits = free >= milli
    partly = fits & (free < MILLI_PER_GPU)
    out = np.empty((len(free), SLOTS), np.int64)
    out[:, 0] = tight = np.where(fits, free, MILLI_PER_GPU + 1).min(1)
    partial = np.where(partly, free, -1).max(1)
    out[:, 1] = np.where(partial != tight, partial, -1)
    out[:, 2] = np.where(
        (tight < MILLI_PER_GPU) & (free >= MILLI_PER_GPU).any(1), MILLI_PER_GPU, -1
    )
    return out
