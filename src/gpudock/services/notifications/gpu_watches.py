"""GPU watches: "tell me when N × MODEL are free". A watch fires once, through
the outbox, in the transaction that marks it fired; the delivery thread checks
the watches on each round (a read of the free counts per model)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpudock.db.models import (
    GpuAllocationModel,
    GpuDeviceModel,
    GpuShareModel,
    GpuState,
    GpuWatchModel,
    HostModel,
    UserModel,
)
from gpudock.errors import Conflict, InvalidRequest, NotFound
from gpudock.services.context import ServiceContext
from gpudock.services.notifications.outbox import notify

MAX_WATCHES = 20
W = GpuWatchModel


def free_by_model(session: Session) -> dict[str, int]:
    """Whole GPUs free now, per model: healthy, present, on a present host,
    neither allocated nor shared."""
    rows = session.execute(
        select(GpuDeviceModel.model, func.count())
        .join(HostModel, HostModel.id == GpuDeviceModel.host_id)
        .where(
            GpuDeviceModel.state == GpuState.HEALTHY,
            GpuDeviceModel.present.is_(True),
            HostModel.present.is_(True),
            ~GpuDeviceModel.id.in_(select(GpuAllocationModel.gpu_id)),
            ~GpuDeviceModel.id.in_(select(GpuShareModel.gpu_id)),
        )
        .group_by(GpuDeviceModel.model)
    ).all()
    return {model: count for model, count in rows}


def create_watch(ctx: ServiceContext, user: UserModel, gpu_model: str, count: int) -> W:
    if not 1 <= count <= 64:
        raise InvalidRequest("count: between 1 and 64 GPUs", field="count")
    with ctx.sessions.begin() as session:
        known = session.scalar(
            select(func.count())
            .select_from(GpuDeviceModel)
            .where(GpuDeviceModel.model == gpu_model)
        )
        if not known:
            raise InvalidRequest(
                f"no GPU model {gpu_model!r} in this fleet: `gpudock gpus` lists them",
                field="gpu_model",
            )
        live = session.scalar(
            select(func.count()).select_from(W).where(W.user_id == user.id, W.fired_at.is_(None))
        )
        if (live or 0) >= MAX_WATCHES:
            raise Conflict(f"you have {live} GPU watches waiting, the most allowed")
        watch = W(
            id="gw-" + secrets.token_hex(6),
            user_id=user.id,
            gpu_model=gpu_model,
            count=count,
            created_at=ctx.clock(),
        )
        session.add(watch)
    return watch


def list_watches(ctx: ServiceContext, user: UserModel) -> list[W]:
    with ctx.reader() as session:
        return list(
            session.scalars(select(W).where(W.user_id == user.id).order_by(W.created_at.desc()))
        )


def remove_watch(ctx: ServiceContext, user: UserModel, watch_id: str) -> W:
    with ctx.sessions.begin() as session:
        watch = session.scalars(
            select(W).where(W.id == watch_id, W.user_id == user.id).with_for_update()
        ).first()
        if watch is None:
            raise NotFound(
                f"no GPU watch {watch_id!r}: `gpudock notifications watches` lists yours"
            )
        session.delete(watch)
    return watch


def fire_watches(ctx: ServiceContext) -> list[str]:
    """Fire every waiting watch whose model has enough free GPUs now. A read
    first: the write transaction (and its lock) only when one can fire."""
    with ctx.reader() as session:
        if not _ready(session, session.scalars(select(W).where(W.fired_at.is_(None))).all()):
            return []
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        waiting = session.scalars(
            select(W).where(W.fired_at.is_(None)).order_by(W.created_at).with_for_update()
        ).all()
        free = free_by_model(session)
        ready = _ready(session, waiting, free)
        for watch in ready:
            watch.fired_at = now
            available = free[watch.gpu_model]
            notify(
                session,
                watch.user_id,
                "gpu.available",
                f"{available} × {watch.gpu_model} free now (you asked for {watch.count}); "
                "the first to create takes them",
                now,
                data={"gpu_model": watch.gpu_model, "free": available, "wanted": watch.count},
            )
        return [watch.id for watch in ready]


def _ready(session: Session, waiting: Sequence[W], free: dict[str, int] | None = None) -> list[W]:
    if not waiting:
        return []
    free = free_by_model(session) if free is None else free
    return [w for w in waiting if free.get(w.gpu_model, 0) >= w.count]
