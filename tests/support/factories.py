"""Test data, made through the same services the API uses (and, for tests of
what the reconciler reads, instance rows written straight to the database)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpudock.db.models import DesiredState, InstanceModel, InstanceStatus
from gpudock.platform import Platform
from gpudock.services.accounts import users


@dataclass(frozen=True)
class Tenant:
    name: str
    token: str
    headers: dict[str, str]


def make_tenant(platform: Platform, name: str, *, admin: bool = False) -> Tenant:
    created = users.create_user(platform.ctx, name, is_admin=admin)
    return Tenant(name, created.token, {"Authorization": f"Bearer {created.token}"})


def instance_row(
    instance_id: str,
    name: str,
    user_id: str,
    at: datetime,
    *,
    status: InstanceStatus | None = None,
    desired_state: DesiredState = DesiredState.RUNNING,
    placed: bool = False,
) -> InstanceModel:
    """A CPU-only instance row in any state, as the services would have left it
    (without a status: a row not yet through `switch_instance_status`)."""
    row = InstanceModel(
        id=instance_id,
        name=name,
        user_id=user_id,
        gpu_model=None,
        gpu_count=0,
        image="gpudock/base:bookworm",
        system_image="gpudock/base:bookworm",
        cpu=1.0,
        memory_gb=1,
        disk_gb=1,
        env="{}",
        desired_state=desired_state,
        placed=placed,
        created_at=at,
        updated_at=at,
        queued_at=at,
    )
    if status is not None:
        row.status = status
    return row
