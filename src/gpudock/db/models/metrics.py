"""Resource samples of running instances, at three resolutions.

One row is one instance at one moment (raw, every `GPUDOCK_METRICS_INTERVAL_S`)
or the average of a minute or an hour of raw rows (`resolution_s` 60 or 3600,
`at` the bucket's start). The downsampling pass
(`services.metrics.downsampling`) replaces raw rows older than a day by minute
rows, and minute rows older than 30 days by hour rows, so the table's size is
bounded by the number of instances, not by time.

GPU figures sit in the row as a small JSON list, one `[utilisation %, memory
MiB]` pair per GPU in the container's order (the order `nvidia-smi` shows
inside it): a row per GPU would triple the table for the common one-GPU
instance, and nothing queries one GPU across instances.
`gpu_utilisation_max` is the largest of them, kept apart because the idle
stop asks for it alone; `gpu_utilisation_mean` their mean, for the fleet
page's utilisation per model and host.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpudock.db.models.base import Base, UTCDateTime

RAW = 0
MINUTE = 60
HOUR = 3600
RESOLUTIONS = (RAW, MINUTE, HOUR)

# SQLite makes only an INTEGER PRIMARY KEY the rowid (auto-increment).
_ID = BigInteger().with_variant(Integer(), "sqlite")


class InstanceSampleModel(Base):
    __tablename__ = "instance_samples"
    __table_args__ = (
        Index("ix_instance_samples_instance_at", "instance_id", "at"),
        Index("ix_instance_samples_resolution_at", "resolution_s", "at"),
    )

    id: Mapped[int] = mapped_column(_ID, primary_key=True, autoincrement=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"))
    at: Mapped[datetime] = mapped_column(UTCDateTime, comment="sample time, or bucket start")
    resolution_s: Mapped[int] = mapped_column(
        Integer, comment="0: one raw sample; 60 / 3600: the average of a minute / an hour"
    )
    samples: Mapped[int] = mapped_column(Integer, comment="raw samples averaged in this row")
    cpu_percent: Mapped[float | None] = mapped_column(
        Float, nullable=True, comment="100 = one core busy; None: the first reading"
    )
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    data_disk_bytes: Mapped[int | None] = mapped_column(
        BigInteger, nullable=True, comment="used on /root/data; None: not measurable here"
    )
    system_disk_bytes: Mapped[int | None] = mapped_column(
        BigInteger, nullable=True, comment="the container's writable layer"
    )
    disk_read_bps: Mapped[float | None] = mapped_column(Float, nullable=True)
    disk_write_bps: Mapped[float | None] = mapped_column(Float, nullable=True)
    net_rx_bps: Mapped[float | None] = mapped_column(Float, nullable=True)
    net_tx_bps: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_utilisation_max: Mapped[float | None] = mapped_column(
        Float, nullable=True, comment="the busiest GPU's utilisation %; None: no GPU figure"
    )
    gpu_utilisation_mean: Mapped[float | None] = mapped_column(
        Float, nullable=True, comment="the mean over its GPUs' utilisation %; None: no GPU figure"
    )
    gpus: Mapped[str] = mapped_column(
        Text, default="[]", comment="JSON: [[utilisation %|null, memory MiB|null], ...] per GPU"
    )
