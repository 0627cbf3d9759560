from __future__ import annotations

import json
from decimal import Decimal
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from gpudock.api.deps import Context, CurrentUser, Language
from gpudock.api.errors import error_responses
from gpudock.api.links import links
from gpudock.api.schemas import (
    AutoStopPublic,
    AutoStopRequest,
    InstanceCreateRequest,
    InstanceEventPublic,
    InstancePublic,
    InstanceQueuePublic,
)
from gpudock.db.models import AutoStopModel, HostLossPolicy
from gpudock.messages import localize
from gpudock.services.context import ServiceContext
from gpudock.services.instances import actions as instances
from gpudock.services.instances import auto_stop, queue
from gpudock.services.instances.actions import InstanceRequest, InstanceView
from gpudock.services.instances.auto_stop import AutoStopPolicy
from gpudock.services.instances.changes import InstanceChanges, wait_until
from gpudock.services.ssh import endpoint as ssh_endpoint

router = APIRouter(prefix="/instances", tags=["instances"])
_ONE = "/instances/{instance_id}"
_NEXT = {
    "show": ("GET", _ONE),
    "events": ("GET", _ONE + "/events"),
    "sessions": ("GET", _ONE + "/sessions"),
    "start": ("POST", _ONE + "/start"),
    "stop": ("POST", _ONE + "/stop"),
    "restart": ("POST", _ONE + "/restart"),
    "auto_stop": ("PUT", _ONE + "/auto-stop"),
    "delete": ("DELETE", _ONE),
}
NEXT = links(200, "instance_id", "id", _NEXT)  # what can be done with the instance returned
NOT_FOUND = error_responses(404)
SHOW = {**NOT_FOUND, **NEXT}
CHANGE = {**error_responses(404, 409), **NEXT}  # stop, restart, delete: the state may forbid it


def _public(
    ctx: ServiceContext,
    v: InstanceView,
    lang: str,
    queue_position: queue.QueuePosition | None = None,
) -> InstancePublic:
    i = v.instance
    return InstancePublic(
        id=i.id,
        name=i.name,
        user_id=i.user_id,
        status=i.status.value,
        status_reason=localize(i.status_reason, lang, i.status_reason_msg),
        desired_state=i.desired_state.value,
        gpu_model=i.gpu_model,
        gpu_count=i.gpu_count,
        gpus=v.gpus,
        host=v.host_name,
        image=i.image,
        cpu=i.cpu,
        memory_gb=i.memory_gb,
        disk_gb=i.disk_gb,
        system_disk_gb=i.system_disk_gb or ctx.settings.system_disk_gb,
        container_id=i.container_id,
        created_at=i.created_at,
        updated_at=i.updated_at,
        ssh_command=ssh_endpoint.ssh_command(ctx.settings, i.id),
        stay_on_host=i.stay_on_host,
        gpu_models=list(i.accepted_models),
        gpu_share=v.share_text,
        gpu_share_milli=i.gpu_share_milli,
        gpu_memory_limit_mb=v.share_memory_mb,
        queue=_queue_public(queue_position, lang) if queue_position else None,
        auto_stop=_auto_stop_public(v.auto_stop) if v.auto_stop else None,
        command=i.command,
        host_labels=json.loads(i.host_labels or "{}"),
        on_host_loss=i.host_loss_policy.value,
    )


def _auto_stop_public(row: AutoStopModel) -> AutoStopPublic:
    return AutoStopPublic(
        idle_after_s=row.idle_after_s,
        idle_below_pct=row.idle_below_pct,
        stop_at=row.stop_at,
        stop_on_exit=row.on_exit,
        idle_warned_at=row.idle_warned_at,
        summary=auto_stop.describe(row),
    )


def _policy(body: AutoStopRequest | None) -> AutoStopPolicy | None:
    if body is None:
        return None
    return AutoStopPolicy(
        idle_after_s=body.idle_after_s,
        idle_below_pct=body.idle_below_pct,
        stop_at=body.stop_at,
        stop_after_s=body.stop_after_s,
        on_exit=body.stop_on_exit,
    )


def _queue_public(position: queue.QueuePosition, lang: str) -> InstanceQueuePublic:
    return InstanceQueuePublic(
        position=position.position,
        waiting=position.waiting,
        reason=localize(position.reason, lang),
        estimate=localize(position.estimate, lang),
    )


def _request_from(body: InstanceCreateRequest) -> InstanceRequest:
    """The body as the service reads it: a share's fraction as the decimal the
    client wrote (0.3, not 0.29999…), the model set as a tuple."""
    fields = body.model_dump()
    share = fields.pop("gpu_share")
    fields["gpu_models"] = tuple(fields["gpu_models"])
    fields["auto_stop"] = _policy(body.auto_stop)
    fields["services"] = tuple(fields["services"].items())
    fields["on_host_loss"] = HostLossPolicy(body.on_host_loss)
    return InstanceRequest(**fields, gpu_share=None if share is None else Decimal(repr(share)))


