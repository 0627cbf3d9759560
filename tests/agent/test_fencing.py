"""Self-fencing: an agent cut off from its server longer than its lease stops its
tenants' containers (stops, never removes); the lease comes from the server's
welcome and every acknowledged heartbeat. In one process: the real gateway and
agent over TCP on 127.0.0.1, the agent's engine a `FakeRuntime`."""

from __future__ import annotations

import logging

import pytest

from gpudock.agent.fencing import Fence
from gpudock.platform import Platform
from gpudock.runtime.base import (
    LABEL_BUILD,
    LABEL_INSTANCE,
    LABEL_MANAGED,
    ContainerSpec,
    ContainerState,
)
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.agents import hosts
from tests.support.agents import LinkRig, join_parts
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for

LEASE_S = 0.6


def started(runtime: FakeRuntime, name: str, labels: dict[str, str]) -> ContainerState:
    spec = ContainerSpec(
        name=name,
        hostname=name,
        image="gpudock/base:bookworm",
        labels={LABEL_MANAGED: "true", **labels},
        env={},
        gpu_uuids=(),
        real_gpus=False,
        cpus=1.0,
        memory_mb=512,
        pids_limit=64,
        volume_name=f"{name}-data",
    )
    return runtime.start_container(runtime.create_container(spec).id)


def running(runtime: FakeRuntime, name: str) -> bool:
    state = runtime.inspect_container(name)
    assert state is not None, f"{name} was removed"
    return state.running


@pytest.fixture
def platform(platform_factory: PlatformFactory) -> Platform:
    return platform_factory(
        agent_link_port=0,
        agent_link_host="127.0.0.1",
        agent_heartbeat_s=0.1,
        agent_lease_s=LEASE_S,
    )


def test_an_agent_cut_off_past_its_lease_stops_its_tenants_and_says_so(
    rig: LinkRig, platform: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpudock.agent")
    engine = FakeRuntime()
    started(engine, "tenant", {LABEL_INSTANCE: "i-1"})
    started(engine, "build-step", {LABEL_BUILD: "b-1"})  # not a tenant's instance
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    rig.join("a", url, token, runtime=engine)
    first = wait_for(lambda: hosts.get_host(platform.ctx, "box-1").last_heartbeat_at, "linked")
    # Linked for several leases, acknowledged all along: nothing is stopped.
    wait_for(
        lambda: (
            (hosts.get_host(platform.ctx, "box-1").last_heartbeat_at - first).total_seconds()
            > 3 * LEASE_S
        ),
        "heartbeats for three leases",
    )
    assert running(engine, "tenant")
    rig.run(rig.gateway.stop())  # the server is gone
    wait_for(lambda: not running(engine, "tenant"), "the tenant stopped by its agent")
    assert running(engine, "build-step")
    assert "cut off from the server longer than the lease" in caplog.text


def test_the_fence_acts_once_per_outage_and_the_hosts_own_lease_wins() -> None:
    now = [0.0]
    engine = FakeRuntime()
    started(engine, "tenant", {LABEL_INSTANCE: "i-1"})
    fence = Fence(engine, lease_s=30, clock=lambda: now[0])
    assert not fence.check()  # no lease granted yet: nothing to fence by
    fence.renew(server_lease_s=5)  # --lease-s 30 wins over the server's 5
    now[0] = 29
    assert not fence.check() and running(engine, "tenant")
    now[0] = 31
    assert fence.check() and fence.fenced and not running(engine, "tenant")
    engine.start_container("tenant")  # the server restarts it once it hears the agent
    assert not fence.check() and running(engine, "tenant")  # this outage was fenced already
    fence.renew(server_lease_s=5)
    assert not fence.fenced
    now[0] = 62
    assert fence.check() and not running(engine, "tenant")
