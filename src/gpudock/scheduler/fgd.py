"""FGD as published (Weng et al., "Beware of Fragmentation", USENIX ATC 2023),
as its simulator scores it.

A node's fragmentation against a target workload M is
    F_n = sum over m in M of p_m * (idle GPU milli on n that m cannot use),
where m cannot use a GPU with less free milli than it needs per GPU, nor any
GPU of a node that lacks its model, enough such GPUs, or enough CPU. Each
request goes where F grows least, scored as the simulator's plugin does:
int(100 * sigmoid((F_before - F_after) / 1000)), a coarse score under which
many nodes tie; the best GPU within a node is the first with the top score.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpudock.scheduler.choosing import TieRule, best_fit_gpus, candidates
from gpudock.scheduler.demand import MILLI_PER_GPU, Demand
from gpudock.scheduler.snapshot import Assignment, BoolArray, IntArray, Snapshot
from gpudock.scheduler.usable import FloatArray
from gpudock.scheduler.workload import WorkloadEstimate


class Fragmentation:
    """F_n for rows of node state; `classes` are (demand, weight) pairs whose
    weights are used as given (FGD's weights also count CPU-only requests)."""

    def __init__(self, classes: Sequence[tuple[Demand, float]], model_names: Sequence[str]):
        shapes: dict[tuple[int, int, frozenset[str] | None], list[tuple[int, float]]] = {}
        for demand, weight in classes:
            if demand.gpus:
                key = (demand.milli, demand.gpus, demand.models)
                shapes.setdefault(key, []).append((demand.cpu_milli, weight))
        keys = sorted(shapes, key=lambda k: (k[0], k[1], sorted(k[2] or ())))
        self.milli = np.array([k[0] for k in keys], np.int64)
        self.count = np.array([k[1] for k in keys], np.int64)
        self.cpu_steps = np.array(sorted({c for k in keys for c, _ in shapes[k]}), np.int64)
        # cpu_mass[s, j]: weight of shape s's classes that need at most cpu_steps[j - 1].
        table = np.zeros((len(keys), len(self.cpu_steps) + 1))
        for i, key in enumerate(keys):
            for cpu, weight in shapes[key]:
                table[i, int(np.searchsorted(self.cpu_steps, cpu)) + 1] += weight
        self.cpu_mass = np.cumsum(table, axis=1)
        self.accepts = np.array(
            [[k[2] is None or m in k[2] for m in model_names] for k in keys], bool
        ).reshape(len(keys), len(model_names))

    def of(self, free: IntArray, cpu_free: IntArray, model: IntArray) -> FloatArray:
        total = free.sum(1).astype(np.float64)
        if not len(self.milli):
            return np.asarray(total, np.float64)
        fits = free[:, None, :] >= self.milli[None, :, None]
        usable = np.where(fits, free[:, None, :], 0).sum(2)
        hosts = (fits.sum(2) >= self.count[None, :]) & self.accepts[:, model].T
        cpu_ok = self.cpu_mass[:, np.searchsorted(self.cpu_steps, cpu_free, side="right")].T
        return np.asarray(total - np.where(hosts, cpu_ok * usable, 0.0).sum(1), np.float64)


class FgdPolicy:
    """FGD over a workload given in advance (`classes`), or, without one, over
    the online estimate (rebuilt when its class list changes)."""

    def __init__(
        self,
        snapshot: Snapshot,
        ties: TieRule,
        classes: Sequence[tuple[Demand, float]] | None = None,
    ) -> None:
        self._snap = snapshot
        self._ties = ties
        self._learned = WorkloadEstimate() if classes is None else None
        self._version = -1
        self._clock = -1
        self._frag = Fragmentation(classes or (), snapshot.model_names)
        self._f: FloatArray = np.zeros(snapshot.size)

    def observe(self, demand: Demand) -> None:
        if self._learned is not None:
            self._learned.observe(demand)

    def _refresh(self) -> None:
        snap = self._snap
        if self._learned is not None and self._learned.version != self._version:
            self._version = self._learned.version
            learned = [(c.demand, c.weight) for c in self._learned.classes()]
            self._frag = Fragmentation(learned, snap.model_names)
            self._clock = -1
        nodes = np.arange(snap.size) if self._clock < 0 else snap.changed_since(self._clock)
        if len(nodes):
            self._f[nodes] = self._frag.of(
                snap.gpu_free[nodes], snap.cpu_free[nodes], snap.model_of[nodes]
            )
        self._clock = snap.clock

    def choose(
        self, demand: Demand, *, may_defer: bool = True, allowed: BoolArray | None = None
    ) -> Assignment | None:
        snap = self._snap
        nodes = candidates(snap, demand, allowed)
        if not len(nodes):
            return None
        self._refresh()
        if demand.is_share:
            return self._choose_share(nodes, demand)
        free = snap.gpu_free[nodes]
        after = free
        if demand.gpus:
            whole = free >= MILLI_PER_GPU
            after = np.where(whole & (np.cumsum(whole, 1) <= demand.gpus), 0, free)
        f_after = self._frag.of(
            after, snap.cpu_free[nodes] - demand.cpu_milli, snap.model_of[nodes]
        )
        score = _score(f_after - self._f[nodes])
        node = self._ties.pick(nodes[score == score.max()])
        return Assignment(node, best_fit_gpus(snap, node, demand), demand)

    def _choose_share(self, nodes: IntArray, demand: Demand) -> Assignment:
        snap = self._snap
        free = snap.gpu_free[nodes]
        width = free.shape[1]
        earlier = np.tril(np.ones((width, width), bool), -1)[None]
        repeated = ((free[:, :, None] == free[:, None, :]) & earlier).any(2)
        rows, gpus = np.nonzero((free >= demand.milli) & ~repeated)  # one per distinct value
        after = free[rows].copy()
        after[np.arange(len(rows)), gpus] -= demand.milli
        cpu = snap.cpu_free[nodes][rows] - demand.cpu_milli
        f_after = self._frag.of(after, cpu, snap.model_of[nodes][rows])
        score = np.full(free.shape, -np.inf)
        score[rows, gpus] = _score(f_after - self._f[nodes][rows])
        best_per_node = score.max(1)
        node = self._ties.pick(nodes[best_per_node == best_per_node.max()])
        row = int(np.searchsorted(nodes, node))
        gpu = int(np.argmax(score[row] == best_per_node[row]))
        return Assignment(node, (gpu,), demand)


def _score(delta: FloatArray) -> FloatArray:
    """The simulator's int64(sigmoid((F_before - F_after) / 1000) * 100)."""
    delta = np.round(delta, 6)
    return np.asarray(np.floor(1.0 / (1.0 + np.exp(delta / 1000.0)) * 100.0), np.float64)
