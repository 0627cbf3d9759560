"""Expected usable GPU capacity of each node under the estimated workload.

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

Per node the idle-milli sums U_d and the usable capacity per class are cached
and refreshed only for nodes whose stamp moved, so scoring one request costs
O(candidates x classes) vector work, not O(nodes x classes x GPUs).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpudock.scheduler.demand import MILLI_PER_GPU
from gpudock.scheduler.snapshot import IntArray, Snapshot
from gpudock.scheduler.workload import WorkloadEstimate

FloatArray = npt.NDArray[np.float64]


class UsableCapacity:
    def __init__(self, snapshot: Snapshot, workload: WorkloadEstimate) -> None:
        self._snap = snapshot
        self._workload = workload
        self._version = -1
        self._clock = -1
        self._rebuild()

    # -- the cache -------------------------------------------------------------------
    def refresh(self) -> None:
        """Bring the per-node caches up to date with the snapshot and the workload."""
        if self._workload.version != self._version:
            self._rebuild()
            return
        changed = self._snap.changed_since(self._clock)
        if len(changed):
            self._fill(changed)
        self._clock = self._snap.clock

    def _rebuild(self) -> None:
        classes = [c.demand for c in self._workload.classes()]
        self._version = self._workload.version
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
        accepts = np.array(
            [[d.accepts(m) for m in snap.model_names] for d in classes], bool
        ).reshape(self.classes, len(snap.model_names))
        self.node_accepts = accepts[:, snap.model_of].T if snap.size else np.zeros((0, 0), bool)
        self.idle_at_least: IntArray = np.zeros((snap.size, len(self.sizes)), np.int64)
        self.full_free = np.zeros(snap.size, np.int64)
        self.usable = np.zeros((snap.size, self.classes), np.float64)
        self._fill(np.arange(snap.size))
        self._clock = snap.clock

    def _fill(self, nodes: IntArray) -> None:
        free = self._snap.gpu_free[nodes]
        self.full_free[nodes] = (free >= MILLI_PER_GPU).sum(1)
        if not self.classes:
            return
        self.idle_at_least[nodes] = idle_at_least(free, self.sizes)
        self.usable[nodes] = self.usable_of(
            nodes,
            self.idle_at_least[nodes],
            self.full_free[nodes],
            self._snap.cpu_free[nodes],
            self._snap.mem_free[nodes],
        )

    # -- scoring ---------------------------------------------------------------------
    def usable_of(
        self, nodes: IntArray, idle: IntArray, full: IntArray, cpu: IntArray, mem: IntArray
    ) -> FloatArray:
        """Usable capacity per class (columns) of nodes (rows) in the given state."""
        cap = np.minimum(cpu[:, None] // self.cpu[None, :], mem[:, None] // self.mem[None, :])
        cap = np.maximum(cap, 0)
        share = np.minimum(idle[:, self.size_of], cap * self.d[None, :])
        whole = np.minimum(full[:, None] // self.k[None, :], cap) * self.k[None, :] * MILLI_PER_GPU
        usable = np.where(self.is_share[None, :], share, whole)
        return np.where(self.node_accepts[nodes], usable, 0).astype(np.float64)

    def weights(self) -> FloatArray:
        return np.array(self._workload.weights(), np.float64)

    def loss(
        self, nodes: IntArray, idle: IntArray, full: IntArray, cpu: IntArray, mem: IntArray
    ) -> FloatArray:
        """Expected usable capacity each candidate (row) loses, against the cache."""
        if not self.classes:
            return np.zeros(len(nodes))
        after = self.usable_of(nodes, idle, full, cpu, mem)
        return np.asarray((self.usable[nodes] - after) @ self.weights(), np.float64)

    def share_after(self, nodes: IntArray, free_before: IntArray, milli: int) -> IntArray:
        """Idle-milli sums after `milli` is taken from a GPU with `free_before` free."""
        after = free_before - milli
        sizes = self.sizes[None, :]
        delta = np.where(after[:, None] >= sizes, after[:, None], 0) - np.where(
            free_before[:, None] >= sizes, free_before[:, None], 0
        )
        return np.asarray(self.idle_at_least[nodes] + delta, np.int64)

    def whole_after(self, nodes: IntArray, count: int) -> IntArray:
        """Idle-milli sums after `count` fully free GPUs are taken."""
        return np.asarray(self.idle_at_least[nodes] - count * MILLI_PER_GPU, np.int64)


def idle_at_least(free: IntArray, sizes: IntArray) -> IntArray:
    """For each row of per-GPU free milli, the idle milli on GPUs with >= each size free."""
    ge = free[:, None, :] >= sizes[None, :, None]
    return np.asarray(np.where(ge, free[:, None, :], 0).sum(2), np.int64)
