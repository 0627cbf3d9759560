from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gpudock.api.deps import Context, CurrentUser
from gpudock.api.schemas import InstanceCreateRequest, InstanceEventPublic, InstancePublic
from gpudock.services import instances, ssh_endpoint
from gpudock.services.context import ServiceContext
from gpudock.services.instances import InstanceRequest, InstanceView

router = APIRouter(prefix="/instances", tags=["instances"])
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such instance (or another tenant's)"}
}


def _public(ctx: ServiceContext, v: InstanceView) -> InstancePublic:
    i = v.instance
    return InstancePublic(
        id=i.id,
        name=i.name,
        user_id=i.user_id,
        status=i.status.value,
        status_reason=i.status_reason,
        desired_state=i.desired_state.value,
        gpu_model=i.gpu_model,
        gpu_count=i.gpu_count,
        gpus=v.gpus,
        host=v.host_name,
        image=i.image,
        cpu=i.cpu,
        memory_gb=i.memory_gb,
        disk_gb=i.disk_gb,
        container_id=i.container_id,
        created_at=i.created_at,
        updated_at=i.updated_at,
        ssh_command=ssh_endpoint.ssh_command(ctx.settings, i.id),
    )


@router.post("", response_model=InstancePublic, status_code=201)
def create(ctx: Context, user: CurrentUser, body: InstanceCreateRequest) -> InstancePublic:
    request = InstanceRequest(**body.model_dump())
    return _public(ctx, instances.view(ctx, instances.create_instance(ctx, user, request)))


@router.get("", response_model=list[InstancePublic])
def list_instances(ctx: Context, user: CurrentUser) -> list[InstancePublic]:
    return [_public(ctx, v) for v in instances.views(ctx, instances.list_instances(ctx, user))]


@router.get("/{instance_id}", response_model=InstancePublic, responses=NOT_FOUND)
def show(ctx: Context, user: CurrentUser, instance_id: str) -> InstancePublic:
    return _public(ctx, instances.view(ctx, instances.get_instance(ctx, user, instance_id)))


@router.post("/{instance_id}/start", response_model=InstancePublic, responses=NOT_FOUND)
def start(ctx: Context, user: CurrentUser, instance_id: str) -> InstancePublic:
    return _public(ctx, instances.view(ctx, instances.start_instance(ctx, user, instance_id)))


@router.post("/{instance_id}/stop", response_model=InstancePublic, responses=NOT_FOUND)
def stop(ctx: Context, user: CurrentUser, instance_id: str) -> InstancePublic:
    return _public(ctx, instances.view(ctx, instances.stop_instance(ctx, user, instance_id)))


@router.post("/{instance_id}/restart", response_model=InstancePublic, responses=NOT_FOUND)
def restart(ctx: Context, user: CurrentUser, instance_id: str) -> InstancePublic:
    return _public(ctx, instances.view(ctx, instances.restart_instance(ctx, user, instance_id)))


@router.delete("/{instance_id}", response_model=InstancePublic, responses=NOT_FOUND)
def delete(ctx: Context, user: CurrentUser, instance_id: str) -> InstancePublic:
    return _public(ctx, instances.view(ctx, instances.delete_instance(ctx, user, instance_id)))


@router.get("/{instance_id}/events", response_model=list[InstanceEventPublic], responses=NOT_FOUND)
def events(ctx: Context, user: CurrentUser, instance_id: str) -> list[InstanceEventPublic]:
    return [
        InstanceEventPublic(
            at=e.at, from_status=e.from_status, to_status=e.to_status, message=e.message
        )
        for e in instances.list_events(ctx, user, instance_id)
    ]
