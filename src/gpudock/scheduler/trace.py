"""The Alibaba GPU cluster trace 2023 ("openb") and the evaluation's arrival order.

Parsing takes rows already read (dicts of strings, as `csv.DictReader` gives),
so this module does no I/O. `arrival_sequence` reproduces the reference
evaluator (`shared/data/fgd_eval.py`, after the FGD simulator): pods sorted by
name, shuffled with the seed, then pods drawn with replacement until total GPU
demand reaches `tune` x capacity; and the seeded node ranks its built-in
policies break ties by. The same seed gives the same sequence as there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpudock.scheduler.demand import MILLI_PER_GPU, Demand
from gpudock.scheduler.snapshot import IntArray, NodeSpec

DEFAULT_POD_CPU_MILLI = 100  # Kubernetes counts a pod without a CPU request as 0.1 core


@dataclass(frozen=True)
class TracePod:
    name: str
    demand: Demand
    created: int | None = None  # seconds, when the trace has them
    deleted: int | None = None


def parse_nodes(rows: Iterable[Mapping[str, str]]) -> list[NodeSpec]:
    nodes = []
    for row in rows:
        model = (row.get("model") or "").strip()
        nodes.append(
            NodeSpec(
                name=row["sn"],
                model="" if model.lower() == "nan" else model,
                gpus=int(row["gpu"]),
                cpu_milli=int(row["cpu_milli"]),
                memory_mib=int(row["memory_mib"]),
            )
        )
    return nodes


def parse_pods(rows: Iterable[Mapping[str, str]]) -> list[TracePod]:
    return [
        TracePod(
            row["name"],
            pod_demand(row),
            _int_or_none(row.get("creation_time")),
            _int_or_none(row.get("deletion_time")),
        )
        for row in rows
    ]


def pod_demand(row: Mapping[str, object]) -> Demand:
    """A trace pod (or an fgd-eval/1 pod message) as a demand, read the evaluator's way."""
    gpus, milli = int(str(row["num_gpu"])), int(str(row.get("gpu_milli") or 0))
    cpu = int(str(row["cpu_milli"])) or DEFAULT_POD_CPU_MILLI
    memory = int(str(row["memory_mib"]))
    if gpus <= 0 or milli <= 0:
        return Demand(0, 0, cpu, memory)
    spec = str(row.get("gpu_spec") or "")
    models = frozenset(m for m in spec.split("|") if m) if spec.lower() != "nan" else frozenset()
    milli = MILLI_PER_GPU if gpus > 1 else min(milli, MILLI_PER_GPU)
    return Demand(gpus, milli, cpu, memory, models or None)


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


def arrival_sequence(
    pods: Sequence[TracePod], nodes: Sequence[NodeSpec], tune: float, seed: int
) -> tuple[list[TracePod], IntArray]:
    """The seeded arrival order with workload tuning, and the seeded node ranks."""
    rng = np.random.default_rng(seed)
    base = sorted(pods, key=lambda p: p.name)
    sequence = [base[i] for i in rng.permutation(len(base))]
    total = sum(p.demand.total_milli for p in sequence)
    target = tune * sum(n.gpus for n in nodes) * MILLI_PER_GPU
    if tune > 0 and total < target:
        while True:
            pod = base[int(rng.integers(len(base)))]
            if total + pod.demand.total_milli > target:
                break
            sequence.append(pod)
            total += pod.demand.total_milli
    elif tune > 0 and total > target:
        while total > target and sequence:
            pod = sequence.pop(int(rng.integers(len(sequence))))
            total -= pod.demand.total_milli
    rank = np.empty(len(nodes), np.int64)
    rank[np.argsort(np.array([n.name for n in nodes]), kind="stable")] = rng.permutation(len(nodes))
    return sequence, rank


def typical_workload(
    pods: Sequence[TracePod], coverage: float = 0.95
) -> list[tuple[Demand, float]]:
    """FGD's target workload: the most frequent (CPU, milli, GPUs, models) shapes
    covering `coverage` of the pods, with weights over the chosen ones. Memory
    is left out, as in the simulator."""
    counts: Counter[tuple[int, int, int, tuple[str, ...]]] = Counter()
    for pod in pods:
        d = pod.demand
        counts[(d.cpu_milli, d.milli, d.gpus, tuple(sorted(d.models or ())))] += 1
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], _spec_order(kv[0])), reverse=True)
    need, covered, chosen = coverage * len(pods), 0, []
    for key, count in ordered:
        if covered >= need:
            break
        chosen.append((key, count))
        covered += count
    return [
        (Demand(gpus, milli, cpu, 0, frozenset(models) or None), count / covered)
        for (cpu, milli, gpus, models), count in chosen
    ]


def _spec_order(key: tuple[int, int, int, tuple[str, ...]]) -> tuple[int, int, int, str]:
    # The simulator compares the spec as its "A|B" string.
    cpu, milli, gpus, models = key
    return (cpu, milli, gpus, "|".join(models))
