"""The target workload: which kinds of request arrive, and how often.

FGD (Weng et al., ATC 2023) measures fragmentation against a workload known in
advance. A cloud does not know it, so `WorkloadEstimate` learns it online from
the requests actually made, with exponential decay so that it follows a
workload that drifts. A class is a request shape (GPUs, milli per GPU, CPU,
memory, acceptable models); the estimate keeps the most frequent classes that
together make up `coverage` of the (decayed) requests, as FGD does with its
"typical pods", and re-ranks them every `rerank_every` observations (starting
at 1, 2, 4, ... so the first classes are known early). Classes and weights
change only at a re-rank, so that scores computed from them can be cached.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from gpudock.scheduler.demand import Demand

ClassKey = tuple[int, int, int, int, frozenset[str] | None]


@dataclass(frozen=True)
class WorkloadClass:
    demand: Demand
    weight: float  # share of GPU requests, summing to 1 over the classes


def class_key(demand: Demand) -> ClassKey:
    return (demand.gpus, demand.milli, demand.cpu_milli, demand.memory_mib, demand.models)


class WorkloadEstimate:
    """Decayed frequencies of GPU request classes (CPU-only requests hold no GPU
    and so cannot fragment one; they are not counted)."""

    def __init__(
        self,
        *,
        half_life: float = 2000.0,
        coverage: float = 0.95,
        max_classes: int = 64,
        rerank_every: int = 2000,
    ) -> None:
        self._growth = math.exp(math.log(2.0) / half_life) if half_life > 0 else 1.0
        self._coverage = coverage
        self._max_classes = max_classes
        self._rerank_every = rerank_every
        self._scale = 1.0  # weight of the next observation; older ones decay relatively
        self._counts: dict[ClassKey, float] = {}
        self._demands: dict[ClassKey, Demand] = {}
        self._since_rerank = 0
        self._observed = 0
        self._ranked: tuple[ClassKey, ...] = ()
        self._weights: list[float] = []
        self.version = 0  # bumped whenever the ranked classes or their weights change

    @classmethod
    def fixed(cls, classes: Iterable[tuple[Demand, float]]) -> WorkloadEstimate:
        """A workload given in advance (FGD as published): no decay, no learning."""
        estimate = cls(half_life=0.0, coverage=1.0, max_classes=10_000)
        for demand, weight in classes:
            if demand.gpus:
                key = class_key(demand)
                estimate._counts[key] = estimate._counts.get(key, 0.0) + weight
                estimate._demands[key] = demand
        estimate._rerank()
        estimate._rerank_every = 0
        return estimate

    def observe(self, demand: Demand) -> None:
        if not demand.gpus or self._rerank_every == 0:
            return
        key = class_key(demand)
        self._counts[key] = self._counts.get(key, 0.0) + self._scale
        self._demands.setdefault(key, demand)
        self._scale *= self._growth
        if self._scale > 1e100:  # renormalise before the floats overflow
            self._counts = {k: v / self._scale for k, v in self._counts.items()}
            self._scale = 1.0
        self._since_rerank += 1
        self._observed += 1
        # Re-rank at 1, 2, 4, ... observations, then every `rerank_every`: the
        # first classes are known early, and later rebuilds of the caches stay rare.
        if self._since_rerank >= min(self._rerank_every, self._observed // 2 or 1):
            self._rerank()

    def classes(self) -> tuple[WorkloadClass, ...]:
        """The ranked classes with their weights as of the last re-rank."""
        return tuple(
            WorkloadClass(self._demands[k], w)
            for k, w in zip(self._ranked, self._weights, strict=True)
        )

    def weights(self) -> list[float]:
        """The weights of `classes()`, in the same order (cheap: no new objects).
        They change only at a re-rank, so scores computed with them can be kept."""
        return self._weights

    def _rerank(self) -> None:
        self._since_rerank = 0
        chosen: set[ClassKey] = set()
        # The most frequent classes that make up `coverage` of the requests, and
        # those that make up `coverage` of the GPU asked for: a rare class of big
        # requests (8 GPUs) asks for much of it.
        for size in (lambda k: 1.0, _gpu_milli):
            mass = {k: self._counts[k] * size(k) for k in self._counts}
            ordered = sorted(mass, key=lambda k: (-mass[k], _sortable(k)))
            need = self._coverage * sum(mass.values())
            covered = sum(mass[k] for k in chosen)
            for key in ordered:
                if covered >= need or len(chosen) >= self._max_classes:
                    break
                if key not in chosen:
                    chosen.add(key)
                    covered += mass[key]
        ranked = tuple(sorted(chosen, key=_sortable))
        total = sum(self._counts[k] for k in ranked)
        weights = [self._counts[k] / total for k in ranked] if total > 0 else []
        if ranked != self._ranked or weights != self._weights:
            self._ranked, self._weights = ranked, weights
            self.version += 1


def _gpu_milli(key: ClassKey) -> float:
    return float(key[0] * key[1])


def _sortable(key: ClassKey) -> tuple[int, int, int, int, tuple[str, ...]]:
    gpus, milli, cpu, mem, models = key
    return (gpus, milli, cpu, mem, () if models is None else tuple(sorted(models)))
