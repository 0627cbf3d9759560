"""The `db` engine of bench/metering.py: the same day through the services.

Instances are rows; their status goes through `switch_instance_status()` (whose
hook opens and closes intervals at the given runtime time) and the charging
pass posts, exactly as in the server; only the clock is simulated. A crash
mid-pass is a pass that stops after a random subset of users (each user's
transaction is atomic), followed by a full pass.
"""

from __future__ import annotations

import logging
import random
import time
from datetime import datetime
from pathlib import Path

from sqlalchemy import select

from bench.metering_day import (
    HEALTH_CHECK_LAG_S,
    PERIOD_S,
    SERVER_CRASHES_PER_DAY,
    T0,
    Booked,
    Counters,
    Fleet,
    day_events,
    moment,
)
from gpudock.db.models import (
    BillingPostingModel,
    BillingPriceModel,
    DesiredState,
    InstanceModel,
    InstanceStatus,
    UserModel,
)
from gpudock.platform import open_platform
from gpudock.reconcile import charging
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.billing import postings as ledger
from gpudock.services.billing.balances import topup
from gpudock.services.context import ServiceContext
from gpudock.services.instances.status import switch_instance_status
from gpudock.settings import Settings

S = InstanceStatus
DB_TICK_S = PERIOD_S  # one pass per charging period: what the server needs at the least


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def run_db(
    fleet: Fleet, day_ms: int, seed: int, data_dir: Path, database_url: str | None
) -> tuple[list[Booked], bool, Counters]:
    logging.getLogger("gpudock").setLevel(logging.WARNING)
    clock = _Clock()
    settings = Settings(
        data_dir=data_dir,
        simulate="1x8xA100-80GB",
        runtime="fake",
        image_pull="never",
        database_url=database_url,
        billing_charge_period_s=PERIOD_S,
        ssh_enabled=False,
    )
    platform = open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)
    try:
        _seed_rows(platform.ctx, fleet)
        began = time.perf_counter()
        counters = _simulate(platform.ctx, fleet, day_ms, seed, clock)
        counters.wall_s = time.perf_counter() - began
        with platform.ctx.sessions() as session:
            balanced = ledger.verify_balances(session) == {}
            rows = session.execute(
                select(
                    BillingPostingModel.key,
                    BillingPostingModel.instance_id,
                    BillingPostingModel.kind,
                    BillingPostingModel.seconds,
                    BillingPostingModel.amount_micro,
                ).where(BillingPostingModel.kind != "topup")
            ).all()
        booked = [Booked(k, i, kind == "refund", s, a) for k, i, kind, s, a in rows]
        return booked, balanced, counters
    finally:
        platform.close()


def _seed_rows(ctx: ServiceContext, fleet: Fleet) -> None:
    admin = next(u for u in users.list_users(ctx) if u.is_admin)
    with ctx.sessions.begin() as session:
        for user_id in sorted(set(fleet.owner.values())):
            session.add(UserModel(id=user_id, name=user_id, is_admin=False, created_at=T0))
        for unit in sorted({unit for unit, _count in fleet.price.values()}):
            model = f"M{unit}"  # one made-up GPU model per price
            session.add(
                BillingPriceModel(
                    key=f"gpu:{model}",
                    kind="gpu",
                    gpu_model=model,
                    amount_micro=unit,
                    updated_at=T0,
                )
            )
        session.flush()
        for instance, (unit, count) in fleet.price.items():
            session.add(_instance_row(instance, fleet.owner[instance], f"M{unit}", count))
    for user_id in sorted(set(fleet.owner.values())):
        topup(ctx, admin, user_id, 10**14, None)  # enough that protection never steps in


def _instance_row(instance_id: str, user_id: str, model: str, count: int) -> InstanceModel:
    return InstanceModel(
        id=instance_id,
        name=instance_id,
        user_id=user_id,
        gpu_model=model,
        gpu_count=count,
        image="gpudock/base:bookworm",
        system_image="gpudock/base:bookworm",
        env="{}",
        cpu=1.0,
        memory_gb=1,
        disk_gb=50,
        status=S.STOPPED,
        status_reason="",
        desired_state=DesiredState.STOPPED,
        placed=False,
        container_id=None,  # no disk: no storage intervals in this benchmark
        created_at=T0,
        updated_at=T0,
        queued_at=T0,
    )


def _switch(
    ctx: ServiceContext, instance_id: str, path: list[InstanceStatus], at: datetime
) -> None:
    with ctx.sessions.begin() as session:
        row = session.get(InstanceModel, instance_id, with_for_update=True)
        assert row is not None
        for status in path:
            switch_instance_status(session, row, status, status.value, at)


def _simulate(ctx: ServiceContext, fleet: Fleet, day_ms: int, seed: int, clock: _Clock) -> Counters:
    rng = random.Random(seed + 2)
    events = day_events(fleet, day_ms)
    pending_deaths: dict[str, int] = {}
    counters = Counters()
    e = 0
    for tick_ms in [*range(0, day_ms, DB_TICK_S * 1000), day_ms]:  # the last tick at the end
        while e < len(events) and events[e][0] <= tick_ms:
            at_ms, _order, kind, instance = events[e]
            e += 1
            if kind == "start":
                if instance in pending_deaths:  # noticed before the restart, as in the server
                    _switch(ctx, instance, [S.CREATING], moment(pending_deaths.pop(instance)))
                with ctx.sessions() as session:
                    status = session.scalar(
                        select(InstanceModel.status).where(InstanceModel.id == instance)
                    )
                path = [S.RUNNING] if status == S.CREATING else [S.STARTING, S.RUNNING]
                _switch(ctx, instance, path, moment(at_ms))
            elif kind == "stop":
                _switch(ctx, instance, [S.STOPPING, S.STOPPED], moment(at_ms))
            else:
                pending_deaths[instance] = at_ms
        for instance, died_ms in list(pending_deaths.items()):
            if tick_ms - died_ms >= HEALTH_CHECK_LAG_S * 1000:
                _switch(ctx, instance, [S.CREATING], moment(died_ms))  # the health check's path
                del pending_deaths[instance]
        clock.now = moment(tick_ms)
        if rng.random() < SERVER_CRASHES_PER_DAY * DB_TICK_S / 86_400:
            counters.crashes += 1
            _partial_pass(ctx, rng)
        pass_began = time.perf_counter()
        charging.charge_pass(ctx)
        counters.pass_s += time.perf_counter() - pass_began
        counters.passes += 1
        # The same pass delivered again (a second server, a retried tick): nothing.
        assert charging.charge_pass(ctx).postings == 0, "a duplicate pass charged"
        counters.late += 1
    for instance, died_ms in pending_deaths.items():
        _switch(ctx, instance, [S.CREATING], moment(died_ms))
    with ctx.sessions() as session:
        running = list(
            session.scalars(select(InstanceModel.id).where(InstanceModel.status == S.RUNNING))
        )
    for instance in running:
        _switch(ctx, instance, [S.STOPPING, S.STOPPED], moment(day_ms))
    return counters


def _partial_pass(ctx: ServiceContext, rng: random.Random) -> None:
    """The pass a SIGKILL interrupts: some users' transactions committed, then nothing."""
    with ctx.sessions() as session:
        user_ids = sorted(
            set(session.scalars(select(UserModel.id).where(UserModel.is_admin.is_(False))))
        )
    for user_id in rng.sample(user_ids, rng.randrange(len(user_ids) + 1)):
        with ctx.sessions.begin() as session:
            charging._charge(ctx, session, [user_id], ctx.clock(), charging.PassReport())
