"""One sample as the services see it, and how it is written to and read from
its row (`db.models.metrics.InstanceSampleModel`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from sqlalchemy import Table, insert
from sqlalchemy.orm import Session

from gpudock.db.models.metrics import RAW, InstanceSampleModel

SAMPLES = cast(Table, InstanceSampleModel.__table__)  # declarative maps it to a Table


@dataclass(frozen=True)
class GpuFigure:
    """One GPU of an instance at one moment; None where it could not be read."""

    utilisation_percent: float | None
    memory_used_mb: float | None


@dataclass(frozen=True)
class Sample:
    """One instance at one moment (raw), or the average over a bucket."""

    instance_id: str
    at: datetime
    cpu_percent: float | None
    memory_bytes: int
    data_disk_bytes: int | None = None
    system_disk_bytes: int | None = None
    disk_read_bps: float | None = None
    disk_write_bps: float | None = None
    net_rx_bps: float | None = None
    net_tx_bps: float | None = None
    gpus: tuple[GpuFigure, ...] = field(default_factory=tuple)
    resolution_s: int = RAW
    samples: int = 1

    @property
    def gpu_utilisation_max(self) -> float | None:
        known = [g.utilisation_percent for g in self.gpus if g.utilisation_percent is not None]
        return max(known) if known else None

    @property
    def gpu_utilisation_mean(self) -> float | None:
        known = [g.utilisation_percent for g in self.gpus if g.utilisation_percent is not None]
        return sum(known) / len(known) if known else None


def encode_gpus(gpus: tuple[GpuFigure, ...]) -> str:
    return json.dumps(
        [[g.utilisation_percent, g.memory_used_mb] for g in gpus], separators=(",", ":")
    )


def decode_gpus(text: str) -> tuple[GpuFigure, ...]:
    return tuple(GpuFigure(util, memory) for util, memory in json.loads(text or "[]"))


def values_of(sample: Sample) -> dict[str, object]:
    """The sample's row as column values (written by a bulk INSERT)."""
    return {
        "instance_id": sample.instance_id,
        "at": sample.at,
        "resolution_s": sample.resolution_s,
        "samples": sample.samples,
        "cpu_percent": sample.cpu_percent,
        "memory_bytes": sample.memory_bytes,
        "data_disk_bytes": sample.data_disk_bytes,
        "system_disk_bytes": sample.system_disk_bytes,
        "disk_read_bps": sample.disk_read_bps,
        "disk_write_bps": sample.disk_write_bps,
        "net_rx_bps": sample.net_rx_bps,
        "net_tx_bps": sample.net_tx_bps,
        "gpu_utilisation_max": sample.gpu_utilisation_max,
        "gpu_utilisation_mean": sample.gpu_utilisation_mean,
        "gpus": encode_gpus(sample.gpus),
    }


def sample_of(row: InstanceSampleModel) -> Sample:
    return Sample(
        instance_id=row.instance_id,
        at=row.at,
        cpu_percent=row.cpu_percent,
        memory_bytes=row.memory_bytes,
        data_disk_bytes=row.data_disk_bytes,
        system_disk_bytes=row.system_disk_bytes,
        disk_read_bps=row.disk_read_bps,
        disk_write_bps=row.disk_write_bps,
        net_rx_bps=row.net_rx_bps,
        net_tx_bps=row.net_tx_bps,
        gpus=decode_gpus(row.gpus),
        resolution_s=row.resolution_s,
        samples=row.samples,
    )


def record_samples(session: Session, samples: list[Sample]) -> None:
    """Insert the samples in the caller's transaction (it commits). One
    executemany of plain values: a round writes a row per running instance,
    and ORM objects for them cost the sampler most of its time."""
    if samples:
        # The table, not the class: the ORM's bulk path builds its own row per sample.
        session.execute(insert(SAMPLES), [values_of(s) for s in samples])
