from __future__ import annotations

from fastapi import APIRouter

from gpudock.api.deps import AdminUser, Context, CurrentUser
from gpudock.api.schemas import GpuModelPublic, GpuPublic, GpuSharePublic, HostPublic
from gpudock.db.models import GpuDeviceModel, HostModel
from gpudock.services.fleet import inventory

router = APIRouter(tags=["gpus"])


@router.get("/gpus", response_model=list[GpuModelPublic])
def list_gpu_models(ctx: Context, _user: CurrentUser) -> list[GpuModelPublic]:
    summary = inventory.gpu_summary(ctx)
    return [GpuModelPublic.model_validate(s, from_attributes=True) for s in summary]


def _gpu(gpu: GpuDeviceModel) -> GpuPublic:
    return GpuPublic(
        uuid=gpu.id,
        index=gpu.index,
        model=gpu.model,
        memory_mb=gpu.memory_mb,
        pci_bus_id=gpu.pci_bus_id,
        numa_node=gpu.numa_node,
        nvlink_peers=[p for p in gpu.nvlink_peers.split(",") if p],
        state=gpu.state.value,
        state_reason=gpu.state_reason,
        present=gpu.present,
        instance_id=gpu.allocation.instance_id if gpu.allocation else None,
        shares=[GpuSharePublic(instance_id=s.instance_id, milli=s.milli) for s in gpu.shares],
    )


def _host(host: HostModel) -> HostPublic:
    return HostPublic(
        id=host.id,
        name=host.name,
        cpus=host.cpus,
        memory_gb=host.memory_gb,
        driver_version=host.driver_version,
        cuda_version=host.cuda_version,
        simulated=host.simulated,
        present=host.present,
        gpus=[_gpu(g) for g in host.gpus],
    )


@router.get("/hosts", response_model=list[HostPublic])
def list_hosts(ctx: Context, _admin: AdminUser) -> list[HostPublic]:
    return [_host(h) for h in inventory.list_hosts(ctx)]
