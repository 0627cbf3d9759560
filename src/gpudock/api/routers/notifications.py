"""Notifications: the user's list, webhooks (the secret in the create answer
only), the email address, the delivery log and GPU watches. Everything is the
caller's own; another user's ids are 404."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query

from gpudock.api.deps import Context, CurrentUser
from gpudock.api.errors import error_responses
from gpudock.api.notification_schemas import (
    DeliveryPublic,
    EmailPublic,
    EmailSetRequest,
    GpuWatchCreateRequest,
    GpuWatchPublic,
    NotificationPublic,
    WebhookCreateRequest,
    WebhookPublic,
    WebhookWithSecretPublic,
)
from gpudock.db.models import DeliveryState, NotificationEndpointModel, NotificationModel
from gpudock.services.notifications import endpoints, gpu_watches
from gpudock.services.notifications.endpoints import DeliveryView
from gpudock.services.notifications.outbox import KINDS

router = APIRouter(tags=["notifications"])
NOT_FOUND = error_responses(404)
Limit = Annotated[int, Query(ge=1, le=500, description="At most this many, newest first")]


def _notification(row: NotificationModel) -> NotificationPublic:
    return NotificationPublic(
        id=row.id,
        kind=row.kind,
        instance_id=row.instance_id,
        message=row.message,
        data=json.loads(row.data),
        created_at=row.created_at,
    )


def _kinds(row: NotificationEndpointModel) -> list[str]:
    return [k for k in row.kinds.split(",") if k]


def _webhook(row: NotificationEndpointModel) -> WebhookPublic:
    return WebhookPublic(id=row.id, url=row.target, kinds=_kinds(row), created_at=row.created_at)


def _email(row: NotificationEndpointModel) -> EmailPublic:
    return EmailPublic(address=row.target, kinds=_kinds(row), created_at=row.created_at)


def _delivery(view: DeliveryView) -> DeliveryPublic:
    d = view.delivery
    return DeliveryPublic(
        id=d.id,
        notification_id=d.notification_id,
        kind=view.kind,
        message=view.message,
        channel=view.channel,
        target=view.target,
        endpoint_id=d.endpoint_id,
        state=d.state.value,
        attempts=d.attempts,
        last_result=d.last_result,
        last_attempt_at=d.last_attempt_at,
        next_attempt_at=d.next_attempt_at if d.state == DeliveryState.PENDING else None,
        delivered_at=d.delivered_at,
        created_at=d.created_at,
    )


@router.get("/notifications", response_model=list[NotificationPublic])
def list_notifications(
    ctx: Context, user: CurrentUser, limit: Limit = 100
) -> list[NotificationPublic]:
    return [_notification(n) for n in endpoints.list_notifications(ctx, user, limit=limit)]


@router.get("/notifications/kinds", response_model=dict[str, str])
def list_kinds(user: CurrentUser) -> dict[str, str]:
    """Every kind of notification, with what causes it."""
    return dict(KINDS)


@router.get("/notifications/deliveries", response_model=list[DeliveryPublic])
def list_deliveries(ctx: Context, user: CurrentUser, limit: Limit = 100) -> list[DeliveryPublic]:
    """The delivery log of every endpoint of yours (webhooks and email)."""
    return [_delivery(v) for v in endpoints.list_deliveries(ctx, user, limit=limit)]


@router.get("/notifications/email", response_model=EmailPublic, responses=NOT_FOUND)
def show_email(ctx: Context, user: CurrentUser) -> EmailPublic:
    row = endpoints.email_endpoint(ctx, user)
    if row is None:
        raise endpoints.NoEmail()
    return _email(row)


@router.put("/notifications/email", response_model=EmailPublic, responses=error_responses(409))
def set_email(ctx: Context, user: CurrentUser, body: EmailSetRequest) -> EmailPublic:
    """Send notifications to this address too (one per user; it replaces the last)."""
    return _email(endpoints.set_email(ctx, user, body.address, body.kinds))


@router.delete("/notifications/email", response_model=EmailPublic, responses=NOT_FOUND)
def clear_email(ctx: Context, user: CurrentUser) -> EmailPublic:
    """Stop emailing; the answer is the address that was removed."""
    return _email(endpoints.clear_email(ctx, user))


@router.post(
    "/webhooks",
    response_model=WebhookWithSecretPublic,
    status_code=201,
    responses=error_responses(409),
)
def create_webhook(
    ctx: Context, user: CurrentUser, body: WebhookCreateRequest
) -> WebhookWithSecretPublic:
    made = endpoints.create_webhook(ctx, user, body.url, body.kinds)
    return WebhookWithSecretPublic(**_webhook(made.endpoint).model_dump(), secret=made.secret)


@router.get("/webhooks", response_model=list[WebhookPublic])
def list_webhooks(ctx: Context, user: CurrentUser) -> list[WebhookPublic]:
    return [_webhook(w) for w in endpoints.list_webhooks(ctx, user)]


@router.delete("/webhooks/{webhook_id}", response_model=WebhookPublic, responses=NOT_FOUND)
def remove_webhook(ctx: Context, user: CurrentUser, webhook_id: str) -> WebhookPublic:
    """Deliveries still pending to it fail; its log stays."""
    return _webhook(endpoints.remove_webhook(ctx, user, webhook_id))


@router.get(
    "/webhooks/{webhook_id}/deliveries", response_model=list[DeliveryPublic], responses=NOT_FOUND
)
def webhook_deliveries(
    ctx: Context, user: CurrentUser, webhook_id: str, limit: Limit = 100
) -> list[DeliveryPublic]:
    found = endpoints.list_deliveries(ctx, user, endpoint_id=webhook_id, limit=limit)
    return [_delivery(v) for v in found]


@router.post(
    "/gpu-watches",
    response_model=GpuWatchPublic,
    status_code=201,
    responses=error_responses(409),
)
def create_watch(ctx: Context, user: CurrentUser, body: GpuWatchCreateRequest) -> GpuWatchPublic:
    """Be told (once) when this many GPUs of the model are free."""
    watch = gpu_watches.create_watch(ctx, user, body.gpu_model, body.count)
    return GpuWatchPublic.model_validate(watch, from_attributes=True)


@router.get("/gpu-watches", response_model=list[GpuWatchPublic])
def list_watches(ctx: Context, user: CurrentUser) -> list[GpuWatchPublic]:
    found = gpu_watches.list_watches(ctx, user)
    return [GpuWatchPublic.model_validate(w, from_attributes=True) for w in found]


@router.delete("/gpu-watches/{watch_id}", response_model=GpuWatchPublic, responses=NOT_FOUND)
def remove_watch(ctx: Context, user: CurrentUser, watch_id: str) -> GpuWatchPublic:
    watch = gpu_watches.remove_watch(ctx, user, watch_id)
    return GpuWatchPublic.model_validate(watch, from_attributes=True)
