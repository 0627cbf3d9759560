"""gpudock's own placement policy (the default, named "gpudock").

1. Loss, in milli-GPU. Each candidate (node, GPUs) is charged
   a. the expected usable capacity it takes away (`UsableCapacity`: FGD's idea
      with CPU and memory counted, over a workload learned online), and
   b. the GPU it strands for the requests the node is meant for: the workload's
      GPU demand, sorted by CPU (and memory) per GPU, is laid onto the fleet's
      GPUs sorted the same way, so each node is meant for requests of some CPU
      per GPU; a request that eats more of a node's CPU than those would leaves
      GPUs without CPU (`UsableCapacity.balanced`).
   Losses closer than `resolution` milli count as equal: the estimate is not
   finer than that.
2. Multi-GPU capacity is kept when it runs short. For each multi-GPU request
   class, if the capacity it could use is less than its part of the demand that
   would fill the idle rest (times MULTI_GPU_MARGIN: all other requests eat that
   capacity too), candidates that take from it come after all others.
3. Scarce models are left to the demand that needs them: a request that could
   go elsewhere puts candidates on models that model-constrained demand is
   short of after all others (`scarcity.ModelScarcity`).
4. Packing among equals: the node with least free GPU first (most used); then,
   for a share, the GPU left with least free; then a seeded order of node
   names. No rule depends on the order in which nodes are listed.
5. Admission. A share that would open a fully free GPU and leave a hole that
   few requests fit (less than `poor_hole_mass` of the estimated workload; an
   810-milli share leaves 190) may be held back, so that a whole-GPU request
   can use that GPU in full, but only while the GPU demand refused at arrival
   (held back, or fitting nowhere) is below the idle capacity already lost in
   such poor holes: the two ways to lose capacity are kept even, since which of
   them costs more depends on how much more demand comes. Held-back requests
   wait (in a replay without a queue they fail); `may_defer=False` (the wait
   queue's anti-starvation rule) places one regardless. A CPU-only request,
   likewise, goes at arrival only where it strands no GPU for the requests
   meant for the node (the CPU and memory its free GPUs need stay reserved),
   and otherwise waits.

Scores depend only on a node's state and the request's class, so they are
computed once per (request class, node state) and kept until the workload
estimate re-ranks (`_Scores`, `nodestates`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpudock.scheduler.choosing import best_fit_gpus, candidates, seeded_order
from gpudock.scheduler.demand import MILLI_PER_GPU, Demand
from gpudock.scheduler.nodestates import NodeStates
from gpudock.scheduler.scarcity import ModelScarcity
from gpudock.scheduler.snapshot import Assignment, BoolArray, IntArray, Snapshot
from gpudock.scheduler.usable import FloatArray, UsableCapacity, share_after
from gpudock.scheduler.workload import ClassKey, WorkloadEstimate, class_key

SLOTS = 3  # GPUs scored per node for a share: see `share_candidates`
CACHED_CLASSES = 256  # request classes whose scores are kept; beyond, the oldest go
MULTI_GPU_MARGIN = 2.0  # see 2. above
Scored = tuple[FloatArray, IntArray, IntArray]  # loss, candidate free milli, multi-GPU bits
Scorer = Callable[[IntArray, Demand], Scored]


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
        self._rank = seeded_order(snapshot, seed)
        self._resolution = resolution
        self._poor_hole_mass = poor_hole_mass
        self._admission = admission
        self._arrival: Demand | None = None  # the demand last observed, until chosen
        self._refused = 0  # GPU milli of arrivals not placed when they arrived
        self._totals = _FleetTotals(snapshot, self._usable)
        self._scarcity = ModelScarcity(snapshot, margin=MULTI_GPU_MARGIN)
        self._top_at: tuple[object, int] = (None, 0)  # (model version, poor-hole bound)

    def observe(self, demand: Demand) -> None:
        self._workload.observe(demand)
        self._scarcity.observe(demand)
        self._arrival = demand

    def choose(
        self, demand: Demand, *, may_defer: bool = True, allowed: BoolArray | None = None
    ) -> Assignment | None:
        arrival = demand is self._arrival
        if arrival:
            self._arrival = None
        choice = self._choose(demand, may_defer and self._admission and arrival, allowed)
        if choice is None and arrival:
            self._refused += demand.total_milli
        return choice

    def _choose(
        self, demand: Demand, may_hold: bool, allowed: BoolArray | None
    ) -> Assignment | None:
        nodes = candidates(self._snap, demand, allowed)
        if not len(nodes):
            return None
        self._states.refresh()
        nodes = self._states.representatives(nodes, self._rank)
        self._usable.refresh()
        self._scores.follow(self._usable.version)
        if demand.is_share:
            return self._choose_share(nodes, demand, may_hold)
        if may_hold and not demand.gpus:
            nodes = self._unreserved(nodes, demand)
            if not len(nodes):
                return None
        node = self._choose_node(nodes, demand)
        return Assignment(node, best_fit_gpus(self._snap, node, demand), demand)

    def _choose_node(self, nodes: IntArray, demand: Demand) -> int:
        ids = self._states.ids[nodes]
        loss, _, bits = self._scores.lookup(class_key(demand), ids, nodes, demand, self._score_node)
        keys = (
            *self._kept_off(nodes, demand),
            (bits[:, 0] & self._short_bits()) != 0,
            self._coarse(loss[:, 0]),
            self._snap.gpu_free[nodes].sum(1),
        )
        return int(nodes[self._best_row(nodes, keys)])

    def _choose_share(self, nodes: IntArray, demand: Demand, may_hold: bool) -> Assignment | None:
        ids = self._states.ids[nodes]
        loss, gap, bits = self._scores.lookup(
            class_key(demand), ids, nodes, demand, self._score_share
        )
        rows, slots = np.nonzero(gap >= 0)
        cand, hole = nodes[rows], gap[rows, slots]
        if may_hold and self._may_hold_back(demand):
            used = hole < MILLI_PER_GPU  # candidates that open no fully free GPU
            if not used.any():
                return None
            rows, slots, cand, hole = rows[used], slots[used], cand[used], hole[used]
        keys = (
            *self._kept_off(cand, demand),
            (bits[rows, slots] & self._short_bits()) != 0,
            self._coarse(loss[rows, slots]),
            self._snap.gpu_free[cand].sum(1),
            hole - demand.milli,
        )
        pick = self._best_row(cand, keys)
        node = int(cand[pick])
        gpu = int(np.argmax(self._snap.gpu_free[node] == hole[pick]))
        return Assignment(node, (gpu,), demand)

    def _unreserved(self, nodes: IntArray, demand: Demand) -> IntArray:
        """Of `nodes`, those where CPU-only `demand` takes none of the CPU and memory
        that the node's free GPUs need (as much per GPU as the requests meant for
        the node ask, see `UsableCapacity.balanced`)."""
        strands = self._strands(nodes, demand, self._snap.gpu_free[nodes].sum(1))
        return np.asarray(nodes[self._coarse(strands) == 0], np.int64)

    def _kept_off(self, nodes: IntArray, demand: Demand) -> tuple[np.ndarray, ...]:
        """A first key, if `demand` should keep off models constrained demand is short of."""
        protected = self._scarcity.protected_nodes(demand)
        return () if protected is None else (protected[nodes],)

    def _coarse(self, loss: FloatArray) -> FloatArray:
        return np.asarray(np.round(loss / self._resolution), np.float64)

    def _best_row(self, nodes: IntArray, keys: tuple[np.ndarray, ...]) -> int:
        """Row with the smallest keys, compared in order, ties to the seeded order."""
        order = np.lexsort((self._rank[nodes], *reversed(keys)))
        return int(order[0])

    # -- scoring, once per (request class, node state) -------------------------------
    def _score_node(self, nodes: IntArray, demand: Demand) -> Scored:
        snap, usable = self._snap, self._usable
        before, idle = usable.of_states(nodes)
        free = snap.gpu_free[nodes]
        after = usable.usable_of(
            nodes,
            idle - demand.gpus * MILLI_PER_GPU,
            (free >= MILLI_PER_GPU).sum(1) - demand.gpus,
            snap.cpu_free[nodes] - demand.cpu_milli,
            snap.mem_free[nodes] - demand.memory_mib,
        )
        loss = self._loss(before, after) + self._strands(nodes, demand, free.sum(1))
        bits = self._bits(before, after)[:, None]
        return loss[:, None], np.zeros((len(nodes), 1), np.int64), bits

    def _score_share(self, nodes: IntArray, demand: Demand) -> Scored:
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
        loss[rows, slots] = self._loss(before[rows], after) + self._strands(
            cand, demand, free[rows].sum(1)
        )
        bits = np.zeros(gaps.shape, np.int64)
        bits[rows, slots] = self._bits(before[rows], after)
        return loss, gaps, bits

    def _loss(self, before: FloatArray, after: FloatArray) -> FloatArray:
        """Expected usable capacity each candidate (row) loses."""
        if not self._usable.classes:
            return np.zeros(len(before))
        return np.asarray((before - after) @ self._usable.weights, np.float64)

    def _strands(self, nodes: IntArray, demand: Demand, gpu: IntArray) -> FloatArray:
        """GPU milli that `demand` on `nodes` strands, beyond what it takes, for the
        requests meant for those nodes (see UsableCapacity.balanced)."""
        snap, u = self._snap, self._usable
        cpu, mem = snap.cpu_free[nodes], snap.mem_free[nodes]
        before = u.balanced(nodes, gpu, cpu, mem)
        after = u.balanced(
            nodes, gpu - demand.total_milli, cpu - demand.cpu_milli, mem - demand.memory_mib
        )
        return np.maximum(before - after - demand.total_milli, 0.0)

    def _bits(self, before: FloatArray, after: FloatArray) -> IntArray:
        """Per candidate, a bit for each multi-GPU class whose usable capacity it lowers."""
        multi = self._usable.multi
        lowered = before[:, multi] > after[:, multi]
        return np.asarray(lowered @ (1 << np.arange(len(multi), dtype=np.int64)), np.int64)

    # -- multi-GPU capacity ------------------------------------------------------------
    def _short_bits(self) -> int:
        """Bits (as in `_bits`) of the multi-GPU classes short of usable capacity."""
        u, snap = self._usable, self._snap
        if not len(u.multi):
            return 0
        self._totals.refresh(self._poor_top())
        demand = u.weights * u.k * u.d
        need = demand[u.multi] / demand.sum() * (snap.capacity_milli - snap.used_milli)
        short = self._totals.multi_supply < MULTI_GPU_MARGIN * need
        return int(short @ (1 << np.arange(len(u.multi), dtype=np.int64)))

    # -- admission ---------------------------------------------------------------------
    def _may_hold_back(self, demand: Demand) -> bool:
        """`demand` leaves a poor hole on a fully free GPU, and the demand refused
        so far is less than the idle capacity lost in poor holes."""
        top = self._poor_top()
        if MILLI_PER_GPU - demand.milli >= top:
            return False
        self._totals.refresh(top)
        return self._refused + demand.total_milli <= self._totals.lost

    def _poor_top(self) -> int:
        """Holes below this many milli are poor (see `UsableCapacity.poor_hole_below`)."""
        version, top = self._top_at
        if version != self._usable.version:
            top = self._usable.poor_hole_below(self._poor_hole_mass)
            self._top_at = (self._usable.version, top)
        return top


class _FleetTotals:
    """Fleet-wide sums the house policy consults on every request, kept per node
    and updated for the nodes that changed (a sum over all nodes per request
    would cost more than the scoring): the usable capacity of each multi-GPU
    class, and the idle milli lost in poor holes (used GPUs with less than
    `top` free)."""

    def __init__(self, snapshot: Snapshot, usable: UsableCapacity) -> None:
        self._snap, self._usable = snapshot, usable
        self._at: tuple[object, int, int] = (None, 0, -1)  # (model version, top, clock)
        self._multi = np.zeros((snapshot.size, 0))
        self._lost = np.zeros(snapshot.size, np.int64)
        self.multi_supply: FloatArray = np.zeros(0)
        self.lost = 0

    def refresh(self, top: int) -> None:
        u, snap = self._usable, self._snap
        version, kept_top, clock = self._at
        if version != u.version or kept_top != top:
            self._multi = np.zeros((snap.size, len(u.multi)))
            self._lost[:] = 0
            self.multi_supply, self.lost = np.zeros(len(u.multi)), 0
            changed = np.arange(snap.size)
        else:
            changed = snap.changed_since(clock)
        self._at = (u.version, top, snap.clock)
        if not len(changed):
            return
        # Usable capacities are whole multiples of 1000 milli: float sums stay exact.
        multi = u.of_states(changed)[0][:, u.multi]
        self.multi_supply = self.multi_supply + multi.sum(0) - self._multi[changed].sum(0)
        self._multi[changed] = multi
        free = snap.gpu_free[changed]
        lost = np.where((free > 0) & (free < top), free, 0).sum(1)
        self.lost += int(lost.sum() - self._lost[changed].sum())
        self._lost[changed] = lost


class _Scores:
    """Candidate scores per (request class, node state), valid while the usable-
    capacity model keeps its version. Each entry has SLOTS candidates: a loss
    (inf: none), the candidate GPU's free milli (-1: none) and its multi-GPU bits."""

    def __init__(self, states: int) -> None:
        self._states = states
        self._version: object = None
        self._tables: dict[ClassKey, tuple[np.ndarray, FloatArray, IntArray, IntArray]] = {}

    def follow(self, version: object) -> None:
        if version != self._version:
            self._version = version
            self._tables.clear()

    def lookup(
        self, key: ClassKey, ids: IntArray, nodes: IntArray, demand: Demand, score: Scorer
    ) -> Scored:
        """The SLOTS scores of `nodes` (one per state, `ids` their states) for
        `demand`; `score` computes those not kept yet."""
        table = self._tables.pop(key, None)  # re-inserted last: the dict is in LRU order
        if table is None:
            if len(self._tables) >= CACHED_CLASSES:
                del self._tables[next(iter(self._tables))]
            table = (
                np.zeros(self._states, bool),
                np.zeros((self._states, SLOTS)),
                np.zeros((self._states, SLOTS), np.int64),
                np.zeros((self._states, SLOTS), np.int64),
            )
        self._tables[key] = table
        known, loss, gap, bits = table
        new = ~known[ids]
        if new.any():
            new_loss, new_gap, new_bits = score(nodes[new], demand)
            width = new_loss.shape[1]
            loss[ids[new], :width] = new_loss
            gap[ids[new], :width] = new_gap
            bits[ids[new], :width] = new_bits
            known[ids[new]] = True
        return loss[ids], gap[ids], bits[ids]


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
