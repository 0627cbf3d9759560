"""Exit stop and time stop on one real container: its main process is killed
and gpudock stops (not restarts) it; started again, it stops at its stop time.
Each stop releases the GPU, keeps the container and its data volume, and
closes the compute interval at the moment Docker says the container stopped.

The server's clock is the real one plus an offset the test moves, so the stop
time comes without waiting for it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import docker
import pytest
from sqlalchemy import select

from gpudock.db.models import BillingIntervalModel, GpuAllocationModel, InstanceStatus
from gpudock.platform import Platform, open_platform
from gpudock.runtime.docker import DockerRuntime
from gpudock.runtime.docker.translate import parse_docker_time
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.instances.auto_stop import AutoStopPolicy, auto_stop_pass
from gpudock.settings import Settings
from tests.support.docker import remove_cluster_objects, unmount_everything_under

pytestmark = pytest.mark.docker
S = InstanceStatus


class OffsetClock:
    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@pytest.fixture
def world(tmp_path: Path, engine: docker.DockerClient) -> Iterator[tuple[Platform, OffsetClock]]:
    clock = OffsetClock()
    settings = Settings(
        data_dir=tmp_path / "d", simulate="1x1xA100-80GB", image_pull="never", stop_timeout_s=1
    )
    platform = open_platform(settings, runtime=DockerRuntime(), clock=clock)
    try:
        yield platform, clock
    finally:
        platform.close()
        remove_cluster_objects(engine, platform.ctx.cluster_id)
        unmount_everything_under(tmp_path)


def finished_at(engine: docker.DockerClient, platform: Platform, instance_id: str) -> datetime:
    name = containers.container_name(platform.ctx.cluster_id, instance_id)
    state = engine.api.inspect_container(name)["State"]
    assert state["Running"] is False
    moment = parse_docker_time(state["FinishedAt"])
    assert moment is not None
    return moment


def assert_stopped_at_docker_time(
    platform: Platform, engine: docker.DockerClient, instance_id: str, intervals: int
) -> None:
    with platform.ctx.sessions() as session:
        assert session.scalars(select(GpuAllocationModel)).all() == []  # the GPU is free
        compute = session.scalars(
            select(BillingIntervalModel)
            .where(BillingIntervalModel.kind == "compute")
            .order_by(BillingIntervalModel.opened_at)
        ).all()
    assert len(compute) == intervals
    assert compute[-1].closed_at == finished_at(engine, platform, instance_id)


def test_exit_stop_then_time_stop_on_one_container(
    world: tuple[Platform, OffsetClock], engine: docker.DockerClient
) -> None:
    platform, clock = world
    user = users.create_user(platform.ctx, "job").user
    policy = AutoStopPolicy(stop_after_s=3600, on_exit=True)
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="job", auto_stop=policy)
    instance_id = actions.create_instance(platform.ctx, user, request).id
    platform.reconciler.drain()
    assert actions.get_instance(platform.ctx, user, instance_id).status == S.RUNNING
    name = containers.container_name(platform.ctx.cluster_id, instance_id)
    container_id = engine.api.inspect_container(name)["Id"]

    engine.api.kill(name)  # the main process dies (SIGKILL, as a crash or the OOM killer)
    platform.reconciler.make_due("liveness")
    platform.reconciler.drain()
    instance = actions.get_instance(platform.ctx, user, instance_id)
    assert instance.status == S.STOPPED
    assert "auto-stop: stopped: the main process exited with code 137" in instance.status_reason
    assert_stopped_at_docker_time(platform, engine, instance_id, intervals=1)

    actions.start_instance(platform.ctx, user, instance_id)
    platform.reconciler.drain()
    assert actions.get_instance(platform.ctx, user, instance_id).status == S.RUNNING
    clock.offset = timedelta(seconds=3601)  # its stop time has come
    assert auto_stop_pass(platform.ctx).stopped == [instance_id]
    platform.reconciler.drain()
    instance = actions.get_instance(platform.ctx, user, instance_id)
    assert instance.status == S.STOPPED
    assert "was reached" in instance.status_reason and instance.status_reason.endswith("data kept")
    assert engine.api.inspect_container(name)["Id"] == container_id  # the same container, kept
    assert engine.api.inspect_volume(instance.data_volume)["Name"] == instance.data_volume
    assert_stopped_at_docker_time(platform, engine, instance_id, intervals=2)


def test_a_job_command_is_the_main_process_and_its_exit_stops_the_instance(
    world: tuple[Platform, OffsetClock], engine: docker.DockerClient
) -> None:
    platform, _ = world
    user = users.create_user(platform.ctx, "jobber").user
    request = InstanceRequest(
        gpu_model="A100-80GB", gpu_count=1, name="job", command="echo done; exit 3"
    )
    instance_id = actions.create_instance(platform.ctx, user, request).id
    platform.reconciler.drain()
    name = containers.container_name(platform.ctx.cluster_id, instance_id)
    assert engine.api.wait(name, timeout=60)["StatusCode"] == 3  # the job ran, and ended
    assert b"done" in engine.api.logs(name)

    platform.reconciler.make_due("liveness")
    platform.reconciler.drain()
    instance = actions.get_instance(platform.ctx, user, instance_id)
    assert instance.status == S.STOPPED
    assert "auto-stop: stopped: the main process exited with code 3" in instance.status_reason
    with platform.ctx.sessions() as session:
        assert session.scalars(select(GpuAllocationModel)).all() == []  # the GPU is free
        [compute] = session.scalars(
            select(BillingIntervalModel).where(BillingIntervalModel.kind == "compute")
        ).all()
    # Closed at Docker's exit time; a job that ended before its interval was
    # recorded as open closes it at its opening (nothing is charged).
    exited = finished_at(engine, platform, instance_id)
    assert compute.closed_at == max(exited, compute.opened_at)
    assert engine.api.inspect_volume(instance.data_volume)["Name"] == instance.data_volume
