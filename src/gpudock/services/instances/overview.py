"""Read-side queries for the console: pages of instances, counts, GPU tenants.

Bounded by design, so that a page costs the same with 10 or 10,000
instances in the database: lists are paged in SQL and summaries are
aggregates, never "load everything and count in Python". Visibility is the
rule of `services.instances`: an admin sees every instance, a user their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, select

from gpudock.db.models import (
    GpuAllocationModel,
    GpuShareModel,
    InstanceModel,
    InstanceStatus,
    UserModel,
)
from gpudock.services.context import ServiceContext
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceView

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200


@dataclass(frozen=True)
class InstancePage:
    items: list[InstanceView]
    owners: dict[str, str]  # user id → name, for the owners on this page
    total: int
    page: int
    pages: int


def _filters(user: UserModel, *, own_only: bool) -> list[ColumnElement[bool]]:
    live = InstanceModel.status != InstanceStatus.DELETED
    if user.is_admin and not own_only:
        return [live]
    return [live, InstanceModel.user_id == user.id]


def instance_page(
    ctx: ServiceContext, user: UserModel, page: int = 1, size: int = PAGE_SIZE
) -> InstancePage:
    """One page of the live instances the user may see, newest first."""
    size = max(1, min(size, MAX_PAGE_SIZE))
    where = _filters(user, own_only=False)
    with ctx.sessions() as session:
        total = session.scalar(select(func.count()).select_from(InstanceModel).where(*where)) or 0
        pages = max(1, -(-total // size))
        page = max(1, min(page, pages))
        rows = list(
            session.scalars(
                select(InstanceModel)
                .where(*where)
                .order_by(InstanceModel.created_at.desc(), InstanceModel.id)
                .offset((page - 1) * size)
                .limit(size)
            )
        )
        owner_ids = {r.user_id for r in rows}
        owners = dict(
            session.execute(
                select(UserModel.id, UserModel.name).where(UserModel.id.in_(owner_ids))
            ).all()
        )
    return InstancePage(instances.views(ctx, rows), owners, total, page, pages)


@dataclass(frozen=True)
class Overview:
    by_status: dict[str, int]
    running: list[InstanceView]  # the newest running ones, at most `limit`
    gpus_in_use: int

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


def own_overview(ctx: ServiceContext, user: UserModel, limit: int = PAGE_SIZE) -> Overview:
    """The user's own live instances: counts per status and the running ones."""
    where = _filters(user, own_only=True)
    running = InstanceModel.status == InstanceStatus.RUNNING
    with ctx.sessions() as session:
        counts = session.execute(
            select(InstanceModel.status, func.count()).where(*where).group_by(InstanceModel.status)
        ).all()
        gpus = session.scalar(
            select(func.coalesce(func.sum(InstanceModel.gpu_count), 0)).where(*where, running)
        )
        rows = list(
            session.scalars(
                select(InstanceModel)
                .where(*where, running)
                .order_by(InstanceModel.created_at.desc())
                .limit(limit)
            )
        )
    by_status = {str(status.value): int(n) for status, n in counts}
    return Overview(by_status, instances.views(ctx, rows), int(gpus or 0))


def gpu_tenants(ctx: ServiceContext) -> dict[str, tuple[str, str]]:
    """For each instance holding GPUs: its name and its owner's name (operators)."""
    with ctx.sessions() as session:
        rows = session.execute(
            select(InstanceModel.id, InstanceModel.name, UserModel.name)
            .join(UserModel, UserModel.id == InstanceModel.user_id)
            .where(
                InstanceModel.id.in_(
                    select(GpuAllocationModel.instance_id).union(select(GpuShareModel.instance_id))
                ),
            )
        ).all()
    return {instance_id: (name, owner) for instance_id, name, owner in rows}
