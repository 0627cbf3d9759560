"""API bodies for GPU health: faults, GPU states and the fleet's reliability.

Faults are filled from the fleet service's `FaultView` with
`model_validate(..., from_attributes=True)`: the service decides the values,
these classes fix the public shape. The reliability report's shape is defined
once, in `gpudock.reliability`, and published as it is.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from gpudock.reliability import GpuReliability, ModelReliability, ReliabilityReport


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


# The reliability report is published in the shape the fleet service computes it.
GpuReliabilityPublic = GpuReliability
ModelReliabilityPublic = ModelReliability
ReliabilityPublic = ReliabilityReport
