"""API bodies of notifications: the list, webhooks, the email address, the
delivery log and GPU watches."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class NotificationPublic(BaseModel):
    id: str
    kind: str = Field(examples=["instance.stopped"])
    instance_id: str | None
    message: str
    data: dict[str, Any] = Field(description="Details, as a webhook receives them")
    created_at: datetime


class KindsField(BaseModel):
    kinds: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Only these kinds (GET /notifications/kinds lists them); empty: all",
    )


class WebhookCreateRequest(KindsField):
    model_config = ConfigDict(extra="forbid", strict=True)
    url: str = Field(min_length=1, max_length=2000, examples=["https://example.com/hooks/gpu"])


class WebhookPublic(BaseModel):
    id: str
    url: str
    kinds: list[str]
    created_at: datetime


class WebhookWithSecretPublic(WebhookPublic):
    secret: str = Field(
        description="Shown once: the HMAC-SHA256 key of X-Gpudock-Signature "
        "(docs/notifications.md shows how to check it)"
    )


class EmailSetRequest(KindsField):
    model_config = ConfigDict(extra="forbid", strict=True)
    address: str = Field(min_length=3, max_length=320, examples=["me@example.com"])


class EmailPublic(BaseModel):
    address: str
    kinds: list[str]
    created_at: datetime


class DeliveryPublic(BaseModel):
    id: str = Field(description="The stable delivery id (X-Gpudock-Delivery)")
    notification_id: str
    kind: str
    message: str
    channel: str = Field(description="webhook or email")
    target: str = Field(description="The webhook URL or the email address")
    endpoint_id: str
    state: str = Field(description="pending, delivered or failed")
    attempts: int
    last_result: str = Field(examples=["HTTP 500"])
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None = Field(description="While pending: the next try")
    delivered_at: datetime | None
    created_at: datetime


class GpuWatchCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    gpu_model: str = Field(min_length=1, max_length=64, examples=["A100-80GB"])
    count: int = Field(default=1, ge=1, le=64)


class GpuWatchPublic(BaseModel):
    id: str
    gpu_model: str
    count: int
    created_at: datetime
    fired_at: datetime | None = Field(description="When it fired (once); null: still waiting")
