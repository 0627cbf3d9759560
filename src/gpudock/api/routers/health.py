"""GPU health for operators: faults (and injecting them on simulated fleets),
repair, drain, migrations and reliability statistics."""

from __future__ import annotations

from fastapi import APIRouter

from gpudock.api.deps import AdminUser, Context
from gpudock.api.errors import error_responses
from gpudock.api.health_schemas import (
    FaultPublic,
    FaultRequest,
    GpuStatePublic,
    ReliabilityPublic,
)
from gpudock.db.models import GpuDeviceModel
from gpudock.services.fleet import gpu_health as health
from gpudock.services.fleet import reliability

router = APIRouter(prefix="/admin", tags=["health"])


def _state(gpu: GpuDeviceModel) -> GpuStatePublic:
    return GpuStatePublic(uuid=gpu.id, state=gpu.state.value, state_reason=gpu.state_reason)


@router.post(
    "/gpus/{gpu_uuid}/faults",
    response_model=FaultPublic,
    status_code=201,
    responses=error_responses(404, 409),
)
def inject_fault(ctx: Context, admin: AdminUser, gpu_uuid: str, body: FaultRequest) -> FaultPublic:
    """Simulated fleets only: the GPU reports this Xid as NVML would."""
    fault = health.inject_fault(ctx, admin, gpu_uuid, body.xid, body.message)
    return FaultPublic.model_validate(fault, from_attributes=True)


@router.post(
    "/gpus/{gpu_uuid}/repair", response_model=GpuStatePublic, responses=error_responses(404, 409)
)
def repair(ctx: Context, admin: AdminUser, gpu_uuid: str) -> GpuStatePublic:
    return _state(health.repair_gpu(ctx, admin, gpu_uuid))


@router.post(
    "/gpus/{gpu_uuid}/drain", response_model=GpuStatePublic, responses=error_responses(404, 409)
)
def drain(ctx: Context, admin: AdminUser, gpu_uuid: str) -> GpuStatePublic:
    return _state(health.drain_gpu(ctx, admin, gpu_uuid))


@router.get("/faults", response_model=list[FaultPublic])
def list_faults(ctx: Context, admin: AdminUser) -> list[FaultPublic]:
    faults = health.list_faults(ctx, admin)
    return [FaultPublic.model_validate(f, from_attributes=True) for f in faults]


@router.get("/reliability", response_model=ReliabilityPublic)
def get_reliability(ctx: Context, admin: AdminUser) -> ReliabilityPublic:
    return ReliabilityPublic.model_validate(reliability.report(ctx, admin), from_attributes=True)
