"""API bodies of the samples: one instance's curves and the latest figures of
each running instance (`gpudock instances metrics|top`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class GpuFigurePublic(BaseModel):
    utilisation_percent: float | None
    memory_used_mb: float | None


class SamplePublic(BaseModel):
    at: datetime
    resolution_s: int  # 0: one raw sample; 60 / 3600: a minute's / an hour's average
    cpu_percent: float | None  # 100 = one core busy
    memory_bytes: int
    data_disk_bytes: int | None
    system_disk_bytes: int | None
    disk_read_bps: float | None
    disk_write_bps: float | None
    net_rx_bps: float | None
    net_tx_bps: float | None
    gpus: list[GpuFigurePublic]  # in the container's GPU order


class InstanceMetricsPublic(BaseModel):
    instance_id: str
    name: str
    since: datetime
    samples: list[SamplePublic]


class InstanceTopPublic(BaseModel):
    instance_id: str
    name: str
    gpu_model: str | None
    host: str
    sample: SamplePublic
