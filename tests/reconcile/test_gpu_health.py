"""Health sources other than fault injection (issue 6): NVML events through the
real `NvmlGpuSource` over the faithful pynvml fake, and the runtime going away."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from gpudock.db.models import GpuDeviceModel, GpuFaultModel, GpuState, InstanceStatus
from gpudock.errors import RuntimeUnavailable
from gpudock.gpu.nvml import NvmlGpuSource
from gpudock.platform import Platform, open_platform
from gpudock.reconcile import gpu_health as health
from gpudock.runtime.base import EngineInfo
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from gpudock.settings import Settings
from tests.gpu.fake_pynvml import FakeNvml, a100_8x_nvlink


class FlakyRuntime(FakeRuntime):
    """The fake runtime, with an engine that can be switched off."""

    down: bool = False

    def engine_info(self) -> EngineInfo:
        if self.down:
            raise RuntimeUnavailable("the Docker Engine is unreachable (test)")
        return super().engine_info()


def _platform(
    tmp_path: Path, host_lost_after_s: float = 60.0
) -> tuple[Platform, tuple[FakeNvml, FlakyRuntime]]:
    nvml = a100_8x_nvlink()
    runtime = FlakyRuntime()
    settings = Settings(
        data_dir=tmp_path,
        runtime="fake",
        image_pull="never",
        host_lost_after_s=host_lost_after_s,
    )
    platform = open_platform(
        settings, runtime=runtime, gpu_source=NvmlGpuSource(nvml, host_name="gpu-host")
    )
    return platform, (nvml, runtime)


def test_an_xid_event_from_nvml_moves_the_tenant(tmp_path: Path) -> None:
    platform, (nvml, _runtime) = _platform(tmp_path)
    try:
        ctx = platform.ctx
        user = users.create_user(ctx, "alice").user
        created = instances.create_instance(
            ctx, user, InstanceRequest(gpu_model="A100-80GB", gpu_count=1)
        )
        platform.reconciler.drain()
        [before] = instances.view(ctx, instances.get_instance(ctx, user, created.id)).gpus
        index = [d.uuid for d in nvml.devices].index(before)

        nvml.inject_xid(index, 119)
        health.health_pass(ctx, health.HealthWatch())
        platform.reconciler.drain()

        moved = instances.view(ctx, instances.get_instance(ctx, user, created.id))
        assert moved.instance.status == InstanceStatus.RUNNING and moved.gpus != [before]
        with ctx.sessions() as session:
            fault = session.scalars(select(GpuFaultModel)).one()
            assert (fault.gpu_id, fault.xid, fault.source) == (before, 119, "nvml")
            bad = session.get(GpuDeviceModel, before)
            assert bad is not None and bad.state == GpuState.UNHEALTHY
    finally:
        platform.close()


def test_a_persistent_condition_is_recorded_once(tmp_path: Path) -> None:
    platform, (nvml, _runtime) = _platform(tmp_path)
    try:
        nvml.remapped_rows[2] = (0, 1, 1, 0)
        watch = health.HealthWatch()
        for _ in range(3):
            health.health_pass(platform.ctx, watch)
        with platform.ctx.sessions() as session:
            faults = session.scalars(select(GpuFaultModel)).all()
            assert [(f.kind, f.action) for f in faults] == [
                ("remapped_rows_pending", "migrate_deferred")
            ]
    finally:
        platform.close()


def test_an_unreachable_runtime_marks_its_hosts_lost_until_it_answers(tmp_path: Path) -> None:
    platform, (_nvml, runtime) = _platform(tmp_path, host_lost_after_s=1e-9)
    try:
        ctx = platform.ctx
        watch = health.HealthWatch()
        runtime.down = True
        health.health_pass(ctx, watch)  # first failure: the clock starts
        health.health_pass(ctx, watch)  # past host_lost_after_s
        with ctx.sessions() as session:
            states = {g.state for g in session.scalars(select(GpuDeviceModel))}
            kinds = {f.kind for f in session.scalars(select(GpuFaultModel))}
        assert states == {GpuState.UNHEALTHY} and kinds == {"host_lost"}
        health.health_pass(ctx, watch)  # still down: nothing recorded twice
        with ctx.sessions() as session:
            assert len(session.scalars(select(GpuFaultModel)).all()) == 8

        runtime.down = False
        health.health_pass(ctx, watch)
        with ctx.sessions() as session:
            assert {g.state for g in session.scalars(select(GpuDeviceModel))} == {GpuState.HEALTHY}
            assert all(f.repaired_at for f in session.scalars(select(GpuFaultModel)))
    finally:
        platform.close()
