"""Expected usable GPU capacity of a node under the estimated workload.

For a workload class m (k GPUs of d milli, c CPU, r memory, some models) the
capacity of node n that m can use is
    share class:  min(U_d(n), cap_m(n) * d)          U_d: idle milli on GPUs with >= d free
    whole class:  min(F(n) // k, cap_m(n)) * k * 1000   F: fully free GPUs
where cap_m(n) = min(cpu_free // c, mem_free // r) is how many such requests
the node's CPU and memory still allow. The expected usable capacity is the
class-weighted sum; what a placement lowers it by, beyond the GPU it takes, is
capacity it strands. FGD's fragmentation is the same idea without the CPU and
memory caps (it treats a node with one free core and seven idle GPUs as fully
usable by any request that needs one core) and without counting how many
k-GPU requests actually fit.

Values are kept per node *state* (see `nodestates`), not per node: a state
once scored is looked up, whichever node is in it, until the workload estimate
re-ranks its classes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpudock.scheduler.demand import MILLI_PER_GPU
from gpudock.scheduler.nodestates import NodeStates
from gpudock.scheduler.snapshot import IntArray, Snapshot
from gpudock.scheduler.workload import WorkloadEstimate

FloatArray = npt.NDArray[np.float64]


class UsableCapacity:
    def __init__(self, snapshot: Snapshot, workload: WorkloadEstimate, states: NodeStates) -> None:
        self._snap = snapshot
        self._workload = workload
        self._states = states
        self.version: tuple[int, int] = (-1, -1)
        self.refresh()

    def refresh(self) -> None:
        """Follow the workload estimate and the state ids: rebuild on a change of either."""
        version = (self._workload.version, self._states.generation)
        if version == self.version:
            return
        self.version = version
        classes = [c.demand for c in self._workload.classes()]
        self.classes = len(classes)
        snap = self._snap
        self.k = np.array([d.gpus for d in classes], np.int64)
        self.d = np.array([d.milli for d in classes], np.int64)
        # A class that asks for no CPU (or memory) is never limited by it: divide by 1.
        self.cpu = np.array([max(d.cpu_milli, 1) for d in classes], np.int64)
        self.mem = np.array([max(d.memory_mib, 1) for d in classes], np.int64)
        self.is_share = self.d < MILLI_PER_GPU
        # One column per share size; the whole-GPU column keeps the array non-empty.
        self.sizes = np.unique(np.append(self.d[self.is_share], MILLI_PER_GPU))
        self.size_of = np.searchsorted(self.sizes, self.d)
        self.model_accepts = np.array(
            [[d.accepts(m) for m in snap.model_names] for d in classes], bool
        ).reshape(self.classes, len(snap.model_names))
        self._all_accept = bool(self.model_accepts.all())
        # Share classes come first in the estimate's order (by GPUs, then milli).
        self._shares = int(self.is_share.sum())
        if not self.is_share[: self._shares].all():
            raise ValueError("share classes must come before whole-GPU classes")
        self._cpu_f = self.cpu.astype(np.float64)
        self._mem_f = self.mem.astype(np.float64)
        self._d_f = self.d[: self._shares].astype(np.float64)
        self._size_of_share = self.size_of[: self._shares]
        # usable whole-GPU milli per count of fully free GPUs, before the CPU cap
        k = self.k[self._shares :]
        counts = np.arange(snap.width + 1)[:, None]
        self._whole_by_full = (counts // np.maximum(k, 1)).astype(np.float64)
        self._whole_milli = (k * MILLI_PER_GPU).astype(np.float64)
        self.weights = np.array(self._workload.weights(), np.float64)
        # whole-GPU classes of several GPUs, at most 62 (they get a bit each)
        self.multi = np.flatnonzero(self.k > 1)[:62]
        self._match_intensities()
        size = self._states.capacity
        self._known = np.zeros(size, bool)
        self._usable = np.zeros((size, self.classes))
        self._idle = np.zeros((size, len(self.sizes)), np.int64)

    def _match_intensities(self) -> None:
        """Per node, the CPU and memory per GPU milli of the requests it should host.

        One-dimensional optimal transport: GPU demand sorted by its CPU per GPU
        milli is laid onto GPU capacity sorted by the nodes' CPU per GPU, so
        the CPU-hungriest requests are meant for the CPU-richest nodes. A node
        is meant for the demand at its own quantile of capacity (memory alike)."""
        snap = self._snap
        self.cpu_meant = np.full(snap.size, np.inf)  # inf: nothing is meant, nothing strands
        self.mem_meant = np.full(snap.size, np.inf)
        gpu = (self.k * self.d).astype(np.float64)
        if not self.classes or snap.capacity_milli == 0:
            return
        demand = self.weights * gpu
        for ask, have, out in (
            (self.cpu / gpu, snap.cpu_cap, self.cpu_meant),
            (self.mem / gpu, snap.mem_cap, self.mem_meant),
        ):
            order = np.argsort(ask, kind="stable")
            cdf = np.cumsum(demand[order]) / demand.sum()
            capacity = snap.num_gpus * MILLI_PER_GPU
            ratio = np.where(capacity > 0, have / np.maximum(capacity, 1), np.inf)
            by_ratio = np.argsort(ratio, kind="stable")
            upto = np.cumsum(capacity[by_ratio]) - capacity[by_ratio] / 2.0
            place = np.empty(snap.size)
            place[by_ratio] = upto / capacity.sum()
            # nodes of equal ratio share the quantile of their middle
            _, inverse = np.unique(ratio, return_inverse=True)
            mid = np.bincount(inverse, place * capacity) / np.maximum(
                np.bincount(inverse, capacity), 1
            )
            q = mid[inverse]
            pick = np.minimum(np.searchsorted(cdf, q), len(order) - 1)
            out[:] = ask[order][pick]

    def poor_hole_below(self, mass: float) -> int:
        """Holes (free milli on a used GPU) below this size fit share classes of
        less than `mass` of the estimated requests in all."""
        if not self.classes:
            return 0
        share = self.is_share
        order = np.argsort(self.d[share], kind="stable")
        sizes, cumulative = self.d[share][order], np.cumsum(self.weights[share][order])
        reached = np.flatnonzero(cumulative >= mass)
        return int(sizes[reached[0]]) if len(reached) else MILLI_PER_GPU

    def balanced(self, nodes: IntArray, gpu: IntArray, cpu: IntArray, mem: IntArray) -> FloatArray:
        """GPU milli of `nodes` that the requests meant for them could still use,
        given free GPU milli, CPU and memory: what runs out first."""
        with np.errstate(divide="ignore", invalid="ignore"):
            by_cpu = np.maximum(cpu, 0) / self.cpu_meant[nodes]
            by_mem = np.maximum(mem, 0) / self.mem_meant[nodes]
        usable = np.minimum(np.minimum(gpu, by_cpu), by_mem)
        return np.where(np.isfinite(self.cpu_meant[nodes]), usable, gpu).astype(np.float64)

    def of_states(self, nodes: IntArray) -> tuple[FloatArray, IntArray]:
        """Usable capacity per class and idle-milli sums per size of `nodes` (rows,
        one per distinct state) as they are now, computed once per state."""
        ids = self._states.ids[nodes]
        new = ~self._known[ids]
        if new.any():
            fresh, snap = nodes[new], self._snap
            free = snap.gpu_free[fresh]
            idle = idle_at_least(free, self.sizes)
            self._idle[ids[new]] = idle
            self._usable[ids[new]] = self.usable_of(
                fresh,
                idle,
                (free >= MILLI_PER_GPU).sum(1),
                snap.cpu_free[fresh],
                snap.mem_free[fresh],
            )
            self._known[ids[new]] = True
        return self._usable[ids], self._idle[ids]

    def usable_of(
        self, nodes: IntArray, idle: IntArray, full: IntArray, cpu: IntArray, mem: IntArray
    ) -> FloatArray:
        """Usable capacity per class (columns) of nodes (rows) in the given state.

        In floats: floor(a / b) of integers below 2**53 is exact in float64, and
        a float division is several times cheaper than an integer one."""
        cap = np.minimum(
            np.floor(np.maximum(cpu, 0)[:, None] / self._cpu_f),
            np.floor(np.maximum(mem, 0)[:, None] / self._mem_f),
        )
        s = self._shares
        usable = np.empty(cap.shape)
        np.minimum(idle[:, self._size_of_share], cap[:, :s] * self._d_f, out=usable[:, :s])
        whole = usable[:, s:]
        np.minimum(self._whole_by_full[full], cap[:, s:], out=whole)
        whole *= self._whole_milli
        if not self._all_accept:
            usable *= self.model_accepts[:, self._snap.model_of[nodes]].T
        return usable


def idle_at_least(free: IntArray, sizes: IntArray) -> IntArray:
    """For each row of per-GPU free milli, the idle milli on GPUs with >= each size free."""
    ge = free[:, None, :] >= sizes[None, :, None]
    return np.asarray(np.where(ge, free[:, None, :], 0).sum(2), np.int64)


def share_after(idle: IntArray, sizes: IntArray, free_before: IntArray, milli: int) -> IntArray:
    """Idle-milli sums after `milli` is taken from a GPU with `free_before` free."""
    after = free_before - milli
    s = sizes[None, :]
    delta = np.where(after[:, None] >= s, after[:, None], 0) - np.where(
        free_before[:, None] >= s, free_before[:, None], 0
    )
    return np.asarray(idle + delta, np.int64)
