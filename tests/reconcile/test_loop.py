"""The reconciler's two threads: placement never waits behind a charging pass."""

from __future__ import annotations

import threading
import time

import pytest

from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.reconcile import charging
from gpudock.services.accounts import users
from gpudock.services.context import ServiceContext
from gpudock.services.instances.actions import InstanceRequest, create_instance
from tests.support.platforms import PlatformFactory

DEADLINE_S = 20.0


def _status(ctx: ServiceContext, instance_id: str) -> InstanceStatus:
    with ctx.sessions() as session:
        row = session.get(InstanceModel, instance_id)
        assert row is not None
        return row.status


def test_placement_runs_while_a_charging_pass_is_stuck(
    platform_factory: PlatformFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    charging_threads: list[str] = []

    def stuck_pass(ctx: ServiceContext) -> charging.PassReport:
        charging_threads.append(threading.current_thread().name)
        entered.set()
        assert release.wait(DEADLINE_S), "the test never let the charging pass finish"
        return charging.PassReport()

    monkeypatch.setattr(charging, "charge_pass", stuck_pass)
    platform = platform_factory(reconcile_interval_s=0.05)
    user = users.create_user(platform.ctx, "erin").user
    platform.reconciler.start()
    try:
        assert entered.wait(DEADLINE_S), "the charging pass never ran"
        made = create_instance(
            platform.ctx, user, InstanceRequest(gpu_model="A100-80GB", gpu_count=1)
        )
        deadline = time.monotonic() + DEADLINE_S
        while _status(platform.ctx, made.id) != InstanceStatus.RUNNING:
            assert time.monotonic() < deadline, "placement waited behind the charging pass"
            threading.Event().wait(0.02)
        assert not release.is_set()  # still inside the same charging pass
    finally:
        release.set()
        platform.reconciler.stop()
    assert charging_threads[0] == "gpudock-charging"
