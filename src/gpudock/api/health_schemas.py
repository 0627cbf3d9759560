"""API bodies for GPU health: faults, GPU states and the fleet's reliability.

The response models are filled from the fleet service's own dataclasses
(`FaultView`, `ReliabilityReport`) with `model_validate(..., from_attributes=True)`:
the service decides the values, these classes only fix the public shape.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class FaultRequest(BaseModel):
    xid: int = Field(ge=1, le=65535, description="The NVIDIA Xid to report, e.g. 48 or 79.")
    message: str = Field(default="", max_length=500)


class FaultPublic(BaseModel):
    id: int
    gpu_uuid: str
    host_id: str
    kind: str
    xid: int | None
    action: str = Field(description="notify, migrate, migrate_deferred, drain_host, host_lost")
    source: str
    message: str
    at: datetime
    repaired_at: datetime | None
    gpu_state: str


class GpuStatePublic(BaseModel):
    uuid: str
    state: str
    state_reason: str


class GpuReliabilityPublic(BaseModel):
    uuid: str
    host: str
    model: str
    state: str
    hours_in_service: float
    failures: int
    mtbf_hours: float | None
    faults: dict[str, int]
    migrations: int


class ModelReliabilityPublic(BaseModel):
    model: str
    gpus: int
    hours_in_service: float
    failures: int
    mtbf_hours: float | None
    reference_mtbf_hours: float | None
    faults: dict[str, int]
    migrations: int
    interruption_p50_s: float | None
    interruption_max_s: float | None


class ReliabilityPublic(BaseModel):
    models: list[ModelReliabilityPublic]
    gpus: list[GpuReliabilityPublic]
