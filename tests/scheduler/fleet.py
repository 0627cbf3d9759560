"""Small fleets and requests for the placement-core tests."""

from __future__ import annotations

from gpudock.scheduler.demand import Demand, gpu_share, whole_gpus
from gpudock.scheduler.snapshot import NodeSpec

A100 = "A100-80GB"
H100 = "H100-80GB"
T4 = "T4"


def node(
    name: str,
    gpus: int = 8,
    model: str = A100,
    *,
    cpu: int = 96_000,
    memory: int = 512 * 1024,
    numa: tuple[int | None, ...] = (),
    nvlink: tuple[frozenset[int], ...] = (),
) -> NodeSpec:
    return NodeSpec(name, model, gpus, cpu, memory, numa, nvlink)


def whole(count: int, *models: str, cpu: int = 1000, memory: int = 1024) -> Demand:
    return whole_gpus(count, frozenset(models) or None, cpu_milli=cpu, memory_mib=memory)


def share(fraction: float, *models: str, cpu: int = 1000, memory: int = 1024) -> Demand:
    return gpu_share(fraction, frozenset(models) or None, cpu_milli=cpu, memory_mib=memory)
