"""The baseline policies of the FGD paper's evaluation, for comparison.

Scores copy the simulator's Kubernetes score plugins, integer truncation
included, so that ties (and so the tie rule) weigh as much as they do there.
"""

from __future__ import annotations

import numpy as np

from gpudock.scheduler.choosing import TieRule, best_fit_gpus, candidates
from gpudock.scheduler.demand import MILLI_PER_GPU, Demand
from gpudock.scheduler.snapshot import Assignment, BoolArray, Snapshot

# The simulator normalises scores by the largest node it knows.
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8 * MILLI_PER_GPU


class RandomPolicy:
    """A uniformly random feasible node; a random fitting GPU for a share."""

    def __init__(self, snapshot: Snapshot, ties: TieRule) -> None:
        self._snap = snapshot
        self._rng = ties.rng

    def observe(self, demand: Demand) -> None:
        return None

    def choose(
        self, demand: Demand, *, may_defer: bool = True, allowed: BoolArray | None = None
    ) -> Assignment | None:
        nodes = candidates(self._snap, demand, allowed)
        if not len(nodes):
            return None
        node = int(nodes[self._rng.integers(len(nodes))])
        if demand.is_share:
            fitting = np.flatnonzero(self._snap.gpu_free[node] >= demand.milli)
            return Assignment(node, (int(fitting[self._rng.integers(len(fitting))]),), demand)
        return Assignment(node, best_fit_gpus(self._snap, node, demand), demand)


class FirstFitPolicy:
    """The first feasible node in the tie order (node-list order without one)."""

    def __init__(self, snapshot: Snapshot, ties: TieRule) -> None:
        self._snap = snapshot
        self._rank = ties.rank

    def observe(self, demand: Demand) -> None:
        return None

    def choose(
        self, demand: Demand, *, may_defer: bool = True, allowed: BoolArray | None = None
    ) -> Assignment | None:
        nodes = candidates(self._snap, demand, allowed)
        if not len(nodes):
            return None
        node = int(nodes[0] if self._rank is None else nodes[np.argmin(self._rank[nodes])])
        return Assignment(node, best_fit_gpus(self._snap, node, demand), demand)


class BestFitPolicy:
    """The node left with least CPU and GPU (equal weights), as the simulator scores it."""

    def __init__(self, snapshot: Snapshot, ties: TieRule) -> None:
        self._snap = snapshot
        self._ties = ties

    def observe(self, demand: Demand) -> None:
        return None

    def choose(
        self, demand: Demand, *, may_defer: bool = True, allowed: BoolArray | None = None
    ) -> Assignment | None:
        snap = self._snap
        nodes = candidates(snap, demand, allowed)
        if not len(nodes):
            return None
        cpu_rest = (snap.cpu_free[nodes] - demand.cpu_milli) / MAX_SPEC_CPU
        gpu_rest = (snap.gpu_free[nodes].sum(1) - demand.total_milli) / MAX_SPEC_GPU
        score = np.trunc((1.0 - (0.5 * cpu_rest + 0.5 * gpu_rest)) * 100.0)
        node = self._ties.pick(nodes[score == score.max()])
        return Assignment(node, best_fit_gpus(snap, node, demand), demand)
