"""What an agent reports is the scheduler's inventory of its host: the real gateway
and agents over TCP on 127.0.0.1, real SQLite, GPUs from a fake NVML read by the
real NVML code (`tests.support.agents.LinkRig`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import select

from gpudock.db.models import GpuDeviceModel, GpuFaultModel, GpuState, HostModel, LinkState
from gpudock.errors import Conflict
from gpudock.platform import Platform
from gpudock.scheduler.placement import HostCapacity
from gpudock.services.accounts import users
from gpudock.services.agents import hosts
from gpudock.services.fleet import inventory
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from tests.gpu.fake_pynvml import MIB, FakeGpu, FakeNvml, fake_uuid
from tests.support.agents import LinkRig, join_parts
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for

H200 = "H200-140GB"  # not in the simulated fleet: only the agent host has it


def h200s(count: int, tag: int = 0x4200) -> FakeNvml:
    """`count` H200s, their UUIDs made from `tag` (one per host)."""
    devices = [
        FakeGpu(
            name="NVIDIA H200",
            uuid=fake_uuid(tag, i),
            memory_total=143771 * MIB,
            bus_id=f"00000000:{0x1B + i:02X}:00.0",
            numa_node=i % 2,
        )
        for i in range(count)
    ]
    return FakeNvml(devices, driver_version="570.124.06", cuda_version=12080)


@pytest.fixture
def platform(platform_factory: PlatformFactory) -> Platform:
    return platform_factory(agent_link_port=0, agent_link_host="127.0.0.1", agent_heartbeat_s=0.2)


def enroll(rig: LinkRig, platform: Platform, name: str, nvml: FakeNvml) -> str:
    """Add host `name`, join an agent reporting `nvml`, wait for its link; its id."""
    url, token = join_parts(hosts.add_host(platform.ctx, name).join_command)
    rig.join(name, url, token, nvml)
    return wait_for(
        lambda: (h := hosts.get_host(platform.ctx, name)).link_state is LinkState.UP and h.id,
        f"host {name} linked",
    )


def snapshot(platform: Platform) -> dict[str, HostCapacity]:
    with platform.ctx.reader() as session:
        return {h.host_id: h for h in inventory.capacity_snapshot(session)}


def gpu_row(platform: Platform, uuid: str) -> GpuDeviceModel:
    with platform.ctx.reader() as session:
        gpu = session.get(GpuDeviceModel, uuid)
        assert gpu is not None
        return gpu


def test_an_enrolled_hosts_gpus_are_in_the_schedulers_inventory(
    rig: LinkRig, platform: Platform
) -> None:
    host_id = enroll(rig, platform, "box-1", h200s(2))
    free = snapshot(platform)[host_id].free_gpus
    assert [(g.uuid, g.model, g.numa_node) for g in free] == [
        (fake_uuid(0x4200, 0), H200, 0),
        (fake_uuid(0x4200, 1), H200, 1),
    ]
    with platform.ctx.reader() as session:
        host = session.get(HostModel, host_id)
        assert host is not None
        assert (host.name, host.agent, host.simulated) == ("box-1", True, False)
        assert (host.driver_version, host.cuda_version) == ("570.124.06", "12.8")
        assert host.cpus > 0 and host.memory_gb > 0
    assert gpu_row(platform, fake_uuid(0x4200, 1)).pci_bus_id == "00000000:1C:00.0"
    # The local GPU source's sync (at every start) leaves the agent's rows alone.
    inventory.sync_inventory(platform.ctx, platform.ctx.gpu_source.discover())
    assert len(snapshot(platform)[host_id].free_gpus) == 2


def test_an_instance_asking_for_the_agent_hosts_model_is_placed_there(
    rig: LinkRig, platform: Platform
) -> None:
    host_id = enroll(rig, platform, "box-1", h200s(1))
    user = users.create_user(platform.ctx, "ann").user
    actions.create_instance(platform.ctx, user, InstanceRequest(gpu_model=H200, gpu_count=1))
    platform.reconciler.drain()
    (placed,) = actions.list_instances(platform.ctx, user)
    assert (placed.host_id, placed.container_gpus) == (host_id, fake_uuid(0x4200, 0))


def test_a_gpu_the_agent_stops_reporting_is_taken_out_and_comes_back(
    rig: LinkRig, platform: Platform
) -> None:
    nvml = h200s(2)
    host_id = enroll(rig, platform, "box-1", nvml)
    second = nvml.devices.pop()
    wait_for(lambda: not gpu_row(platform, second.uuid).present, "the missing GPU marked")
    gone = gpu_row(platform, second.uuid)
    assert gone.state is GpuState.UNHEALTHY
    assert "no longer reported" in gone.state_reason
    assert [g.uuid for g in snapshot(platform)[host_id].free_gpus] == [fake_uuid(0x4200, 0)]
    nvml.devices.append(second)
    wait_for(lambda: gpu_row(platform, second.uuid).present, "the GPU reported again")
    assert gpu_row(platform, second.uuid).state is GpuState.HEALTHY
    assert len(snapshot(platform)[host_id].free_gpus) == 2
    with platform.ctx.reader() as session:
        faults = session.scalars(select(GpuFaultModel).where(GpuFaultModel.gpu_id == second.uuid))
        assert [(f.kind, f.repaired_at is not None) for f in faults] == [("gpu_missing", True)]


def test_a_draining_host_takes_no_new_instances(rig: LinkRig, platform: Platform) -> None:
    host_id = enroll(rig, platform, "box-1", h200s(1))
    hosts.drain_host(platform.ctx, "box-1")
    assert host_id not in snapshot(platform)
    user = users.create_user(platform.ctx, "ann").user
    actions.create_instance(platform.ctx, user, InstanceRequest(gpu_model=H200, gpu_count=1))
    platform.reconciler.drain()
    (waiting,) = actions.list_instances(platform.ctx, user)
    assert (waiting.status.value, waiting.host_id) == ("pending", None)
    hosts.drain_host(platform.ctx, "box-1", draining=False)
    platform.reconciler.drain()
    assert actions.list_instances(platform.ctx, user)[0].host_id == host_id


def test_a_removed_host_leaves_the_inventory_and_its_name_keeps_its_id(
    rig: LinkRig, platform: Platform
) -> None:
    host_id = enroll(rig, platform, "box-1", h200s(1))
    hosts.remove_host(platform.ctx, "box-1")
    assert host_id not in snapshot(platform)
    with platform.ctx.reader() as session:
        host = session.get(HostModel, host_id)
        assert host is not None and not host.present
    assert not gpu_row(platform, fake_uuid(0x4200, 0)).present
    # Enrolled again under its name, it is the same host to the instances that ran there.
    assert hosts.add_host(platform.ctx, "box-1").host.id == host_id


def test_an_instance_asking_for_labels_is_placed_only_on_a_host_carrying_them(
    rig: LinkRig, platform: Platform
) -> None:
    hosts.add_host(platform.ctx, "eu-1", {"region": "eu"})
    eu = enroll(rig, platform, "eu-1", h200s(1))
    us = enroll(rig, platform, "us-1", h200s(2, tag=0x4201))  # roomier: chosen without labels
    hosts.label_host(platform.ctx, "us-1", {"region": "us"})
    user = users.create_user(platform.ctx, "ann").user
    wanted = InstanceRequest(gpu_model=H200, gpu_count=1, host_labels={"region": "eu"})
    for name in ("first", "second"):
        actions.create_instance(platform.ctx, user, replace(wanted, name=name))
    platform.reconciler.drain()
    first, second = sorted(actions.list_instances(platform.ctx, user), key=lambda i: i.name)
    assert (first.host_id, first.status.value) == (eu, "running")
    assert (second.host_id, second.status.value) == (None, "pending")  # us-1 is free, not eu
    assert us in snapshot(platform) and len(snapshot(platform)[us].free_gpus) == 2


def test_a_name_the_local_gpu_source_holds_is_refused(platform: Platform) -> None:
    local = inventory.list_hosts(platform.ctx)[0].name
    with pytest.raises(Conflict, match="own GPU source"):
        hosts.add_host(platform.ctx, local)
