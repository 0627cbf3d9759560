"""Which GPU models the model-constrained demand is short of.

A request that accepts only some models (`--gpu T4`) can use only their share
of the fleet; when such demand is large against that share, every GPU of those
models that a request which could have gone elsewhere takes is one the
constrained demand will miss. The usable-capacity loss cannot see this: it
weighs a class by how often it arrives, not by how scarce the capacity it can
use is, so a small T4-only class counts for little even when T4-only demand
exceeds the T4 fleet.

So the GPU demand is tallied by its set of acceptable models (with the same
decay as the workload estimate), and for each constrained set S the demand
that only S can serve (the sets within S) is projected onto the idle rest of
the fleet, as the multi-GPU rule does: S is *short* when its models' free GPU
milli is below `margin` times that projection (every other request eats that
capacity too). A request that S does not hold all of (it could go elsewhere)
then treats S's models as protected: candidates on them come after all others.
A request only S can serve is never kept off S.
"""

from __future__ import annotations

import math

import numpy as np

from gpudock.scheduler.demand import Demand
from gpudock.scheduler.snapshot import BoolArray, Snapshot

ModelSet = frozenset[str]


class ModelScarcity:
    def __init__(self, snapshot: Snapshot, *, margin: float, half_life: float = 2000.0) -> None:
        self._snap = snapshot
        self._margin = margin
        self._growth = math.exp(math.log(2.0) / half_life) if half_life > 0 else 1.0
        self._scale = 1.0
        self._fleet = frozenset(
            m for m, gpus in zip(snapshot.model_names, self._model_gpus(), strict=True) if gpus
        )
        self._milli: dict[ModelSet, float] = {}  # decayed GPU milli per constrained set
        self._total = 0.0  # decayed GPU milli of all GPU requests
        self._masks: dict[ModelSet, BoolArray] = {}  # per set, which model indices it holds
        self._short_at: tuple[int, float, tuple[ModelSet, ...]] = (-1, -1.0, ())

    def _model_gpus(self) -> list[int]:
        snap = self._snap
        counts = np.bincount(snap.model_of, snap.num_gpus, minlength=len(snap.model_names))
        return [int(c) for c in counts]

    def observe(self, demand: Demand) -> None:
        if not demand.gpus:
            return
        weight = demand.total_milli * self._scale
        self._total += weight
        models = self._constrained(demand)
        if models is not None:
            self._milli[models] = self._milli.get(models, 0.0) + weight
        self._scale *= self._growth
        if self._scale > 1e100:  # renormalise before the floats overflow
            self._milli = {k: v / self._scale for k, v in self._milli.items()}
            self._total /= self._scale
            self._scale = 1.0

    def protected_nodes(self, demand: Demand) -> BoolArray | None:
        """Per node, whether it has a model that `demand` should keep off (None: none)."""
        if not demand.gpus:
            return None
        own = self._constrained(demand)
        keep_off = [s for s in self._short_sets() if own is None or not own <= s]
        if not keep_off:
            return None
        models = np.zeros(len(self._snap.model_names), bool)
        for s in keep_off:
            models |= self._mask(s)
        return np.asarray(models[self._snap.model_of], bool)

    def _constrained(self, demand: Demand) -> ModelSet | None:
        """The fleet models `demand` accepts, or None if it accepts them all."""
        if demand.models is None:
            return None
        models = demand.models & self._fleet
        return None if models == self._fleet else models

    def _mask(self, models: ModelSet) -> BoolArray:
        mask = self._masks.get(models)
        if mask is None:
            mask = np.array([m in models for m in self._snap.model_names], bool)
            self._masks[models] = mask
        return mask

    def _short_sets(self) -> tuple[ModelSet, ...]:
        snap = self._snap
        clock, total, short = self._short_at
        if clock == snap.clock and total == self._total:
            return short
        found: list[ModelSet] = []
        idle = snap.capacity_milli - snap.used_milli
        if self._milli and self._total > 0 and idle > 0:
            free = np.bincount(snap.model_of, snap.gpu_free.sum(1), minlength=len(snap.model_names))
            for models in sorted(self._milli, key=sorted):
                only_here = sum(v for s, v in self._milli.items() if s <= models)
                need = only_here / self._total * idle
                if float(free[self._mask(models)].sum()) < self._margin * need:
                    found.append(models)
        self._short_at = (snap.clock, self._total, tuple(found))
        return self._short_at[2]
