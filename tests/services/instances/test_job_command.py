"""Job commands on the fake runtime: the command reaches the container spec as
its main process, the instance stops when it exits (by default) or restarts
when its owner said so, and a bad command is refused saying why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.db.models import InstanceStatus, UserModel
from gpudock.errors import InvalidRequest
from gpudock.platform import Platform, open_platform
from gpudock.runtime.base import ContainerSpec
from gpudock.runtime.docker.containers import create_arguments
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.instances.auto_stop import AutoStopPolicy
from gpudock.settings import Settings
from tests.support.clocks import FakeClock

S = InstanceStatus


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Platform, FakeRuntime, FakeClock]]:
    clock = FakeClock()
    runtime = FakeRuntime(clock=clock)
    settings = Settings(
        data_dir=tmp_path / "d", simulate="1x2xA100-80GB", runtime="fake", image_pull="never"
    )
    platform = open_platform(settings, runtime=runtime, clock=clock)
    try:
        yield platform, runtime, clock
    finally:
        platform.close()


def start_job(platform: Platform, user: UserModel, policy: AutoStopPolicy | None = None) -> str:
    request = InstanceRequest(
        gpu_model="A100-80GB", gpu_count=1, name="job", command="python train.py", auto_stop=policy
    )
    instance = actions.create_instance(platform.ctx, user, request)
    platform.reconciler.drain()
    assert actions.get_instance(platform.ctx, user, instance.id).status == S.RUNNING
    return instance.id


def end_job(platform: Platform, runtime: FakeRuntime, clock: FakeClock, code: int) -> None:
    clock.advance(30)
    [container] = runtime.containers.values()
    runtime.end_main_process(container.state.id, code)
    clock.advance(5)
    platform.reconciler.make_due("liveness")
    platform.reconciler.drain()


def test_a_job_stops_when_its_command_exits(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, runtime, clock = world
    user = users.create_user(platform.ctx, "jobs").user
    instance_id = start_job(platform, user)
    [container] = runtime.containers.values()
    assert container.spec.command == "python train.py"
    view = actions.view(platform.ctx, actions.get_instance(platform.ctx, user, instance_id))
    assert view.instance.command == "python train.py"
    assert view.auto_stop is not None and view.auto_stop.on_exit  # on without asking

    end_job(platform, runtime, clock, 3)
    instance = actions.get_instance(platform.ctx, user, instance_id)
    assert instance.status == S.STOPPED
    assert "the main process exited with code 3" in instance.status_reason
    assert not instance.placed
    assert instance.data_volume in runtime.volumes  # data kept


def test_a_job_whose_owner_said_restart_is_restarted(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, runtime, clock = world
    user = users.create_user(platform.ctx, "again").user
    instance_id = start_job(platform, user, AutoStopPolicy(on_exit=False))
    end_job(platform, runtime, clock, 1)
    instance = actions.get_instance(platform.ctx, user, instance_id)
    assert instance.status == S.RUNNING and instance.placed
    assert [c.state.running for c in runtime.containers.values()] == [True]


def test_the_docker_command_is_the_shell_line_or_the_keep_alive() -> None:
    spec = ContainerSpec(
        name="c",
        hostname="c",
        image="gpudock/base:bookworm",
        labels={},
        env={},
        gpu_uuids=(),
        real_gpus=False,
        cpus=1.0,
        memory_mb=512,
        pids_limit=64,
        volume_name="v",
        command="echo done; exit 3",
    )
    assert create_arguments(spec)["command"] == ["/bin/sh", "-c", "echo done; exit 3"]
    keep_alive = create_arguments(ContainerSpec(**{**spec.__dict__, "command": None}))
    assert keep_alive["command"] == ["sleep", "infinity"]


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("   ", "the command is empty"),
        ("x" * 4097, "4097 characters long; at most 4096"),
        ("echo a\x00b", "NUL character"),
    ],
)
def test_a_bad_command_is_refused_saying_why(
    world: tuple[Platform, FakeRuntime, FakeClock], command: str, says: str
) -> None:
    platform, runtime, _ = world
    user = users.create_user(platform.ctx, "bad").user
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, command=command)
    with pytest.raises(InvalidRequest, match=says) as refused:
        actions.create_instance(platform.ctx, user, request)
    assert refused.value.field == "command"
    assert runtime.containers == {}
