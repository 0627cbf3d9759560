"""An instance moved off a failing GPU to another agent host: its data over both
links (real tar, real SSH channels, real files), nothing left on the first host."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from gpudock.db.models import (
    GpuFaultModel,
    HostLossPolicy,
    InstanceModel,
    InstanceStatus,
    LinkState,
    MigrationModel,
)
from gpudock.errors import InvalidRequest, NotFound
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.agents import hosts
from gpudock.services.fleet import kept
from gpudock.services.instances import actions as instances
from gpudock.services.instances import container_spec as containers
from tests.gpu.fake_pynvml import FakeNvml, fake_uuid, h200_1x
from tests.support.agents import DirectoryVolumesRuntime, LinkRig, join_parts
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for

MIB = 1 << 20


@pytest.fixture
def platform(platform_factory: PlatformFactory, request: pytest.FixtureRequest) -> Platform:
    """A test may ask for more settings (indirect parametrization)."""
    more = getattr(request, "param", {})
    return platform_factory(
        agent_link_port=0, agent_link_host="127.0.0.1", agent_heartbeat_s=0.2, **more
    )


@pytest.fixture
def rig(platform: Platform, tmp_path: Path) -> Iterator[LinkRig]:
    """Agents a (box-a) and b (box-b), one H200 each, volumes as directories."""
    made = LinkRig(platform, tmp_path)
    made.start()
    for index, (agent, host) in enumerate((("a", "box-a"), ("b", "box-b"))):
        gpu = replace(h200_1x().devices[0], uuid=fake_uuid(0x4200, index))
        nvml = FakeNvml([gpu], driver_version="570.124.06", cuda_version=12080)
        url, token = join_parts(hosts.add_host(platform.ctx, host).join_command)
        engine = DirectoryVolumesRuntime(tmp_path / f"volumes-{agent}")
        made.join(agent, url, token, nvml=nvml, runtime=engine, watch_health=True)
        wait_for(
            lambda host=host: (  # type: ignore[misc]
                (h := hosts.get_host(platform.ctx, host)).link_state is LinkState.UP
                and platform.ctx.hosts is not None
                and platform.ctx.hosts.linked(h.id)
                and bool(h.gpus)
            ),
            f"{host} linked",
        )
    yield made
    made.stop()


def _drain_until(platform: Platform, instance_id: str, status: InstanceStatus) -> InstanceModel:
    def reached() -> InstanceModel | None:
        platform.reconciler.drain()
        with platform.ctx.sessions() as session:
            found = session.get(InstanceModel, instance_id)
            return found if found is not None and found.status == status else None

    return wait_for(reached, f"instance {instance_id} {status.value}", deadline_s=60)


def test_an_xid_79_moves_the_instance_and_its_data_to_the_other_host(
    platform: Platform, rig: LinkRig
) -> None:
    ctx = platform.ctx
    owner = users.create_user(ctx, "alice").user
    request = instances.InstanceRequest(gpu_model="H200-140GB", gpu_count=1, name="train")
    created = instances.create_instance(ctx, owner, request)
    first = _drain_until(platform, created.id, InstanceStatus.RUNNING)
    by_host = {hosts.get_host(ctx, name).id: name for name in ("box-a", "box-b")}
    agent_of = {"box-a": "a", "box-b": "b"}
    source = rig.runtimes[agent_of[by_host[first.host_id]]]
    destination = rig.runtimes[agent_of[by_host[next(h for h in by_host if h != first.host_id)]]]
    assert isinstance(source, DirectoryVolumesRuntime)
    assert isinstance(destination, DirectoryVolumesRuntime)
    assert first.data_volume is not None
    data = source.volume_directory(first.data_volume)
    with (data / "weights.bin").open("wb") as handle:
        handle.truncate(16 * MIB)  # a file with a hole
        handle.write(os.urandom(MIB))
        handle.seek(12 * MIB)
        handle.write(os.urandom(MIB))
    digest = hashlib.sha256((data / "weights.bin").read_bytes()).hexdigest()
    rig.nvmls[agent_of[by_host[first.host_id]]].inject_xid(0, 79)  # read by that agent

    def moved() -> InstanceModel | None:
        platform.reconciler.drain()
        with ctx.sessions() as session:
            row = session.get(InstanceModel, created.id)
            ok = row is not None and row.status == InstanceStatus.RUNNING
            return row if ok and row.host_id != first.host_id else None  # type: ignore[union-attr]

    after = wait_for(moved, "the instance running on the other host", deadline_s=60)
    assert after.name == "train" and after.id == created.id
    assert after.data_volume is not None
    landed = destination.volume_directory(after.data_volume) / "weights.bin"
    assert hashlib.sha256(landed.read_bytes()).hexdigest() == digest
    assert landed.stat().st_blocks * 512 < 8 * MIB  # its hole stayed a hole
    name = containers.container_name(ctx.cluster_id, created.id)
    assert destination.inspect_container(name) is not None
    assert source.inspect_container(name) is None and not source.volumes  # nothing left on A
    assert after.system_image != first.system_image  # the writable layer, committed on A
    assert after.system_image in destination.images and after.system_image not in source.images
    with ctx.sessions() as session:
        move = session.scalars(select(MigrationModel)).one()
        assert move.bytes_copied is not None and move.bytes_copied >= 2 * MIB
        fault = session.scalars(select(GpuFaultModel)).one()
        assert (fault.host_id, fault.xid, fault.source) == (first.host_id, 79, "agent")


@pytest.mark.parametrize("platform", [{"host_lost_after_s": 3.0}], indirect=True)
def test_a_host_back_after_its_instance_moved_away_has_that_container_stopped_not_removed(
    platform: Platform, rig: LinkRig
) -> None:
    """Its agent killed (no self-fence: the containers keep running), the host is
    lost, the opted-in instance restarts on the other host; when the agent runs
    again, the old container is stopped and kept, with its volume."""
    ctx = platform.ctx
    owner = users.create_user(ctx, "alice").user
    request = instances.InstanceRequest(
        gpu_model="H200-140GB", gpu_count=1, on_host_loss=HostLossPolicy.ELSEWHERE
    )
    created = instances.create_instance(ctx, owner, request)
    first = _drain_until(platform, created.id, InstanceStatus.RUNNING)
    pairs = (("box-a", "a"), ("box-b", "b"))
    agent_of = {hosts.get_host(ctx, host).id: agent for host, agent in pairs}
    assert first.host_id is not None
    lost_agent = agent_of[first.host_id]
    old_engine = rig.runtimes[lost_agent]
    assert isinstance(old_engine, DirectoryVolumesRuntime)
    name = containers.container_name(ctx.cluster_id, created.id)
    rig.halt(lost_agent)

    def elsewhere() -> InstanceModel | None:
        platform.reconciler.drain()
        with ctx.sessions() as session:
            row = session.get(InstanceModel, created.id)
            ok = row is not None and row.status == InstanceStatus.RUNNING
            return row if ok and row.host_id != first.host_id else None  # type: ignore[union-attr]

    moved = wait_for(elsewhere, "the instance running on the other host", deadline_s=60)
    left = old_engine.inspect_container(name)
    assert left is not None and left.running  # out of reach: nothing could stop it
    rig.rerun(lost_agent)

    def fenced() -> bool:
        platform.reconciler.drain()
        state = old_engine.inspect_container(name)
        assert state is not None, "the fence removed the container: it must only stop it"
        return not state.running

    wait_for(fenced, "the old container stopped", deadline_s=60)
    assert old_engine.volumes, "the old host's volumes are kept for the operator"
    assert moved.host_id is not None
    new_engine = rig.runtimes[agent_of[moved.host_id]]
    now = new_engine.inspect_container(name)
    assert now is not None and now.running
    with ctx.sessions() as session:
        row = session.get(InstanceModel, created.id)
        assert row is not None and (row.status, row.host_id) == (
            InstanceStatus.RUNNING,
            moved.host_id,
        )
    # The operator sees what the fence kept, and removes it once nothing in it is needed.
    names = {hosts.get_host(ctx, host).id: host for host, _ in pairs}
    old_host, new_host = names[first.host_id], names[moved.host_id]
    (kept_one,) = kept.list_kept(ctx, old_host)
    old_volumes = tuple(sorted(old_engine.volumes))
    assert (kept_one.instance_id, kept_one.owner, kept_one.container) == (created.id, "alice", name)
    assert (kept_one.running, kept_one.volumes) == (False, old_volumes)
    assert kept_one.reason == f"the instance lives on host {new_host} now"
    assert kept.list_kept(ctx, new_host) == []  # its live container is its own
    with pytest.raises(NotFound):
        kept.remove_kept(ctx, old_host, "i-0000000000")
    kept.remove_kept(ctx, old_host, created.id)
    assert old_engine.inspect_container(name) is None
    assert tuple(sorted(old_engine.volumes)) == old_volumes  # its data stays until asked
    (data_only,) = kept.list_kept(ctx, old_host)
    assert (data_only.container, data_only.volumes) == ("", old_volumes)
    with pytest.raises(InvalidRequest, match="--with-data"):
        kept.remove_kept(ctx, old_host, created.id)
    kept.remove_kept(ctx, old_host, created.id, with_data=True)
    assert old_engine.volumes == {} and kept.list_kept(ctx, old_host) == []
    assert new_engine.inspect_container(name) is not None  # the live one untouched
