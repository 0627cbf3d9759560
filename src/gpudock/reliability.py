"""The fleet's reliability report, defined once: the fleet service computes it
(`services.fleet.reliability`), the API publishes it (`api.health_schemas`) and
the CLI parses it. Only pydantic, so the CLI reads it without the server."""

from __future__ import annotations

from pydantic import BaseModel, Field


class GpuReliability(BaseModel):
    uuid: str
    host: str
    model: str
    state: str
    hours_in_service: float
    failures: int
    mtbf_hours: float | None
    faults: dict[str, int] = Field(default_factory=dict)  # "xid 48" / "ecc_dbe" → count
    migrations: int = 0


class ModelReliability(BaseModel):
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


class ReliabilityReport(BaseModel):
    models: list[ModelReliability]
    gpus: list[GpuReliability]
