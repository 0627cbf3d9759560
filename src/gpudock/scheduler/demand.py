"""What a request asks of one host, in the scheduler's integer units.

The unit of GPU is the milli-GPU: a whole card is `MILLI_PER_GPU`, a share is
any smaller positive amount on one card. CPU is in milli-cores and memory in
MiB, so every comparison in the placement core is exact integer arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MILLI_PER_GPU = 1000
MIB_PER_GB = 1024


@dataclass(frozen=True)
class Demand:
    """A request for `gpus` GPUs of `milli` each on one host, plus CPU and memory.

    Whole GPUs: `milli == MILLI_PER_GPU` and `gpus >= 1`. A share of one GPU:
    `gpus == 1` and `0 < milli < MILLI_PER_GPU`. CPU-only: `gpus == 0`.
    `models` is the set of acceptable GPU models (None: any).
    """

    gpus: int
    milli: int
    cpu_milli: int
    memory_mib: int
    models: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError("a demand cannot be negative")
        if self.gpus == 0 and self.milli != 0:
            raise ValueError("a CPU-only demand asks for no GPU milli")
        if self.gpus > 0 and not 0 < self.milli <= MILLI_PER_GPU:
            raise ValueError(f"milli per GPU must be in 1..{MILLI_PER_GPU}")
        if self.gpus > 1 and self.milli != MILLI_PER_GPU:
            raise ValueError("a share is of one GPU; several GPUs are whole")

    @property
    def is_share(self) -> bool:
        return self.gpus == 1 and self.milli < MILLI_PER_GPU

    @property
    def total_milli(self) -> int:
        return self.gpus * self.milli

    def accepts(self, model: str) -> bool:
        return self.models is None or model in self.models


def whole_gpus(
    count: int, models: frozenset[str] | None, *, cpu_milli: int, memory_mib: int
) -> Demand:
    """`count` whole GPUs of any model in `models` on one host."""
    if count < 1:
        raise ValueError("ask for at least one GPU, or use cpu_only")
    return Demand(count, MILLI_PER_GPU, cpu_milli, memory_mib, models)


def gpu_share(
    fraction: float, models: frozenset[str] | None, *, cpu_milli: int, memory_mib: int
) -> Demand:
    """A share of one GPU: `fraction` of the card, rounded up to the milli-GPU."""
    milli = math.ceil(round(fraction * MILLI_PER_GPU, 6))
    if not 0 < milli < MILLI_PER_GPU:
        raise ValueError("a share is more than 0 and less than a whole GPU")
    return Demand(1, milli, cpu_milli, memory_mib, models)


def share_milli_for_memory(memory_gb: float, card_memory_gb: float) -> int:
    """The share of a card with `card_memory_gb` that holds `memory_gb` of GPU
    memory, rounded up to the milli-GPU so the tenant never gets less."""
    if memory_gb <= 0 or card_memory_gb <= 0:
        raise ValueError("memory sizes must be positive")
    return min(MILLI_PER_GPU, math.ceil(round(memory_gb / card_memory_gb * MILLI_PER_GPU, 6)))


def cpu_only(*, cpu_milli: int, memory_mib: int) -> Demand:
    return Demand(0, 0, cpu_milli, memory_mib)


def cpu_milli_of(cpus: float) -> int:
    return math.ceil(round(cpus * 1000, 6))


def memory_mib_of(memory_gb: float) -> int:
    return math.ceil(round(memory_gb * MIB_PER_GB, 6))