@router.post(
    "",
    response_model=InstancePublic,
    status_code=201,
    responses={**error_responses(402, 409), **links(201, "instance_id", "id", _NEXT)},
)
def create(
    ctx: Context, user: CurrentUser, lang: Language, body: InstanceCreateRequest
) -> InstancePublic:
    request = _request_from(body)
    return _public(ctx, instances.view(ctx, instances.create_instance(ctx, user, request)), lang)


@router.get("", response_model=list[InstancePublic])
def list_instances(ctx: Context, user: CurrentUser, lang: Language) -> list[InstancePublic]:
    return [
        _public(ctx, v, lang) for v in instances.views(ctx, instances.list_instances(ctx, user))
    ]


@router.get("/{instance_id}", response_model=InstancePublic, responses=SHOW)
def show(ctx: Context, user: CurrentUser, lang: Language, instance_id: str) -> InstancePublic:
    shown = instances.show_view(ctx, user, instance_id)
    return _public(ctx, shown, lang, queue.queue_position(ctx, shown.instance))


@router.get("/{instance_id}/wait", response_model=InstancePublic, responses=SHOW)
async def wait(
    ctx: Context,
    user: CurrentUser,
    lang: Language,
    instance_id: str,
    status: Annotated[
        Literal["running", "stopped", "deleted"], Query(description="What to wait for.")
    ] = "running",
    changed_from: Annotated[
        str | None,
        Query(
            description="Also answer as soon as the status or its reason is no longer this "
            "(`status|reason`, as the last answer gave them): to show progress."
        ),
    ] = None,
    timeout_s: Annotated[
        float,
        Query(ge=0, le=25, description="Longest wait, seconds (within a client's usual 30 s)."),
    ] = 25.0,
) -> InstancePublic:
    """The instance once it is `status`, has failed, is no longer meant to be
    `status`, or (with `changed_from`) its status or reason changed; else as it is
    after `timeout_s`. Answers at the change, not at the next poll."""

    def done(v: InstanceView) -> bool:
        i = v.instance
        seen = f"{i.status.value}|{i.status_reason}"
        return (
            i.status.value in (status, "failed")
            or i.desired_state.value != status
            or (changed_from is not None and seen != changed_from)
        )

    changes = ctx.memo.get(InstanceChanges)
    shown = await wait_until(
        changes, lambda: instances.show_view(ctx, user, instance_id), done, timeout_s
    )
    return _public(ctx, shown, lang)


@router.post(
    "/{instance_id}/start",
    response_model=InstancePublic,
    responses={**error_responses(402, 404, 409), **NEXT},
)
def start(
    ctx: Context,
    user: CurrentUser,
    lang: Language,
    instance_id: str,
    stay: Annotated[
        bool,
        Query(
            description="Wait for a GPU on the instance's own host instead of moving "
            "it (with its data) to another host that has one free."
        ),
    ] = False,
) -> InstancePublic:
    started = instances.start_instance(ctx, user, instance_id, stay=stay)
    return _public(ctx, instances.view(ctx, started), lang)


@router.post("/{instance_id}/stop", response_model=InstancePublic, responses=CHANGE)
def stop(ctx: Context, user: CurrentUser, lang: Language, instance_id: str) -> InstancePublic:
    return _public(ctx, instances.view(ctx, instances.stop_instance(ctx, user, instance_id)), lang)


@router.put(
    "/{instance_id}/auto-stop",
    response_model=InstancePublic,
    responses={**error_responses(404, 409, 422), **NEXT},
)
def change_auto_stop(
    ctx: Context, user: CurrentUser, lang: Language, instance_id: str, body: AutoStopRequest
) -> InstancePublic:
    """Replace the policy: fields left out are off (`{}` removes every auto-stop)."""
    policy = _policy(body) or AutoStopPolicy()
    changed = instances.change_auto_stop(ctx, user, instance_id, policy)
    return _public(ctx, instances.view(ctx, changed), lang)


@router.post("/{instance_id}/restart", response_model=InstancePublic, responses=CHANGE)
def restart(ctx: Context, user: CurrentUser, lang: Language, instance_id: str) -> InstancePublic:
    return _public(
        ctx, instances.view(ctx, instances.restart_instance(ctx, user, instance_id)), lang
    )


@router.delete("/{instance_id}", response_model=InstancePublic, responses=CHANGE)
def delete(ctx: Context, user: CurrentUser, lang: Language, instance_id: str) -> InstancePublic:
    return _public(
        ctx, instances.view(ctx, instances.delete_instance(ctx, user, instance_id)), lang
    )


@router.get("/{instance_id}/events", response_model=list[InstanceEventPublic], responses=NOT_FOUND)
def events(
    ctx: Context, user: CurrentUser, lang: Language, instance_id: str
) -> list[InstanceEventPublic]:
    found = instances.list_events(ctx, user, instance_id)
    return [
        InstanceEventPublic(
            at=e.at,
            from_status=e.from_status,
            to_status=e.to_status,
            message=localize(e.message, lang, e.message_msg),
        )
        for e in found
    ]
