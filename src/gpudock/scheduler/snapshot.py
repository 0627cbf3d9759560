"""The capacity snapshot the placement policies work on: free CPU, memory and
per-GPU free milli of every node, as numpy arrays so that a policy scores all
nodes of a 1,000-host fleet in a few vector operations.

The snapshot is the only mutable state of the core and it never does I/O.
Every change bumps the node's stamp, so a policy that caches per-node scores
refreshes just the nodes changed since it last looked (`changed_since`).
`allocate` refuses anything that would over-commit a node, so a bug in a policy
cannot hand out a GPU twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpudock.scheduler.demand import MILLI_PER_GPU, Demand

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class NodeSpec:
    """One host as built. `numa` and `nvlink` are per GPU index, empty if unknown."""

    name: str
    model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    numa: tuple[int | None, ...] = ()
    nvlink: tuple[frozenset[int], ...] = ()


@dataclass(frozen=True)
class Assignment:
    """`demand` placed on node index `node`, on GPU indices `gpus`."""

    node: int
    gpus: tuple[int, ...]
    demand: Demand


class OverCommitError(ValueError):
    """An allocation or release that the node's capacity does not allow."""


class Snapshot:
    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        self.specs = tuple(nodes)
        self.size = len(self.specs)
        self.width = max([s.gpus for s in self.specs] + [1])
        self.model_names = tuple(sorted({s.model for s in self.specs}))
        model_index = {m: i for i, m in enumerate(self.model_names)}
        self.model_of: IntArray = np.array([model_index[s.model] for s in self.specs], np.int64)
        self.num_gpus: IntArray = np.array([s.gpus for s in self.specs], np.int64)
        self.cpu_cap: IntArray = np.array([s.cpu_milli for s in self.specs], np.int64)
        self.mem_cap: IntArray = np.array([s.memory_mib for s in self.specs], np.int64)
        self.gpu_exists: BoolArray = np.arange(self.width)[None, :] < self.num_gpus[:, None]
        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        # GPU slots a node lacks stay at 0 free and so never fit a request.
        self.gpu_free: IntArray = np.where(self.gpu_exists, MILLI_PER_GPU, 0).astype(np.int64)
        # Kept with gpu_free, so that feasibility is a few 1-D comparisons.
        self.full_free: IntArray = self.num_gpus.copy()
        self.max_free: IntArray = np.where(self.num_gpus > 0, MILLI_PER_GPU, 0).astype(np.int64)
        self.capacity_milli = int(self.num_gpus.sum()) * MILLI_PER_GPU
        self.used_milli = 0
        self.stamp: IntArray = np.zeros(self.size, np.int64)
        self.clock = 0
        self._model_masks: dict[frozenset[str] | None, BoolArray] = {}

    # -- queries ---------------------------------------------------------------------
    def model_mask(self, models: frozenset[str] | None) -> BoolArray:
        mask = self._model_masks.get(models)
        if mask is None:
            allowed = np.array([models is None or m in models for m in self.model_names], bool)
            mask = allowed[self.model_of] if self.size else np.zeros(0, bool)
            self._model_masks[models] = mask
        return mask

    def feasible(self, demand: Demand) -> BoolArray:
        """Nodes that can take `demand` now."""
        ok = (self.cpu_free >= demand.cpu_milli) & (self.mem_free >= demand.memory_mib)
        if demand.gpus:
            ok &= self.model_mask(demand.models)
            if demand.milli >= MILLI_PER_GPU:
                ok &= self.full_free >= demand.gpus
            else:
                ok &= self.max_free >= demand.milli
        return ok

    def fits_when_empty(self, demand: Demand) -> BoolArray:
        """Nodes that could take `demand` if nothing ran on them."""
        ok = (self.cpu_cap >= demand.cpu_milli) & (self.mem_cap >= demand.memory_mib)
        if demand.gpus:
            ok &= self.model_mask(demand.models) & (self.num_gpus >= demand.gpus)
        return ok

    def can_take(self, node: int, gpus: Sequence[int], demand: Demand) -> bool:
        if not 0 <= node < self.size:
            return False
        if self.cpu_free[node] < demand.cpu_milli or self.mem_free[node] < demand.memory_mib:
            return False
        if len(gpus) != demand.gpus or len(set(gpus)) != len(gpus):
            return False
        if demand.gpus and not demand.accepts(self.specs[node].model):
            return False
        return all(
            0 <= g < self.num_gpus[node] and self.gpu_free[node, g] >= demand.milli for g in gpus
        )

    def changed_since(self, clock: int) -> IntArray:
        """Indices of nodes changed after `clock` (a value of `self.clock`)."""
        return np.flatnonzero(self.stamp > clock)

    def is_empty(self) -> bool:
        return bool(
            self.used_milli == 0
            and (self.cpu_free == self.cpu_cap).all()
            and (self.mem_free == self.mem_cap).all()
            and (self.gpu_free == np.where(self.gpu_exists, MILLI_PER_GPU, 0)).all()
        )

    # -- changes ---------------------------------------------------------------------
    def allocate(self, assignment: Assignment) -> None:
        node, gpus, demand = assignment.node, assignment.gpus, assignment.demand
        if not self.can_take(node, gpus, demand):
            raise OverCommitError(f"node {node} cannot take {demand} on GPUs {gpus}")
        self.cpu_free[node] -= demand.cpu_milli
        self.mem_free[node] -= demand.memory_mib
        for g in gpus:
            self.gpu_free[node, g] -= demand.milli
        self.used_milli += demand.total_milli
        self._touch(node)

    def release(self, assignment: Assignment) -> None:
        node, gpus, demand = assignment.node, assignment.gpus, assignment.demand
        over_cpu = self.cpu_free[node] + demand.cpu_milli > self.cpu_cap[node]
        over_mem = self.mem_free[node] + demand.memory_mib > self.mem_cap[node]
        over_gpu = any(self.gpu_free[node, g] + demand.milli > MILLI_PER_GPU for g in gpus)
        if over_cpu or over_mem or over_gpu:
            raise OverCommitError(f"releasing {demand} from node {node} frees more than it has")
        self.cpu_free[node] += demand.cpu_milli
        self.mem_free[node] += demand.memory_mib
        for g in gpus:
            self.gpu_free[node, g] += demand.milli
        self.used_milli -= demand.total_milli
        self._touch(node)

    def set_free(self, node: int, cpu_milli: int, memory_mib: int, gpu_free: Sequence[int]) -> None:
        """Mirror a node's free resources reported from outside (fgd-eval/1 updates)."""
        row = np.zeros(self.width, np.int64)
        row[: len(gpu_free)] = gpu_free
        self.used_milli += int(self.gpu_free[node].sum() - row.sum())
        self.cpu_free[node], self.mem_free[node] = cpu_milli, memory_mib
        self.gpu_free[node] = row
        self._touch(node)

    def _touch(self, node: int) -> None:
        row = self.gpu_free[node]
        self.full_free[node] = int((row >= MILLI_PER_GPU).sum())
        self.max_free[node] = int(row.max()) if self.width else 0
        self.clock += 1
        self.stamp[node] = self.clock
