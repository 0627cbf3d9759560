from __future__ import annotations

from fastapi import APIRouter

from gpudock.api.deps import AdminUser, Context, CurrentUser
from gpudock.api.schemas import GpuModelPublic, GpuPublic, HostPublic
from gpudock.services.fleet import inventory

router = APIRouter(tags=["gpus"])


@router.get("/gpus", response_model=list[GpuModelPublic])
def list_gpu_models(ctx: Context, _user: CurrentUser) -> list[GpuModelPublic]:
    return [
        GpuModelPublic(
            model=s.model,
            memory_mb=s.memory_mb,
            total=s.total,
            free=s.free,
            hosts=s.hosts,
            max_per_host=s.max_per_host,
            price_per_hour=s.price_per_hour,
        )
        for s in inventory.gpu_summary(ctx)
    ]


@router.get("/hosts", response_model=list[HostPublic])
def list_hosts(ctx: Context, _admin: AdminUser) -> list[HostPublic]:
    return [
        HostPublic(
            id=h.id,
            name=h.name,
            cpus=h.cpus,
            memory_gb=h.memory_gb,
            driver_version=h.driver_version,
            cuda_version=h.cuda_version,
            simulated=h.simulated,
            present=h.present,
            gpus=[
                GpuPublic(
                    uuid=g.id,
                    index=g.index,
                    model=g.model,
                    memory_mb=g.memory_mb,
                    pci_bus_id=g.pci_bus_id,
                    numa_node=g.numa_node,
                    nvlink_peers=[p for p in g.nvlink_peers.split(",") if p],
                    state=g.state.value,
                    state_reason=g.state_reason,
                    present=g.present,
                    instance_id=g.allocation.instance_id if g.allocation else None,
                )
                for g in h.gpus
            ],
        )
        for h in inventory.list_hosts(ctx)
    ]
